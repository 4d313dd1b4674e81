"""Message schemas kio lacks (or cannot read as Kafka sends them), declared in kio's layout, and the one lookup
of schemas by (api key, version).

Kafka 4 removed the ZooKeeper-mode inter-broker APIs, LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6)
and ControlledShutdown (7), so kio, generated from Kafka 4's specs, has no classes for them. The packages
here declare the versions of the IBP 2.8-IV1 profile (kafka-cluster.md §5.1) from Kafka 3.7.0's JSON specs,
laid out as kio lays out its own (``<api>/v<N>/{request,response}.py``, frozen dataclasses with ``__type__``,
``__version__``, ``__flexible__``, ``__api_key__``, ``__header_schema__`` and ``kafka_type`` metadata), so
kio's ``entity_reader`` / ``entity_writer`` and ``kcli.protocol.guard.walk`` read and write them like kio's.

The functions below are ``kio.index``'s, looking here first: use them, not kio's, wherever an
(api key, version) becomes a class. Unknown keys and versions raise kio's ``KioIndexError`` subclasses.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType, ModuleType
from typing import Any, Final

from kio import index as kio_index
from kio.schema.index import api_key_map as kio_api_key_map
from kio.static.constants import EntityType

# api key -> schema name (kio's naming: the package under this one) for the APIs declared here.
OWN_API_NAMES: Final[Mapping[int, str]] = MappingProxyType({
    4: "leader_and_isr",
    5: "stop_replica",
    6: "update_metadata",
    7: "controlled_shutdown",
    65: "describe_transactions",  # kio's reader refuses the -1 start time Kafka sends (see its response module)
})

# api key -> the versions declared here. ControlledShutdown v0 is not: its request header has no client_id
# (a header v0 that neither kio nor the codec knows).
DECLARED_VERSIONS: Final[Mapping[int, tuple[int, ...]]] = MappingProxyType({
    4: (5,),
    5: (3,),
    6: (7,),
    7: (1, 2, 3),
    65: (0,),
})

# kio's api key -> schema name map, with ours added (``codec.api_name`` reads it).
api_key_map: Final[Mapping[int, str]] = MappingProxyType(dict(sorted({**kio_api_key_map, **OWN_API_NAMES}.items())))


def _class_prefix(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


# cached: every request and response looks its schema up (kio resolves a module path by name each time)
@cache
def load_payload_module(api_key: int, version: int, entity_type: Any) -> ModuleType:
    """The module holding the request or response of ``api_key`` at ``version`` (``kio.index.load_payload_module``).

    ``entity_type`` is ``EntityType.request`` or ``EntityType.response``.
    """
    name = OWN_API_NAMES.get(int(api_key))
    if name is None:
        return kio_index.load_payload_module(api_key, version, entity_type)
    if version not in DECLARED_VERSIONS[int(api_key)] or entity_type not in (EntityType.request, EntityType.response):
        raise kio_index.UnknownEntity(
            f"no schema for ({name=!r}, {version=!r}, entity_type={getattr(entity_type, 'name', entity_type)!r})")
    return importlib.import_module(f"{__name__}.{name}.v{version}.{entity_type.name}")


@cache
def load_request_schema(api_key: int, version: int) -> type[Any]:
    """The request class of ``api_key`` at ``version``: ours, else kio's (``kio.index.load_request_schema``)."""
    name = OWN_API_NAMES.get(int(api_key))
    if name is None:
        return kio_index.load_request_schema(api_key, version)
    module = load_payload_module(api_key, version, EntityType.request)
    return getattr(module, _class_prefix(name) + "Request")  # type: ignore[no-any-return]


@cache
def load_response_schema(api_key: int, version: int) -> type[Any]:
    """The response class of ``api_key`` at ``version``: ours, else kio's (``kio.index.load_response_schema``)."""
    name = OWN_API_NAMES.get(int(api_key))
    if name is None:
        return kio_index.load_response_schema(api_key, version)
    module = load_payload_module(api_key, version, EntityType.response)
    return getattr(module, _class_prefix(name) + "Response")  # type: ignore[no-any-return]


__all__ = [
    "DECLARED_VERSIONS",
    "OWN_API_NAMES",
    "api_key_map",
    "load_payload_module",
    "load_request_schema",
    "load_response_schema",
]
