"""The two ends of one Kafka connection, sans-io (h11's shape; kafka-python's ``KafkaProtocol``).

``ServerConnection``, the broker side: bytes in, requests out; responses in, bytes out, in request order.
``ClientConnection``, the client side (kcli's admin client, the inter-broker fetchers and senders, the
controller's request threads): requests in, bytes out with a correlation id each; bytes in, responses out,
matched to their requests. Both own the 4-byte size framing and the maximum frame size. No sockets here:
the caller feeds ``receive_data`` (or whole frames) and writes what ``send``/``send_request`` return.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any, Final, Literal

from dataclasses import dataclass

from kcli.protocol.codec import (
    SIZE_PREFIX,
    Request,
    api_name,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)
from kcli.protocol.errors import (
    FrameTooLargeError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)

# socket.request.max.bytes default (Kafka's SocketServerConfigs): a size prefix above it is
# refused before any of the frame is buffered, so a forged length cannot make us allocate.
DEFAULT_MAX_FRAME_BYTES: Final = 104857600

# Consumed bytes are dropped from the front of the buffer once they pass this much (and half
# the buffer), so many small pipelined frames cost O(bytes) and not O(frames x buffer).
_COMPACT_AFTER: Final = 64 * 1024


class NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


class _Framing:
    """What both ends share: the receive buffer, the 4-byte size framing with its maximum, and the error that
    made the connection unusable."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0
        self._error: ProtocolError | None = None

    @property
    def error(self) -> ProtocolError | None:
        """The error that made this connection unusable, if any."""
        return self._error

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a returned frame (a partial frame at EOF)."""
        return len(self._buffer) - self._start

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the socket; frames are taken in ``next_request`` / ``next_response``."""
        if self._error is None:
            self._buffer += data

    def frame_size(self, prefix: bytes) -> int:
        """The size a frame's 4-byte size prefix announces; a negative or too large one is a ProtocolError
        (before any of the frame is read)."""
        self._check_usable()
        return self._checked_size(SIZE_PREFIX.unpack(prefix)[0])

    def _checked_size(self, size: int) -> int:
        """``size`` if a frame may have it: a negative one, or one above ``max_frame_bytes``, makes the
        connection unusable (the client side names its peer and also wants a request in flight)."""
        if size < 0:
            raise self._fail(RemoteProtocolError(f"negative frame size {size}", position=0))
        if size > self.max_frame_bytes:
            raise self._fail(FrameTooLargeError(size, self.max_frame_bytes))
        return size

    def _next_frame(self) -> bytes | None:
        """The next whole frame from the buffer (the bytes after its size prefix), or None until one is in."""
        self._check_usable()
        if self.buffered_bytes < SIZE_PREFIX.size:
            return None
        size = self._checked_size(SIZE_PREFIX.unpack_from(self._buffer, self._start)[0])
        end = self._start + SIZE_PREFIX.size + size
        if len(self._buffer) < end:
            return None
        with memoryview(self._buffer) as view:
            frame = bytes(view[self._start + SIZE_PREFIX.size:end])
        self._start = end
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif self._start > _COMPACT_AFTER and self._start * 2 > len(self._buffer):
            del self._buffer[:self._start]
            self._start = 0
        return frame

    def _check_usable(self) -> None:
        if self._error is not None:
            raise LocalProtocolError(f"connection unusable after: {self._error}")

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._error = error
        self._buffer = bytearray()
        self._start = 0
        return error


class ServerConnection(_Framing):
    """Frames and decodes requests; encodes responses in the order the requests arrived.

    Kafka answers the requests of one connection strictly in order (its socket server mutes
    the channel while a request is in flight), and clients match answers by that order as
    much as by correlation id. ``send`` therefore only accepts the oldest request still
    awaiting a response. Produce with acks=0 awaits none (``Request.expects_response``).

    After a ``ProtocolError`` the connection is unusable and the broker closes it, except
    for an ``UnsupportedVersionError`` carrying a ``response`` (an ApiVersions version we
    do not know): write that frame and carry on.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        super().__init__(max_frame_bytes)
        self._awaiting: deque[Request] = deque()

    @property
    def awaiting_response(self) -> int:
        """Requests returned by ``next_request`` whose response has not been sent."""
        return len(self._awaiting)

    def next_request(self) -> Request | Literal[NeedData.NEED_DATA]:
        """The next complete request, or ``NEED_DATA`` until a whole frame is buffered."""
        frame = self._next_frame()
        return NEED_DATA if frame is None else self.receive_frame(frame)

    # A caller that reads whole frames itself (the broker's socket edge: one copy of each frame fewer than
    # receive_data + next_request) uses ``frame_size`` and ``receive_frame``, with the same checks and order.

    def receive_frame(self, frame: bytes) -> Request:
        """The request in one whole frame (the bytes after its size prefix), as ``next_request`` returns it."""
        self._check_usable()
        try:
            request = decode_request(frame)
        except UnsupportedVersionError as e:
            if e.response is None:
                self._fail(e)
            raise
        except ProtocolError as e:
            self._fail(e)
            raise
        if request.expects_response:
            self._awaiting.append(request)
        return request

    def send(self, request: Request, response_body: Any) -> bytes:
        """The response frame for ``request``, which must be the oldest awaiting a response."""
        self._check_next(request)
        data = encode_response(request, response_body)
        self._awaiting.popleft()
        return data

    def send_parts(self, request: Request, response_body: Any) -> list[Any]:
        """``send`` for responses carrying file regions: bytes and regions, in wire order."""
        self._check_next(request)
        parts = encode_response_parts(request, response_body)
        self._awaiting.popleft()
        return parts

    def _check_next(self, request: Request) -> None:
        if self._awaiting and self._awaiting[0] is request:
            return
        if any(r is request for r in self._awaiting):
            reason = "responses must follow request order; an earlier request is still unanswered"
        elif not request.expects_response:
            reason = "Produce with acks=0 gets no response"
        else:
            reason = "no such request awaits a response on this connection"
        raise LocalProtocolError(reason, request=request.name, correlation_id=request.correlation_id)


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request sent on a ``ClientConnection`` whose response has not arrived yet."""

    api_key: int
    api_version: int
    correlation_id: int

    @property
    def name(self) -> str:
        return f"{api_name(self.api_key)}Request v{self.api_version}"


@dataclass(frozen=True, slots=True)
class Response:
    """A response matched to its request."""

    request: InFlight
    body: Any


class ClientConnection(_Framing):
    """Frames requests with increasing correlation ids; decodes each response with the schema of the request it
    answers.

    A Kafka broker answers the requests of one connection in the order they were sent (its socket server mutes
    the channel while one is in flight), so the oldest request in flight is the one a response answers; a
    response carrying another correlation id, a negative or oversized frame or one that does not decode is a
    ``RemoteProtocolError`` and the connection is unusable (the caller closes it), as in Kafka's NetworkClient
    ("Correlation id for response does not match request"). Produce with acks=0 gets no response
    (``expects_response=False``).
    """

    def __init__(self, client_id: str | None, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 peer: str | None = None) -> None:
        super().__init__(max_frame_bytes)
        self.client_id = client_id
        self.peer = peer  # for messages: "broker 2 at host:port"
        self._correlation = 0
        self._in_flight: deque[InFlight] = deque()

    @property
    def in_flight(self) -> int:
        """Requests sent whose response has not been returned."""
        return len(self._in_flight)

    def send_request(self, api_key: int, api_version: int, body: Any, *, expects_response: bool = True
                     ) -> tuple[InFlight, bytes]:
        """The request's frame to write, and the request it becomes in flight."""
        self._check_usable()
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF  # a non-negative int32, as Kafka's clients
        request = InFlight(int(api_key), api_version, self._correlation)
        frame = encode_request(api_key, api_version, request.correlation_id, self.client_id, body)
        if expects_response:
            self._in_flight.append(request)
        return request, frame

    def next_response(self) -> Response | Literal[NeedData.NEED_DATA]:
        """The next complete response, or ``NEED_DATA`` until a whole frame is buffered."""
        frame = self._next_frame()
        return NEED_DATA if frame is None else self.receive_frame(frame)

    # For a caller that reads whole frames itself (blocking sockets, asyncio's readexactly): ``frame_size`` and
    # ``receive_frame``, with the same checks.
    def _checked_size(self, size: int) -> int:
        if size < 0:
            raise self._fail(RemoteProtocolError(f"{self._who()} sent a negative frame size {size}", position=0))
        if size > self.max_frame_bytes:
            raise self._fail(RemoteProtocolError(
                f"{self._who()} sent a frame of {size} bytes, above the maximum of {self.max_frame_bytes}",
                position=0))
        if not self._in_flight:
            raise self._fail(RemoteProtocolError(f"{self._who()} sent a response to no request in flight"))
        return size

    def receive_frame(self, frame: bytes | bytearray | memoryview) -> Response:
        """The response in one whole frame (the bytes after its size prefix), matched to the oldest request."""
        self._check_usable()
        if not self._in_flight:
            raise self._fail(RemoteProtocolError(f"{self._who()} sent a response to no request in flight"))
        request = self._in_flight[0]
        try:
            correlation_id, body = decode_response(request.api_key, request.api_version, frame)
        except ProtocolError as e:
            raise self._fail(e) from None
        if correlation_id != request.correlation_id:
            raise self._fail(RemoteProtocolError(
                f"{self._who()} answered correlation id {correlation_id} where {request.correlation_id} was due",
                request=request.name, correlation_id=correlation_id))
        self._in_flight.popleft()
        return Response(request, body)

    def _who(self) -> str:
        return self.peer or "the broker"
