"""`kctl cluster run` as a newcomer runs it: real ZooKeeper, real broker processes, real clients, Ctrl-C.
(tests/cli/test_cluster_run_restarts.py: a broker that dies, a killed runner, a restart.)"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

import kctl_fork
from cluster_run_support import _gone, _installed, _kctl, _listening, _metadata, _wait_gone, cluster_run  # noqa: F401
from kcli.processes import command_line, free_port

pytestmark = pytest.mark.cluster


def test_three_brokers_answer_register_and_stop_on_ctrl_c(cluster_run, tmp_path):
    _installed()
    started = time.monotonic()
    run = cluster_run("--brokers", "3", "--racks", "2", "--json")
    info = run.json()
    data_dir = tmp_path / "cluster"
    assert info["data_dir"] == str(data_dir)
    assert [b["id"] for b in info["brokers"]] == [0, 1, 2]
    assert info["bootstrap"] == ",".join(f"127.0.0.1:{b['port']}" for b in info["brokers"])
    assert info["zookeeper"].startswith("127.0.0.1:") and info["zookeeper"].endswith("/kctl")
    assert [b["rack"] for b in info["brokers"]] == ["r0", "r1", "r0"]

    # Each broker answers a real client's Metadata on its own port (the controller that would make every broker
    # list all three is not there yet: each lists at least itself).
    for broker in info["brokers"]:
        assert broker["id"] in _metadata(broker["port"]).brokers

    # All three registered in ZooKeeper under the chroot, with their racks.
    proc = _kctl("zk", "brokers", "--zookeeper", info["zookeeper"], "--json")
    assert proc.returncode == 0, proc.stderr
    registered = {b["id"]: b for b in json.loads(proc.stdout)["brokers"]}
    assert sorted(registered) == [0, 1, 2]
    assert {i: (b["port"], b["rack"]) for i, b in registered.items()} == {
        b["id"]: (b["port"], b["rack"]) for b in info["brokers"]}

    # The data directory holds everything, as documented.
    state = json.loads((data_dir / "cluster.json").read_text())
    assert state["zookeeper"]["port"] == int(info["zookeeper"].split(":")[1].split("/")[0])
    assert {int(k): v["port"] for k, v in state["brokers"].items()} == {b["id"]: b["port"] for b in info["brokers"]}
    properties = (data_dir / "server-1.properties").read_text()
    for line in ("broker.id=1", "default.replication.factor=3", "offsets.topic.replication.factor=3",
                 "min.insync.replicas=1", "controlled.shutdown.retry.backoff.ms=500", "broker.rack=r1",
                 f"log.dirs={data_dir / 'broker-1'}"):
        assert line.replace(":", "\\:") in properties, line
    assert (data_dir / "broker-1" / "broker.log").is_file() and (data_dir / "broker-1" / "meta.properties").is_file()
    assert (data_dir / "zookeeper" / "zoo.cfg").is_file()

    assert run.interrupt() == 0, run.stderr
    assert _wait_gone(run.pids()) == [], run.stderr
    assert not any(_listening(b["port"]) for b in info["brokers"])
    assert "kctl cluster: stopped" in run.stderr and "Traceback" not in run.stderr
    for i in range(3):  # each broker stopped cleanly (SIGTERM), not killed
        assert "stopped cleanly" in (data_dir / f"broker-{i}" / "broker.log").read_text()
        assert (data_dir / f"broker-{i}" / ".kafka_cleanshutdown").is_file()
    assert all(v["pid"] is None for v in json.loads((data_dir / "cluster.json").read_text())["brokers"].values())


def _processes_of(data_dir: Path) -> list[str]:
    """Command lines of live processes that name ``data_dir`` (ZooKeeper's zoo.cfg, a broker's --config)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and not _gone(int(entry.name)):
            line = command_line(int(entry.name))
            if str(data_dir) in line and "pytest" not in line:
                found.append(line)
    return found


def test_ctrl_c_while_starting_stops_what_was_started(cluster_run, tmp_path):
    _installed()
    run = cluster_run("--brokers", "3")
    run.wait_stderr("starting broker 2")
    assert run.interrupt() == 0, run.stderr
    assert "interrupted while starting" in run.stderr and "kctl cluster: stopped" in run.stderr
    deadline = time.monotonic() + 10
    while _processes_of(tmp_path / "cluster") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_of(tmp_path / "cluster") == []


def test_missing_java_exits_3_with_the_command_that_installs_it(cluster_run, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "no-java-here")
    run = cluster_run("--brokers", "1", env=env)
    assert run.wait() == 3, run.stderr
    assert "ZooKeeper needs Java" in run.stderr and "apt-get install -y default-jre-headless" in run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1
    assert not (tmp_path / "cluster").exists()  # nothing was started or created


def test_a_port_in_use_exits_2(cluster_run):
    _installed()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = cluster_run("--brokers", "2", "--base-port", str(port - 1 if port > 1024 else port))
        assert run.wait() == 2, run.stderr
    assert f"127.0.0.1:{port}" in run.stderr and "already in use" in run.stderr and "--base-port" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("override,message", [
    ("broker.id=7", "--override cannot set broker.id"),
    ("num.partitions=none", "num.partitions"),
    ("no-equals-sign", "key=value"),
])
def test_bad_overrides_exit_2_before_anything_starts(cluster_run, tmp_path, override, message):
    run = cluster_run("--brokers", "1", "--override", override)
    assert run.wait() == 2, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "cluster").exists()


def test_a_directory_in_use_is_refused(cluster_run, tmp_path):
    _installed()
    data_dir = tmp_path / "cluster"
    data_dir.mkdir()
    with open(data_dir / "cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("4242\n")
        lock.flush()
        run = cluster_run("--brokers", "1", "--zookeeper-port", str(free_port()))
        assert run.wait() == 1, run.stderr
    assert "another kctl cluster run (pid 4242)" in run.stderr


def test_rack_names_are_dealt_round_robin_with_the_prefix():
    from kcli.cluster.runner import ClusterSpec, broker_rack

    # librdkafka's tests expect trivup's naming, RACK<broker id> (0101 sets client.rack to a follower's).
    trivup = ClusterSpec(brokers=3, racks=3, rack_prefix="RACK")
    assert [broker_rack(i, trivup) for i in range(3)] == ["RACK0", "RACK1", "RACK2"]
    assert [broker_rack(i, ClusterSpec(brokers=3, racks=2)) for i in range(3)] == ["r0", "r1", "r0"]
    assert broker_rack(0, ClusterSpec(brokers=3)) is None


def test_security_prints_client_settings_that_kcat_confluent_kafka_and_kctl_use(cluster_run, tmp_path):
    """--security: every broker's one listener is SASL_SSL, the brokers replicate to each other over it, and the
    settings files it prints serve kcat (-F), confluent-kafka and kctl (--command-config); a restart reuses the
    CA and passwords, so the files keep working; a client without them gets nothing."""
    _installed()
    import shutil

    from confluent_kafka import Consumer, Producer

    from kcli.storage.checkpoint import parse_java_properties

    run = cluster_run("--brokers", "2", "--security", "--json")
    info = run.json(timeout=120)
    security = info["security"]
    run.wait_stderr("Ctrl-C stops the cluster.")
    assert f"--command-config {security['client_properties']}" in run.stderr
    assert f"-F {security['librdkafka_properties']}" in run.stderr
    for broker in info["brokers"]:
        config = parse_java_properties(Path(broker["config"]).read_text())
        assert config["listeners"] == f"SASL_SSL://127.0.0.1:{broker['port']}"
        assert config["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    for name in ("client_properties", "librdkafka_properties"):
        assert os.stat(security[name]).st_mode & 0o077 == 0  # it holds the admin's password
    librdkafka = parse_java_properties(Path(security["librdkafka_properties"]).read_text())
    assert librdkafka["security.protocol"] == "SASL_SSL" and librdkafka["sasl.username"] == "admin"
    bootstrap = info["bootstrap"]

    created = _kctl("topics", "create", "sec", "--partitions", "2", "--replication-factor", "2", "-b", bootstrap,
                    "--command-config", security["client_properties"])
    assert created.returncode == 0, created.stderr
    producer = Producer({"bootstrap.servers": bootstrap, **librdkafka})
    producer.produce("sec", b"over SASL_SSL")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, **librdkafka, "group.id": "g",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["sec"])
    deadline, got = time.monotonic() + 60, None
    while got is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        got = msg.value() if msg is not None and not msg.error() else None
    consumer.close()
    assert got == b"over SASL_SSL"
    described = kctl_fork.run("topics", "describe", "sec", "-b", bootstrap, "--command-config",
                              security["client_properties"])
    assert described.returncode == 0, described.stderr
    assert described.stdout.count("Isr: ") == 2 and all(  # both replicas in sync: the follower logged in
        len(line.split("Isr: ")[1].split(",")) == 2 for line in described.stdout.splitlines() if "Isr: " in line)
    if shutil.which("kcat"):
        listed = subprocess.run(["kcat", "-b", bootstrap, "-F", security["librdkafka_properties"], "-L", "-t", "sec"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and 'topic "sec" with 2 partitions' in listed.stdout, listed.stderr
    plain = kctl_fork.run("topics", "list", "-b", bootstrap, "--timeout", "5")
    assert plain.returncode != 0 and "security settings" in plain.stderr
    assert run.interrupt() == 0, run.stderr

    again = cluster_run("--brokers", "2", "--security", "--json")
    assert again.json(timeout=120)["security"] == security  # the same CA, user and password
    listed = kctl_fork.run("topics", "list", "-b", bootstrap, "--command-config", security["client_properties"])
    assert listed.returncode == 0 and "sec" in listed.stdout.split(), listed.stderr
    assert again.interrupt() == 0, again.stderr
