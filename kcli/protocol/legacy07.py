"""The Kafka 0.7 wire protocol, sans-io: frames ``[int32 size][int16 request type][body]`` of the five request
types, their bodies, and the ``[int32 size][int16 error][body]`` responses.

    Request       => Size:int32 RequestType:int16 Body
    Produce (0)   => Topic:short-string Partition:int32 MessageSetSize:int32 MessageSet        (no response)
    Fetch (1)     => Topic:short-string Partition:int32 Offset:int64 MaxSize:int32
    MultiFetch (2)   => Count:int16 Fetch*    (the Fetch bodies, without request types)
    MultiProduce (3) => Count:int16 Produce*
    Offsets (4)   => Topic:short-string Partition:int32 Time:int64 MaxNumOffsets:int32
    Response      => Size:int32 ErrorCode:int16 Body
      Fetch: MessageSet; MultiFetch: (Size:int32 ErrorCode:int16 MessageSet)*; Offsets: Count:int32 Offset:int64*

Kafka 0.7: kafka/api/{RequestKeys,ProducerRequest,FetchRequest,MultiFetchRequest,MultiProducerRequest,
OffsetRequest,MultiFetchResponse}.scala, kafka/common/ErrorMapping.scala, kafka/network/SocketServer.scala.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Union

from kcli.protocol.errors import RemoteProtocolError

BYTE_ORDER: Final = ">"


class RequestType07(IntEnum):
    """RequestKeys."""

    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4


class ErrorCode07(IntEnum):
    """ErrorMapping."""

    UNKNOWN = -1
    NO_ERROR = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    WRONG_PARTITION = 3
    INVALID_FETCH_SIZE = 4


# -- the layouts, declared once: (field, struct code) in wire order ---------------------------------------
FRAME_FIELDS: Final = (("size", "i"), ("request_type", "h"))  # size: the bytes after it
RESPONSE_FIELDS: Final = (("size", "i"), ("error_code", "h"))
SHORT_STRING_LENGTH: Final = struct.Struct(BYTE_ORDER + "h")
COUNT16: Final = struct.Struct(BYTE_ORDER + "h")  # MultiFetch/MultiProduce: number of requests
PRODUCE_FIELDS: Final = (("partition", "i"), ("message_set_size", "i"))  # after the topic
FETCH_FIELDS: Final = (("partition", "i"), ("offset", "q"), ("max_size", "i"))
OFFSETS_FIELDS: Final = (("partition", "i"), ("time", "q"), ("max_num_offsets", "i"))
OFFSET_ARRAY_COUNT: Final = struct.Struct(BYTE_ORDER + "i")
OFFSET_ENTRY: Final = struct.Struct(BYTE_ORDER + "q")


def _struct(fields: tuple[tuple[str, str], ...]) -> struct.Struct:
    return struct.Struct(BYTE_ORDER + "".join(code for _name, code in fields))


FRAME_HEADER: Final = _struct(FRAME_FIELDS)
RESPONSE_HEADER: Final = _struct(RESPONSE_FIELDS)
SIZE_FIELD: Final = struct.Struct(BYTE_ORDER + dict(FRAME_FIELDS)["size"])
REQUEST_TYPE_FIELD: Final = struct.Struct(BYTE_ORDER + dict(FRAME_FIELDS)["request_type"])
PRODUCE_BODY: Final = _struct(PRODUCE_FIELDS)
FETCH_BODY: Final = _struct(FETCH_FIELDS)
OFFSETS_BODY: Final = _struct(OFFSETS_FIELDS)
# The error code counts in a response's size, as OffsetArraySend and MessageSetSend write it.
ERROR_CODE_SIZE: Final = RESPONSE_HEADER.size - SIZE_FIELD.size

DEFAULT_MAX_REQUEST_BYTES: Final = 100 * 1024 * 1024  # max.socket.request.bytes


class Protocol07Error(RemoteProtocolError):
    """A frame a 0.7 broker cannot parse: it closes the connection (0.7's SocketServer does the same)."""


@dataclass(frozen=True, slots=True)
class ProduceRequest07:
    topic: str
    partition: int  # -1: a random partition (ProducerRequest.RandomPartition)
    messages: bytes


@dataclass(frozen=True, slots=True)
class FetchRequest07:
    topic: str
    partition: int
    offset: int
    max_size: int


@dataclass(frozen=True, slots=True)
class MultiFetchRequest07:
    fetches: tuple[FetchRequest07, ...]


@dataclass(frozen=True, slots=True)
class MultiProduceRequest07:
    produces: tuple[ProduceRequest07, ...]


@dataclass(frozen=True, slots=True)
class OffsetsRequest07:
    topic: str
    partition: int
    time: int  # -1 latest, -2 earliest, else milliseconds
    max_num_offsets: int


Request07 = Union[ProduceRequest07, FetchRequest07, MultiFetchRequest07, MultiProduceRequest07, OffsetsRequest07]


@dataclass(frozen=True, slots=True)
class FetchResponse07:
    error_code: int
    messages: bytes = b""


@dataclass(frozen=True, slots=True)
class MultiFetchResponse07:
    responses: tuple[FetchResponse07, ...]


@dataclass(frozen=True, slots=True)
class OffsetsResponse07:
    error_code: int
    offsets: tuple[int, ...] = ()


Response07 = Union[FetchResponse07, MultiFetchResponse07, OffsetsResponse07]


# -- decoding ----------------------------------------------------------------------------------------------
class _Reader:
    def __init__(self, body: bytes, what: str) -> None:
        self.body = body
        self.pos = 0
        self.what = what

    def take(self, layout: struct.Struct, name: str) -> tuple:
        if self.pos + layout.size > len(self.body):
            raise Protocol07Error(f"{self.what}: truncated at byte {self.pos} of the body, reading {name}")
        values = layout.unpack_from(self.body, self.pos)
        self.pos += layout.size
        return values

    def short_string(self, name: str) -> str:
        (length,) = self.take(SHORT_STRING_LENGTH, f"{name} length")
        if length < 0 or self.pos + length > len(self.body):
            raise Protocol07Error(f"{self.what}: {name} of {length} bytes does not fit at byte {self.pos}")
        raw = self.body[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Protocol07Error(f"{self.what}: {name} is not UTF-8") from None

    def raw(self, length: int, name: str) -> bytes:
        if length < 0 or self.pos + length > len(self.body):
            raise Protocol07Error(f"{self.what}: {name} of {length} bytes does not fit at byte {self.pos} "
                                  f"({len(self.body) - self.pos} left)")
        out = self.body[self.pos : self.pos + length]
        self.pos += length
        return out

    def done(self) -> None:
        if self.pos != len(self.body):
            raise Protocol07Error(f"{self.what}: {len(self.body) - self.pos} bytes left over after the body")


def _produce(reader: _Reader) -> ProduceRequest07:
    topic = reader.short_string("topic")
    partition, size = reader.take(PRODUCE_BODY, "partition and message set size")
    return ProduceRequest07(topic, partition, reader.raw(size, "message set"))


def _fetch(reader: _Reader) -> FetchRequest07:
    topic = reader.short_string("topic")
    return FetchRequest07(topic, *reader.take(FETCH_BODY, "partition, offset and max size"))


def _count(reader: _Reader) -> int:
    (count,) = reader.take(COUNT16, "count")
    if count < 0:
        raise Protocol07Error(f"{reader.what}: negative count {count}")
    return count


def decode_request(request_type: int, body: bytes) -> Request07:
    """The request of one frame's type and body (the frame's size and type already taken off)."""
    try:
        kind = RequestType07(request_type)
    except ValueError:
        raise Protocol07Error(f"no request type {request_type} (0.7 has 0 produce, 1 fetch, 2 multi-fetch, "
                              f"3 multi-produce, 4 offsets)") from None
    reader = _Reader(body, kind.name.lower())
    request: Request07
    if kind is RequestType07.PRODUCE:
        request = _produce(reader)
    elif kind is RequestType07.FETCH:
        request = _fetch(reader)
    elif kind is RequestType07.MULTIFETCH:
        request = MultiFetchRequest07(tuple(_fetch(reader) for _ in range(_count(reader))))
    elif kind is RequestType07.MULTIPRODUCE:
        request = MultiProduceRequest07(tuple(_produce(reader) for _ in range(_count(reader))))
    else:
        topic = reader.short_string("topic")
        request = OffsetsRequest07(topic, *reader.take(OFFSETS_BODY, "partition, time and max offsets"))
    reader.done()
    return request


# -- encoding ----------------------------------------------------------------------------------------------
def _short_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return SHORT_STRING_LENGTH.pack(len(raw)) + raw


def _produce_body(p: ProduceRequest07) -> bytes:
    return _short_string(p.topic) + PRODUCE_BODY.pack(p.partition, len(p.messages)) + p.messages


def _fetch_body(f: FetchRequest07) -> bytes:
    return _short_string(f.topic) + FETCH_BODY.pack(f.partition, f.offset, f.max_size)


def encode_request(request: Request07) -> bytes:
    """A whole frame, as a 0.7 client sends it."""
    if isinstance(request, ProduceRequest07):
        kind, body = RequestType07.PRODUCE, _produce_body(request)
    elif isinstance(request, FetchRequest07):
        kind, body = RequestType07.FETCH, _fetch_body(request)
    elif isinstance(request, MultiFetchRequest07):
        kind, body = RequestType07.MULTIFETCH, COUNT16.pack(len(request.fetches)) + b"".join(
            _fetch_body(f) for f in request.fetches)
    elif isinstance(request, MultiProduceRequest07):
        kind, body = RequestType07.MULTIPRODUCE, COUNT16.pack(len(request.produces)) + b"".join(
            _produce_body(p) for p in request.produces)
    else:
        kind, body = RequestType07.OFFSETS, _short_string(request.topic) + OFFSETS_BODY.pack(
            request.partition, request.time, request.max_num_offsets)
    return encode_frame(int(kind), body)


def encode_frame(request_type: int, body: bytes) -> bytes:
    return FRAME_HEADER.pack(REQUEST_TYPE_FIELD.size + len(body), request_type) + body


def _response(error_code: int, body: bytes) -> bytes:
    return RESPONSE_HEADER.pack(ERROR_CODE_SIZE + len(body), error_code) + body


def encode_response(response: Response07) -> bytes:
    if isinstance(response, FetchResponse07):
        return _response(response.error_code, response.messages)
    if isinstance(response, MultiFetchResponse07):
        # MultiMessageSetSend: the outer error is always NoError; each set carries its own.
        return _response(ErrorCode07.NO_ERROR, b"".join(
            RESPONSE_HEADER.pack(ERROR_CODE_SIZE + len(r.messages), r.error_code) + r.messages
            for r in response.responses))
    body = OFFSET_ARRAY_COUNT.pack(len(response.offsets)) + b"".join(OFFSET_ENTRY.pack(o) for o in response.offsets)
    return _response(response.error_code, body)


def decode_response(request: Request07, frame: bytes) -> Response07:
    """A response frame (size field included) to ``request``, as a 0.7 client reads it."""
    reader = _Reader(frame, "response")
    size, error = reader.take(RESPONSE_HEADER, "size and error code")
    if size != len(frame) - SIZE_FIELD.size:
        raise Protocol07Error(f"response size {size} but {len(frame) - SIZE_FIELD.size} bytes follow it")
    if isinstance(request, FetchRequest07):
        return FetchResponse07(error, frame[reader.pos :])
    if isinstance(request, MultiFetchRequest07):
        parts = []
        while reader.pos < len(frame):
            part_size, part_error = reader.take(RESPONSE_HEADER, "set size and error code")
            parts.append(FetchResponse07(part_error, reader.raw(part_size - ERROR_CODE_SIZE, "message set")))
        return MultiFetchResponse07(tuple(parts))
    if error != ErrorCode07.NO_ERROR and reader.pos == len(frame):
        return OffsetsResponse07(error)
    (count,) = reader.take(OFFSET_ARRAY_COUNT, "offset count")
    return OffsetsResponse07(error, tuple(reader.take(OFFSET_ENTRY, "offset")[0] for _ in range(count)))


# -- the connection --------------------------------------------------------------------------------------
class NeedData:
    """next_request's answer while a frame is incomplete."""


NEED_DATA: Final = NeedData()


@dataclass(frozen=True, slots=True)
class BadRequest07:
    """A frame that arrived whole but does not parse: the broker logs ``reason`` and closes the connection."""

    request_type: int
    reason: str


class Connection07:
    """A 0.7 server connection (h11's shape): bytes in, requests out; responses in, bytes out."""

    def __init__(self, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_request_bytes = max_request_bytes
        self.buffer = bytearray()

    def receive_data(self, data: bytes) -> None:
        self.buffer += data

    def next_request(self) -> Request07 | NeedData | BadRequest07:
        """The next whole request; NEED_DATA; or BadRequest07. A size outside [2, max] raises Protocol07Error:
        the rest of the stream cannot be framed."""
        if len(self.buffer) < SIZE_FIELD.size:
            return NEED_DATA
        (size,) = SIZE_FIELD.unpack_from(self.buffer)
        if size < REQUEST_TYPE_FIELD.size or size > self.max_request_bytes:
            raise Protocol07Error(f"request size {size} is outside [{REQUEST_TYPE_FIELD.size}, "
                                  f"{self.max_request_bytes}] (max.socket.request.bytes)")
        if len(self.buffer) < SIZE_FIELD.size + size:
            return NEED_DATA
        frame = bytes(self.buffer[: SIZE_FIELD.size + size])
        del self.buffer[: SIZE_FIELD.size + size]
        (request_type,) = REQUEST_TYPE_FIELD.unpack_from(frame, SIZE_FIELD.size)
        try:
            return decode_request(request_type, frame[FRAME_HEADER.size :])
        except Protocol07Error as exc:
            return BadRequest07(request_type, str(exc))

    @staticmethod
    def send(response: Response07) -> bytes:
        return encode_response(response)
