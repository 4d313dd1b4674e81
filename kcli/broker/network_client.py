"""A broker's requests to another broker over the Kafka protocol (Kafka's NetworkClient as the broker uses
it): an asyncio transport around the sans-io ``kcli.protocol.ClientConnection``, which owns the framing, the
maximum frame size, the correlation ids and the matching of responses to requests. ``BrokerConnection`` is one
open connection (the replica fetchers keep theirs open); ``send_request`` opens one, exchanges once and closes
it (controlled shutdown, transaction markers)."""

from __future__ import annotations

import asyncio
from typing import Any

from kcli.protocol import ApiKey
from kcli.protocol.codec import SIZE_PREFIX
from kcli.protocol.connection import ClientConnection
from kcli.protocol.errors import ProtocolError


class BrokerConnection:
    """One connection to another broker, one request at a time (the inter-broker senders never pipeline)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, client_id: str,
                 peer: str | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = ClientConnection(client_id, peer=peer)

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout: float) -> BrokerConnection:
        """Connect within ``timeout`` seconds (TimeoutError / OSError otherwise)."""
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id=client_id, peer=f"{host}:{port}")

    async def exchange(self, api_key: ApiKey, version: int, body: Any, *, timeout: float) -> Any:
        """Send one request and read its response. The request must be sent, and the response must start, within
        ``timeout`` seconds, and no stretch of the response may take longer to arrive: a connection that stalls
        (a peer cut off by the network, whose TCP retransmissions back off for tens of seconds after it heals)
        is given up rather than waited for. asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel.
        Raises TimeoutError on a stall, ConnectionError on an answer out of turn or that does not decode (the
        connection is then unusable: close it)."""
        _, frame = self.protocol.send_request(api_key, version, body)
        self.writer.write(frame)
        async with asyncio.timeout(timeout):
            await self.writer.drain()
        try:
            async with asyncio.timeout(timeout):
                size = self.protocol.frame_size(await self.reader.readexactly(SIZE_PREFIX.size))
            return self.protocol.receive_frame(await _read_frame(self.reader, size, timeout)).body
        except ProtocolError as exc:
            raise ConnectionError(str(exc)) from exc

    def close(self) -> None:
        self.writer.close()


async def _read_frame(reader: asyncio.StreamReader, size: int, idle_timeout: float) -> bytes:
    """``size`` bytes, each read arriving within ``idle_timeout``: a large response on a slow link may take
    longer as a whole, as long as it keeps coming."""
    buffer = bytearray()
    while len(buffer) < size:
        async with asyncio.timeout(idle_timeout):
            chunk = await reader.read(size - len(buffer))
        if not chunk:
            raise asyncio.IncompleteReadError(bytes(buffer), size)
        if len(chunk) == size:
            return chunk  # all of it at once, the usual case: no copy
        buffer += chunk
    return bytes(buffer)


async def send_request(host: str, port: int, api_key: ApiKey, version: int, body: Any, *, client_id: str,
                       timeout: float) -> Any:
    """One request/response exchange on a new connection within ``timeout`` seconds; raises OSError /
    TimeoutError / ConnectionError when the broker cannot be reached or answers out of turn."""
    async with asyncio.timeout(timeout):
        connection = await BrokerConnection.open(host, port, client_id=client_id, timeout=timeout)
        try:
            return await connection.exchange(api_key, version, body, timeout=timeout)
        finally:
            connection.close()
