"""Dynamic broker configs (KIP-226): AlterConfigs and IncrementalAlterConfigs on a BROKER resource, as Kafka's
ConfigAdminManager, ZkAdminManager.alterBrokerConfigs and DynamicBrokerConfig take them.

A per-broker value (resource name: this broker's id) wins over the cluster default (resource name ""), which
wins over server.properties. They are kept where Kafka keeps them: /config/brokers/<id> and
/config/brokers/<default> in ZooKeeper, each write followed by a /config/changes notification so that every
broker applies a new default; standalone in kctl-broker-configs.json in the first log dir.

The keys are Kafka 3.7's DynamicBrokerConfig.AllDynamicConfigs. The topic-config synonyms among them
(log.retention.ms, log.cleanup.policy, message.max.bytes, ...) become the topics' defaults at once. Those of
mechanisms this broker does not have (thread pools, cleaner buffers, SASL/SSL listener settings, metric
reporters) are kept and described, as their server.properties keys are accepted and ignored.
Those of things it does only statically or not at all (listeners, log.cleaner.backoff.ms, ...) are refused with
Kafka's text for a key that cannot be updated dynamically, as is every other key a broker has. Keys no Kafka
broker has are kept (Kafka allows custom ones).
The connection limits (max.connections and the others of Kafka's SocketServer) apply live: the server re-reads
them after each change (``reconfigurables``; kcli.broker.connection_quotas), and so do the replication throttles
(KIP-73: kcli.broker.replication_quotas).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kcli.broker.config import IGNORED, KNOWN, BrokerConfig
from kcli.broker.errors import InvalidRequestError
from kcli.errors import KcliError
from kcli.storage.cleanup_policy import KCTL_BROKER_CONFIGS
from kcli.storage.log_config import TOPIC_CONFIGS, ConfigEntry, ConfigSource, ConfigSynonym, ConfigType, LogConfig

log = logging.getLogger("kcli.broker")

DEFAULT_ENTITY = "<default>"  # ConfigEntityName.Default: the cluster-wide broker defaults
BROKER_CONFIGS_FILE = KCTL_BROKER_CONFIGS  # read offline by kctl compact (kcli.storage.cleanup_policy)

# -- Kafka 3.7 DynamicBrokerConfig.AllDynamicConfigs, by the class that reconfigures them --------------------
SSL_RECONFIGURABLE = frozenset({  # SslConfigs.RECONFIGURABLE_CONFIGS: only with a listener prefix
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.truststore.certificates"})
LOG_CLEANER = frozenset({  # LogCleaner.ReconfigurableConfigs
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms"})
# DynamicLogConfig.ReconfigurableConfigs: the first broker synonym of each topic config, but the message format
DYNAMIC_LOG = frozenset(k.synonyms[0].name for k in TOPIC_CONFIGS if k.synonyms) - {"log.message.format.version"}
THREAD_POOL = frozenset({"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
                         "background.threads"})
CLUSTER_LEVEL_LISTENER = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
LISTENER = frozenset({  # DynamicListenerConfig.ReconfigurableConfigs
    "advertised.listeners", "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    *CLUSTER_LEVEL_LISTENER})
SOCKET_SERVER = frozenset({"max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections",
                           "max.connection.creation.rate"})
PRODUCER_STATE = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
REMOTE_QUOTAS = frozenset({"remote.log.manager.copy.max.bytes.per.second",  # KIP-956
                           "remote.log.manager.fetch.max.bytes.per.second"})
REMOTE_LOG = frozenset({"remote.log.index.file.cache.total.size.bytes"}) | REMOTE_QUOTAS  # DynamicRemoteLogConfig
QUOTAS = frozenset({  # DynamicConfig.Broker: only ever set dynamically
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second"})
ALL_DYNAMIC = (SSL_RECONFIGURABLE | LOG_CLEANER | DYNAMIC_LOG | THREAD_POOL | {"metric.reporters"} | LISTENER
               | SOCKET_SERVER | PRODUCER_STATE | REMOTE_LOG | QUOTAS)
PER_BROKER = (SSL_RECONFIGURABLE | LISTENER) - CLUSTER_LEVEL_LISTENER  # DynamicBrokerConfig.PerBrokerConfigs

# Dynamic in Kafka, not here: this broker reads them once (listeners, the cleaner's backoff), or has no such
# mechanism with an effect a client relies on (producer-id expiration). Refused rather than accepted and ignored.
NOT_DYNAMIC_HERE = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map",
                              "log.cleaner.backoff.ms", "producer.id.expiration.ms",
                              "unclean.leader.election.enable"})  # the controller reads it at startup
# The broker keys Kafka's KafkaConfig has that this broker knows of; those not dynamic are refused.
BROKER_KEYS = frozenset(KNOWN) | IGNORED | ALL_DYNAMIC | {
    "log.retention.minutes", "log.retention.hours", "log.roll.hours", "log.roll.jitter.hours",
    "log.flush.scheduler.interval.ms", "log.message.format.version", "zookeeper.connect", "broker.id"}

LISTENER_PREFIX = re.compile(r"^listener\.name\.[^.]*\.(.*)$")  # DynamicBrokerConfig.ListenerConfigRegex
PASSWORDS = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "sasl.jaas.config",
                       "ssl.keystore.key"})
# ConfigDef types of the dynamic keys that are not topic-config synonyms (the rest are strings)
_TYPES: dict[str, ConfigType] = {
    **dict.fromkeys(("background.threads", "num.io.threads", "num.network.threads", "num.replica.fetchers",
                     "num.recovery.threads.per.data.dir", "log.cleaner.threads", "log.cleaner.io.buffer.size",
                     "max.connections", "max.connections.per.ip", "max.connection.creation.rate"), ConfigType.INT),
    **dict.fromkeys(("log.cleaner.dedupe.buffer.size", "sasl.kerberos.min.time.before.relogin",
                     "remote.log.index.file.cache.total.size.bytes", "log.cleaner.backoff.ms",
                     "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
                     "producer.id.expiration.ms", *QUOTAS), ConfigType.LONG),
    **dict.fromkeys(("log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second",
                     "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
                     "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter"), ConfigType.DOUBLE),
    **dict.fromkeys(("sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds"),
                    ConfigType.SHORT),
    "transaction.partition.verification.enable": ConfigType.BOOLEAN,
    **dict.fromkeys(("log.cleanup.policy", "ssl.cipher.suites", "ssl.enabled.protocols", "sasl.enabled.mechanisms",
                     "metric.reporters"), ConfigType.LIST),
}
_TYPES.update({k.synonyms[0].name: k.type for k in TOPIC_CONFIGS if k.synonyms and k.synonyms[0].name in DYNAMIC_LOG})
# the defaults APPEND and SUBTRACT start from when a LIST key is not set (ConfigDef defaults)
_LIST_DEFAULTS = {"log.cleanup.policy": "delete", "ssl.cipher.suites": "", "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
                  "sasl.enabled.mechanisms": "GSSAPI", "metric.reporters": ""}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # AlterConfigOp.OpType


def _scala_set(names: Iterable[str]) -> str:
    return f"Set({', '.join(sorted(names))})"


def _check_type(key: str, value: str) -> None:
    """ConfigDef.parseType for the dynamic keys' types: Kafka's ConfigException text."""
    kind = _TYPES.get(key)
    text = value.strip()
    try:
        if kind in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            int(text)
        elif kind is ConfigType.DOUBLE:
            float(text)
        elif kind is ConfigType.BOOLEAN and text.lower() not in ("true", "false"):
            raise InvalidRequestError(f"Invalid value {value} for configuration {key}: Expected value to be either "
                                      "true or false")
    except ValueError:
        raise InvalidRequestError(f"Invalid value {value} for configuration {key}: Not a number of type "
                                  f"{kind.name if kind else 'STRING'}") from None


class DynamicBrokerConfig:
    """This broker's dynamic configs: the per-broker ones and the cluster defaults, validated, kept, applied."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}
        self.zk: Any = None  # kcli.zk.kafka_zk_client.KafkaZkClient in ZooKeeper mode
        self.file: Path | None = None  # standalone: kctl-broker-configs.json
        self.on_change: Any = None  # () -> None: the topic defaults moved (TopicAdmin.broker_defaults_changed)
        self.reconfigurables: list[Any] = []  # () -> None each, after any change (the connection limits)

    # -- what the rest of the broker reads ------------------------------------------------------------
    def log_defaults(self) -> tuple[dict[str, str], dict[str, ConfigSource]]:
        """The topic configs' broker synonyms (server.properties, then the cluster default, then this broker's
        own), with where each comes from."""
        values = self.config.explicit_values()
        sources = dict.fromkeys(values, ConfigSource.STATIC_BROKER_CONFIG)
        for layer, source in ((self.cluster_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG)):
            for key in DYNAMIC_LOG & set(layer):
                values[key], sources[key] = layer[key], source
        return values, sources

    def describe(self, per_broker: bool) -> list[ConfigEntry]:
        """DescribeConfigs of a BROKER resource (ZkAdminManager.describeConfigs): for this broker's id every key
        with its value and synonyms, in precedence order; for "" only the cluster defaults set dynamically."""
        if not per_broker:
            return [self._entry(key, [(key, v, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)])
                    for key, v in sorted(self.cluster_default.items())]
        explicit = self.config.explicit_values()
        out = []
        for key in sorted(set(self.config.values) | set(self.per_broker) | set(self.cluster_default)):
            synonyms = []
            if key in self.per_broker:
                synonyms.append((key, self.per_broker[key], ConfigSource.DYNAMIC_BROKER_CONFIG))
            if key in self.cluster_default:
                synonyms.append((key, self.cluster_default[key], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
            if key in explicit:
                synonyms.append((key, explicit[key], ConfigSource.STATIC_BROKER_CONFIG))
            default = KNOWN[key][1] if key in KNOWN else None
            if not synonyms and default is None:
                continue
            if default is not None:
                synonyms.append((key, str(default).lower() if isinstance(default, bool) else str(default),
                                 ConfigSource.DEFAULT_CONFIG))
            out.append(self._entry(key, synonyms))
        return out

    @staticmethod
    def _entry(key: str, synonyms: list[tuple[str, str, ConfigSource]]) -> ConfigEntry:
        sensitive = key in PASSWORDS or (LISTENER_PREFIX.match(key) is not None
                                         and any(key.endswith(p) for p in PASSWORDS))
        value = None if sensitive else synonyms[0][1]
        return ConfigEntry(key, value, synonyms[0][2],
                           tuple(ConfigSynonym(n, None if sensitive else v, s) for n, v, s in synonyms),
                           _TYPES.get(key, ConfigType.STRING), sensitive,
                           read_only=key in NOT_DYNAMIC_HERE or (key not in ALL_DYNAMIC and key in BROKER_KEYS))

    # -- AlterConfigs / IncrementalAlterConfigs -------------------------------------------------------------
    def per_broker_resource(self, name: str) -> bool:
        """ConfigAdminManager.validateResourceNameIsCurrentNodeId: "" is the cluster default, else this id."""
        if not name:
            return False
        try:
            broker_id = int(name)
        except ValueError:
            raise InvalidRequestError(f"Node id must be an integer, but it is: {name}") from None
        if broker_id != self.broker_id:
            raise InvalidRequestError(f"Unexpected broker id, expected {self.broker_id}, but received {name}")
        return True

    def alter(self, name: str, configs: Mapping[str, str | None], *, validate_only: bool = False) -> None:
        """AlterConfigs: the resource's dynamic configs become exactly ``configs``."""
        nulls = [k for k, v in configs.items() if v is None]
        if nulls:
            raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
        per_broker = self.per_broker_resource(name)
        self._set(per_broker, {k: str(v) for k, v in configs.items()}, validate_only)

    def incremental_alter(self, name: str, ops: list[tuple[str, int, str | None]], *,
                          validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: the ops applied to the resource's stored configs (ConfigAdminManager
        .prepareIncrementalConfigs); APPEND and SUBTRACT only for LIST keys, from the key's default."""
        keys = [key for key, _, _ in ops]
        if len(set(keys)) != len(keys):
            raise InvalidRequestError("Error due to duplicate config keys")
        nulls = [k for k, op, v in ops if op != DELETE and v is None]
        if nulls:
            raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
        per_broker = self.per_broker_resource(name)
        if self.zk is not None:  # ZooKeeper's copy, as Kafka's fetchEntityConfig: another broker may have moved it
            props = self.zk.entity_config("brokers", str(self.broker_id) if per_broker else DEFAULT_ENTITY)
        else:
            props = dict(self.per_broker if per_broker else self.cluster_default)
        for key, op, value in ops:
            if op == SET:
                props[key] = value or ""
            elif op == DELETE:
                props.pop(key, None)
            elif op in (APPEND, SUBTRACT):
                base_key = (m.group(1) if (m := LISTENER_PREFIX.match(key)) else key)
                if _TYPES.get(base_key) is not ConfigType.LIST:
                    what = "append" if op == APPEND else "subtract"
                    raise InvalidRequestError(f"Config value {what} is not allowed for config key: {key}")
                current = props.get(key, _LIST_DEFAULTS.get(base_key, ""))
                items = [v for v in current.split(",") if v]
                given = (value or "").split(",")
                if op == APPEND:
                    items += [v for v in given if v not in items]
                else:
                    items = [v for v in items if v not in given]
                props[key] = ",".join(items)
            else:
                raise InvalidRequestError(f"Unknown operations type {op}")
        self._set(per_broker, props, validate_only)

    def validate(self, props: Mapping[str, str], per_broker: bool) -> None:
        """DynamicBrokerConfig.validateConfigs, then the new topic defaults must parse (DynamicLogConfig)."""
        fixed = {k for k in props if k in NOT_DYNAMIC_HERE or (k in BROKER_KEYS and k not in ALL_DYNAMIC)}
        if fixed:
            refused = fixed & (NOT_DYNAMIC_HERE & ALL_DYNAMIC)
            if refused:
                log.warning("refusing dynamic %s: kctl broker applies it only at startup or not at all",
                            ", ".join(sorted(refused)))
            raise InvalidRequestError(f"Cannot update these configs dynamically: {_scala_set(fixed)}")
        unprefixed = SSL_RECONFIGURABLE & set(props)
        if unprefixed:
            raise InvalidRequestError("These security configs can be dynamically updated only per-listener using "
                                      f"the listener prefix: {_scala_set(unprefixed)}")
        for key, value in props.items():
            match = LISTENER_PREFIX.match(key)
            _check_type(match.group(1) if match else key, value)
            if key in QUOTAS and int(value.strip()) < 0:  # DynamicConfig.Broker: atLeast(0)
                raise InvalidRequestError(f"Invalid value {value} for configuration {key}: Value must be at least 0")
            if key in REMOTE_QUOTAS and int(value.strip()) < 1:  # RemoteLogManagerConfig: atLeast(1)
                raise InvalidRequestError(f"Invalid value {value} for configuration {key}: Value must be at least 1")
        if not per_broker:
            broker_only = {k for k in props if k in PER_BROKER or (
                (m := LISTENER_PREFIX.match(k)) is not None and m.group(1) not in CLUSTER_LEVEL_LISTENER)}
            if broker_only:
                raise InvalidRequestError("Cannot update these configs at default cluster level, broker id must be "
                                          f"specified: {_scala_set(broker_only)}")
        if "max.connections.per.ip.overrides" in props:  # SocketServer.validateReconfiguration
            from kcli.broker.config_error import ConfigError
            from kcli.broker.connection_quotas import parse_overrides

            try:
                parse_overrides(props["max.connections.per.ip.overrides"])
            except ConfigError as exc:
                raise InvalidRequestError(exc.reason) from None
        trial = DynamicBrokerConfig(self.config)
        trial.per_broker, trial.cluster_default = dict(self.per_broker), dict(self.cluster_default)
        if per_broker:
            trial.per_broker = dict(props)
        else:
            trial.cluster_default = dict(props)
        try:
            LogConfig.from_props({}, trial.log_defaults()[0])
        except KcliError as exc:
            raise InvalidRequestError(exc.reason) from None

    def _set(self, per_broker: bool, props: dict[str, str], validate_only: bool) -> None:
        self.validate(props, per_broker)
        if validate_only:
            return
        entity = str(self.broker_id) if per_broker else DEFAULT_ENTITY
        if self.zk is not None:
            self.zk.set_entity_config("brokers", entity, props)
        log.info("dynamic configs of %s now %s", f"broker {self.broker_id}" if per_broker else "the cluster default",
                 props or "none")
        self._apply(per_broker, props)
        self._write_file()

    # -- storage and change notifications -------------------------------------------------------------------
    def load(self) -> None:
        """At startup: both entities from ZooKeeper, or the standalone file (an unreadable file is logged)."""
        if self.zk is not None:
            self.per_broker = self.zk.entity_config("brokers", str(self.broker_id))
            self.cluster_default = self.zk.entity_config("brokers", DEFAULT_ENTITY)
        elif self.file is not None and self.file.exists():
            try:
                data = json.loads(self.file.read_text()).get("brokers", {})
                self.per_broker = {str(k): str(v) for k, v in data.get(str(self.broker_id), {}).items()}
                self.cluster_default = {str(k): str(v) for k, v in data.get(DEFAULT_ENTITY, {}).items()}
            except (OSError, ValueError, AttributeError) as exc:
                log.error("ignoring unreadable dynamic broker configs %s: %s", self.file, exc)
        if self.per_broker or self.cluster_default:
            log.info("dynamic broker configs: broker %d %s, cluster default %s", self.broker_id, self.per_broker,
                     self.cluster_default)

    def changed(self, entity: str, props: Mapping[str, str]) -> None:
        """A /config/changes notification for /config/brokers/<entity> (Kafka's BrokerConfigHandler)."""
        if entity == DEFAULT_ENTITY:
            self._apply(False, dict(props))
        elif entity == str(self.broker_id):
            self._apply(True, dict(props))

    def _apply(self, per_broker: bool, props: dict[str, str]) -> None:
        if per_broker:
            self.per_broker = props
        else:
            self.cluster_default = props
        if self.on_change is not None:
            self.on_change()
        for reconfigure in self.reconfigurables:
            reconfigure()

    def merged(self) -> dict[str, str]:
        """The dynamic values in force: this broker's own over the cluster default."""
        return {**self.cluster_default, **self.per_broker}

    def _write_file(self) -> None:
        if self.zk is not None or self.file is None:
            return
        data = {"version": 1, "brokers": {e: c for e, c in ((str(self.broker_id), self.per_broker),
                                                              (DEFAULT_ENTITY, self.cluster_default)) if c}}
        tmp = self.file.with_name(self.file.name + ".tmp")
        with open(tmp, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.file)
