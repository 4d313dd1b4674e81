"""`kctl zk consumers GROUP --bootstrap-server`: stored offsets from a real ZooKeeper, log end offsets from a
real `kctl broker run` (ListOffsets), and the lag between them."""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from broker_support import BrokerProcess, free_port
from kcli.cli.app import app

pytestmark = pytest.mark.zookeeper


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("lag") / "kafka-logs",
                            ["auto.create.topics.enable=false"])
    process.start()
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        for future in admin.create_topics([NewTopic("clicks", 2, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": process.bootstrap})
        for i in range(12):
            producer.produce("clicks", value=b"c%d" % i, partition=0 if i < 8 else 1)
        assert producer.flush(30) == 0
        yield process
    finally:
        process.stop()


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["zk", *args], env={"KCTL_ZOOKEEPER": None, "KCTL_BOOTSTRAP_SERVER": None,
                                                         "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_lag(zookeeper, broker):
    chroot = f"/t-{uuid.uuid4().hex}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        for path, data in ((f"{chroot}/consumers/g/offsets/clicks/0", b"3"),
                           (f"{chroot}/consumers/g/offsets/clicks/1", b"4"),
                           (f"{chroot}/consumers/g/offsets/gone/0", b"1")):
            client.create(path, data, makepath=True)
    finally:
        client.stop()
        client.close()
    connect = zookeeper.connect + chroot
    code, out, err = _run("consumers", "g", "-z", connect, "--bootstrap-server", broker.bootstrap, "--json")
    assert code == 0, err
    report = json.loads(out)
    rows = {(r["topic"], r["partition"]): (r["offset"], r["log_end_offset"], r["lag"]) for r in report["partitions"]}
    assert rows == {("clicks", 0): (3, 8, 5), ("clicks", 1): (4, 4, 0), ("gone", 0): (1, None, None)}
    assert report["total_lag"] == 5
    code, out, _ = _run("consumers", "g", "-z", connect, "-b", broker.bootstrap)
    assert code == 0 and "LAG" in out and "total lag: 5" in out
    code, out, _ = _run("consumers", "g", "-z", connect, "--json")
    assert "lag" not in json.loads(out)["partitions"][0]  # no broker given: no lag columns
    code, _, err = _run("consumers", "g", "-z", connect, "-b", f"127.0.0.1:{free_port()}")
    assert code == 3 and "cannot connect to the Kafka broker" in err
