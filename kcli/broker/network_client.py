"""A broker's requests to another broker over the Kafka protocol (Kafka's NetworkClient as the broker uses
it): ``exchange`` is one request/response on an open connection (the replica fetchers keep theirs open);
``send_request`` opens, exchanges once and closes (controlled shutdown, transaction markers)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from kcli.protocol import ApiKey
from kcli.protocol.codec import decode_response, encode_request

SIZE = struct.Struct(">i")
_correlation = itertools.count(1)


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: ApiKey, version: int,
                   body: Any, *, client_id: str, timeout: float) -> Any:
    """Send one request and read its response. The request must be sent, and the response must start, within
    ``timeout`` seconds, and no stretch of the response may take longer to arrive: a connection that stalls (a
    peer cut off by the network, whose TCP retransmissions back off for tens of seconds after it heals) is given
    up rather than waited for. asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel. Raises
    TimeoutError on a stall, ConnectionError on an out-of-turn answer."""
    correlation = next(_correlation)
    writer.write(encode_request(api_key, version, correlation, client_id, body))
    async with asyncio.timeout(timeout):
        await writer.drain()
    async with asyncio.timeout(timeout):
        size = SIZE.unpack(await reader.readexactly(4))[0]
    frame = await _read_frame(reader, size, timeout)
    got, response = decode_response(api_key, version, frame)
    if got != correlation:
        raise ConnectionError(f"response correlation id {got}, expected {correlation}")
    return response


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
        reader, writer = await asyncio.open_connection(host, port)
        try:
            return await exchange(reader, writer, api_key, version, body, client_id=client_id, timeout=timeout)
        finally:
            writer.close()
