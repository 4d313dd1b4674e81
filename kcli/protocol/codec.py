"""Request frames to kio request objects, kio response objects to size-prefixed response frames.

Wire layout (https://kafka.apache.org/protocol#protocol_messages)::

    RequestOrResponse => Size RequestMessage | ResponseMessage
      Size => int32                      (not part of the frames passed here)
    Request Header v1 => request_api_key:int16 request_api_version:int16
                         correlation_id:int32 client_id:NULLABLE_STRING
    Request Header v2 => v1 fields, then TAG_BUFFER (KIP-482)
    Response Header v0 => correlation_id:int32
    Response Header v1 => correlation_id:int32 TAG_BUFFER

The message bodies are kio's dataclasses, read and written by kio at the request's version; for the old versions
kio has no schema of, dataclasses of the same shape generated from kcli.protocol.legacy's declarations.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import IO, Any, Final, cast

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

from kcli.protocol.api import (
    INTER_BROKER_APIS,
    SUPPORTED_APIS,
    ApiKey,
    request_header_version,
    response_header_version,
)
from kcli.protocol.errors import LocalProtocolError, RemoteProtocolError, UnsupportedVersionError
from kcli.protocol.guard import Malformed, walk
from kcli.protocol.schema import api_key_map, load_payload_module
from kcli.protocol.legacy import request_schema, response_schema

# request_api_key:int16 request_api_version:int16 correlation_id:int32
REQUEST_HEADER_PREFIX: Final = struct.Struct(">hhi")
# Size:int32, the length of what follows it
SIZE_PREFIX: Final = struct.Struct(">i")

RequestHeader = RequestHeaderV1 | RequestHeaderV2


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request: the header fields the broker needs up front, and kio's body object."""

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    header: RequestHeader
    body: Any  # the kio request dataclass for (api_key, api_version), or kcli.protocol.legacy's
    # Bytes after the body that the schema does not account for; ignored, as Kafka does
    # (see decode_request). librdkafka sends 3 with its all-topics Metadata v12 request.
    trailing_bytes: int = 0

    @property
    def name(self) -> str:
        return f"{type(self.body).__name__} v{self.api_version}"

    @property
    def expects_response(self) -> bool:
        # acks=0: the producer reads nothing back, so the broker must send nothing.
        return not (self.api_key is ApiKey.PRODUCE and self.body.acks == 0)


def api_name(api_key: int) -> str:
    """``"Produce"`` for 0: Kafka's name for any key kio knows, ``"api key N"`` otherwise."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"api key {api_key}"
    return "".join(part.capitalize() for part in name.split("_"))


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """Decode one request frame (the bytes after the size prefix).

    Bytes after the body are ignored and counted in ``Request.trailing_bytes``, as Kafka ignores them.
    Raises ``UnsupportedVersionError`` for an API or version outside ``SUPPORTED_APIS``
    (with ``response`` set for ApiVersions, KIP-511) and ``RemoteProtocolError`` for
    anything malformed or truncated, naming the request and field. Never anything else.
    """
    if not isinstance(frame, bytes):
        frame = bytes(frame)  # kio's readers refuse writable buffers
    if len(frame) < REQUEST_HEADER_PREFIX.size:
        field = ("request_api_key", "request_api_key", "request_api_version", "request_api_version",
                 "correlation_id", "correlation_id", "correlation_id", "correlation_id")[len(frame)]
        raise RemoteProtocolError(
            f"truncated request header: {len(frame)} bytes", field=field, position=len(frame))
    raw_key, version, correlation_id = REQUEST_HEADER_PREFIX.unpack_from(frame, 0)
    label = f"{api_name(raw_key)}Request v{version}" if raw_key in api_key_map else f"request of api key {raw_key}"

    try:
        api_key = ApiKey(raw_key)
        # The controller's requests are served without being advertised: ApiVersions is for clients, and a
        # ZooKeeper-mode controller sends the versions its inter.broker.protocol.version fixes.
        supported = SUPPORTED_APIS.get(api_key) or INTER_BROKER_APIS[api_key]  # KeyError: not served
    except (ValueError, KeyError):
        raise UnsupportedVersionError(
            f"{api_name(raw_key)} (api key {raw_key}) is not served" if raw_key in api_key_map
            else f"unknown api key {raw_key}", api_key=raw_key, api_version=version,
            correlation_id=correlation_id, request=label) from None

    if version not in supported:
        if api_key is ApiKey.API_VERSIONS:
            # Answer in the v0 layout with our ranges so the client can retry (KIP-511).
            header, _ = _read_header(frame, api_key, version, label)
            response = _frame(ResponseHeaderV0(correlation_id=i32(correlation_id)),
                              api_versions_response(error=ErrorCode.unsupported_version, version=0))
            raise UnsupportedVersionError(
                f"ApiVersions v{version} is outside v{supported.min_version}-v{supported.max_version}; "
                f"answering UNSUPPORTED_VERSION in the v0 layout", api_key=raw_key, api_version=version,
                correlation_id=correlation_id, request=label, client_id=header.client_id, response=response)
        raise UnsupportedVersionError(
            f"unsupported version: {api_name(raw_key)} is served at "
            f"v{supported.min_version}-v{supported.max_version}",
            api_key=raw_key, api_version=version, correlation_id=correlation_id, request=label)

    body_type = request_schema(api_key, version)
    if body_type is None:
        raise UnsupportedVersionError(f"{label} is not served", api_key=raw_key, api_version=version,
                                      correlation_id=correlation_id, request=label)
    label = f"{body_type.__name__} v{version}"

    header, pos = _read_header(frame, api_key, version, label)
    try:
        end = walk(body_type, frame, pos)
    except Malformed as e:
        raise RemoteProtocolError(e.reason, request=label, field=e.field, position=e.position,
                                  correlation_id=correlation_id) from None
    # Bytes after the body are ignored, as Kafka does: RequestContext.parseRequest (3.x) hands the
    # rest of the frame to AbstractRequest.parseRequest, whose generated ``XRequestData.read`` reads
    # the fields of the version and stops; nothing checks ``buffer.remaining()`` afterwards (the
    # RequestAndSize size is the whole buffer's). librdkafka (through 2.16 at least) relies on it:
    # its all-topics Metadata v12 request carries 3 stray bytes. Everything before the end of the
    # body stays strict: a short body, a forged count or a bad header is still an error (the walk
    # above), exactly where Kafka's reader throws (BufferUnderflowException, InvalidRequestException).
    trailing_bytes = len(frame) - end
    try:
        body: Any = entity_reader(body_type)(frame, pos)[0]
    except Exception as e:  # the walk accepted it; kio's own errors are still the peer's fault
        raise RemoteProtocolError(f"body does not decode: {e}", request=label, position=pos,
                                  correlation_id=correlation_id) from None
    return Request(api_key=api_key, api_version=version, correlation_id=correlation_id,
                   client_id=header.client_id, header=header, body=body, trailing_bytes=trailing_bytes)


def encode_response(request: Request, response_body: Any) -> bytes:
    """The size-prefixed response frame: header (v0, or v1 when flexible; ApiVersions always v0), body."""
    header = _response_header(request, response_body)
    try:
        return _frame(header, response_body)
    except Exception as e:  # kio's writers: out-of-range ints, wrong types, None where not nullable
        raise LocalProtocolError(f"cannot encode {type(response_body).__name__}: {e}", request=request.name,
                                 correlation_id=request.correlation_id) from None


def api_versions_response(
    *,
    error: ErrorCode = ErrorCode.none,
    version: int = 0,
    throttle_time: timedelta = timedelta(0),
) -> Any:
    """The ApiVersionsResponse body at ``version`` listing every range in ``SUPPORTED_APIS``."""
    body_type = response_schema(ApiKey.API_VERSIONS, version)
    assert body_type is not None
    api_version_type = load_payload_module(ApiKey.API_VERSIONS, version, EntityType.response).ApiVersion
    api_keys = tuple(
        api_version_type(api_key=i16(key), min_version=i16(api.min_version), max_version=i16(api.max_version))
        for key, api in sorted(SUPPORTED_APIS.items())
    )
    names = {f.name for f in fields(body_type)}
    kwargs: dict[str, Any] = {"error_code": error, "api_keys": api_keys}
    if "throttle_time" in names:
        kwargs["throttle_time"] = throttle_time
    return body_type(**kwargs)


def _read_header(frame: bytes, api_key: ApiKey, version: int,
                 label: str) -> tuple[RequestHeader, int]:
    header_type = RequestHeaderV2 if request_header_version(api_key, version) == 2 else RequestHeaderV1
    correlation_id = REQUEST_HEADER_PREFIX.unpack_from(frame, 0)[2]
    try:
        walk(header_type, frame, 0)
        header, size = cast("tuple[RequestHeader, int]", entity_reader(header_type)(frame, 0))
    except Malformed as e:
        field = f"header.{e.field}" if e.field else "header"
        raise RemoteProtocolError(e.reason, request=label, field=field, position=e.position,
                                  correlation_id=correlation_id) from None
    except Exception as e:
        raise RemoteProtocolError(f"request header does not decode: {e}", request=label, position=0,
                                  correlation_id=correlation_id) from None
    return header, size


PASS_THROUGH_BYTES = 64 * 1024  # a records buffer this large is a part of its own, not copied into the frame


class _PartsWriter:
    """A write target for kio's writers that keeps file regions (record bytes still on disk) out of memory:
    kio writes a records field as ``len(value)`` then ``write(value)``, so a region passes through whole. Large
    in-memory records (a remote segment's chunk, issue 28) pass through as they are too: copying a MiB into the
    frame, then the frame into the socket's buffer, cost more than the read itself."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self._buffer = bytearray()
        self.size = 0

    def write(self, data: Any) -> None:
        if getattr(data, "file_region", False) or (len(data) >= PASS_THROUGH_BYTES
                                                   and isinstance(data, (bytes, memoryview))):
            if self._buffer:
                self.parts.append(bytes(self._buffer))
                self._buffer.clear()
            self.parts.append(data)
            self.size += len(data)
            return
        self._buffer += data
        self.size += len(data)

    def finish(self) -> list[Any]:
        if self._buffer:
            self.parts.append(bytes(self._buffer))
            self._buffer.clear()
        return self.parts


def encode_response_parts(request: Request, response_body: Any) -> list[Any]:
    """Like ``encode_response``, but records fields holding file regions (objects with ``file_region =
    True`` and a length) stay regions: the caller sends them with sendfile, zero-copy, as Kafka does. Records
    buffers of PASS_THROUGH_BYTES or more are parts of their own, not copied."""
    header = _response_header(request, response_body)
    out = _PartsWriter()
    try:
        entity_writer(type(header))(cast(IO[bytes], out), header)
        entity_writer(type(response_body))(cast(IO[bytes], out), response_body)
    except Exception as e:
        raise LocalProtocolError(f"cannot encode {type(response_body).__name__}: {e}", request=request.name,
                                 correlation_id=request.correlation_id) from None
    return [SIZE_PREFIX.pack(out.size), *out.finish()]


def _response_header(request: Request, response_body: Any) -> ResponseHeaderV0 | ResponseHeaderV1:
    body_type = type(response_body)
    if (getattr(body_type, "__type__", None) is not EntityType.response
            or body_type.__api_key__ != request.api_key or body_type.__version__ != request.api_version):
        raise LocalProtocolError(f"{body_type.__name__} does not answer this request",
                                 request=request.name, correlation_id=request.correlation_id)
    correlation_id = i32(request.correlation_id)
    if response_header_version(request.api_key, request.api_version) == 0:
        return ResponseHeaderV0(correlation_id=correlation_id)
    return ResponseHeaderV1(correlation_id=correlation_id)


def _frame(header: Any, body: Any) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    entity_writer(type(header))(out, header)
    entity_writer(type(body))(out, body)
    view = out.getbuffer()
    SIZE_PREFIX.pack_into(view, 0, len(view) - SIZE_PREFIX.size)
    del view  # an exported buffer would block getvalue()'s copy
    return out.getvalue()


# -- the client side: request frames out, response frames in ------------------------------------------------
def encode_request(api_key: ApiKey | int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """The size-prefixed request frame a client sends: header v1 (v2 when the version is flexible), body."""
    body_type = type(body)
    if (getattr(body_type, "__type__", None) is not EntityType.request or body_type.__api_key__ != api_key
            or body_type.__version__ != api_version):
        raise LocalProtocolError(f"{body_type.__name__} is not {api_name(api_key)}Request v{api_version}")
    header_type = RequestHeaderV2 if request_header_version(api_key, api_version) == 2 else RequestHeaderV1
    header = header_type(request_api_key=i16(int(api_key)), request_api_version=i16(api_version),
                         correlation_id=i32(correlation_id), client_id=client_id)
    try:
        return _frame(header, body)
    except Exception as e:  # kio's writers: out-of-range ints, wrong types, None where not nullable
        raise LocalProtocolError(f"cannot encode {body_type.__name__} v{api_version}: {e}") from None


def decode_response(api_key: ApiKey | int, api_version: int, frame: bytes | bytearray | memoryview) -> tuple[int, Any]:
    """(correlation id, kio response body) from one response frame (the bytes after the size prefix).

    The bytes are walked along the schema first (``guard.walk``), so a malformed or hostile answer raises
    ``RemoteProtocolError`` naming the response and field, never an allocation of a forged size.
    """
    if not isinstance(frame, bytes):
        frame = bytes(frame)
    body_type = response_schema(api_key, api_version)
    if body_type is None:
        raise LocalProtocolError(f"no schema of {api_name(api_key)}Response v{api_version}")
    label = f"{body_type.__name__} v{api_version}"
    header_type = ResponseHeaderV1 if response_header_version(api_key, api_version) == 1 else ResponseHeaderV0
    try:
        pos = walk(header_type, frame, 0)
        header, pos = entity_reader(header_type)(frame, 0)
        end = walk(body_type, frame, pos)
    except Malformed as e:
        raise RemoteProtocolError(e.reason, request=label, field=e.field, position=e.position) from None
    if end != len(frame):
        raise RemoteProtocolError(f"{len(frame) - end} unexpected bytes after the response body", request=label,
                                  position=end)
    try:
        body, _ = entity_reader(body_type)(frame, pos)
    except Exception as e:
        raise RemoteProtocolError(f"body does not decode: {e}", request=label, position=pos) from None
    return int(header.correlation_id), body
