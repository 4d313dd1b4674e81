"""Protocol exceptions: who broke the rules (h11's Local/Remote split) and what to tell the peer.

Wire error codes are kio's ``kio.schema.errors.ErrorCode``; these classes are the
``KcliError`` side, mapped to codes only by the broker's dispatcher.
"""

from __future__ import annotations

from kcli.errors import KcliError


class ProtocolError(KcliError):
    """A Kafka wire-protocol violation on one connection.

    ``request`` names the request (``"ProduceRequest v9"``) and ``field`` the dotted path
    of the field that did not decode (``"topic_data[0].partition_data[1].records"``),
    when known; ``position`` is the byte offset inside the request frame.
    """

    def __init__(
        self,
        reason: str,
        *,
        request: str | None = None,
        field: str | None = None,
        position: int | None = None,
        correlation_id: int | None = None,
    ) -> None:
        self.request = request
        self.field = field
        self.correlation_id = correlation_id
        super().__init__(reason, path=request, position=position)

    def describe(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.correlation_id is not None:
            where.append(f"correlation id {self.correlation_id}")
        if self.field is not None:
            where.append(f"field {self.field}")
        if self.position is not None:
            where.append(f"byte {self.position}")
        return f"{', '.join(where)}: {self.reason}" if where else self.reason


class RemoteProtocolError(ProtocolError):
    """The peer sent something illegal: Kafka closes the connection (after ``response``, if any)."""


class LocalProtocolError(ProtocolError):
    """We tried to send something illegal: a bug on our side, never the peer's fault."""


class FrameTooLargeError(RemoteProtocolError):
    """A size prefix above socket.request.max.bytes (Kafka's InvalidReceiveException)."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        self.size = size
        self.max_frame_bytes = max_frame_bytes
        super().__init__(
            f"frame of {size} bytes exceeds socket.request.max.bytes={max_frame_bytes}", position=0)


class UnsupportedVersionError(RemoteProtocolError):
    """An API key or version outside the advertised table.

    ``response`` is the complete frame to write back when Kafka answers instead of
    disconnecting: an ApiVersions request of a version we do not know gets
    UNSUPPORTED_VERSION in the v0 layout, listing our ranges (KIP-511), and the
    connection stays usable. For every other API ``response`` is None and the broker
    closes the connection, as Kafka does.
    """

    def __init__(
        self,
        reason: str,
        *,
        api_key: int,
        api_version: int,
        correlation_id: int,
        request: str | None = None,
        client_id: str | None = None,
        response: bytes | None = None,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id
        self.response = response
        super().__init__(reason, request=request, correlation_id=correlation_id)
