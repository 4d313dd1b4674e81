"""LogConfig: a topic's log configuration, every topic-level key Kafka 3.7 has, declared once as data.

Each key is a ``TopicConfigKey``: name, type, default, validator and its broker-level synonyms (the
``server.properties`` keys that set the cluster-wide default: ``retention.ms`` <- ``log.retention.ms`` /
``log.retention.minutes`` / ``log.retention.hours``). ``LogConfig.from_props(topic_overrides, broker_defaults)``
resolves a value as Kafka does: the topic override, else the first broker synonym that is set, else the
default; ``describe()`` yields what DescribeConfigs v1+ reports for each key (value, source, synonyms).

Kafka: clients/.../common/config/{TopicConfig,ConfigDef}.java, storage/.../log/LogConfig.java (3.7),
core/.../server/KafkaConfig.scala (synonyms, the hours/minutes -> ms conversions), DynamicBrokerConfig.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kcli.errors import KcliError

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # 1 MiB + Records.LOG_OVERHEAD


class InvalidConfigError(KcliError):
    """A topic config Kafka refuses (INVALID_CONFIG): an unknown name or a value its definition rejects.

    The message is Kafka's ConfigException text: ``Invalid value x for configuration retention.ms: Not a
    number of type LONG``, or ``Unknown topic config name: x``."""

    error_code = "INVALID_CONFIG"

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.config_reason = reason
        if value is None and reason.startswith("Unknown topic config name"):
            text = reason
        else:
            text = f"Invalid value {value} for configuration {key}" + (f": {reason}" if reason else "")
        super().__init__(text)


class ConfigType(Enum):
    """ConfigDef.Type, as DescribeConfigs v3+ reports it (config_type)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(Enum):
    """DescribeConfigs v1+ config_source values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


# -- parsing and validators (ConfigDef.parseType and ConfigDef's validators, with their messages) ----

def _parse(type_: ConfigType, text: str) -> Any:
    value = text.strip()
    if type_ is ConfigType.BOOLEAN:
        if value.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return value.lower() == "true"
    if type_ in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        low, high = {ConfigType.INT: (INT32_MIN, INT32_MAX), ConfigType.LONG: (LONG_MIN, LONG_MAX),
                     ConfigType.SHORT: (-(2**15), 2**15 - 1)}[type_]
        try:
            number = int(value, 10)
        except ValueError:
            number = None
        if number is None or "_" in value or not low <= number <= high:
            raise ValueError(f"Not a number of type {type_.name}")
        return number
    if type_ is ConfigType.DOUBLE:
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"Not a number of type {type_.name}") from None
    if type_ is ConfigType.LIST:
        return tuple(p.strip() for p in value.split(",")) if value else ()
    return value


Validator = Callable[[str, Any], None]


def at_least(low: float) -> Validator:
    def check(_key: str, value: Any) -> None:
        if value < low:
            raise ValueError(f"Value must be at least {low}")
    return check


def between(low: float, high: float) -> Validator:
    def check(_key: str, value: Any) -> None:
        if value < low:
            raise ValueError(f"Value must be at least {low}")
        if value > high:
            raise ValueError(f"Value must be no more than {high}")
    return check


def one_of(*allowed: str, case_insensitive: bool = False) -> Validator:
    def check(_key: str, value: Any) -> None:
        candidate = value.lower() if case_insensitive else value
        if candidate not in ((a.lower() for a in allowed) if case_insensitive else allowed):
            raise ValueError(f"String must be one of{' (case insensitive)' if case_insensitive else ''}: "
                             f"{', '.join(allowed)}")
    return check


def list_of(*allowed: str) -> Validator:
    """ConfigDef.ValidList.in (3.7: no duplicates, every element allowed)."""
    def check(key: str, value: Any) -> None:
        if len(set(value)) != len(value):
            raise ValueError(f"Configuration '{key}' values must not be duplicated.")
        for element in value:
            if element not in allowed:
                raise ValueError(f"String must be one of: {', '.join(allowed)}")
    return check


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas(key: str, value: Any) -> None:
    """ThrottledReplicaListValidator (KIP-73): every item ``partitionId:brokerId`` (an empty one passes), or the
    whole list ``*``; Kafka's message names the key."""
    if all(_THROTTLED_REPLICA.fullmatch(item.strip()) for item in value) or "".join(value).strip() == "*":
        return
    raise ValueError(f"{key} must be the literal '*' or a list of replicas in the following format: "
                     "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


# -- the declaration ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A server.properties key that sets a topic config's default: ``scale`` converts its unit to the
    topic key's (hours -> ms); ``default`` is the broker's own default, in its own unit (None: unset)."""

    name: str
    scale: int = 1
    default: str | None = None


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    name: str
    type: ConfigType
    default: Any
    validator: Validator | None = None
    synonyms: tuple[BrokerSynonym, ...] = ()
    doc: str = ""
    sensitive: bool = False

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, text: object) -> Any:
        """The typed, validated value of ``text`` (a str, or already typed), or InvalidConfigError."""
        try:
            value = _parse(self.type, text) if isinstance(text, str) else text
            if self.validator is not None and value is not None:
                self.validator(self.name, value)
        except ValueError as exc:
            raise InvalidConfigError(self.name, text, str(exc)) from None
        return value


def _ms(name: str, default: str | None = None) -> BrokerSynonym:
    return BrokerSynonym(name, 1, default)


def _minutes(name: str, default: str | None = None) -> BrokerSynonym:
    return BrokerSynonym(name, 60 * 1000, default)


def _hours(name: str, default: str | None = None) -> BrokerSynonym:
    return BrokerSynonym(name, 60 * 60 * 1000, default)


T = ConfigType
# Kafka 3.7 LogConfig.CONFIG (TopicConfig names), synonyms in KafkaConfig's precedence order.
TOPIC_CONFIGS: tuple[TopicConfigKey, ...] = (
    TopicConfigKey("cleanup.policy", T.LIST, ("delete",), list_of("compact", "delete"),
                   (BrokerSynonym("log.cleanup.policy"),), "delete and/or compact"),
    TopicConfigKey("compression.type", T.STRING, "producer",
                   one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
                   (BrokerSynonym("compression.type"),), "final compression of the topic's batches"),
    TopicConfigKey("delete.retention.ms", T.LONG, 86_400_000, at_least(0),
                   (_ms("log.cleaner.delete.retention.ms"),), "how long tombstones are kept when compacting"),
    TopicConfigKey("file.delete.delay.ms", T.LONG, 60_000, at_least(0),
                   (_ms("log.segment.delete.delay.ms"),), "delay before a .deleted file is removed"),
    TopicConfigKey("flush.messages", T.LONG, LONG_MAX, at_least(1),
                   (BrokerSynonym("log.flush.interval.messages"),), "fsync every N messages"),
    TopicConfigKey("flush.ms", T.LONG, LONG_MAX, at_least(0),
                   (_ms("log.flush.interval.ms"),), "fsync at least this often"),
    TopicConfigKey("follower.replication.throttled.replicas", T.LIST, (), _throttled_replicas, (),
                   "replicas throttled on the follower side"),
    TopicConfigKey("index.interval.bytes", T.INT, DEFAULT_INDEX_INTERVAL_BYTES, at_least(0),
                   (BrokerSynonym("log.index.interval.bytes"),), "bytes between offset index entries"),
    TopicConfigKey("leader.replication.throttled.replicas", T.LIST, (), _throttled_replicas, (),
                   "replicas throttled on the leader side"),
    TopicConfigKey("local.retention.bytes", T.LONG, -2, at_least(-2),
                   (BrokerSynonym("log.local.retention.bytes"),), "tiered storage: local bytes kept (-2: retention.bytes)"),
    TopicConfigKey("local.retention.ms", T.LONG, -2, at_least(-2),
                   (_ms("log.local.retention.ms"),), "tiered storage: local time kept (-2: retention.ms)"),
    TopicConfigKey("max.compaction.lag.ms", T.LONG, LONG_MAX, at_least(1),
                   (_ms("log.cleaner.max.compaction.lag.ms"),), "longest a record stays uncompacted"),
    TopicConfigKey("max.message.bytes", T.INT, DEFAULT_MAX_MESSAGE_BYTES, at_least(0),
                   (BrokerSynonym("message.max.bytes"),), "largest record batch size allowed"),
    TopicConfigKey("message.downconversion.enable", T.BOOLEAN, True, None,
                   (BrokerSynonym("log.message.downconversion.enable"),), "down-convert for old fetch versions"),
    TopicConfigKey("message.format.version", T.STRING, "3.0-IV1", None,
                   (BrokerSynonym("log.message.format.version"),), "deprecated, ignored since 3.0"),
    TopicConfigKey("message.timestamp.after.max.ms", T.LONG, LONG_MAX, at_least(0),
                   (_ms("log.message.timestamp.after.max.ms"),), "CreateTime: how far in the future"),
    TopicConfigKey("message.timestamp.before.max.ms", T.LONG, LONG_MAX, at_least(0),
                   (_ms("log.message.timestamp.before.max.ms"),), "CreateTime: how far in the past"),
    TopicConfigKey("message.timestamp.difference.max.ms", T.LONG, LONG_MAX, at_least(0),
                   (_ms("log.message.timestamp.difference.max.ms"),), "deprecated: CreateTime distance from now"),
    TopicConfigKey("message.timestamp.type", T.STRING, "CreateTime", one_of("CreateTime", "LogAppendTime"),
                   (BrokerSynonym("log.message.timestamp.type"),), "CreateTime or LogAppendTime"),
    TopicConfigKey("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, between(0, 1),
                   (BrokerSynonym("log.cleaner.min.cleanable.ratio"),), "dirty share that makes a log cleanable"),
    TopicConfigKey("min.compaction.lag.ms", T.LONG, 0, at_least(0),
                   (_ms("log.cleaner.min.compaction.lag.ms"),), "shortest a record stays uncompacted"),
    TopicConfigKey("min.insync.replicas", T.INT, 1, at_least(1),
                   (BrokerSynonym("min.insync.replicas"),), "replicas that must acknowledge acks=all"),
    TopicConfigKey("preallocate", T.BOOLEAN, False, None,
                   (BrokerSynonym("log.preallocate"),), "preallocate segment files"),
    TopicConfigKey("remote.storage.enable", T.BOOLEAN, False, None, (), "tiered storage for this topic"),
    TopicConfigKey("retention.bytes", T.LONG, -1, None,
                   (BrokerSynonym("log.retention.bytes"),), "size above which old segments are deleted"),
    TopicConfigKey("retention.ms", T.LONG, 7 * 24 * 3_600_000, at_least(-1),
                   (_ms("log.retention.ms"), _minutes("log.retention.minutes"), _hours("log.retention.hours", "168")),
                   "age above which old segments are deleted"),
    TopicConfigKey("segment.bytes", T.INT, DEFAULT_SEGMENT_BYTES, at_least(14),  # LegacyRecord.RECORD_OVERHEAD_V0
                   (BrokerSynonym("log.segment.bytes"),), "segment size that rolls a new segment"),
    TopicConfigKey("segment.index.bytes", T.INT, DEFAULT_SEGMENT_INDEX_BYTES, at_least(4),
                   (BrokerSynonym("log.index.size.max.bytes"),), "offset/time index size limit"),
    TopicConfigKey("segment.jitter.ms", T.LONG, 0, at_least(0),
                   (_ms("log.roll.jitter.ms"), _hours("log.roll.jitter.hours", "0")), "random jitter on segment.ms"),
    TopicConfigKey("segment.ms", T.LONG, 7 * 24 * 3_600_000, at_least(1),
                   (_ms("log.roll.ms"), _hours("log.roll.hours", "168")), "segment age that rolls a new segment"),
    TopicConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, None,
                   (BrokerSynonym("unclean.leader.election.enable"),), "allow out-of-sync replicas to lead"),
)
del T
CONFIG_KEYS: dict[str, TopicConfigKey] = {k.name: k for k in TOPIC_CONFIGS}
_BY_ATTRIBUTE: dict[str, TopicConfigKey] = {k.attribute: k for k in TOPIC_CONFIGS}


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs v1+ entry for a topic resource."""

    name: str
    value: str | None
    source: ConfigSource
    synonyms: tuple[ConfigSynonym, ...]
    type: ConfigType
    sensitive: bool = False
    read_only: bool = False
    documentation: str = ""


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


# -- LogConfig ---------------------------------------------------------------------------------------

class LogConfig:
    """A topic's effective log configuration. Attributes are the keys with ``_`` for ``.``
    (``segment_bytes``, ``retention_ms``, ``cleanup_policy`` ...), typed: int, float, bool, str, tuple[str].

    ``LogConfig(segment_bytes=600)`` sets values directly (tests, tools); ``from_props`` is how a broker
    builds one from a topic's overrides and its own server.properties.
    """

    __slots__ = ("_values", "_overrides", "_broker", "_sources")

    def __init__(self, **values: Any) -> None:
        resolved: dict[str, Any] = {}
        for attribute, value in values.items():
            key = _BY_ATTRIBUTE.get(attribute)
            if key is None:
                raise InvalidConfigError(attribute.replace("_", "."), None,
                                         f"Unknown topic config name: {attribute.replace('_', '.')}")
            resolved[key.name] = key.parse(value)
        object.__setattr__(self, "_values", {k.name: resolved.get(k.name, k.default) for k in TOPIC_CONFIGS})
        object.__setattr__(self, "_overrides", {name: _to_text(v) for name, v in resolved.items()})
        object.__setattr__(self, "_broker", {})
        object.__setattr__(self, "_sources", {})
        self._check_combination()

    @classmethod
    def from_props(cls, topic_overrides: Mapping[str, str] | None = None,
                   broker_defaults: Mapping[str, str] | None = None,
                   broker_sources: Mapping[str, ConfigSource] | None = None) -> LogConfig:
        """Kafka `LogConfig.fromProps(brokerDefaults, overrides)` + `validate`: a topic override wins, then
        the first broker synonym set in ``broker_defaults`` (converted to the topic key's unit), then the
        default. Unknown topic keys and invalid values raise InvalidConfigError; unknown broker keys are
        ignored (server.properties holds far more than log settings). ``broker_sources`` says where a broker
        key's value comes from (a dynamic broker config, KIP-226); STATIC_BROKER_CONFIG by default."""
        topic_overrides = dict(topic_overrides or {})
        broker_defaults = dict(broker_defaults or {})
        for name in topic_overrides:
            if name not in CONFIG_KEYS:
                raise InvalidConfigError(name, None, f"Unknown topic config name: {name}")
        values: dict[str, Any] = {}
        for key in TOPIC_CONFIGS:
            if key.name in topic_overrides:
                values[key.name] = key.parse(topic_overrides[key.name])
                continue
            for synonym in key.synonyms:
                if synonym.name in broker_defaults:
                    raw = broker_defaults[synonym.name]
                    if synonym.scale == 1:
                        values[key.name] = key.parse(raw)
                    else:
                        try:
                            number = _parse(ConfigType.LONG, raw)
                        except ValueError as exc:
                            raise InvalidConfigError(synonym.name, raw, str(exc)) from None
                        # KafkaConfig: a negative retention means "forever" whatever the unit.
                        values[key.name] = key.parse(-1 if number < 0 else number * synonym.scale)
                    break
        config = cls.__new__(cls)
        object.__setattr__(config, "_values", {k.name: values.get(k.name, k.default) for k in TOPIC_CONFIGS})
        object.__setattr__(config, "_overrides", {n: topic_overrides[n] for n in CONFIG_KEYS if n in topic_overrides})
        synonyms = {s.name for k in TOPIC_CONFIGS for s in k.synonyms}
        object.__setattr__(config, "_broker", {n: v for n, v in broker_defaults.items() if n in synonyms})
        object.__setattr__(config, "_sources", {n: s for n, s in (broker_sources or {}).items() if n in synonyms})
        config._check_combination()
        return config

    def _check_combination(self) -> None:
        """Kafka `LogConfig.validateValues`: the checks that span two keys."""
        low, high = self._values["min.compaction.lag.ms"], self._values["max.compaction.lag.ms"]
        if low > high:
            raise InvalidConfigError("min.compaction.lag.ms", low,
                                     f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                                     f"max.compaction.lag.ms ({high})")

    # -- values ------------------------------------------------------------------------------
    def __getattr__(self, attribute: str) -> Any:
        key = _BY_ATTRIBUTE.get(attribute)
        if key is None:
            raise AttributeError(attribute)
        return self._values[key.name]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("LogConfig is immutable: use replace()")

    def get(self, name: str) -> Any:
        """The value of a Kafka key (``retention.ms``)."""
        return self._values[name]

    def replace(self, **values: Any) -> LogConfig:
        merged = {CONFIG_KEYS[n].attribute: v for n, v in self._overrides.items()}
        merged.update(values)
        return LogConfig(**merged)

    def overrides(self) -> dict[str, str]:
        """The topic-level overrides (what Kafka keeps in the topic's config entity)."""
        return dict(self._overrides)

    @property
    def compact(self) -> bool:
        return "compact" in self._values["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self._values["cleanup.policy"]

    @property
    def log_append_time(self) -> bool:
        return self._values["message.timestamp.type"] == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """Kafka 3.7 `LogConfig.messageTimestampBeforeMaxMs`: the difference key unless this one is set."""
        before = self._values["message.timestamp.before.max.ms"]
        return before if before != LONG_MAX else self._values["message.timestamp.difference.max.ms"]

    @property
    def timestamp_after_max_ms(self) -> int:
        after = self._values["message.timestamp.after.max.ms"]
        return after if after != LONG_MAX else self._values["message.timestamp.difference.max.ms"]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._values, self._overrides, self._broker, self._sources))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, _to_text(v)) for k, v in self._values.items())))

    def __repr__(self) -> str:
        changed = ", ".join(f"{CONFIG_KEYS[n].attribute}={v!r}" for n, v in self._values.items()
                            if v != CONFIG_KEYS[n].default)
        return f"LogConfig({changed})"

    # -- DescribeConfigs ---------------------------------------------------------------------
    def describe(self, names: list[str] | None = None) -> Iterator[ConfigEntry]:
        """DescribeConfigs v1+ entries for the topic: value, where it comes from, and the synonyms in
        precedence order (topic override, the broker keys set in server.properties, the default)."""
        for key in TOPIC_CONFIGS:
            if names is not None and key.name not in names:
                continue
            synonyms: list[ConfigSynonym] = []
            if key.name in self._overrides:
                synonyms.append(ConfigSynonym(key.name, self._overrides[key.name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
            for synonym in key.synonyms:
                if synonym.name in self._broker:
                    synonyms.append(ConfigSynonym(synonym.name, self._broker[synonym.name], self._sources.get(
                        synonym.name, ConfigSource.STATIC_BROKER_CONFIG)))
            default_synonym = next((s for s in reversed(key.synonyms) if s.default is not None), None)
            if default_synonym is not None:
                synonyms.append(ConfigSynonym(default_synonym.name, default_synonym.default or "", ConfigSource.DEFAULT_CONFIG))
            elif key.synonyms:
                synonyms.append(ConfigSynonym(key.synonyms[0].name, _to_text(key.default), ConfigSource.DEFAULT_CONFIG))
            source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
            yield ConfigEntry(key.name, _to_text(self._values[key.name]), source, tuple(synonyms), key.type,
                              key.sensitive, False, key.doc)


def _rebuild(values: dict[str, Any], overrides: dict[str, str], broker: dict[str, str],
             sources: dict[str, ConfigSource] | None = None) -> LogConfig:
    config = LogConfig.__new__(LogConfig)
    object.__setattr__(config, "_values", dict(values))
    object.__setattr__(config, "_overrides", dict(overrides))
    object.__setattr__(config, "_broker", dict(broker))
    object.__setattr__(config, "_sources", dict(sources or {}))
    return config
