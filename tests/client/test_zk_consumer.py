"""The old consumer's member (kcli.client.zk_consumer) over an in-memory registry and client: release-then-claim
with retries, all-or-nothing claims, malformed and pykafka members, commits to ZooKeeper and Kafka, settings.
The real thing, ZooKeeper and brokers, is in test_zk_consumer_cluster.py."""

from __future__ import annotations

import json
import types

import pytest
from kio.schema.errors import ErrorCode

from kcli.client.zk_consumer import (ConsumerRebalanceFailedError, OldConsumerConfig, Rebalanced, ZookeeperConsumer,
                                     parse_properties)
from kcli.client.consume import ConsumeNotice
from kcli.errors import KcliError, UsageError
from kcli.records import old_consumer as oc
from kcli.zk.consumer_group import GroupSnapshot


class FakeRegistry:
    """A group's nodes in memory: ``others`` are the other members' subscriptions, ``owners`` the owner nodes."""

    group = "g"

    def __init__(self, partitions: dict[str, list[int]]) -> None:
        self.partitions = partitions
        self.others: list[oc.Subscription] = []
        self.malformed: dict[str, str] = {}
        self.foreign: dict[str, str] = {}
        self.owners: dict[tuple[str, int], str] = {}
        self.offsets: dict[tuple[str, int], int] = {}
        self.me: oc.Subscription | None = None
        self.log: list[tuple] = []
        self.on_failed_claim = None
        self.pending = False

    def register(self, consumer_id, data):
        self.me = oc.Subscription(consumer_id, dict(json.loads(data)["subscription"]))
        self.pending = True

    def reregister(self):
        pass

    def take_rebalance(self):
        pending, self.pending = self.pending, False
        return pending

    def request_rebalance(self):
        self.pending = True

    def take_session_loss(self):
        return False

    def snapshot(self, own):
        return GroupSnapshot([self.me, *self.others], dict(self.malformed), dict(self.foreign),
                             sorted(self.partitions), {t: list(ps) for t, ps in self.partitions.items()})

    def claim(self, topic, partition, thread_id):
        holder = self.owners.get((topic, partition))
        if holder is not None and holder != thread_id:
            self.log.append(("refused", topic, partition))
            if self.on_failed_claim:
                self.on_failed_claim(self)
            return False
        self.owners[(topic, partition)] = thread_id
        self.log.append(("claim", topic, partition))
        return True

    def release(self, topic, partition):
        self.owners.pop((topic, partition), None)
        self.log.append(("release", topic, partition))

    def read_offsets(self, partitions):
        return {tp: self.offsets[tp] for tp in partitions if tp in self.offsets}

    def write_offsets(self, offsets):
        self.offsets.update(offsets)
        self.log.append(("write", dict(offsets)))

    def close(self):
        self.log.append(("close",))


class FakeClient:
    def __init__(self) -> None:
        self.kafka_offsets: dict[tuple[str, int], int] = {}

    def log_offsets(self, partitions):
        return {tp: (5, 50) for tp in partitions}

    def metadata(self, topics):
        return types.SimpleNamespace(topics={t: types.SimpleNamespace(partitions={0: 0, 1: 0, 2: 0, 3: 0})
                                             for t in topics})

    def offset_fetch(self, group, partitions):
        return {tp: self.kafka_offsets[tp] for tp in partitions if tp in self.kafka_offsets}

    def offset_commit(self, group, offsets):
        self.kafka_offsets.update(offsets)
        return {tp: ErrorCode.none for tp in offsets}


def member(registry, client=None, **settings) -> ZookeeperConsumer:
    config = OldConsumerConfig("g", consumer_id="g_me", rebalance_backoff_ms=0, consumer_timeout_ms=0, **settings)
    return ZookeeperConsumer(client or FakeClient(), registry, config, {"t": 1})


def test_claims_are_all_or_nothing_and_retried_until_the_owner_lets_go():
    registry = FakeRegistry({"t": [0, 1, 2, 3]})
    registry.others = [oc.Subscription("g_zz", {"t": 1})]  # sorts after g_me: g_me-0 gets 0 and 1
    registry.owners[("t", 1)] = "g_zz-0"  # the other member has not released partition 1 yet
    registry.on_failed_claim = lambda r: (r.owners.pop(("t", 1)), setattr(r, "on_failed_claim", None))
    consumer = member(registry)
    consumer.start()
    assert consumer.owned == {("t", 0): "g_me-0", ("t", 1): "g_me-0"}
    # the first attempt claimed 0, was refused 1, and let 0 go again before the second attempt
    assert registry.log[:3] == [("claim", "t", 0), ("refused", "t", 1), ("release", "t", 0)]
    items = list(consumer.items())
    assert any(isinstance(i, ConsumeNotice) and "still owned" in i.text for i in items)
    assert [i for i in items if isinstance(i, Rebalanced)][0].attempt == 2
    # no committed offset: auto.offset.reset=smallest, the log start
    assert {tp: p.fetch for tp, p in consumer.positions.items()} == {("t", 0): 5, ("t", 1): 5}


def test_an_attempt_whose_partition_the_brokers_do_not_know_yet_is_retried():
    """A partition added in ZooKeeper before the brokers' metadata has it: the attempt fails (noticed), releases
    what it claimed at the next attempt, and the member carries on instead of dying."""
    from kcli.client.client import KafkaClientError

    class LateMetadata(FakeClient):
        calls = 0

        def log_offsets(self, partitions):
            self.calls += 1
            if self.calls == 1:
                raise KafkaClientError("t-1 is not in the cluster's metadata", path="MetadataResponse")
            return super().log_offsets(partitions)

    registry = FakeRegistry({"t": [0, 1]})
    consumer = member(registry, LateMetadata())
    consumer.start()
    assert consumer.owned == {("t", 0): "g_me-0", ("t", 1): "g_me-0"}
    assert registry.log.count(("release", "t", 0)) == 1  # the failed attempt's claims went before the second
    items = list(consumer.items())
    assert any(isinstance(i, ConsumeNotice) and "rebalance attempt 1 failed" in i.text for i in items)


def test_gives_up_after_rebalance_max_retries():
    registry = FakeRegistry({"t": [0, 1]})
    registry.owners[("t", 0)] = "g_gone-0"
    with pytest.raises(ConsumerRebalanceFailedError, match="can't rebalance after 3 retries"):
        member(registry, rebalance_max_retries=3).start()
    assert registry.log.count(("refused", "t", 0)) == 3


def test_malformed_members_are_reported_once_and_left_out():
    registry = FakeRegistry({"t": [0, 1]})
    registry.malformed = {"g_bad": "malformed JSON"}
    consumer = member(registry)
    consumer.start()
    assert consumer.owned == {("t", 0): "g_me-0", ("t", 1): "g_me-0"}  # the bad member counts for nothing
    notices = [i.text for i in consumer.items() if isinstance(i, ConsumeNotice)]
    assert notices == ["group g: skipping member g_bad: its ids node is malformed (malformed JSON)"]
    registry.request_rebalance()
    consumer._synced_rebalance()
    assert not consumer._notices  # said once


def test_a_pykafka_member_makes_it_leave():
    registry = FakeRegistry({"t": [0]})
    registry.foreign = {"host:uuid": "t"}
    with pytest.raises(KcliError, match="pykafka's BalancedConsumer host:uuid"):
        member(registry).start()


def test_commits_what_was_processed_before_releasing():
    registry = FakeRegistry({"t": [0, 1]})
    registry.offsets = {("t", 0): 7}
    consumer = member(registry)
    consumer.start()
    assert consumer.positions[("t", 0)].fetch == 7 and consumer.positions[("t", 1)].fetch == 5
    consumer.mark("t", 0, 9)
    registry.others = [oc.Subscription("g_a", {"t": 1})]  # a member joins, sorting first: it takes partition 0
    registry.log.clear()
    consumer._synced_rebalance()
    # the commit (only what changed since the last one, and the reset start) comes before the releases
    assert registry.log[0] == ("write", {("t", 0): 9, ("t", 1): 5})
    assert registry.log[1:3] == [("release", "t", 0), ("release", "t", 1)]
    assert consumer.owned == {("t", 1): "g_me-0"}
    registry.log.clear()
    consumer.commit()
    assert registry.log == []  # nothing changed


def test_kafka_storage_with_dual_commit():
    registry, client = FakeRegistry({"t": [0]}), FakeClient()
    registry.offsets = {("t", 0): 12}  # ZooKeeper ahead of Kafka: a group migrating, the larger wins
    client.kafka_offsets = {("t", 0): 10}
    consumer = member(registry, client, offsets_storage="kafka")
    consumer.start()
    assert consumer.positions[("t", 0)].fetch == 12
    consumer.mark("t", 0, 20)
    consumer.commit()
    assert client.kafka_offsets == {("t", 0): 20} and registry.offsets == {("t", 0): 20}
    consumer = member(FakeRegistry({"t": [0]}), client, offsets_storage="kafka", dual_commit_enabled=False)
    consumer.start()
    consumer.mark("t", 0, 25)
    consumer.commit()
    assert client.kafka_offsets == {("t", 0): 25} and consumer.registry.offsets == {}


def test_settings_by_kafkas_names():
    config = parse_properties("g", ["partition.assignment.strategy=roundrobin", "rebalance.max.retries=9",
                                    "auto.commit.enable=false", "offsets.storage=kafka", "consumer.id=me"])
    assert (config.partition_assignment_strategy, config.rebalance_max_retries, config.auto_commit_enable,
            config.dual_commit, config.consumer_id) == ("roundrobin", 9, False, True, "me")
    for bad in ("nope=1", "rebalance.max.retries=x", "auto.commit.enable=yes", "offsets.storage=file",
                "partition.assignment.strategy=sticky", "rebalance.max.retries"):
        with pytest.raises(UsageError):
            parse_properties("g", [bad])


def test_consumer_ids_as_kafka_makes_them():
    consumer = ZookeeperConsumer(FakeClient(), FakeRegistry({"t": [0]}), OldConsumerConfig("grp"), {"t": 1})
    group, _, rest = consumer.consumer_id.partition("_")
    host_ms, _, hex8 = rest.rpartition("-")
    assert group == "grp" and len(hex8) <= 8 and host_ms.rpartition("-")[2].isdigit()


@pytest.mark.parametrize("args,message", [
    (["--zookeeper", "127.0.0.1:1", "t"], "needs a group"),
    (["--zookeeper", "127.0.0.1:1", "-G", "g"], "give topics, or --whitelist"),
    (["--zookeeper", "127.0.0.1:1", "-G", "g", "t", "--whitelist", "x"], "give topics, or --whitelist"),
    (["--zookeeper", "127.0.0.1:1", "-G", "g", "t", "-p", "0"], "takes no -p"),
    (["--zookeeper", "127.0.0.1:1", "-G", "g", "t", "-o", "5"], "-o only as beginning or end"),
    (["--zookeeper", "127.0.0.1:1", "-G", "g", "t", "--consumer-property", "x=1"], "expected KEY=VALUE"),
    (["t", "--whitelist", "x", "-b", "127.0.0.1:1"], "go with --zookeeper"),
    (["a", "b", "-b", "127.0.0.1:1"], "several topics are read by a group member"),
    (["-b", "127.0.0.1:1"], "give a TOPIC"),
])
def test_consume_usage_errors(args, message):
    from typer.testing import CliRunner

    from kcli.cli.app import app

    result = CliRunner().invoke(app, ["consume", *args], env={"KCTL_BOOTSTRAP_SERVER": None})
    assert result.exit_code == 2 and message in result.stderr, result.stderr
