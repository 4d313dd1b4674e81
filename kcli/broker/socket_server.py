"""SocketServer: the network edge, the only broker module that touches sockets (Kafka's SocketServer).

Per connection: whole frames from the stream -> ServerConnection (frame checks and decoding) -> KafkaApis ->
response frame.
Requests of one connection are answered in order, one at a time, as Kafka does (it mutes a channel until
its response is sent). Fetch responses carry open segment files, sent with sendfile (zero-copy).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from kcli.broker.handlers.common import CloseConnection
from kcli.broker.kafka_apis import KafkaApis
from kcli.protocol import ApiKey, LocalProtocolError, ProtocolError, ServerConnection, UnsupportedVersionError, api_versions_response

log = logging.getLogger("kcli.broker")

_STREAM_LIMIT = 1 << 20


class SocketServer:
    def __init__(self, apis: KafkaApis, *, max_frame_bytes: int) -> None:
        self.apis = apis
        self.max_frame_bytes = max_frame_bytes
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        self.bound: list[tuple[str, int]] = []
        # (api, version) -> [requests, client software names]: the version ledger's evidence
        self.served: dict[tuple[str, int], list[Any]] = {}

    async def start(self, listeners: list[tuple[str, int]]) -> None:
        keep_large_buffers_in_heap()
        for host, port in listeners:
            # The stream's buffer limit: a frame of up to 2x this is read without pausing the transport once
            # per 256 KiB read (producers send batches of up to about 1 MiB).
            server = await asyncio.start_server(self._serve_connection, host, port, reuse_address=True,
                                                limit=_STREAM_LIMIT)
            self._servers.append(server)
            for sock in server.sockets:
                self.bound.append(sock.getsockname()[:2])

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers:
            await server.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        conn = ServerConnection(max_frame_bytes=self.max_frame_bytes)
        if isinstance(getattr(writer.transport, "max_size", None), int):
            # asyncio's selector transport reads at most 256 KiB per recv; a 1 MiB produce then takes four
            # rounds of the event loop (and four wake-ups of the reading task) instead of one.
            writer.transport.max_size = _STREAM_LIMIT  # type: ignore[attr-defined]
        try:
            while True:
                # Whole frames straight from the stream's buffer: the size prefix (checked before the frame is
                # read), then the frame, one copy; EOF, even inside a frame, ends the connection.
                try:
                    size = conn.frame_size(await reader.readexactly(4))
                    data = await reader.readexactly(size)
                except asyncio.IncompleteReadError:
                    return
                try:
                    request = conn.receive_frame(data)
                except UnsupportedVersionError as exc:
                    if exc.response is None:
                        raise
                    writer.write(exc.response)  # ApiVersions too new: our ranges in the v0 layout (KIP-511)
                    continue
                del data
                frame = await self._answer(conn, request, peer[0] if peer else "")
                if frame is None:
                    continue
                if isinstance(frame, list):
                    await self._send_parts(writer, frame)
                else:
                    writer.write(frame)
                await writer.drain()
                # One request per connection per turn, as Kafka's processors serve them: a client pipelining
                # produces would otherwise be answered a whole buffer (1 MiB of requests) before anyone else.
                await asyncio.sleep(0)
        except CloseConnection as exc:  # Kafka's closeConnection: e.g. an acks=0 produce that failed
            log.info("closing connection from %s: %s", peer, exc)
        except ProtocolError as exc:
            # Malformed frames close this connection only; everyone else is served on.
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a handler bug must cost one connection, never the broker
            log.exception("internal error serving %s; closing the connection", peer)
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _answer(self, conn: ServerConnection, request: Any, client_host: str) -> bytes | list[Any] | None:
        entry = self.served.setdefault((request.api_key.name, request.api_version), [0, set()])
        entry[0] += 1
        entry[1].add(_client_family(request.client_id))
        if request.api_key == ApiKey.API_VERSIONS:
            return conn.send(request, api_versions_response(version=request.api_version))
        try:
            response = await self.apis.handle(request.api_key, request.api_version, request.body,
                                              client_id=request.client_id or "", client_host=client_host,
                                              correlation_id=request.correlation_id)
        except LookupError:  # advertised but unhandled would be a bug: cost the connection, not the broker
            raise LocalProtocolError(f"no handler for {request.name}", request=request.name,
                                     correlation_id=request.correlation_id) from None
        if response is None:
            return None
        if request.api_key == ApiKey.FETCH:
            return conn.send_parts(request, response)
        return conn.send(request, response)

    async def _send_parts(self, writer: asyncio.StreamWriter, parts: list[Any]) -> None:
        """Bytes through the stream; open segment regions with sendfile. Every region is closed afterwards,
        sent or not.

        The bytes between regions go in one write (the size prefix and the fields before the records: one send,
        not two). TCP_CORK around the whole response measured no better in bench/bench_rdkafka.py."""
        loop = asyncio.get_running_loop()
        try:
            pending: list[Any] = []
            for part in parts:
                if isinstance(part, (bytes, bytearray, memoryview)):
                    pending.append(part)
                    continue
                if pending:
                    writer.write(b"".join(pending))
                    pending.clear()
                await writer.drain()
                with part.opened() as segment:
                    await _sendfile(loop, writer, segment, part.position, part.length)
            if pending:
                writer.write(b"".join(pending))
        finally:
            for part in parts:
                close = getattr(part, "close", None)
                if close is not None:
                    close()


async def _sendfile(loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter, segment: Any, offset: int,
                    count: int) -> None:
    """``loop.sendfile`` of a file region, with os.sendfile straight away while the transport has nothing
    buffered and the socket takes it all (the usual case: 1 MiB into a loopback or LAN socket). asyncio's
    sendfile pauses and resumes reading, stats the file and waits on futures for every region; what the socket
    does not take at once still goes through it."""
    sock = writer.get_extra_info("socket")
    if sock is not None and writer.transport.get_write_buffer_size() == 0:
        out, src = sock.fileno(), segment.fileno()
        while count > 0:
            try:
                sent = os.sendfile(out, src, offset, count)
            except (BlockingIOError, InterruptedError):
                break
            if sent <= 0:  # the file ended early: asyncio's path reports it
                break
            offset += sent
            count -= sent
    if count > 0:
        await loop.sendfile(writer.transport, segment, offset, count)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_allocator_tuned = False


def keep_large_buffers_in_heap() -> None:
    """glibc: serve allocations up to 32 MiB from the heap and keep up to 64 MiB of free heap, once per process.

    Every request frame, and the copies made of it, is one allocation of its size (about 1 MiB for a producer's
    batch). glibc's default gives such blocks fresh pages (mmap, or a heap grown after a trim) unless its
    dynamic threshold happened to rise earlier in the process, and the first touch of each 4 KiB page is then
    a page fault: 500-700 faults per MiB produced, doubling the broker's CPU per MiB in one process and not in
    another. Fixed thresholds make it the same in every process. Elsewhere (musl, macOS) nothing happens."""
    global _allocator_tuned
    if _allocator_tuned:
        return
    _allocator_tuned = True
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest on 64-bit
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)


def _client_family(client_id: str | None) -> str:
    """librdkafka names clients rdkafka by default; kafka-python kafka-python-<version>; kcat 'rdkafka' too."""
    text = (client_id or "").lower()
    for family in ("kafka-python", "rdkafka", "kcat", "aiokafka", "console-consumer", "adminclient", "producer"):
        if family in text:
            return family
    return client_id or "(none)"
