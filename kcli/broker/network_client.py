"""A broker's requests to another broker over the Kafka protocol (Kafka's NetworkClient as the broker uses
it): an asyncio transport around the sans-io ``kcli.protocol.ClientConnection``, which owns the framing, the
maximum frame size, the correlation ids and the matching of responses to requests. ``BrokerConnection`` is one
open connection (the replica fetchers keep theirs open); ``send_request`` opens one, exchanges once and closes
it (controlled shutdown, transaction markers)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kcli.broker.security.inter_broker import (
    PLAINTEXT_INTER_BROKER,
    InterBrokerAuthenticationError,
    InterBrokerSecurity,
)
from kcli.protocol import ApiKey
from kcli.protocol.codec import SIZE_PREFIX
from kcli.protocol.connection import ClientConnection
from kcli.protocol.errors import ProtocolError
from kcli.protocol.security import SaslAuthenticationFailed, reauth_deadline, sasl_exchange


class BrokerConnection:
    """One connection to another broker, one request at a time (the inter-broker senders never pipeline)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, client_id: str,
                 peer: str | None = None, security: InterBrokerSecurity = PLAINTEXT_INTER_BROKER) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = ClientConnection(client_id, peer=peer)
        self.security = security
        self._reauth_at: float | None = None

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout: float,
                   security: InterBrokerSecurity = PLAINTEXT_INTER_BROKER) -> BrokerConnection:
        """Connect within ``timeout`` seconds, with the inter-broker listener's TLS and SASL (TimeoutError /
        OSError otherwise; a refused login is an InterBrokerAuthenticationError, a ConnectionError)."""
        context = security.ssl_context()
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host, port, **({} if context is None else dict(ssl=context, server_hostname=host,
                                                                 ssl_handshake_timeout=timeout)))
        connection = cls(reader, writer, client_id=client_id, peer=f"{host}:{port}", security=security)
        if security.sasl:
            try:
                await connection.authenticate(timeout)
            except BaseException:
                connection.close()
                raise
        return connection

    async def authenticate(self, timeout: float) -> None:
        """SaslHandshake + SaslAuthenticate (again on an open connection before the session expires, KIP-368)."""
        self._reauth_at = None
        exchange = sasl_exchange(self.security.security, peer=f"broker at {self.protocol.peer}")
        try:
            step = next(exchange)
            while True:
                response = await self.exchange(*step, timeout=timeout)
                step = exchange.send(response)
        except StopIteration as done:
            self._reauth_at = reauth_deadline(time.monotonic(), done.value)
        except SaslAuthenticationFailed as exc:
            raise InterBrokerAuthenticationError(exc.reason) from None

    async def exchange(self, api_key: ApiKey, version: int, body: Any, *, timeout: float) -> Any:
        """Send one request and read its response. The request must be sent, and the response must start, within
        ``timeout`` seconds, and no stretch of the response may take longer to arrive: a connection that stalls
        (a peer cut off by the network, whose TCP retransmissions back off for tens of seconds after it heals)
        is given up rather than waited for. asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel.
        Raises TimeoutError on a stall, ConnectionError on an answer out of turn or that does not decode (the
        connection is then unusable: close it)."""
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            await self.authenticate(timeout)
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
                       timeout: float, security: InterBrokerSecurity = PLAINTEXT_INTER_BROKER) -> Any:
    """One request/response exchange on a new connection within ``timeout`` seconds; raises OSError /
    TimeoutError / ConnectionError when the broker cannot be reached, refuses the login or answers out of turn."""
    async with asyncio.timeout(timeout):
        connection = await BrokerConnection.open(host, port, client_id=client_id, timeout=timeout, security=security)
        try:
            return await connection.exchange(api_key, version, body, timeout=timeout)
        finally:
            connection.close()
