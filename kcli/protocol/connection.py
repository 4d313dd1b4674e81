"""ServerConnection: the broker side of one Kafka connection, bytes in and requests out (h11-style).

It owns the 4-byte size framing, the maximum frame size and the order of responses.
No sockets here: the caller feeds ``receive_data`` and writes what ``send`` returns.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any, Final, Literal

from kcli.protocol.codec import SIZE_PREFIX, Request, decode_request, encode_response, encode_response_parts
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


class ServerConnection:
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
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0
        self._awaiting: deque[Request] = deque()
        self._error: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a returned request (a partial frame at EOF)."""
        return len(self._buffer) - self._start

    @property
    def awaiting_response(self) -> int:
        """Requests returned by ``next_request`` whose response has not been sent."""
        return len(self._awaiting)

    @property
    def error(self) -> ProtocolError | None:
        """The error that made this connection unusable, if any."""
        return self._error

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the socket; decoding happens in ``next_request``."""
        if self._error is None:
            self._buffer += data

    def next_request(self) -> Request | Literal[NeedData.NEED_DATA]:
        """The next complete request, or ``NEED_DATA`` until a whole frame is buffered."""
        if self._error is not None:
            raise LocalProtocolError(f"connection unusable after: {self._error}")
        if self.buffered_bytes < SIZE_PREFIX.size:
            return NEED_DATA
        size = self._checked_size(SIZE_PREFIX.unpack_from(self._buffer, self._start)[0])
        end = self._start + SIZE_PREFIX.size + size
        if len(self._buffer) < end:
            return NEED_DATA
        with memoryview(self._buffer) as view:
            frame = bytes(view[self._start + SIZE_PREFIX.size:end])
        self._consume(end)
        return self.receive_frame(frame)

    # A caller that reads whole frames itself (the broker's socket edge: one copy of each frame fewer than
    # receive_data + next_request) uses these two instead, with the same checks and the same order.
    def frame_size(self, prefix: bytes) -> int:
        """The size a frame's 4-byte size prefix announces; a negative or too large one is a ProtocolError
        (before any of the frame is read), as in ``next_request``."""
        if self._error is not None:
            raise LocalProtocolError(f"connection unusable after: {self._error}")
        return self._checked_size(SIZE_PREFIX.unpack(prefix)[0])

    def _checked_size(self, size: int) -> int:
        if size < 0:
            raise self._fail(RemoteProtocolError(f"negative frame size {size}", position=0))
        if size > self.max_frame_bytes:
            raise self._fail(FrameTooLargeError(size, self.max_frame_bytes))
        return size

    def receive_frame(self, frame: bytes) -> Request:
        """The request in one whole frame (the bytes after its size prefix), as ``next_request`` returns it."""
        if self._error is not None:
            raise LocalProtocolError(f"connection unusable after: {self._error}")
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

    def _consume(self, end: int) -> None:
        self._start = end
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif self._start > _COMPACT_AFTER and self._start * 2 > len(self._buffer):
            del self._buffer[:self._start]
            self._start = 0

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._error = error
        self._buffer = bytearray()
        self._start = 0
        return error
