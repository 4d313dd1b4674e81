"""The legacy 0.7 listener's keys in server.properties: ``kafka07.`` + Kafka 0.7's own KafkaConfig names.

Unset ``kafka07.listeners`` leaves the listener off. Its topics live in ``kafka07.log.dir`` (default: the first log
dir's name + ``-kafka07`` beside it), never among the modern logs: a 0.7 partition directory has the same name
and a different layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kcli.broker.config_values import INT32_MAX, int_value, str_value

_LISTENER = re.compile(r"^PLAINTEXT://\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)$", re.IGNORECASE)
_int, _str = int_value, str_value


def parse_listener(text: str) -> str:
    """kafka07.listeners: one PLAINTEXT://host:port (0.7 had neither TLS nor SASL)."""
    value = text.strip()
    match = _LISTENER.match(value)
    if match is None or not 0 <= int(match.group(2)) <= 65535:
        raise ValueError("expected one PLAINTEXT://host:port")
    return value


def listener_address(text: str) -> tuple[str, int]:
    match = _LISTENER.match(text.strip())
    if match is None:
        raise ValueError(f"kafka07.listeners: expected one PLAINTEXT://host:port, got {text!r}")
    return match.group(1) or "0.0.0.0", int(match.group(2))


def parse_count_map(text: str) -> dict[str, int]:
    """0.7's Utils.getTopicPartitions / getTopicRentionHours form: "topic:n,topic:n"."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        topic, sep, number = item.rpartition(":")
        if not sep or not topic or not number.strip().isdigit() or int(number) < 1:
            raise ValueError(f"expected topic:number, got {item!r}")
        out[topic.strip()] = int(number)
    return out


# key -> (parser, 0.7's default). The defaults apply in kafka07_value, not in the broker's config table: the keys
# stay out of DescribeConfigs unless set (a 0.7 listener is no Kafka 2.8-3.x config).
KAFKA07_TABLE: dict[str, tuple[Callable[[str], object], object]] = {
    "kafka07.listeners": (parse_listener, None),
    "kafka07.zookeeper.connect": (_str, None),  # host:port[,host:port]/chroot; unset: no registration
    "kafka07.zookeeper.session.timeout.ms": (_int(1, INT32_MAX), 6000),  # zk.sessiontimeout.ms
    "kafka07.log.dir": (_str, None),
    "kafka07.num.partitions": (_int(1, INT32_MAX), 1),
    "kafka07.topic.partition.count.map": (parse_count_map, {}),
    "kafka07.log.file.size": (_int(1, INT32_MAX), 1024 * 1024 * 1024),
    "kafka07.log.flush.interval": (_int(1, INT32_MAX), 500),  # messages
    "kafka07.log.default.flush.interval.ms": (_int(0, INT32_MAX), 3000),
    "kafka07.topic.flush.intervals.ms": (parse_count_map, {}),
    "kafka07.log.default.flush.scheduler.interval.ms": (_int(1, INT32_MAX), 3000),
    "kafka07.log.retention.hours": (_int(1, INT32_MAX), 168),
    "kafka07.topic.log.retention.hours": (parse_count_map, {}),
    "kafka07.log.retention.size": (_int(-1), -1),
    "kafka07.log.cleanup.interval.mins": (_int(1, INT32_MAX), 10),
    "kafka07.max.socket.request.bytes": (_int(1, INT32_MAX), 100 * 1024 * 1024),
}
# What kcli.broker.config.KNOWN takes: the parsers, no defaults.
KAFKA07_KEYS: dict[str, tuple[Callable[[str], object], object]] = {
    key: (parser, None) for key, (parser, _default) in KAFKA07_TABLE.items()}


def kafka07_value(config: object, key: str) -> object:
    """The key's value in a BrokerConfig, or 0.7's default."""
    value = config[key]  # type: ignore[index]
    return KAFKA07_TABLE[key][1] if value is None else value
