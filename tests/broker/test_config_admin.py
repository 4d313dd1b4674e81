"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs in process: a KafkaServer over a temp dir, its handlers
called with decoded requests (issue 23.5-23.7). Dynamic broker configs (KIP-226: Kafka's DynamicBrokerConfig and
ConfigAdminManager), DescribeConfigs reading ZooKeeper in a cluster (ZkAdminManager.describeConfigs), and the
topic settings this broker refuses rather than accept and ignore."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from kio.schema.alter_configs.v2 import request as alter_req
from kio.schema.create_topics.v7 import request as create_req
from kio.schema.describe_configs.v4 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_req

import inprocess_broker
from inprocess_broker import InProcessBroker, running_broker
from kcli.protocol import ApiKey

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 4, 5
REMOTE_STORAGE_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
                           "remote log storage.")


class Broker(InProcessBroker):
    async def describe(self, kind: int, name: str) -> tuple[ErrorCode, dict[str, Any]]:
        request = describe_req.DescribeConfigsRequest(resources=(describe_req.DescribeConfigsResource(
            resource_type=kind, resource_name=name, configuration_keys=None),), include_synonyms=True)
        result = (await self.call(ApiKey.DESCRIBE_CONFIGS, 4, request)).results[0]
        return result.error_code, {c.name: c for c in result.configs}

    async def alter(self, kind: int, name: str, configs: dict[str, str | None]) -> tuple[ErrorCode, str | None]:
        request = alter_req.AlterConfigsRequest(validate_only=False, resources=(alter_req.AlterConfigsResource(
            resource_type=kind, resource_name=name,
            configs=tuple(alter_req.AlterableConfig(name=k, value=v) for k, v in configs.items())),))
        response = (await self.call(ApiKey.ALTER_CONFIGS, 2, request)).responses[0]
        return response.error_code, response.error_message

    async def incremental(self, kind: int, name: str, *ops: tuple[str, int, str | None]) -> tuple[ErrorCode, str | None]:
        request = incremental_req.IncrementalAlterConfigsRequest(validate_only=False, resources=(
            incremental_req.AlterConfigsResource(resource_type=kind, resource_name=name, configs=tuple(
                incremental_req.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)),))
        response = (await self.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)).responses[0]
        return response.error_code, response.error_message

    async def create(self, name: str, configs: dict[str, str]) -> tuple[ErrorCode, str | None]:
        request = create_req.CreateTopicsRequest(timeout=datetime.timedelta(seconds=10), topics=(
            create_req.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                                      configs=tuple(create_req.CreatableTopicConfig(name=k, value=v)
                                                    for k, v in configs.items())),))
        result = (await self.call(ApiKey.CREATE_TOPICS, 7, request)).topics[0]
        return result.error_code, result.error_message


def running(log_dir: Path, **overrides: str):
    return running_broker(log_dir, Broker, **{"offsets.topic.num.partitions": "1", **overrides})


run = inprocess_broker.run


def _value(configs: dict[str, Any], name: str) -> tuple[str | None, int]:
    return configs[name].value, configs[name].config_source


# -- 23.5: dynamic broker configs ------------------------------------------------------------------------------
def test_librdkafka_0081_broker_configs_are_applied_described_and_kept(tmp_path):
    """The keys librdkafka's 0081 sets on a BROKER resource: AlterConfigs sasl.kerberos.min.time.before.relogin,
    then IncrementalAlterConfigs SET background.threads + APPEND log.cleanup.policy, then DELETE + SUBTRACT. The
    topic-config synonym reaches the topics at once; everything survives a restart."""

    async def alter_and_describe() -> None:
        async with running(tmp_path / "logs", **{"log.retention.hours": "100"}) as b:
            b.server.admin.create_topic("t", 1, 1)
            assert await b.alter(BROKER, "0", {"sasl.kerberos.min.time.before.relogin": "58000"}) == (
                ErrorCode.none, None)
            assert await b.incremental(BROKER, "0", ("background.threads", SET, "9"),
                                       ("log.cleanup.policy", APPEND, "compact")) == (ErrorCode.none, None)
            error, configs = await b.describe(BROKER, "0")
            assert error == ErrorCode.none
            assert _value(configs, "background.threads") == ("9", DYNAMIC_BROKER_CONFIG)
            assert not configs["background.threads"].read_only
            # the incremental change started from what AlterConfigs stored for this broker
            assert "sasl.kerberos.min.time.before.relogin" in configs
            assert _value(configs, "log.cleanup.policy") == ("delete,compact", DYNAMIC_BROKER_CONFIG)
            assert [(s.value, s.source) for s in configs["log.cleanup.policy"].synonyms] == [
                ("delete,compact", DYNAMIC_BROKER_CONFIG), ("delete", DEFAULT_CONFIG)]
            assert _value(configs, "log.retention.hours") == ("100", STATIC_BROKER_CONFIG)
            assert configs["log.dirs"].read_only
            # the new default reaches the topic without an override: its log compacts from now on
            error, topic = await b.describe(TOPIC, "t")
            assert _value(topic, "cleanup.policy") == ("delete,compact", DYNAMIC_BROKER_CONFIG)
            assert b.server.log_manager.topics["t"].partitions[0].log.config.compact
            # the cluster-wide default ("" resource) is its own entity; describing it lists only what is set there
            assert await b.alter(BROKER, "", {"log.retention.ms": "3600000"}) == (ErrorCode.none, None)
            error, default = await b.describe(BROKER, "")
            assert (error, {k: _value(default, k) for k in default}) == (
                ErrorCode.none, {"log.retention.ms": ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)})
            error, topic = await b.describe(TOPIC, "t")
            assert _value(topic, "retention.ms") == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)

    async def after_restart() -> None:
        async with running(tmp_path / "logs", **{"log.retention.hours": "100"}) as b:
            error, configs = await b.describe(BROKER, "0")
            assert _value(configs, "background.threads") == ("9", DYNAMIC_BROKER_CONFIG)
            error, topic = await b.describe(TOPIC, "t")
            assert _value(topic, "cleanup.policy") == ("delete,compact", DYNAMIC_BROKER_CONFIG)
            assert _value(topic, "retention.ms") == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)
            assert await b.incremental(BROKER, "0", ("background.threads", DELETE, ""),
                                       ("log.cleanup.policy", SUBTRACT, "compact")) == (ErrorCode.none, None)
            error, configs = await b.describe(BROKER, "0")
            assert _value(configs, "log.cleanup.policy") == ("delete", DYNAMIC_BROKER_CONFIG)
            assert "background.threads" not in configs
            error, topic = await b.describe(TOPIC, "t")
            assert _value(topic, "cleanup.policy") == ("delete", DYNAMIC_BROKER_CONFIG)
            assert not b.server.log_manager.topics["t"].partitions[0].log.config.compact

    run(alter_and_describe())
    run(after_restart())


def test_broker_configs_kafka_refuses_are_refused_with_its_errors(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            refusals = {
                # ConfigAdminManager: INVALID_REQUEST with DynamicBrokerConfig's ConfigException text
                ("0", "log.dirs", "/elsewhere"): "Cannot update these configs dynamically: Set(log.dirs)",
                ("0", "log.retention.hours", "1"): "Cannot update these configs dynamically: Set(log.retention.hours)",
                # dynamic in Kafka, not here: refused rather than accepted and ignored
                ("0", "listeners", "PLAINTEXT://127.0.0.1:1"): "Cannot update these configs dynamically: Set(listeners)",
                # DynamicConfig.Broker: the replication throttles are LONGs of at least 0 (KIP-73)
                ("0", "leader.replication.throttled.rate", "-1"):
                    "Invalid value -1 for configuration leader.replication.throttled.rate: Value must be at least 0",
                ("", "follower.replication.throttled.rate", "fast"):
                    "Invalid value fast for configuration follower.replication.throttled.rate: Not a number of type "
                    "LONG",
                ("0", "ssl.keystore.location", "/k"): "These security configs can be dynamically updated only "
                                                      "per-listener using the listener prefix: Set(ssl.keystore.location)",
                ("", "listener.name.plaintext.ssl.keystore.location", "/k"):
                    "Cannot update these configs at default cluster level, broker id must be specified: "
                    "Set(listener.name.plaintext.ssl.keystore.location)",
                ("0", "background.threads", "many"): "Invalid value many for configuration background.threads: Not a "
                                                     "number of type INT",
                ("0", "log.retention.ms", "soon"): "Invalid value soon for configuration log.retention.ms",
                ("1", "background.threads", "2"): "Unexpected broker id, expected 0, but received 1",
                ("b", "background.threads", "2"): "Node id must be an integer, but it is: b",
            }
            for (name, key, value), message in refusals.items():
                for error, text in (await b.alter(BROKER, name, {key: value}),
                                    await b.incremental(BROKER, name, (key, SET, value))):
                    assert error == ErrorCode.invalid_request, (key, error, text)
                    assert message in (text or ""), (key, text)
            assert await b.incremental(BROKER, "0", ("background.threads", APPEND, "2")) == (
                ErrorCode.invalid_request, "Config value append is not allowed for config key: background.threads")
            error, configs = await b.describe(BROKER, "0")
            assert not any(c.config_source == DYNAMIC_BROKER_CONFIG for c in configs.values())
            assert not (tmp_path / "logs" / "kctl-broker-configs.json").exists()

    run(main())


# -- 23.6: DescribeConfigs reads ZooKeeper in a cluster ------------------------------------------------------
class ConfigStore:
    """Stands in for KafkaZkClient's config znodes: what another broker wrote is there at once."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[str, str]] = {}
        self.entities: dict[tuple[str, str], dict[str, str]] = {}

    def topic_config(self, topic: str) -> dict[str, str]:
        return dict(self.topics.get(topic, {}))

    def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        self.topics[topic] = dict(config)

    def entity_config(self, kind: str, name: str) -> dict[str, str]:
        return dict(self.entities.get((kind, name), {}))

    def set_entity_config(self, kind: str, name: str, config: dict[str, str]) -> None:
        self.entities[(kind, name)] = dict(config)


def test_describe_and_incremental_alter_read_zookeeper_not_the_local_copy(tmp_path):
    """Another broker altered the topic: /config/topics/<t> has the new value, this broker's logs have not heard
    (its /config/changes notification is still on its way). DescribeConfigs answers from ZooKeeper, and an
    incremental change here starts from ZooKeeper's copy, so it does not undo the other broker's change."""

    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            admin = b.server.admin
            admin.create_topic("t", 1, 1)
            store = ConfigStore()
            admin.zk = store  # as in ZooKeeper mode, from here on
            store.topics["t"] = {"retention.ms": "1234"}  # written by another broker just now
            error, configs = await b.describe(TOPIC, "t")
            assert _value(configs, "retention.ms") == ("1234", 1)  # DYNAMIC_TOPIC_CONFIG
            assert await b.incremental(TOPIC, "t", ("segment.bytes", SET, "2048")) == (ErrorCode.none, None)
            assert store.topics["t"] == {"retention.ms": "1234", "segment.bytes": "2048"}
            error, configs = await b.describe(TOPIC, "t")
            assert (_value(configs, "retention.ms")[0], _value(configs, "segment.bytes")[0]) == ("1234", "2048")
            # the same for the cluster-wide broker defaults in /config/brokers/<default>
            admin.dynamic.zk = store
            store.entities[("brokers", "<default>")] = {"background.threads": "3"}
            assert await b.incremental(BROKER, "", ("num.io.threads", SET, "4")) == (ErrorCode.none, None)
            assert store.entities[("brokers", "<default>")] == {"background.threads": "3", "num.io.threads": "4"}

    run(main())


# -- 23.7: topic settings nothing implements are refused ----------------------------------------------------
def test_remote_storage_is_refused_and_replication_throttles_are_applied_live(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            # tiered storage is off: Kafka's LogConfig.validateRemoteStorageOnlyIfSystemEnabled
            assert await b.create("tiered", {"remote.storage.enable": "true"}) == (
                ErrorCode.invalid_config, REMOTE_STORAGE_DISABLED)
            assert "tiered" not in b.server.metadata.topics
            assert (await b.create("plain", {"remote.storage.enable": "false"}))[0] == ErrorCode.none
            for error, message in (await b.alter(TOPIC, "plain", {"remote.storage.enable": "true"}),
                                   await b.incremental(TOPIC, "plain", ("remote.storage.enable", SET, "true"))):
                assert (error, message) == (ErrorCode.invalid_config, REMOTE_STORAGE_DISABLED)
            # KIP-73: the throttled-replica lists are validated as Kafka's ThrottledReplicaListValidator does and
            # mark this broker's (0) partitions in its quota managers at once; the rates likewise
            quotas = b.server.admin.replication_quotas
            for key, manager in (("leader.replication.throttled.replicas", quotas.leader),
                                 ("follower.replication.throttled.replicas", quotas.follower)):
                assert await b.create(f"throttled-{key[0]}", {key: "*"}) == (ErrorCode.none, None)
                assert manager.is_throttled(f"throttled-{key[0]}", 7)
                assert await b.alter(TOPIC, "plain", {key: "0:0,1:1,2:0"}) == (ErrorCode.none, None)
                assert manager.throttled["plain"] == frozenset({0, 2})
                error, message = await b.incremental(TOPIC, "plain", (key, SET, "0:zero"))
                assert (error, message) == (ErrorCode.invalid_config, f"Invalid value 0:zero for configuration {key}: "
                                            f"{key} must be the literal '*' or a list of replicas in the following "
                                            "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
                assert manager.throttled["plain"] == frozenset({0, 2})
                assert await b.incremental(TOPIC, "plain", (key, SET, "")) == (ErrorCode.none, None)
                assert "plain" not in manager.throttled
                assert await b.incremental(TOPIC, "plain", (key, SET, "*")) == (ErrorCode.none, None)
                assert await b.incremental(TOPIC, "plain", (key, DELETE, None)) == (ErrorCode.none, None)
                assert "plain" not in manager.throttled
            # the rates: this broker's own over the cluster default, live
            assert await b.incremental(BROKER, "", ("leader.replication.throttled.rate", SET, "2000")) == (
                ErrorCode.none, None)
            assert (quotas.leader.bound, quotas.follower.bound) == (2000, None)
            assert await b.incremental(BROKER, "0", ("leader.replication.throttled.rate", SET, "1000"),
                                       ("follower.replication.throttled.rate", SET, "3000"),
                                       ("replica.alter.log.dirs.io.max.bytes.per.second", SET, "4000")) == (
                ErrorCode.none, None)
            assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (1000, 3000, 4000)
            error, configs = await b.describe(BROKER, "0")
            assert _value(configs, "leader.replication.throttled.rate") == ("1000", DYNAMIC_BROKER_CONFIG)
            assert not configs["leader.replication.throttled.rate"].read_only
            assert await b.incremental(BROKER, "0", ("leader.replication.throttled.rate", DELETE, None),
                                       ("follower.replication.throttled.rate", DELETE, None)) == (ErrorCode.none, None)
            assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (2000, None, 4000)
            error, configs = await b.describe(TOPIC, "plain")
            assert configs["remote.storage.enable"].value == "false"

    run(main())
