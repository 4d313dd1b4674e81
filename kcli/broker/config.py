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
from kcli.broker.config_error import ConfigError
from kcli.broker.config_values import INT32_MAX, LONG_MAX, bool_value, int_value, str_value
from kcli.broker.kafka07_config import KAFKA07_KEYS
from kcli.broker.security.authorizer import parse_authorizer_class, parse_super_users_config
from kcli.storage.checkpoint import parse_java_properties

_bool, _int, _str = bool_value, int_value, str_value




def _policy(text: str) -> str:
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("expected delete, compact or compact,delete")
    return ",".join(parts)


def _http_listener(text: str) -> str:
    """metrics.http.listener: http://host:port (port 0 picks a free one)."""
    value = text.strip()
    match = re.match(r"^http://\[?([0-9a-zA-Z\-%._:]+?)\]?:([0-9]+)/?$", value)
    if match is None or not 0 <= int(match.group(2)) <= 65535:
        raise ValueError("expected http://host:port")
    return value


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
    # KIP-227: the broker's incremental fetch sessions (kcli.broker.fetch_session); 0: none, every Fetch is full
    "max.incremental.fetch.session.cache.slots": (_int(0, INT32_MAX), 1000),
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
    # listener name -> security protocol (Kafka's default maps the protocol names to themselves)
    "listener.security.protocol.map": (_str, DEFAULT_SECURITY_PROTOCOL_MAP),
    # -- security: listeners, TLS and SASL (issue 25, the broker's edge; kafka-security.md §1-§3). Each SSL/SASL key
    # may also be given per listener as listener.name.<lower-case name>.<key> (and the SASL ones per mechanism,
    # listener.name.<name>.<mechanism>.<key>): BrokerConfig.listener_value resolves them as Kafka's ChannelBuilders.
    "security.inter.broker.protocol": (_str, None),  # Kafka's default PLAINTEXT; exclusive with the listener name
    "sasl.enabled.mechanisms": (_str, "GSSAPI"),
    "sasl.mechanism.inter.broker.protocol": (_str, "GSSAPI"),
    "sasl.jaas.config": (_str, None),  # a broker reads only the listener and mechanism prefixed form (§1.3)
    "sasl.server.max.receive.size": (_int(1, INT32_MAX), 524_288),
    "connection.failed.authentication.delay.ms": (_int(0, INT32_MAX), 100),  # KIP-306
    "connections.max.reauth.ms": (_int(0), 0),  # KIP-368; 0 = sessions never expire
    "ssl.keystore.type": (_str, "JKS"),
    "ssl.keystore.location": (_str, None),
    "ssl.keystore.password": (_str, None),
    "ssl.key.password": (_str, None),
    "ssl.keystore.certificate.chain": (_str, None),  # KIP-651: PEM text
    "ssl.keystore.key": (_str, None),
    "ssl.truststore.type": (_str, "JKS"),
    "ssl.truststore.location": (_str, None),
    "ssl.truststore.password": (_str, None),
    "ssl.truststore.certificates": (_str, None),
    "ssl.client.auth": (_str, "none"),
    "ssl.enabled.protocols": (_str, "TLSv1.2,TLSv1.3"),
    "ssl.protocol": (_str, "TLSv1.3"),
    "ssl.cipher.suites": (_str, None),
    "ssl.principal.mapping.rules": (_str, "DEFAULT"),  # KIP-371
    "ssl.endpoint.identification.algorithm": (_str, "https"),
    # kctl's own: a TLS handshake or a SASL exchange not finished within this closes the connection (Kafka leaves
    # it to connections.max.idle.ms, ten minutes)
    "kctl.authentication.timeout.ms": (_int(1, INT32_MAX), 10_000),
    # kctl's own: how many Produce requests of one connection may wait for their acks at a time (produce
    # pipelining, kcli.broker.socket_server); 1 is Kafka's one request at a time
    "kctl.produce.pipeline.depth": (_int(1, 1 << 16), 64),
    # tiered storage (KIP-405, kcli.broker.remote_log_manager): the RemoteStorageManager is kctl's fsspec one
    # (kcli.storage.remote), its settings under the impl prefix (rsm.config.url and fsspec's storage options)
    "remote.log.storage.system.enable": (_bool, False),
    "remote.log.storage.manager.class.name": (_str, None),
    "remote.log.storage.manager.impl.prefix": (_str, "rsm.config."),
    "remote.log.metadata.manager.impl.prefix": (_str, "rlmm.config."),
    "remote.log.manager.task.interval.ms": (_int(1, INT32_MAX), 30_000),
    "remote.log.reader.threads": (_int(1, 1024), 10),
    "remote.log.manager.thread.pool.size": (_int(1, 1024), 10),
    # KIP-956 (Kafka 3.8/3.9): the copier's and the remote reader's byte rates, dynamic; unbounded by default
    "remote.log.manager.copy.max.bytes.per.second": (_int(1), LONG_MAX),
    "remote.log.manager.copy.quota.window.num": (_int(1, INT32_MAX), 11),
    "remote.log.manager.copy.quota.window.size.seconds": (_int(1, INT32_MAX), 1),
    "remote.log.manager.fetch.max.bytes.per.second": (_int(1), LONG_MAX),
    "remote.log.manager.fetch.quota.window.num": (_int(1, INT32_MAX), 11),
    "remote.log.manager.fetch.quota.window.size.seconds": (_int(1, INT32_MAX), 1),
    "rlmm.config.remote.log.metadata.topic.num.partitions": (_int(1, INT32_MAX), 50),
    "rlmm.config.remote.log.metadata.topic.replication.factor": (_int(1, 32767), 3),
    "log.local.retention.ms": (_int(-2), -2),
    "log.local.retention.bytes": (_int(-2), -2),
    "controlled.shutdown.enable": (_bool, True),
    "offsets.commit.timeout.ms": (_int(1, INT32_MAX), 5000),
    "controlled.shutdown.max.retries": (_int(0, INT32_MAX), 3),
    "controlled.shutdown.retry.backoff.ms": (_int(0, INT32_MAX), 5000),
    # authorization (Kafka's AclAuthorizer): unset = no authorizer, every API allowed, the ACL APIs answer
    # SECURITY_DISABLED; an unknown class stops the start
    "authorizer.class.name": (parse_authorizer_class, ""),
    "super.users": (parse_super_users_config, None),
    "allow.everyone.if.no.acl.found": (_bool, False),
    # client quotas (KIP-13): the rate over quota.window.num samples of quota.window.size.seconds each
    "quota.window.num": (_int(1, INT32_MAX), 11),
    "quota.window.size.seconds": (_int(1, INT32_MAX), 1),
    # replication throttles (KIP-73): the rate over replication.quota.window.num samples of ... seconds each
    "replication.quota.window.num": (_int(1, INT32_MAX), 11),
    "replication.quota.window.size.seconds": (_int(1, INT32_MAX), 1),
    # connection limits (Kafka's ConnectionQuotas; KIP-402, KIP-612): also per listener as
    # listener.name.<name>.max.connections / .max.connection.creation.rate, and dynamic (kcli.broker.connection_quotas)
    "max.connections": (_int(0, INT32_MAX), INT32_MAX),
    "max.connections.per.ip": (_int(0, INT32_MAX), INT32_MAX),
    "max.connections.per.ip.overrides": (_str, ""),
    "max.connection.creation.rate": (_int(0, INT32_MAX), INT32_MAX),
    # kctl's own: http://host:port serves GET /metrics in Prometheus' text format (kcli.broker.metrics); unset = off
    "metrics.http.listener": (_http_listener, None),
    # kctl's own: the legacy Kafka 0.7 listener (kcli.broker.kafka07); unset kafka07.listeners = off
    **KAFKA07_KEYS,
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
    # listener.name.<name>.[<mechanism>.]<key> as given (parsed by listener_value): per-listener security settings
    prefixed: dict[str, str] = field(default_factory=dict)
    # remote.log.storage.manager.impl.prefix's keys (rsm.config.url, fsspec's options), as given
    remote_storage: dict[str, str] = field(default_factory=dict)

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

    def listener_value(self, listener_name: str, key: str, mechanism: str | None = None) -> object:
        """``key`` for one listener, as Kafka's ChannelBuilders resolve it: ``listener.name.<name>.<mechanism>.<key>``
        (SASL keys, with a mechanism), then ``listener.name.<name>.<key>``, then the broker-wide value (KIP-103)."""
        prefix = f"listener.name.{listener_name.lower()}."
        candidates = ([prefix + f"{mechanism.lower()}.{key}"] if mechanism else []) + [prefix + key]
        for name in candidates:
            if name in self.prefixed:
                text = self.prefixed[name]
                try:
                    return KNOWN[key][0](text)
                except ValueError as exc:
                    raise ConfigError(f"Invalid value {text!r} for configuration {name}: {exc}") from None
        return self.values[key]

    def listener_has(self, listener_name: str, key: str) -> bool:
        """Whether ``key`` is set for this listener with its prefix (ssl.client.auth on SASL_SSL, KIP-684)."""
        return f"listener.name.{listener_name.lower()}.{key}" in self.prefixed

    @property
    def inter_broker_listener_name(self) -> str:
        """inter.broker.listener.name, else the listener named after security.inter.broker.protocol (Kafka's
        default PLAINTEXT): KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol."""
        name = self.values["inter.broker.listener.name"]
        if name:
            return str(name).upper()
        return str(self.values["security.inter.broker.protocol"] or "PLAINTEXT").upper()

    @property
    def inter_broker_security_protocol(self) -> str:
        protocol = self.security_protocol_map.get(self.inter_broker_listener_name)
        if protocol is None:
            raise ConfigError(f"No security protocol defined for listener {self.inter_broker_listener_name}")
        return protocol

    def check_listeners(self) -> None:
        """Kafka's KafkaConfig validation of listeners: every listener has a protocol in
        listener.security.protocol.map, names and ports are unique, advertised names are listeners, and the
        inter-broker listener is one of them; each listener's own security settings must be usable (a SASL listener
        with a mechanism kctl serves, an SSL listener with a keystore): a listener is never served with less
        security than its protocol says. A refusal names the listener."""
        listeners = self.listeners
        for key, group in (("listeners", listeners), ("advertised.listeners", self.advertised_listeners)):
            names = [l.name for l in group]
            duplicate = next((n for n in names if names.count(n) > 1), None)
            if duplicate is not None:
                raise ConfigError(f"{key}: each listener must have a different name, {duplicate} is given twice")
            for listener in group:
                self.security_protocol(listener)
        ports = [l.port for l in listeners if l.port]
        duplicate_port = next((p for p in ports if ports.count(p) > 1), None)
        if duplicate_port is not None:
            raise ConfigError(f"listeners: each listener must have a different port, {duplicate_port} is given twice")
        listener_names = {l.name for l in listeners}
        advertised = [l.name for l in self.advertised_listeners]
        for name in advertised:
            if name not in listener_names:
                raise ConfigError(f"advertised.listeners listener names must be equal to or a subset of the ones "
                                  f"defined in listeners. Found {name}; the listeners are {', '.join(sorted(listener_names))}")
        if self.values["inter.broker.listener.name"] and self.values["security.inter.broker.protocol"]:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
        protocol = self.values["security.inter.broker.protocol"]
        if protocol and str(protocol).upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {protocol!r} for configuration security.inter.broker.protocol: "
                              f"one of {', '.join(SECURITY_PROTOCOLS)}")
        inter_broker = self.inter_broker_listener_name
        if inter_broker not in advertised:
            raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                              f"The valid options based on currently configured listeners are {','.join(advertised)}"
                              if self.values["inter.broker.listener.name"] else
                              f"security.inter.broker.protocol={inter_broker}: no advertised listener is named "
                              f"{inter_broker} (set inter.broker.listener.name to one of {','.join(advertised)})")
        from kcli.broker.security.listener_config import listener_security  # reads this config, imports none of it

        for listener in listeners:
            security = listener_security(self, listener)  # each listener's TLS and SASL settings; ConfigError names it
            if security.ssl is not None:
                from kcli.broker.security.tls import server_ssl_context

                server_ssl_context(security.ssl, listener.name)  # the keystore loads (path, password, format)
            mechanism = str(self.values["sasl.mechanism.inter.broker.protocol"]).strip().upper()
            if listener.name == inter_broker and security.sasl and mechanism not in security.mechanisms:
                raise ConfigError(f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms "
                                  f"when SASL is used for inter-broker communication: {mechanism} is not enabled on "
                                  f"the inter-broker listener {inter_broker} ({', '.join(security.mechanisms)})")

    def check_unsupported(self) -> None:
        """Tiered storage needs a remote store: remote.log.storage.system.enable=true without the store's URL
        stops the start (Kafka would fail loading its RemoteStorageManager)."""
        if self.values["remote.log.storage.system.enable"]:
            prefix = str(self.values["remote.log.storage.manager.impl.prefix"])
            if not self.remote_storage.get(prefix + "url"):
                raise ConfigError(f"remote.log.storage.system.enable=true needs {prefix}url, the remote store's "
                                  "fsspec URL (file:///var/kafka-remote, s3://bucket/prefix)")
            from kcli.storage.remote import KCTL_RSM_CLASS

            name = self.values["remote.log.storage.manager.class.name"]
            if name and name not in (KCTL_RSM_CLASS, "FsspecRemoteStorageManager"):
                raise ConfigError(f"remote.log.storage.manager.class.name={name}: kctl broker has one "
                                  f"RemoteStorageManager, {KCTL_RSM_CLASS}")

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
    prefixed: dict[str, str] = {}
    remote_storage: dict[str, str] = {}
    rsm_prefix = (raw.get("remote.log.storage.manager.impl.prefix") or "rsm.config.").strip()
    for key, text in raw.items():
        if key.startswith(rsm_prefix) and key not in KNOWN:
            remote_storage[key] = text.strip()
        elif key.startswith("listener.name.") and _prefixed_key(key) in KNOWN:
            prefixed[key] = text.strip()
        elif key in KNOWN:
            parser = KNOWN[key][0]
            try:
                values[key] = parser(text)
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text!r} for configuration {key}: {exc}") from None
        elif key not in IGNORED:
            unknown.append(key)
    config = BrokerConfig(values, unknown, frozenset(k for k in raw if k in KNOWN), prefixed, remote_storage)
    config.listeners  # validate now, not at bind time
    config.advertised_listeners
    config.check_listeners()
    config.check_unsupported()
    return config


_SASL_MECHANISM_PREFIXES = ("plain.", "scram-sha-256.", "scram-sha-512.", "oauthbearer.", "gssapi.")


def _prefixed_key(key: str) -> str:
    """The broker key inside ``listener.name.<name>.[<mechanism>.]<key>`` ("" when it has none)."""
    rest = key[len("listener.name."):]
    _name, sep, tail = rest.partition(".")
    if not sep:
        return ""
    for mechanism in _SASL_MECHANISM_PREFIXES:
        if tail.startswith(mechanism):
            return tail[len(mechanism):]
    return tail
