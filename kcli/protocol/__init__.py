"""Sans-io Kafka wire protocol: request frames in, kio request objects out; kio responses in, frames out.

No sockets, no asyncio, no files: the broker's server feeds a ``ServerConnection`` and
writes what it returns (h11's design). Message bodies are kio's dataclasses.
"""

from __future__ import annotations

from kcli.protocol.api import (
    KAFKA_RELEASE,
    SUPPORTED_APIS,
    ApiKey,
    SupportedApi,
    advertised_versions,
    fetch_record_magic,
    flexible_request_header,
    is_flexible,
    is_supported,
    request_header_version,
    response_header_version,
)
from kcli.protocol.codec import (
    Request,
    api_name,
    api_versions_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)
from kcli.protocol.connection import (
    DEFAULT_MAX_FRAME_BYTES,
    NEED_DATA,
    ClientConnection,
    InFlight,
    NeedData,
    Response,
    ServerConnection,
)
from kcli.protocol.errors import (
    FrameTooLargeError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from kcli.protocol.legacy import (
    LEGACY_VERSIONS,
    build_entity,
    is_legacy,
    request_schema,
    response_schema,
    response_types,
)
from kcli.protocol.minimal import minimal_request
from kcli.protocol.requests import requested_topics

__all__ = [
    "ClientConnection",
    "InFlight",
    "Response",
    "DEFAULT_MAX_FRAME_BYTES",
    "KAFKA_RELEASE",
    "LEGACY_VERSIONS",
    "NEED_DATA",
    "SUPPORTED_APIS",
    "ApiKey",
    "FrameTooLargeError",
    "LocalProtocolError",
    "NeedData",
    "ProtocolError",
    "RemoteProtocolError",
    "Request",
    "ServerConnection",
    "SupportedApi",
    "UnsupportedVersionError",
    "advertised_versions",
    "api_name",
    "build_entity",
    "api_versions_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "fetch_record_magic",
    "flexible_request_header",
    "is_flexible",
    "is_legacy",
    "is_supported",
    "minimal_request",
    "request_header_version",
    "request_schema",
    "requested_topics",
    "response_header_version",
    "response_schema",
    "response_types",
]
