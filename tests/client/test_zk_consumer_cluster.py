"""ZooKeeper-era consumer groups on a real three-broker cluster: `kctl consume --zookeeper` members (Kafka 0.8.2's
ZookeeperConsumerConnector protocol) and pykafka 2.8 BalancedConsumers, as processes.

A member joins, a member is killed -9 (its ephemerals go when its 2 s session expires), a broker is restarted,
partitions are added; after each change the owner registry settles on the assignment of the live members (kctl zk
consumers --check's reading), and across the run every produced message is printed at least once: members commit
only what they printed, so none is skipped. Then the group's ZooKeeper offsets are the log end offsets and
`kctl offsets migrate` copies them into Kafka. pykafka's members run the same scenarios (partitions added: the
gap pykafka 2.8 has, reported by the check); kctl refuses to join their group."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import kctl_fork
from cluster_support import create_topic, metadata, produce, running_cluster, wait_for
from support import REPO

pytestmark = pytest.mark.cluster

SESSION_MS = 2000  # the members' zookeeper.session.timeout.ms: a killed member is gone after about this long
PYKAFKA = REPO / ".venv-pykafka" / "bin" / "python"
KCTL_SETTINGS = ("zookeeper.session.timeout.ms=%d" % SESSION_MS, "rebalance.backoff.ms=300",
                 "rebalance.max.retries=20", "auto.commit.interval.ms=300", "fetch.wait.max.ms=100")


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with running_cluster(zookeeper, tmp_path_factory.mktemp("zk-consumer")) as c:
        yield c


class Member:
    """One member process; what it printed is in ``out`` ("<partition> <offset> <value>" lines)."""

    def __init__(self, argv: list[str], directory: Path, name: str) -> None:
        self.out, self.err = directory / f"{name}.out", directory / f"{name}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def values(self) -> set[str]:
        return {line.split(" ", 2)[2] for line in self.out.read_text().splitlines() if line.count(" ") >= 2}

    def stderr(self) -> str:
        return self.err.read_text()

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no commit, no goodbye; ZooKeeper removes its nodes when the session expires
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def kctl_member(cluster, directory: Path, group: str, topic: str, name: str) -> Member:
    argv = [sys.executable, "-m", "kcli", "consume", "--zookeeper", cluster.connect, "-G", group, topic,
            "-f", "%p %o %s\\n"]
    for setting in KCTL_SETTINGS:
        argv += ["--consumer-property", setting]
    return Member(argv, directory, name)


def pykafka_member(cluster, directory: Path, group: str, topic: str, name: str) -> Member:
    return Member([str(PYKAFKA), str(REPO / "tests" / "pykafka_member.py"), cluster.bootstrap, cluster.connect,
                   group, topic, str(SESSION_MS)], directory, name)


def check(cluster, group: str):
    from kcli.zk.rebalance import read_and_check
    from kcli.zk.registry import ZkRegistry

    with ZkRegistry(cluster.connect) as registry:
        return read_and_check(registry, group)


def settle(cluster, group: str, members: list[Member], partitions: int, layout: str, timeout: float = 60):
    """Wait until the owner registry matches the assignment of exactly ``members`` over ``partitions``."""
    seen = {}

    def settled():
        from kcli.zk.registry import ZnodeMissingError

        try:
            result = check(cluster, group)
        except ZnodeMissingError:
            return False  # no member registered yet
        seen["last"] = result
        return (result.ok and result.layout == layout and len(result.members) == len(members)
                and sum(p.status == "ok" for p in result.partitions) == partitions)
    try:
        wait_for(settled, timeout, f"{len(members)} members owning {partitions} partitions of {group}", interval=0.3)
    except AssertionError:
        logs = "\n".join(f"--- {m.err.name}\n{m.stderr()[-2000:]}" for m in members)
        last = seen.get("last")
        raise AssertionError(f"not settled: {last.to_json() if last else None}\n{logs}") from None
    return seen["last"]


def produce_round(cluster, topic: str, prefix: str, count: int = 40) -> set[str]:
    errors = produce(cluster, topic, count, value=prefix.encode())
    assert not any(errors), errors
    return {f"{prefix}{i}" for i in range(count)}


def consumed_everything(members: list[Member], produced: set[str], timeout: float = 90) -> None:
    def all_printed():
        seen = set().union(*(m.values() for m in members))
        return produced <= seen
    try:
        wait_for(all_printed, timeout, "every produced message printed by some member", interval=0.5)
    except AssertionError:
        seen = set().union(*(m.values() for m in members))
        logs = "\n".join(f"--- {m.err.name}\n{m.stderr()[-2000:]}" for m in members)
        raise AssertionError(f"{len(produced - seen)} never printed, e.g. {sorted(produced - seen)[:5]}\n{logs}")


def restart_broker(cluster, broker_id: int) -> None:
    cluster.brokers[broker_id].stop()
    wait_for(lambda: broker_id not in cluster.live_broker_ids(), 60, f"broker {broker_id} gone")
    cluster.brokers[broker_id].start()
    wait_for(lambda: broker_id in cluster.live_broker_ids(), 60, f"broker {broker_id} back")


def add_partitions(cluster, topic: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(60)
    wait_for(lambda: all(p.leader >= 0 for p in metadata(cluster, topic).topics[topic].partitions.values())
             and len(metadata(cluster, topic).topics[topic].partitions) == total, 60, f"{total} partitions")


def kctl(*args: str) -> subprocess.CompletedProcess:
    """A one-off kctl command, forked from kctl_fork's server (the members are the module's fresh processes)."""
    return kctl_fork.run(*args, timeout=120)


def test_kctl_members_join_die_and_follow_brokers_and_partitions(cluster, tmp_path):
    topic, group = "zkc-kctl", f"zkc-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, partitions=4, rf=3)
    produced = produce_round(cluster, topic, "a")
    members: list[Member] = []
    try:
        first = kctl_member(cluster, tmp_path, group, topic, "m1")
        second = kctl_member(cluster, tmp_path, group, topic, "m2")
        members += [first, second]
        settle(cluster, group, [first, second], 4, "kafka")
        third = kctl_member(cluster, tmp_path, group, topic, "m3")
        members.append(third)
        result = settle(cluster, group, [first, second, third], 4, "kafka")
        assert {p.owners[0].rsplit("-", 1)[0] for p in result.partitions} == set(result.members)  # all take part

        # another member's ids node that is no registration: reported, skipped, and the rest agree
        cluster.zk.create(f"{cluster.chroot}/consumers/{group}/ids/{group}_bogus", b"{not json")
        wait_for(lambda: "skipping member" in first.stderr(), 30, "the malformed member reported")
        settle(cluster, group, [first, second, third], 4, "kafka")
        out = kctl("zk", "consumers", group, "--check", "--json", "-z", cluster.connect)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["layout"] == "kafka" and report["check"]["ok"]
        assert [m["consumer_id"] for m in report["malformed_members"]] == [f"{group}_bogus"]
        assert "malformed" in out.stderr
        cluster.zk.delete(f"{cluster.chroot}/consumers/{group}/ids/{group}_bogus")

        produced |= produce_round(cluster, topic, "b")
        second.kill()
        settle(cluster, group, [first, third], 4, "kafka")

        restart_broker(cluster, 1)
        produced |= produce_round(cluster, topic, "c")
        settle(cluster, group, [first, third], 4, "kafka")

        add_partitions(cluster, topic, 6)
        settle(cluster, group, [first, third], 6, "kafka")
        produced |= produce_round(cluster, topic, "d")
        consumed_everything(members, produced)
        for member in (first, third):
            assert member.stop() == 0, member.stderr()
    finally:
        for member in members:
            if member.proc.poll() is None:
                member.proc.kill()

    # Offsets were committed after printing: with every message printed, they are the log end offsets.
    from kcli.zk.offsets import ZkOffsetStore

    with ZkOffsetStore(cluster.connect) as store:
        stored = store.read([group])[group]
    from kcli.client import KafkaClient

    with KafkaClient(cluster.bootstrap) as client:
        ends = client.log_offsets([(topic, p) for p in range(6)])
    assert stored == {tp: end for tp, (_, end) in ends.items()}

    # and `kctl offsets migrate` takes them to Kafka as it takes Kafka 0.8's
    out = kctl("offsets", "migrate", "-z", cluster.connect, "-b", cluster.bootstrap, "-g", group, "--execute",
               "--backup", str(tmp_path / "backup.csv"))
    assert out.returncode == 0, out.stdout + out.stderr
    with KafkaClient(cluster.bootstrap) as client:
        assert client.offset_fetch(group) == stored

    # offsets.storage=kafka with dual commit, a whitelist subscription, round-robin, and consumer.timeout.ms
    # ending the run
    other = f"{group}-kafka"
    out = kctl("consume", "--zookeeper", cluster.connect, "-G", other, "--whitelist", "zkc-k.*", "-f", "%s\\n",
               "--consumer-property", "offsets.storage=kafka", "--consumer-property", "consumer.timeout.ms=3000",
               "--consumer-property", "partition.assignment.strategy=roundrobin")
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == produced and f"owns {topic}-0, " in out.stderr
    with KafkaClient(cluster.bootstrap) as client:
        assert client.offset_fetch(other) == stored
    with ZkOffsetStore(cluster.connect) as store:
        assert store.read([other])[other] == stored  # dual.commit.enabled: ZooKeeper too


@pytest.mark.skipif(not PYKAFKA.exists(), reason="pykafka's environment (.venv-pykafka) is made by scripts/setup.sh")
def test_pykafka_balanced_consumers_and_kctl_refusing_their_group(cluster, tmp_path):
    topic, group = "zkc-pykafka", f"zkp-{uuid.uuid4().hex[:6]}"
    # pykafka's members sort partitions by the leader each of them last saw: leadership moving under them can
    # leave their views, and so their assignments, apart. Broker 2 leads nothing here, so restarting it makes
    # them rebalance (they watch /brokers/ids) over the same leaders.
    create_topic(cluster, topic, assignment=[[0, 1, 2], [1, 0, 2], [0, 1, 2], [1, 0, 2]])
    produced = produce_round(cluster, topic, "a")
    members: list[Member] = []
    try:
        first = pykafka_member(cluster, tmp_path, group, topic, "p1")
        second = pykafka_member(cluster, tmp_path, group, topic, "p2")
        members += [first, second]
        settle(cluster, group, members, 4, "pykafka")
        out = kctl("zk", "consumers", group, "--check", "-z", cluster.connect)
        assert out.returncode == 0 and "layout: pykafka" in out.stdout, out.stdout + out.stderr

        # kctl's member refuses the group instead of writing Kafka's nodes into it
        out = kctl("consume", "--zookeeper", cluster.connect, "-G", group, topic)
        assert out.returncode == 1 and "pykafka's registry layout" in out.stderr, out.stderr
        settle(cluster, group, members, 4, "pykafka")

        produced |= produce_round(cluster, topic, "b")
        second.kill()
        settle(cluster, group, [first], 4, "pykafka")
        third = pykafka_member(cluster, tmp_path, group, topic, "p3")
        members.append(third)
        settle(cluster, group, [first, third], 4, "pykafka")

        restart_broker(cluster, 2)
        produced |= produce_round(cluster, topic, "c")
        settle(cluster, group, [first, third], 4, "pykafka")

        consumed_everything(members, produced)

        # pykafka 2.8 watches the topic list, not a topic's partitions: partitions added to its topic stay
        # unowned until something else makes it rebalance, and `kctl zk consumers --check` says so
        add_partitions(cluster, topic, 6)

        statuses = {}

        def new_partitions_unowned():
            statuses.update({p.partition: p.status for p in check(cluster, group).partitions})
            # the first four keep their owners (which the range over six would deal differently)
            return (statuses.get(4) == statuses.get(5) == "unowned"
                    and all(statuses.get(p) in ("ok", "wrong-owner") for p in range(4)))
        try:
            wait_for(new_partitions_unowned, 30, "the added partitions reported unowned")
        except AssertionError:
            raise AssertionError(f"statuses {statuses}: {check(cluster, group).to_json()}") from None
        out = kctl("zk", "consumers", group, "--check", "--json", "-z", cluster.connect)
        assert out.returncode == 1, out.stdout + out.stderr
        report = json.loads(out.stdout)["check"]
        assert report["layout"] == "pykafka" and not report["ok"]
        assert [p["partition"] for p in report["partitions"] if p["status"] == "unowned"] == [4, 5]
        for member in (first, third):
            member.stop()
    finally:
        for member in members:
            if member.proc.poll() is None:
                member.proc.kill()
