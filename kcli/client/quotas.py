"""Client quotas through any broker (KIP-546; kafka-configs --bootstrap-server --entity-type users|clients):
DescribeClientQuotas (48) and AlterClientQuotas (49), as Kafka's admin client sends them. A ZooKeeper-mode broker
answers both itself and announces alterations to the others on /config/changes.

An entity is a tuple of (entity type, name) pairs (``user``, ``client-id``; a None name is the default entity).
A top-level error raises KafkaRequestError; per-entity failures are reported, not raised. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaRequestError, _build
from kcli.protocol.api import ApiKey

Entity = tuple[tuple[str, "str | None"], ...]
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def entity_json(entity: Entity) -> dict[str, str | None]:
    """``{"user": "alice", "client-id": null}`` (null: the default entity)."""
    return {kind: name for kind, name in entity}


@dataclass(frozen=True)
class QuotaEntry:
    """One entity's quotas as a broker describes them."""

    entity: Entity
    values: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"entity": entity_json(self.entity), "quotas": dict(sorted(self.values.items()))}


@dataclass(frozen=True)
class QuotaAlteration:
    """The outcome of one entity's changes (all or none)."""

    entity: Entity
    error: str | None = None
    error_code: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"entity": entity_json(self.entity), "ok": self.ok, "error": self.error}


def describe_client_quotas(client: KafkaClient, components: Sequence[tuple[str, Any]] = (), *,
                           strict: bool = False) -> list[QuotaEntry]:
    """The entities matching ``components``: (entity type, match) with match a name, None (the default entity) or
    ``...`` (any entity of that type). ``strict``: only entities with no other component."""
    connection = client._any()
    version, m = connection.module(ApiKey.DESCRIBE_CLIENT_QUOTAS)
    body = connection.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, _build(
        m, "DescribeClientQuotasRequest", strict=strict, components=tuple(
            _build(m, "ComponentData", entity_type=kind,
                   match_type=MATCH_SPECIFIED if match is ... else MATCH_DEFAULT if match is None else MATCH_EXACT,
                   match=match if isinstance(match, str) else None)
            for kind, match in components)))
    if body.error_code != ErrorCode.none:
        raise KafkaRequestError(body.error_message or "", request=f"DescribeClientQuotasResponse v{version}",
                                field="error_code", error=body.error_code)
    return [QuotaEntry(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                       {v.key: float(v.value) for v in entry.values}) for entry in body.entries or ()]


def alter_client_quotas(client: KafkaClient, alterations: Sequence[tuple[Entity, Sequence[tuple[str, float | None]]]],
                        *, validate_only: bool = False) -> list[QuotaAlteration]:
    """Set (a value) and remove (None) quota keys of each entity; one result per entity, in the order given."""
    connection = client._any()
    version, m = connection.module(ApiKey.ALTER_CLIENT_QUOTAS)
    body = connection.call(ApiKey.ALTER_CLIENT_QUOTAS, _build(
        m, "AlterClientQuotasRequest", validate_only=validate_only, entries=tuple(
            _build(m, "EntryData",
                   entity=tuple(_build(m, "EntityData", entity_type=k, entity_name=n) for k, n in entity),
                   ops=tuple(_build(m, "OpData", key=key, value=0.0 if value is None else float(value),
                                    remove=value is None) for key, value in ops))
            for entity, ops in alterations)))
    label = f"AlterClientQuotasResponse v{version}"
    out = []
    for entry in body.entries:
        entity = tuple((e.entity_type, e.entity_name) for e in entry.entity)
        error = None
        if entry.error_code != ErrorCode.none:
            error = KafkaRequestError(entry.error_message or "", request=label, field="entries[].error_code",
                                      error=entry.error_code).describe()
        out.append(QuotaAlteration(entity, error, int(entry.error_code)))
    return out
