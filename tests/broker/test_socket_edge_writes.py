"""The socket edge's buffer writes (kcli.broker.socket_server._write_buffers): a Fetch response's bytes and a
remote read's records buffer go to a real loopback socket without being joined, in order, whole, also when the
socket takes only part of them and when the transport already holds unsent bytes. The reader is slow on purpose
(a small send buffer, and the client reads only after the writes), so the partial sends happen whatever the machine's speed."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kcli.broker.socket_server import _unsent, _write_buffers


def test_unsent_cuts_the_buffer_in_the_middle_as_a_view():
    a, b, c = b"abc", b"defgh", b"ij"
    assert _unsent([a, b, c], 0) == [a, b, c]
    assert _unsent([a, b, c], 3) == [b, c]
    rest = _unsent([a, b, c], 5)
    assert isinstance(rest[0], memoryview) and bytes(rest[0]) == b"fgh" and rest[1] is c
    assert _unsent([a, b, c], 10) == []


async def _exchange(writes, *, tls: bool) -> tuple[bytes, list[int]]:
    """The bytes the client got, and what the transport held unsent after each write."""
    received = bytearray()
    done = asyncio.Event()
    held: list[int] = []

    async def serve(reader, writer):
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)  # the socket takes little at once
        for buffers in writes:
            _write_buffers(writer, list(buffers), tls)
            held.append(writer.transport.get_write_buffer_size())
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while chunk := await reader.read(65536):
            received += chunk
        writer.close()
        await asyncio.wait_for(done.wait(), 30)
    finally:
        server.close()
        await server.wait_closed()
    return bytes(received), held


@pytest.mark.parametrize("tls", [False, True])
def test_buffers_arrive_whole_and_in_order_when_the_socket_takes_part(tls):
    big = bytes(range(256)) * 16384  # 4 MiB: more than the socket takes before the client reads
    writes = [
        [b"\x00\x00\x00\x10", b"header", memoryview(big)[3:], b"tail"],
        [b"second-response"],  # the transport holds the first one's rest: this one must queue behind it
        [b"x" * 10, memoryview(big)[:100_000], b"y" * 600 * 1024],
    ]
    got, held = asyncio.run(_exchange(writes, tls=tls))
    assert held[0] > 0  # the socket took part of the first response: the rest waited in the transport
    assert got == b"".join(bytes(b) for buffers in writes for b in buffers)


def test_many_buffers_go_in_several_writevs():
    pieces = [bytes([i % 251]) * (i % 7 + 1) for i in range(2000)]  # more than one writev's IOV_MAX
    got, _ = asyncio.run(_exchange([pieces], tls=False))
    assert got == b"".join(pieces)


def test_buffers_queue_behind_what_the_transport_holds_even_when_the_socket_has_room():
    """The transport holds the rest of one response; the client then reads everything the socket had, so the
    socket has room again before the transport's own write callback runs: the next response's buffers must queue
    behind the transport's bytes, not go straight to the socket ahead of them."""

    async def run() -> tuple[bytes, bytes]:
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            accepted.set_result(writer)
            await asyncio.sleep(3600)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        client = socket.socket()
        client.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(client, server.sockets[0].getsockname())
            writer = await accepted
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
            received = bytearray()

            def read_what_is_there() -> None:  # no await: the transport's write callback cannot run meanwhile
                while True:
                    try:
                        chunk = client.recv(1 << 20)
                    except BlockingIOError:
                        return
                    received.extend(chunk)

            first = [b"one:", bytes(range(256)) * 4096]
            _write_buffers(writer, first, False)
            assert writer.transport.get_write_buffer_size() > 0
            read_what_is_there()
            second = [b"two:", b"z" * 1000]
            _write_buffers(writer, second, False)
            expected = b"".join(first + second)
            while len(received) < len(expected):
                received.extend(await asyncio.get_running_loop().sock_recv(client, 1 << 20))
            writer.close()
            return bytes(received), expected
        finally:
            client.close()
            server.close()

    got, expected = asyncio.run(run())
    assert got == expected

