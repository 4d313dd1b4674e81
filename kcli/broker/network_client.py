"""A broker's one-off requests to another broker over the Kafka protocol (Kafka's NetworkClient as the
broker uses it outside the replica fetchers): open, send one request, read its response, close."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from kcli.protocol import ApiKey
from kcli.protocol.codec import decode_response, encode_request

SIZE = struct.Struct(">i")
_correlation = itertools.count(1)


async def send_request(host: str, port: int, api_key: ApiKey, version: int, body: Any, *, client_id: str,
                       timeout: float) -> Any:
    """One request/response exchange within ``timeout`` seconds; raises OSError / asyncio.TimeoutError /
    ConnectionError when the broker cannot be reached or answers out of turn."""
    async def exchange() -> Any:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            correlation = next(_correlation)
            writer.write(encode_request(api_key, version, correlation, client_id, body))
            await writer.drain()
            size = SIZE.unpack(await reader.readexactly(4))[0]
            got, response = decode_response(api_key, version, await reader.readexactly(size))
            if got != correlation:
                raise ConnectionError(f"response correlation id {got}, expected {correlation}")
            return response
        finally:
            writer.close()

    async with asyncio.timeout(timeout):
        return await exchange()
