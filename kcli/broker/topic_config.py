"""Topic-level configuration for the broker: Kafka's topic config keys, each with its broker-level synonym
(the default), parsed, validated and described with sources for DescribeConfigs.

The key table is storage's LogConfig (one declaration for the offline tools and the broker); this module
binds it to a BrokerConfig: defaults come from server.properties, overrides from the topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kcli.broker.config import BrokerConfig
from kcli.broker.errors import InvalidConfigError

# DescribeConfigs config_source values (KIP-226)
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
# DescribeConfigs v3+ config_type values
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 8, 9


@dataclass(frozen=True)
class Described:
    name: str
    value: str | None
    source: int
    config_type: int
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source)
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG


def _long(text: str) -> int:
    return int(text.strip())


def _double(text: str) -> float:
    return float(text.strip())


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return value == "true"


def _policy(text: str) -> str:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("String must be one of: compact, delete")
    return ",".join(sorted(set(parts)))


def _choice(*choices: str):
    def parse(text: str) -> str:
        if text.strip() not in choices:
            raise ValueError(f"String must be one of: {', '.join(choices)}")
        return text.strip()
    return parse


def _at_least(low: float, parse=_long):
    def check(text: str):
        value = parse(text)
        if value < low:
            raise ValueError(f"Value must be at least {low}")
        return value
    return check


def _ratio(text: str) -> float:
    value = _double(text)
    if not 0 <= value <= 1:
        raise ValueError("Value must be no more than 1")
    return value


LONG_MAX = 2**63 - 1
# topic key -> (parser, type, broker synonyms in Kafka's precedence order, default when no broker key is set)
TOPIC_CONFIGS: dict[str, tuple[Any, int, tuple[str, ...], str]] = {
    "cleanup.policy": (_policy, LIST, ("log.cleanup.policy",), "delete"),
    "compression.type": (_choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), STRING,
                         ("compression.type",), "producer"),
    "delete.retention.ms": (_at_least(0), LONG, ("log.cleaner.delete.retention.ms",), "86400000"),
    "file.delete.delay.ms": (_at_least(0), LONG, ("log.segment.delete.delay.ms",), "60000"),
    "flush.messages": (_at_least(1), LONG, ("log.flush.interval.messages",), str(LONG_MAX)),
    "flush.ms": (_at_least(0), LONG, ("log.flush.interval.ms",), str(LONG_MAX)),
    "index.interval.bytes": (_at_least(0), INT, ("log.index.interval.bytes",), "4096"),
    "max.compaction.lag.ms": (_at_least(1), LONG, ("log.cleaner.max.compaction.lag.ms",), str(LONG_MAX)),
    "max.message.bytes": (_at_least(0), INT, ("message.max.bytes",), "1048588"),
    "message.downconversion.enable": (_bool, BOOLEAN, ("log.message.downconversion.enable",), "true"),
    "message.timestamp.difference.max.ms": (_at_least(0), LONG, ("log.message.timestamp.difference.max.ms",),
                                            str(LONG_MAX)),
    "message.timestamp.type": (_choice("CreateTime", "LogAppendTime"), STRING, ("log.message.timestamp.type",),
                               "CreateTime"),
    "min.cleanable.dirty.ratio": (_ratio, DOUBLE, ("log.cleaner.min.cleanable.ratio",), "0.5"),
    "min.compaction.lag.ms": (_at_least(0), LONG, ("log.cleaner.min.compaction.lag.ms",), "0"),
    "min.insync.replicas": (_at_least(1), INT, ("min.insync.replicas",), "1"),
    "preallocate": (_bool, BOOLEAN, ("log.preallocate",), "false"),
    "retention.bytes": (_long, LONG, ("log.retention.bytes",), "-1"),
    "retention.ms": (_at_least(-1), LONG, ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                     "604800000"),
    "segment.bytes": (_at_least(14), INT, ("log.segment.bytes",), "1073741824"),
    "segment.index.bytes": (_at_least(4), INT, ("log.index.size.max.bytes",), "10485760"),
    "segment.jitter.ms": (_at_least(0), LONG, ("log.roll.jitter.ms", "log.roll.jitter.hours"), "0"),
    "segment.ms": (_at_least(1), LONG, ("log.roll.ms", "log.roll.hours"), "604800000"),
    "unclean.leader.election.enable": (_bool, BOOLEAN, ("unclean.leader.election.enable",), "false"),
    "local.retention.bytes": (_at_least(-2), LONG, ("log.local.retention.bytes",), "-2"),
    "local.retention.ms": (_at_least(-2), LONG, ("log.local.retention.ms",), "-2"),
    "remote.storage.enable": (_bool, BOOLEAN, (), "false"),
}
# broker keys given in another unit than the topic key
_UNITS = {"log.retention.minutes": 60_000, "log.retention.hours": 3_600_000, "log.roll.hours": 3_600_000,
          "log.roll.jitter.hours": 3_600_000}


class TopicConfigDefs:
    def __init__(self, broker: BrokerConfig | Mapping[str, Any]) -> None:
        self.broker = broker
        values = broker.values if isinstance(broker, BrokerConfig) else dict(broker)
        explicit = broker.explicit if isinstance(broker, BrokerConfig) else frozenset(values)
        self._broker_values = {k: v for k, v in values.items() if v is not None}
        self.defaults: dict[str, tuple[str, int, tuple[tuple[str, str | None, int], ...]]] = {}
        for key, (_parse, _type, synonyms, default) in TOPIC_CONFIGS.items():
            chain = []
            value, source = default, DEFAULT_CONFIG
            for broker_key in synonyms:
                if broker_key in self._broker_values and broker_key in explicit:
                    raw = self._broker_values[broker_key]
                    text = str(int(raw) * _UNITS[broker_key]) if broker_key in _UNITS and int(raw) >= 0 else \
                        _text(raw)
                    chain.append((broker_key, _text(raw), STATIC_BROKER_CONFIG))
                    if source == DEFAULT_CONFIG:
                        value, source = text, STATIC_BROKER_CONFIG
            self.defaults[key] = (value, source, tuple(chain))

    def broker_int(self, key: str, default: int) -> int:
        value = self._broker_values.get(key)
        return default if value is None else int(value)

    def is_list(self, key: str) -> bool:
        return key in TOPIC_CONFIGS and TOPIC_CONFIGS[key][1] == LIST

    def default_text(self, key: str) -> str | None:
        return self.defaults[key][0] if key in self.defaults else None

    def validate(self, overrides: Mapping[str, str | None]) -> dict[str, str]:
        """Refuse unknown keys and bad values as Kafka does (INVALID_CONFIG with its message)."""
        clean: dict[str, str] = {}
        for key, text in overrides.items():
            if key not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"Unknown topic config name: {key}")
            if text is None:
                raise InvalidConfigError(f"Null value not supported for topic configs: {key}")
            parse = TOPIC_CONFIGS[key][0]
            try:
                parse(str(text))
            except (ValueError, TypeError) as exc:
                raise InvalidConfigError(f"Invalid value {text} for configuration {key}: {exc}") from None
            clean[key] = str(text).strip()
        return clean

    def effective(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        out = {}
        for key, (parse, _type, _syn, _default) in TOPIC_CONFIGS.items():
            out[key] = parse(overrides.get(key, self.defaults[key][0]))
        for key in ("flush.messages", "flush.ms", "max.compaction.lag.ms"):
            if out[key] >= LONG_MAX:
                out[key] = None  # "never"
        return out

    def describe(self, overrides: Mapping[str, str]) -> list[Described]:
        out = []
        for key, (_parse, config_type, _syn, _default) in TOPIC_CONFIGS.items():
            default, source, chain = self.defaults[key]
            if key in overrides:
                out.append(Described(key, overrides[key], DYNAMIC_TOPIC_CONFIG, config_type,
                                     ((key, overrides[key], DYNAMIC_TOPIC_CONFIG),) + chain))
            else:
                out.append(Described(key, default, source, config_type, chain))
        return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
