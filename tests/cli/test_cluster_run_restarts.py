"""`kctl cluster run` across deaths and restarts: a broker that dies, a killed runner's leftovers, a restart that
reuses ports and data (split from tests/cli/test_cluster_run.py so that the two halves can run side by side)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cluster_run_support import _installed, _metadata, _wait_gone, cluster_run  # noqa: F401

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("exit_on_failure", [False, True], ids=["keep-the-others", "exit-on-failure"])
def test_a_broker_that_dies_is_reported(cluster_run, exit_on_failure):
    _installed()
    run = cluster_run("--brokers", "2", "--json", *(["--exit-on-failure"] if exit_on_failure else []))
    info = run.json()
    victim = info["brokers"][1]
    os.kill(victim["pid"], signal.SIGKILL)
    run.wait_stderr(f"broker 1 (pid {victim['pid']}) exited with status -9")
    assert f"The end of {victim['log']}:" in run.stderr
    if exit_on_failure:
        assert run.wait() == 1, run.stderr
        assert "stopping the cluster" in run.stderr
    else:
        assert "the others keep running" in run.stderr
        assert 0 in _metadata(info["brokers"][0]["port"]).brokers
        assert run.proc.poll() is None
        assert run.interrupt() == 1, run.stderr  # a broker was lost: not a clean run
    assert _wait_gone(run.pids()) == [], run.stderr
    if exit_on_failure:
        # The killed broker's registration outlives it (its session, restored by the restarted ZooKeeper, has
        # not timed out): the next start clears it rather than fail to register broker 1.
        again = cluster_run("--brokers", "2", "--json")
        assert again.json()["bootstrap"] == info["bootstrap"]
        assert "/kctl/brokers/ids/1" in again.stderr and "did not stop cleanly" in again.stderr
        assert again.interrupt() == 0, again.stderr


def test_plain_output_is_the_bootstrap_list_and_a_restart_reuses_ports_and_data(cluster_run, tmp_path):
    _installed()
    from confluent_kafka import Producer

    run = cluster_run("--brokers", "1", "--override", "num.partitions=2")
    bootstrap = run.first_line().strip()
    host, port = bootstrap.split(":")
    assert host == "127.0.0.1"
    run.wait_stderr("Ctrl-C stops the cluster.")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("kept", b"hello")
    assert producer.flush(30) == 0
    assert len(_metadata(int(port)).topics["kept"].partitions) == 2
    assert run.interrupt() == 0, run.stderr

    again = cluster_run("--brokers", "1")
    assert again.first_line().strip() == bootstrap
    # The topic lives in ZooKeeper; the broker lists it once the controller's UpdateMetadata arrived.
    deadline = time.monotonic() + 30
    while "kept" not in _metadata(int(port)).topics:
        assert time.monotonic() < deadline, "the kept topic did not come back"
        time.sleep(0.2)
    assert again.interrupt() == 0, again.stderr


def test_leftovers_of_a_killed_runner_are_stopped_at_the_next_start(cluster_run, tmp_path):
    _installed()
    run = cluster_run("--brokers", "1", "--json")
    info = run.json()
    run.proc.kill()  # the runner dies without stopping anything: its children run on
    run.wait()
    assert _wait_gone(run.pids(), timeout=1) == run.pids()

    again = cluster_run("--brokers", "1", "--json")
    assert again.json()["bootstrap"] == info["bootstrap"]
    assert "left running by an earlier run" in again.stderr
    assert _wait_gone(run.pids()) == []
    assert again.interrupt() == 0, again.stderr
    assert _wait_gone(again.pids()) == []
