"""The metrics endpoint: ``GET /metrics`` over HTTP/1.1 on metrics.http.listener, in Prometheus' text format
(kcli.broker.metrics renders it). It runs on the broker's event loop beside the Kafka listeners: one short request
per connection, answered from counters already kept, then the connection is closed."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

log = logging.getLogger("kcli.broker")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text exposition format
_URL = re.compile(r"^http://\[?([0-9a-zA-Z\-%._:]+?)\]?:([0-9]+)/?$")
_REQUEST_TIMEOUT_S = 10.0
_MAX_HEAD = 16 * 1024


def parse_listener(url: str) -> tuple[str, int]:
    """``http://host:port`` -> (host, port); the config check has refused anything else."""
    match = _URL.match(url.strip())
    if match is None:
        raise ValueError(f"metrics.http.listener {url!r} is not http://host:port")
    return match.group(1), int(match.group(2))


class MetricsEndpoint:
    def __init__(self, url: str, render: Callable[[], str]) -> None:
        self.host, self.port = parse_listener(url)
        self.render = render
        self.bound: list[tuple[str, int]] = []
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True,
                                                  limit=_MAX_HEAD)
        self.bound = [sock.getsockname()[:2] for sock in self._server.sockets]
        log.info("metrics at %s", ", ".join(f"http://{h}:{p}/metrics" for h, p in self.bound))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split(" ")
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, body, extra = "405 Method Not Allowed", b"only GET\n", "Allow: GET, HEAD\r\n"
            elif path != "/metrics":
                status, body, extra = "404 Not Found", b"metrics are at /metrics\n", ""
            else:
                status, body, extra = "200 OK", self.render().encode(), ""
            content_type = CONTENT_TYPE if status.startswith("200") else "text/plain; charset=utf-8"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                         f"{extra}Connection: close\r\n\r\n".encode("latin-1"))
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:  # a bug costs this scrape, never the broker
            log.exception("serving /metrics failed")
        finally:
            writer.close()
