"""kctl consume -G as a real member of a consumer group, against one real `kctl broker run`: two kctl processes
split a 4-partition topic (each partition with exactly one live member, as DescribeGroups shows it), the one
left takes every partition once the other is killed -9 and its session times out, and a kctl member shares a
group with a confluent-kafka (librdkafka) member in both directions (kctl's leader assigns to librdkafka, then
librdkafka's leader to kctl). Every record produced is printed at least once across the members, and the offsets
committed reach the end of each partition."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import broker_fork
from broker_support import BrokerProcess, free_port
from kcli.client import KafkaClient
from kcli.client.groups import describe_groups
from kcli.client.produce import Producer, ProducerRecord

PARTITIONS = 4
SESSION_MS = 6000  # the broker's group.min.session.timeout.ms


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("consume-group") / "kafka-logs",
                            [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0",
                             "offsets.topic.num.partitions=1"])
    process.start()
    try:
        yield process
    finally:
        process.stop()


class KctlMember:
    """`kctl consume -G GROUP TOPIC` as its own process, printing topic, partition, offset and value."""

    def __init__(self, tmp: Path, name: str, bootstrap: str, group: str, topic: str, *, json: bool = False) -> None:
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        self.json = json
        args = ["consume", topic, "-b", bootstrap, "-G", group, "--session-timeout", str(SESSION_MS),
                *(["--json"] if json else ["-f", "%p %o %s\\n"])]
        if broker_fork.enabled():
            self.proc = broker_fork.spawn(args, stdout=self.out, stderr=self.err)
        else:
            with open(self.out, "w") as out, open(self.err, "w") as err:
                self.proc = subprocess.Popen([sys.executable, "-m", "kcli", *args], stdout=out, stderr=err)

    def printed(self) -> set[tuple[int, int]]:
        text = self.out.read_text() if self.out.exists() else ""
        lines = text.split("\n")[:-1]  # whole lines (the process may be writing one)
        if self.json:
            return {(d["partition"], d["offset"]) for d in map(json.loads, lines)}
        return {(int(p), int(o)) for p, o, _ in (line.split(" ", 2) for line in lines)}

    def notices(self) -> list[dict]:
        """--json's rebalance notices on stderr."""
        return [json.loads(line) for line in self.stderr().splitlines() if line.startswith("{")]

    def stderr(self) -> str:
        return self.err.read_text() if self.err.exists() else ""

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


def wait_for(condition, what: str, seconds: float = 60.0, tick=None):
    deadline = time.monotonic() + seconds
    while True:
        if tick is not None:
            tick()
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, per_partition: int, tag: str) -> set[tuple[int, int]]:
    with KafkaClient(bootstrap) as client:
        producer = Producer(client, topic, linger_ms=0)
        for i in range(per_partition * PARTITIONS):
            producer.send(ProducerRecord(f"{tag}-{i}".encode(), partition=i % PARTITIONS))
        summary = producer.close()
    assert summary.ok
    return {(p.partition, o) for p in summary.partitions.values() for o in range(p.first_offset, p.last_offset + 1)}


def split(bootstrap: str, group: str, members: int):
    """The group's members' assignments when it is Stable with ``members`` members that hold every partition
    exactly once; None otherwise."""
    with KafkaClient(bootstrap) as client:
        d = describe_groups(client, [group])[0]
    if d.state != "Stable" or len(d.members) != members:
        return None
    owned = [tp for m in d.members for tp in m.assignment or ()]
    if sorted(owned) != sorted({(tp[0], p) for tp in owned for p in range(PARTITIONS)}) or len(owned) != PARTITIONS:
        return None
    return {m.client_id + "/" + m.member_id: sorted(m.assignment or ()) for m in d.members}


def committed_at_end(bootstrap: str, group: str, topic: str) -> bool:
    with KafkaClient(bootstrap) as client:
        ends = {tp: end for tp, (_, end) in client.log_offsets([(topic, p) for p in range(PARTITIONS)]).items()}
        return client.offset_fetch(group) == ends


def test_two_kctl_members_split_the_partitions_and_one_takes_over_from_a_killed_one(broker, tmp_path):
    topic, group = "t-" + uuid.uuid4().hex[:8], "g-" + uuid.uuid4().hex[:8]
    produced = produce(broker.bootstrap, topic, 10, "first")
    a = KctlMember(tmp_path, "a", broker.bootstrap, group, topic, json=True)
    b = None
    try:
        wait_for(lambda: split(broker.bootstrap, group, 1), "the first member to hold every partition")
        b = KctlMember(tmp_path, "b", broker.bootstrap, group, topic)
        assignments = wait_for(lambda: split(broker.bootstrap, group, 2), "two members splitting the partitions")
        assert sorted(len(ps) for ps in assignments.values()) == [2, 2]  # range: 4 partitions over 2 members
        produced |= produce(broker.bootstrap, topic, 10, "second")
        wait_for(lambda: a.printed() | b.printed() >= produced, "every record printed by one of them")
        # kcat's rebalance lines; with --json, JSON notices on stderr (records alone on stdout)
        assert "% Group " + group + " rebalanced" in b.stderr() and "assigned: " + topic in b.stderr()
        events = a.notices()
        assert [(e["event"], len(e["partitions"])) for e in events[:3]] == [
            ("assigned", 4), ("revoked", 4), ("assigned", 2)]
        assert {e["notice"] for e in events} == {"rebalance"} and events[0]["leader"]

        b.kill()  # no LeaveGroup: the coordinator notices when B's session times out
        wait_for(lambda: split(broker.bootstrap, group, 1), "the member left to take every partition",
                 seconds=SESSION_MS / 1000 + 60)
        produced |= produce(broker.bootstrap, topic, 5, "third")
        wait_for(lambda: a.printed() | b.printed() >= produced, "the third records printed")
        assert a.stop() == 0  # Ctrl-C: commit what was printed, leave the group
        assert a.notices()[-1]["event"] == "revoked" and len(a.notices()[-1]["partitions"]) == PARTITIONS
        assert committed_at_end(broker.bootstrap, group, topic)
        with KafkaClient(broker.bootstrap) as client:
            assert describe_groups(client, [group])[0].state == "Empty"
    finally:
        a.kill()
        if b is not None:
            b.kill()


def test_a_kctl_member_and_a_confluent_kafka_member_share_a_group(broker, tmp_path):
    from confluent_kafka import Consumer

    topic, group = "t-" + uuid.uuid4().hex[:8], "g-" + uuid.uuid4().hex[:8]
    produced = produce(broker.bootstrap, topic, 5, "first")
    seen: set[tuple[int, int]] = set()
    rdkafka = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                        "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range,roundrobin"})

    def poll() -> None:
        msg = rdkafka.poll(0.1)
        if msg is not None and msg.error() is None:
            seen.add((msg.partition(), msg.offset()))
            rdkafka.commit(msg, asynchronous=False)

    first = KctlMember(tmp_path, "first", broker.bootstrap, group, topic)
    second = None
    try:
        wait_for(lambda: split(broker.bootstrap, group, 1), "kctl to join first (the leader)")
        rdkafka.subscribe([topic])
        # kctl's leader assigned librdkafka its half, in the consumer protocol's bytes
        wait_for(lambda: split(broker.bootstrap, group, 2) and len(rdkafka.assignment()) == 2,
                 "kctl and librdkafka to split the partitions", tick=poll)
        mine = {p.partition for p in rdkafka.assignment()}
        produced |= produce(broker.bootstrap, topic, 5, "second")
        wait_for(lambda: seen | first.printed() >= produced, "every record printed or polled", tick=poll)
        assert {p for p, _ in seen} <= mine  # librdkafka read only what kctl's leader gave it
        assert first.stop(signal.SIGTERM) == 0  # SIGTERM as Ctrl-C: commit, LeaveGroup
        wait_for(lambda: len(rdkafka.assignment()) == PARTITIONS, "librdkafka to take every partition", tick=poll)

        # librdkafka is the leader now: it assigns the new kctl member, which decodes librdkafka's bytes
        second = KctlMember(tmp_path, "second", broker.bootstrap, group, topic)
        wait_for(lambda: split(broker.bootstrap, group, 2) and len(rdkafka.assignment()) == 2,
                 "librdkafka's leader to give kctl half", tick=poll)
        produced |= produce(broker.bootstrap, topic, 5, "third")
        wait_for(lambda: seen | first.printed() | second.printed() >= produced, "the third records", tick=poll)
        ours = {p for p, _ in second.printed()}
        assert ours and not ours & {p.partition for p in rdkafka.assignment()}
        rdkafka.close()  # leaves: the kctl member takes every partition
        rdkafka = None
        wait_for(lambda: split(broker.bootstrap, group, 1), "kctl to take every partition")
        assert second.stop() == 0
        assert committed_at_end(broker.bootstrap, group, topic)
    finally:
        if rdkafka is not None:
            rdkafka.close()
        first.kill()
        if second is not None:
            second.kill()
