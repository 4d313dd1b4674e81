"""Protocol test helpers: kafka-python as the independent client, and small random kio messages.

kafka-python 3's ``KafkaProtocol`` is a sans-io client (its own schema-driven codec and
framing), so pairing it with ``ServerConnection`` exercises both sides with no sockets
(h11's ``ConnectionPair``).
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timedelta, timezone
from functools import cache

import pytest
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.parser import KafkaProtocol
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

import kafka.protocol.admin  # noqa: F401  (registers the admin API classes)
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
from kcli.protocol import NEED_DATA, Request, ServerConnection


def _kafka_python_classes() -> dict[tuple[int, str], type]:
    found: dict[tuple[int, str], type] = {}

    def visit(cls: type) -> None:
        for sub in cls.__subclasses__():
            if getattr(sub, "_class_version", None) is None and getattr(sub, "_json", None) is not None:
                found[sub.API_KEY, sub.type] = sub
            visit(sub)

    visit(ApiMessage)
    return found


KAFKA_PYTHON = _kafka_python_classes()


class ConnectionPair:
    """A kafka-python client protocol object wired to a ServerConnection."""

    def __init__(self, max_frame_bytes: int | None = None, client_id: str = "kcli-test") -> None:
        self.client = KafkaProtocol(client_id=client_id)
        self.server = ServerConnection() if max_frame_bytes is None else ServerConnection(max_frame_bytes)

    def client_bytes(self, request) -> bytes:
        self.client.send_request(request)
        return bytes(self.client.send_bytes())

    def send(self, request) -> Request:
        self.server.receive_data(self.client_bytes(request))
        got = self.server.next_request()
        assert got is not NEED_DATA
        assert self.server.buffered_bytes == 0
        return got

    def respond(self, request: Request, body):
        data = self.server.send(request, body)
        [(correlation_id, response)] = self.client.receive_bytes(data)
        assert correlation_id == request.correlation_id
        return response


@pytest.fixture
def pair() -> ConnectionPair:
    return ConnectionPair()


@pytest.fixture(scope="session")
def connection_pair() -> type[ConnectionPair]:
    """The ConnectionPair class, for tests that build several (hypothesis, size limits)."""
    return ConnectionPair


@pytest.fixture(scope="session")
def kafka_python() -> dict[tuple[int, str], type]:
    """kafka-python's message classes by (api key, "request" | "response")."""
    return KAFKA_PYTHON


# Random kio messages, built from the same field metadata kio serialises by, kept small.

_INTS = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1),
    "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
}


def _primitive(kafka_type: str, optional: bool) -> st.SearchStrategy:
    if kafka_type in _INTS:
        low, high = _INTS[kafka_type]
        base: st.SearchStrategy = st.integers(low, high)
    elif kafka_type == "string":
        base = st.text(max_size=8)
    elif kafka_type in ("bytes", "records"):
        base = st.binary(max_size=24)
    elif kafka_type == "bool":
        base = st.booleans()
    elif kafka_type == "float64":  # quota values (Describe/AlterClientQuotas)
        base = st.floats(allow_nan=False, width=64)
    elif kafka_type == "uuid":
        base = st.uuids().filter(lambda u: u.int != 0)  # kio reads the zero UUID back as None
    elif kafka_type == "error_code":
        base = st.sampled_from(list(ErrorCode))
    elif kafka_type == "timedelta_i32":
        base = st.integers(-2**31, 2**31 - 1).map(lambda ms: timedelta(milliseconds=ms))
    elif kafka_type == "timedelta_i64":
        base = st.integers(-2**40, 2**40).map(lambda ms: timedelta(milliseconds=ms))
    elif kafka_type == "datetime_i64":
        base = st.integers(0, 2**42).map(lambda ms: datetime.fromtimestamp(ms / 1000, tz=timezone.utc))
    else:
        raise AssertionError(f"no strategy for {kafka_type}")
    return st.none() | base if optional else base


@cache
def kio_messages(entity_type: type) -> st.SearchStrategy:
    """Random instances of a kio entity, arrays of at most 3 elements."""
    kwargs = {}
    for f in fields(entity_type):
        kind = classify_field(f)
        optional = is_optional(f)
        if isinstance(kind, EntityField):
            inner = st.deferred(lambda t=kind.type_: kio_messages(t))
            kwargs[f.name] = st.none() | inner if optional else inner
        elif isinstance(kind, EntityTupleField):
            inner = st.lists(st.deferred(lambda t=kind.type_: kio_messages(t)), max_size=3).map(tuple)
            kwargs[f.name] = st.none() | inner if optional else inner
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[f.name] = st.lists(_primitive(get_schema_field_type(f), False), max_size=3).map(tuple)
        else:
            kwargs[f.name] = _primitive(get_schema_field_type(f), optional)
    return st.builds(entity_type, **kwargs)



@pytest.fixture(scope="session")
def random_kio():
    """``random_kio(entity_type)``: a strategy of small random kio messages of that type."""
    return kio_messages
