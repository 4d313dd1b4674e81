"""LogConfig: Kafka 3.7's topic keys, broker synonyms, Kafka's messages for bad values, DescribeConfigs entries."""

from __future__ import annotations

import pickle

import pytest

from kcli.storage.log_config import CONFIG_KEYS, ConfigSource, ConfigType, InvalidConfigError, LogConfig

KAFKA_37_TOPIC_KEYS = {
    "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "remote.storage.enable",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}


def test_every_kafka_topic_key_is_declared_with_kafkas_defaults():
    assert set(CONFIG_KEYS) == KAFKA_37_TOPIC_KEYS
    config = LogConfig()
    assert config.segment_bytes == 1073741824 and config.retention_ms == 604800000
    assert config.max_message_bytes == 1048588 and config.cleanup_policy == ("delete",)
    assert config.min_cleanable_dirty_ratio == 0.5 and config.message_downconversion_enable is True
    assert config.flush_messages == 2**63 - 1 and config.local_retention_ms == -2


def test_old_constructor_keywords_still_work():
    config = LogConfig(segment_bytes=600, index_interval_bytes=1024, segment_index_bytes=4096)
    assert (config.segment_bytes, config.index_interval_bytes, config.segment_index_bytes) == (600, 1024, 4096)
    assert config == LogConfig(segment_bytes=600, index_interval_bytes=1024, segment_index_bytes=4096)
    assert pickle.loads(pickle.dumps(config)) == config
    assert config.replace(segment_bytes=700).index_interval_bytes == 1024
    with pytest.raises(AttributeError):
        config.segment_bytes = 5  # type: ignore[misc]


def test_topic_override_beats_broker_synonym_beats_default():
    broker = {"log.retention.hours": "1", "log.segment.bytes": "2048", "message.max.bytes": "500",
              "log.cleanup.policy": "compact", "num.partitions": "3"}
    config = LogConfig.from_props({"segment.bytes": "4096"}, broker)
    assert config.retention_ms == 3_600_000 and config.segment_bytes == 4096
    assert config.max_message_bytes == 500 and config.compact and not config.delete


def test_retention_synonyms_in_kafkas_precedence():
    hours, minutes, ms = "log.retention.hours", "log.retention.minutes", "log.retention.ms"
    assert LogConfig.from_props({}, {hours: "2", minutes: "3"}).retention_ms == 180_000
    assert LogConfig.from_props({}, {hours: "2", minutes: "3", ms: "7"}).retention_ms == 7
    assert LogConfig.from_props({}, {hours: "-1"}).retention_ms == -1
    assert LogConfig.from_props({}, {"log.roll.hours": "1"}).segment_ms == 3_600_000


@pytest.mark.parametrize("key,value,message", [
    ("retention.ms", "x", "Invalid value x for configuration retention.ms: Not a number of type LONG"),
    ("segment.bytes", "2147483648", "Invalid value 2147483648 for configuration segment.bytes: Not a number of type INT"),
    ("segment.bytes", "13", "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    ("min.cleanable.dirty.ratio", "1.5",
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "half", "Invalid value half for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ("cleanup.policy", "compact,remove",
     "Invalid value compact,remove for configuration cleanup.policy: String must be one of: compact, delete"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must be one of: "
                                   "uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("message.timestamp.type", "createtime",
     "Invalid value createtime for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
])
def test_bad_values_with_kafkas_messages(key, value, message):
    with pytest.raises(InvalidConfigError) as e:
        LogConfig.from_props({key: value}, {})
    assert str(e.value) == message and (e.value.key, e.value.value) == (key, value)


def test_unknown_key_and_conflicting_compaction_lags():
    with pytest.raises(InvalidConfigError, match="^Unknown topic config name: retention.hours$"):
        LogConfig.from_props({"retention.hours": "1"}, {})
    with pytest.raises(InvalidConfigError, match=r"min.compaction.lag.ms \(10\) > max.compaction.lag.ms \(5\)"):
        LogConfig.from_props({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, {})
    with pytest.raises(InvalidConfigError, match="Unknown topic config name: no.such.key"):
        LogConfig(no_such_key=1)


def test_describe_sources_and_synonyms():
    config = LogConfig.from_props({"retention.ms": "1000"}, {"log.retention.minutes": "5", "log.segment.bytes": "2048"})
    entries = {e.name: e for e in config.describe()}
    assert set(entries) == KAFKA_37_TOPIC_KEYS
    retention = entries["retention.ms"]
    assert (retention.value, retention.source, retention.type) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigType.LONG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.minutes", "5", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == ("2048", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.source) for s in segment.synonyms] == [("log.segment.bytes", ConfigSource.STATIC_BROKER_CONFIG),
                                                              ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG)]
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.sensitive, policy.read_only) == ("delete", ConfigSource.DEFAULT_CONFIG,
                                                                                 False, False)
    assert [e.name for e in config.describe(["segment.ms"])] == ["segment.ms"]
