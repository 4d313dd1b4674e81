"""Topic and broker configs as kafka-configs reads and changes them: DescribeConfigs (with synonyms, v1+) and
IncrementalAlterConfigs (KIP-339), for topics (ConfigResource.Type TOPIC), brokers by id and the cluster-wide
broker default (BROKER, the empty name; kafka-configs' ``<default>``).

A request about one broker goes to that broker (its own configs, as Kafka's admin client routes it); topics and
the broker default go to any broker. Per-entity failures come back as messages naming the response, the field and
Kafka's error code; nothing here prints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import BrokerConnection, BrokerUnreachableError, KafkaClient, KafkaClientError, _build
from kcli.client.topics import CONFIG_SOURCES, DELETE, SET, _failure, cluster_view, request_module
from kcli.errors import UsageError
from kcli.protocol.api import ApiKey

TOPIC, BROKER = 2, 4  # ConfigResource.Type
DEFAULT_ENTITY = "<default>"  # kafka-configs' name for the cluster-wide broker default (the empty name)
ENTITY_TYPES = {"topics": TOPIC, "brokers": BROKER}
# What --describe shows without --all: the entity's own dynamic configs (ConfigCommand.getResourceConfig)
DYNAMIC_SOURCE = {TOPIC: "DYNAMIC_TOPIC_CONFIG", BROKER: "DYNAMIC_BROKER_CONFIG"}
DEFAULT_BROKER_SOURCE = "DYNAMIC_DEFAULT_BROKER_CONFIG"


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None  # None for a sensitive value (the broker never sends it)
    source: str
    read_only: bool
    sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()

    def line(self) -> str:
        """kafka-configs --describe's line."""
        synonyms = ", ".join(f"{s.source}:{s.name}={_text(s.value)}" for s in self.synonyms)
        return f"{self.name}={_text(self.value)} sensitive={str(self.sensitive).lower()} synonyms={{{synonyms}}}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source, "read_only": self.read_only,
                "sensitive": self.sensitive, "synonyms": [s.to_json() for s in self.synonyms]}


def _text(value: str | None) -> str:
    return "null" if value is None else value


@dataclass
class EntityConfigs:
    entity_type: str  # topics, brokers
    name: str  # a topic, a broker id, or <default>
    configs: list[ConfigEntry] = field(default_factory=list)
    error: str | None = None

    @property
    def is_default(self) -> bool:
        return self.entity_type == "brokers" and self.name == DEFAULT_ENTITY

    def to_json(self) -> dict[str, Any]:
        return {"entity_type": self.entity_type, "entity_name": self.name,
                "configs": [c.to_json() for c in self.configs], "error": self.error}


@dataclass(frozen=True)
class AlterResult:
    entity_type: str
    name: str
    set: dict[str, str]
    deleted: list[str]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"entity_type": self.entity_type, "entity_name": self.name, "ok": self.ok, "set": self.set,
                "deleted": self.deleted, "error": self.error}


# -- kafka-configs' option values ----------------------------------------------------------------------------
_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")  # commas outside [...] (ConfigCommand.parseConfigsToBeAdded)


def parse_add_config(values: Sequence[str]) -> dict[str, str]:
    """--add-config ``k1=v1,k2=[v1,v2],k3=v3`` (repeatable): a list value's brackets are dropped, as
    kafka-configs drops them."""
    out: dict[str, str] = {}
    for text in values:
        for item in _SPLIT.split(text):
            if not item.strip():
                continue
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise UsageError(f"--add-config {text!r}: {item!r} is not key=value (several: k1=v1,k2=[v1,v2])")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = value
    return out


def parse_delete_config(values: Sequence[str]) -> list[str]:
    """--delete-config ``k1,k2`` (repeatable)."""
    return list(dict.fromkeys(k.strip() for text in values for k in text.split(",") if k.strip()))


def resource_name(entity_type: str, name: str) -> str:
    """The request's resource name: a broker id checked as Kafka checks it, ``<default>`` the empty name."""
    if entity_type == "brokers":
        if name in (DEFAULT_ENTITY, ""):
            return ""
        if not name.strip().isdigit():
            raise UsageError(f"The entity name for brokers must be a valid integer broker id, but it is: {name}")
        return str(int(name))
    return name


# -- requests ------------------------------------------------------------------------------------------------
def _connection(client: KafkaClient, resource_type: int, name: str) -> BrokerConnection:
    return client._node(int(name)) if resource_type == BROKER and name else client._any()


def entity_names(client: KafkaClient, entity_type: str) -> list[str]:
    """Every topic, or every broker id and then <default> (what kafka-configs describes without --entity-name)."""
    view = cluster_view(client, None if entity_type == "topics" else [])
    if entity_type == "topics":
        return sorted(view.topics)
    return [*(str(b) for b in sorted(view.brokers)), DEFAULT_ENTITY]


def describe(client: KafkaClient, entity_type: str, names: Sequence[str], *, include_all: bool = False
             ) -> list[EntityConfigs]:
    """Each entity's configs (with --all every key with its source, else its own dynamic configs), sorted by
    name, each with its synonyms (DescribeConfigs v1+ include_synonyms)."""
    resource_type = ENTITY_TYPES[entity_type]
    out = []
    for name in names:
        wire = resource_name(entity_type, name)
        shown = DEFAULT_ENTITY if entity_type == "brokers" and not wire else name
        entity = EntityConfigs(entity_type, shown)
        try:
            connection = _connection(client, resource_type, wire)
        except BrokerUnreachableError:
            raise  # no broker at all: not this entity's failure
        except KafkaClientError as exc:  # a broker id not in the cluster's metadata
            entity.error = exc.describe()
            out.append(entity)
            continue
        version, m = request_module(connection, ApiKey.DESCRIBE_CONFIGS)
        body = connection.call(ApiKey.DESCRIBE_CONFIGS, _build(
            m, "DescribeConfigsRequest", include_synonyms=True, include_documentation=False, resources=(_build(
                m, "DescribeConfigsResource", resource_type=resource_type, resource_name=wire,
                configuration_keys=None),)))
        label = f"DescribeConfigsResponse v{version}"
        wanted = None if include_all else (DEFAULT_BROKER_SOURCE if resource_type == BROKER and not wire
                                           else DYNAMIC_SOURCE[resource_type])
        for r in body.results:
            if r.error_code != ErrorCode.none:
                entity.error = _failure(label, f"results[{shown}].error_code", r.error_code, r.error_message)
                continue
            for c in r.configs:
                source = CONFIG_SOURCES.get(int(getattr(c, "config_source", -1)), "UNKNOWN")
                if wanted is not None and source != wanted:
                    continue
                synonyms = tuple(ConfigSynonym(s.name, s.value, CONFIG_SOURCES.get(int(s.source), str(s.source)))
                                 for s in getattr(c, "synonyms", ()) or ())
                entity.configs.append(ConfigEntry(c.name, c.value, source, bool(c.read_only), bool(c.is_sensitive),
                                                  synonyms))
        entity.configs.sort(key=lambda c: c.name)
        out.append(entity)
    return out


def alter(client: KafkaClient, entity_type: str, names: Sequence[str], *, set_configs: Mapping[str, str],
          delete_configs: Sequence[str] = (), validate_only: bool = False,
          require_present: bool = True) -> list[AlterResult]:
    """IncrementalAlterConfigs: set and delete keys of each entity, the others unchanged. Deleting a key the
    entity has no dynamic value for is refused first, as kafka-configs refuses it ("Invalid config(s): k"),
    unless not ``require_present`` (kafka-reassign-partitions clears throttles whether set or not)."""
    resource_type = ENTITY_TYPES[entity_type]
    results = []
    for name in names:
        wire = resource_name(entity_type, name)
        shown = DEFAULT_ENTITY if entity_type == "brokers" and not wire else name
        result = AlterResult(entity_type, shown, dict(set_configs), list(delete_configs))
        if delete_configs and require_present:
            [current] = describe(client, entity_type, [name])
            if current.error:
                results.append(AlterResult(entity_type, shown, dict(set_configs), list(delete_configs),
                                           current.error))
                continue
            absent = [k for k in delete_configs if k not in {c.name for c in current.configs}]
            if absent:
                results.append(AlterResult(entity_type, shown, dict(set_configs), list(delete_configs),
                                           f"Invalid config(s): {','.join(absent)} (not set on {entity_type[:-1]} "
                                           f"{shown})"))
                continue
        connection = _connection(client, resource_type, wire)
        if int(ApiKey.INCREMENTAL_ALTER_CONFIGS) not in connection.versions:
            raise KafkaClientError(f"the broker at {connection.address} does not serve IncrementalAlterConfigs "
                                   "(Kafka 2.3 and later do)")
        version, m = request_module(connection, ApiKey.INCREMENTAL_ALTER_CONFIGS)
        ops = [(k, SET, v) for k, v in set_configs.items()] + [(k, DELETE, None) for k in delete_configs]
        body = connection.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, _build(
            m, "IncrementalAlterConfigsRequest", validate_only=validate_only, resources=(_build(
                m, "AlterConfigsResource", resource_type=resource_type, resource_name=wire, configs=tuple(
                    _build(m, "AlterableConfig", name=k, config_operation=op, value=v) for k, op, v in ops)),)))
        label = f"IncrementalAlterConfigsResponse v{version}"
        for r in body.responses:
            if r.error_code != ErrorCode.none:
                result = AlterResult(entity_type, shown, dict(set_configs), list(delete_configs), _failure(
                    label, f"responses[{shown}].error_code", r.error_code, r.error_message))
        results.append(result)
    return results
