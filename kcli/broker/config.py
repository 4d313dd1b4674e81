"""BrokerConfig: Kafka's server.properties keys, defaults and validation (the subset kctl's broker honours).

Configuration comes as Kafka takes it: a properties file plus ``key=value`` overrides, later ones win.
Unknown keys are reported (not fatal, as Kafka warns); bad values raise ConfigError naming key and value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kcli.broker.replica_selector import parse_selector_class
from kcli.broker.security.authorizer import parse_authorizer_class, parse_super_users_config
from kcli.errors import KcliError
from kcli.storage.checkpoint import parse_java_properties

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(KcliError):
    """A configuration value Kafka would refuse."""


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def _int(low: int, high: int = LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _str(text: str) -> str:
    return text.strip()


def _policy(text: str) -> str:
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("expected delete, compact or compact,delete")
    return ",".join(parts)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")  # Kafka's SecurityProtocol
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)


def parse_security_protocol_map(text: str) -> dict[str, str]:
    """listener.security.protocol.map ("NAME:PROTOCOL,..."), as KafkaConfig.getMap then SecurityProtocol.forName
    read it; names are upper-cased as Kafka's ListenerName.normalised does."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(f"Invalid value {text!r} for configuration listener.security.protocol.map: Map entry "
                              f"should be of form <key>:<value>, got {item!r}")
        if protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {text!r} for configuration listener.security.protocol.map: "
                              f"No enum constant SecurityProtocol.{protocol.strip().upper()} "
                              f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


# key -> (parser, default). Defaults are Kafka's, except the data directory (a local one by default).
KNOWN: dict[str, tuple[Callable[[str], object], object]] = {
    "broker.id": (_int(-1, INT32_MAX), 0),
    "broker.rack": (_str, None),
    "node.id": (_int(-1, INT32_MAX), None),
    "listeners": (_str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": (_str, None),
    "log.dirs": (_str, None),
    "log.dir": (_str, "kctl-data"),
    "num.partitions": (_int(1, INT32_MAX), 1),
    "auto.create.topics.enable": (_bool, True),
    "log.segment.bytes": (_int(14, INT32_MAX), 1024 * 1024 * 1024),
    "log.roll.ms": (_int(1), None),
    "log.roll.hours": (_int(1, INT32_MAX), 168),
    "log.retention.ms": (_int(-1), None),
    "log.retention.minutes": (_int(-1, INT32_MAX), None),
    "log.retention.hours": (_int(-1, INT32_MAX), 168),
    "log.retention.bytes": (_int(-1), -1),
    "log.retention.check.interval.ms": (_int(1), 300_000),
    "log.flush.interval.messages": (_int(1), LONG_MAX),
    "log.flush.interval.ms": (_int(0), None),
    "log.index.interval.bytes": (_int(0, INT32_MAX), 4096),
    "log.index.size.max.bytes": (_int(4, INT32_MAX), 10 * 1024 * 1024),
    "log.segment.delete.delay.ms": (_int(0), 60_000),
    "message.max.bytes": (_int(0, INT32_MAX), 1024 * 1024 + 12),
    "socket.request.max.bytes": (_int(1, INT32_MAX), 100 * 1024 * 1024),
    "offsets.topic.num.partitions": (_int(1, INT32_MAX), 50),
    "log.cleanup.policy": (_policy, "delete"),
    "zookeeper.connect": (_str, None),
    "zookeeper.session.timeout.ms": (_int(1, INT32_MAX), 18_000),
    "group.initial.rebalance.delay.ms": (_int(0, INT32_MAX), 3000),
    "group.min.session.timeout.ms": (_int(0, INT32_MAX), 6000),
    "group.max.session.timeout.ms": (_int(0, INT32_MAX), 1_800_000),
    "transaction.max.timeout.ms": (_int(1, INT32_MAX), 900_000),
    # the transaction coordinator (KIP-98): __transaction_state and its timers, Kafka's defaults
    "transaction.state.log.num.partitions": (_int(1, INT32_MAX), 50),
    "transaction.state.log.segment.bytes": (_int(1, INT32_MAX), 100 * 1024 * 1024),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_int(1, INT32_MAX), 10_000),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (_int(1, INT32_MAX), 3_600_000),
    "transactional.id.expiration.ms": (_int(1, INT32_MAX), 604_800_000),
    "default.replication.factor": (_int(1, INT32_MAX), 1),
    "min.insync.replicas": (_int(1, INT32_MAX), 1),
    "log.cleaner.enable": (_bool, True),
    "log.cleaner.backoff.ms": (_int(0), 15_000),
    "log.cleaner.delete.retention.ms": (_int(0), 86_400_000),
    "log.cleaner.min.cleanable.ratio": (_str, "0.5"),
    "log.cleaner.min.compaction.lag.ms": (_int(0), 0),
    "log.cleaner.max.compaction.lag.ms": (_int(1), LONG_MAX),
    "log.message.timestamp.type": (_str, "CreateTime"),
    "log.message.timestamp.difference.max.ms": (_int(0), LONG_MAX),
    "log.message.downconversion.enable": (_bool, True),
    "log.preallocate": (_bool, False),
    "compression.type": (_str, "producer"),
    "unclean.leader.election.enable": (_bool, False),
    "delete.topic.enable": (_bool, True),
    # the controller's preferred leader balancing: a check every interval, a preferred replica election for
    # the brokers leading fewer than (100 - percentage)% of the partitions they are the preferred replica of
    "auto.leader.rebalance.enable": (_bool, True),
    "leader.imbalance.check.interval.seconds": (_int(1), 300),
    "leader.imbalance.per.broker.percentage": (_int(-2**31, INT32_MAX), 10),
    # replication (ZooKeeper mode); Kafka's defaults
    "offsets.topic.replication.factor": (_int(1, 32767), 3),
    "transaction.state.log.replication.factor": (_int(1, 32767), 3),
    "transaction.state.log.min.isr": (_int(1, INT32_MAX), 2),
    "replica.lag.time.max.ms": (_int(1), 30_000),
    "replica.fetch.wait.max.ms": (_int(0, INT32_MAX), 500),
    "replica.fetch.min.bytes": (_int(1, INT32_MAX), 1),
    "replica.fetch.max.bytes": (_int(0, INT32_MAX), 1024 * 1024),
    "replica.fetch.response.max.bytes": (_int(0, INT32_MAX), 10 * 1024 * 1024),
    "replica.fetch.backoff.ms": (_int(0, INT32_MAX), 1000),
    "replica.high.watermark.checkpoint.interval.ms": (_int(1), 5000),
    "replica.socket.timeout.ms": (_int(1, INT32_MAX), 30_000),
    # kctl's own: a replica fetcher's request unanswered this long past replica.fetch.wait.max.ms (or a connection
    # not made within it) is a dead connection, re-opened (Kafka waits request.timeout.ms; see replica_fetcher)
    "replica.fetch.response.timeout.ms": (_int(1, INT32_MAX), 3000),
    # KIP-392: unset = consumers fetch from leaders only; RackAwareReplicaSelector sends them to their rack
    "replica.selector.class": (parse_selector_class, None),
    "request.timeout.ms": (_int(0, INT32_MAX), 30_000),
    "inter.broker.listener.name": (_str, None),
    # listener name -> security protocol (Kafka's default maps the protocol names to themselves); only
    # PLAINTEXT is implemented, so a listener mapped to anything else stops the start (check_listeners)
    "listener.security.protocol.map": (_str, DEFAULT_SECURITY_PROTOCOL_MAP),
    # tiered storage (KIP-405) is not implemented: "true" stops the start (check_unsupported)
    "remote.log.storage.system.enable": (_bool, False),
    "controlled.shutdown.enable": (_bool, True),
    "offsets.commit.timeout.ms": (_int(1, INT32_MAX), 5000),
    "controlled.shutdown.max.retries": (_int(0, INT32_MAX), 3),
    "controlled.shutdown.retry.backoff.ms": (_int(0, INT32_MAX), 5000),
    # authorization (Kafka's AclAuthorizer): unset = no authorizer, every API allowed, the ACL APIs answer
    # SECURITY_DISABLED; an unknown class stops the start
    "authorizer.class.name": (parse_authorizer_class, ""),
    "super.users": (parse_super_users_config, None),
    "allow.everyone.if.no.acl.found": (_bool, False),
}
# Accepted because every real server.properties has them; they mean nothing on one standalone broker.
IGNORED = frozenset({
    "num.network.threads", "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "zookeeper.connection.timeout.ms", "num.replica.fetchers",
    "transaction.state.log.load.buffer.size",
})


_LISTENER = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse_list(cls, text: str, key: str) -> list[Listener]:
        out = []
        for item in (p.strip() for p in text.split(",") if p.strip()):
            match = _LISTENER.match(item)  # Kafka's EndPoint.uriParseExp: names may hold "_" (SASL_SSL)
            if match is None or not match.group(1) or not 0 <= int(match.group(3)) <= 65535:
                raise ConfigError(f"Invalid value {text!r} for configuration {key}: {item!r} is not NAME://host:port")
            out.append(cls(match.group(1).upper(), match.group(2) or "0.0.0.0", int(match.group(3))))
        if not out:
            raise ConfigError(f"Invalid value {text!r} for configuration {key}: no listener")
        return out


@dataclass
class BrokerConfig:
    values: dict[str, object]
    unknown: list[str] = field(default_factory=list)
    explicit: frozenset[str] = frozenset()  # keys the file or overrides set (DescribeConfigs sources)

    def __getitem__(self, key: str):
        return self.values[key]

    def explicit_values(self) -> dict[str, str]:
        """The keys the file or overrides set, as text (what topic configs take as their broker defaults)."""
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self.values.items()
                if k in self.explicit and v is not None}

    @property
    def broker_id(self) -> int:
        node_id = self.values["node.id"]
        return int(node_id if node_id is not None else self.values["broker.id"])  # type: ignore[arg-type]

    @property
    def listeners(self) -> list[Listener]:
        return Listener.parse_list(str(self.values["listeners"]), "listeners")

    @property
    def advertised_listeners(self) -> list[Listener]:
        text = self.values["advertised.listeners"] or self.values["listeners"]
        listeners = Listener.parse_list(str(text), "advertised.listeners")
        # A client cannot connect to 0.0.0.0: advertise loopback as Kafka's docs tell users to set.
        return [Listener(l.name, "127.0.0.1" if l.host in ("0.0.0.0", "") else l.host, l.port) for l in listeners]

    @property
    def security_protocol_map(self) -> dict[str, str]:
        return parse_security_protocol_map(str(self.values["listener.security.protocol.map"]))

    def security_protocol(self, listener: Listener) -> str:
        """Kafka's EndPoint.createEndPoint: a listener's protocol comes from the map, by its name."""
        protocol = self.security_protocol_map.get(listener.name)
        if protocol is None:
            raise ConfigError(f"No security protocol defined for listener {listener.name}")
        return protocol

    def check_listeners(self) -> None:
        """Every listener and advertised listener needs a protocol in listener.security.protocol.map, and it
        must be PLAINTEXT: SSL and SASL are not implemented yet, and a listener named SSL:// served as plaintext
        would let clients believe they are encrypted or authenticated. A refusal names the listener."""
        for key, listeners in (("listeners", self.listeners), ("advertised.listeners", self.advertised_listeners)):
            for listener in listeners:
                protocol = self.security_protocol(listener)
                if protocol != "PLAINTEXT":
                    raise ConfigError(
                        f"{key}: listener {listener.name}://{listener.host}:{listener.port} has security protocol "
                        f"{protocol}, which kctl broker does not implement (only PLAINTEXT listeners are served)")

    def check_unsupported(self) -> None:
        if self.values["remote.log.storage.system.enable"]:
            raise ConfigError("remote.log.storage.system.enable=true: tiered storage (KIP-405) is not implemented "
                              "by kctl broker")

    @property
    def log_dirs(self) -> list[Path]:
        text = self.values["log.dirs"] or self.values["log.dir"]
        return [Path(p.strip()) for p in str(text).split(",") if p.strip()]

    @property
    def retention_ms(self) -> int:
        for key, unit in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
            value = self.values[key]
            if value is not None:
                return -1 if int(value) < 0 else int(value) * unit  # type: ignore[arg-type]
        return 168 * 3_600_000


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
    """Read ``server.properties`` (if given) then apply ``key=value`` overrides, like kafka-server-start.sh."""
    raw: dict[str, str] = {}
    if path is not None:
        try:
            raw.update(parse_java_properties(Path(path).read_text(encoding="latin-1")))
        except OSError as exc:
            raise ConfigError(f"cannot read config file: {exc.strerror or exc}", path=str(path)) from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        raw[key.strip()] = value
    return build_config(raw)


def build_config(raw: Mapping[str, str]) -> BrokerConfig:
    values = {key: default for key, (_parser, default) in KNOWN.items()}
    unknown = []
    for key, text in raw.items():
        if key in KNOWN:
            parser = KNOWN[key][0]
            try:
                values[key] = parser(text)
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text!r} for configuration {key}: {exc}") from None
        elif key not in IGNORED:
            unknown.append(key)
    config = BrokerConfig(values, unknown, frozenset(k for k in raw if k in KNOWN))
    config.listeners  # validate now, not at bind time
    config.advertised_listeners
    config.check_listeners()
    config.check_unsupported()
    return config
