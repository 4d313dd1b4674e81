"""A replica moved between a `kctl broker run` process's two log dirs under a confluent-kafka producer's load, with
`kctl reassign --execute` and a plan naming the log dir (AlterReplicaLogDirs, KIP-113), followed with
`kctl reassign --verify` and `kctl log-dirs describe`: every acknowledged record is read back once and in order,
the partition ends in the new dir and the old directory is removed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker_support import BrokerProcess, free_port
from kcli.cli.app import app

pytestmark = pytest.mark.broker_process
TOPIC = "moving"


def kctl(broker: BrokerProcess, *args: str, code: int | None = 0):
    result = CliRunner().invoke(app, [*args, "-b", broker.bootstrap], env={"COLUMNS": "200"})
    assert code is None or result.exit_code == code, f"exit {result.exit_code}\n{result.output}"
    return result


def where(broker: BrokerProcess) -> dict[str, list[tuple[str, bool]]]:
    """Log dir -> (partition, isFuture) of the topic, from `kctl log-dirs describe --json`."""
    out = json.loads(kctl(broker, "log-dirs", "describe", "--topic-list", TOPIC, "--json").stdout)
    [answer] = out["brokers"]
    return {d["logDir"]: [(p["partition"], p["isFuture"]) for p in d["partitions"]] for d in answer["logDirs"]}


def wait_for(condition, timeout: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Producing:
    """An idempotent producer sending numbered values until stopped; ``acked`` in acknowledgement order."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.acked: list[int] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            def delivered(err, msg, n=n):
                if err is None:
                    self.acked.append(n)
                else:
                    self.failed.append(str(err))
            try:
                self.producer.produce(TOPIC, value=b"%08d" % n + b"x" * 200, partition=0, on_delivery=delivered)
                n += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
            if n % 200 == 0:
                time.sleep(0.01)  # a steady load, not a flood the 2 CPUs spend on alone
        assert self.producer.flush(60) == 0

    def wait_acked(self, count: int) -> None:
        wait_for(lambda: len(self.acked) >= count, 120, f"{count} acknowledged records")

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)


def consume_all(bootstrap: str, expected: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                values.append(int(msg.value()[:8]))
    consumer.close()
    return values


def test_a_replica_moves_to_the_other_log_dir_under_load_with_kctl_reassign(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    a, b = tmp_path / "a", tmp_path / "b"
    broker = BrokerProcess(free_port(), a, [f"log.dirs={a},{b}", "log.segment.bytes=262144",
                                            "log.segment.delete.delay.ms=100", "group.initial.rebalance.delay.ms=0"])
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)]).values():
            future.result(30)
        [(source, [(name, future)])] = [(d, ps) for d, ps in where(broker).items() if ps]
        assert (name, future) == (f"{TOPIC}-0", False)
        target = str(b.resolve()) if Path(source) == a.resolve() else str(a.resolve())
        broker_id = next(iter(admin.list_topics(timeout=30).brokers))
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [broker_id], "log_dirs": [target]}]}))
        with Producing(broker.bootstrap) as load:
            load.wait_acked(20_000)  # some segments to copy
            out = kctl(broker, "reassign", "--execute", "--reassignment-json-file", str(plan)).stdout
            assert f"Successfully started log directory move for: {TOPIC}-0-{broker_id}" in out
            for _ in range(600):  # exit 1 while the replica is moving, 0 once it is in the target dir
                verified = kctl(broker, "reassign", "--verify", "--reassignment-json-file", str(plan), code=None)
                if verified.exit_code == 0:
                    break
                assert verified.exit_code == 1 and "is still in progress" in verified.stdout, verified.output
                time.sleep(0.2)
            assert verified.exit_code == 0, verified.output
            assert f"Reassignment of replica {TOPIC}-0-{broker_id} completed successfully." in verified.stdout
            moved_at = len(load.acked)
            load.wait_acked(moved_at + 2000)  # the moved log takes appends
        assert not load.failed, load.failed[:3]
        assert where(broker) == {source: [], target: [(f"{TOPIC}-0", False)]}
        old = Path(source)
        wait_for(lambda: not list(old.glob(f"{TOPIC}-0*")), 30, "the old log's directory removed")
        consumed = consume_all(broker.bootstrap, len(load.acked))
        assert len(consumed) == len(set(consumed)), "a record read twice"
        assert consumed == sorted(consumed), "records out of order"
        assert set(load.acked) <= set(consumed), "an acknowledged record lost"
        status = json.loads(kctl(broker, "reassign", "--verify", "--reassignment-json-file", str(plan),
                                 "--json").stdout)
        assert status["complete"] and status["log_dirs"][0]["status"] == "completed"
    finally:
        assert broker.stop() == 0, broker.log()
    assert "Traceback" not in broker.log() and "internal error" not in broker.log(), broker.log()
