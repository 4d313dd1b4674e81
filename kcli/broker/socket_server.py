"""SocketServer: the network edge, the only broker module that touches sockets (Kafka's SocketServer).

Per listener (kafka-security.md §7.1): TCP -> TLS (SSL, SASL_SSL: the handshake with a timeout; a failure is
logged with the peer's address) -> SASL authentication (SASL_PLAINTEXT, SASL_SSL: kcli.broker.security.authenticator)
-> whole frames from the stream -> ServerConnection (frame checks and decoding) -> KafkaApis, with the connection's
Session (who is asking, on which listener) -> response frame.
Requests of one connection are answered in order, one at a time, as Kafka does (it mutes a channel until
its response is sent), except that Produce requests are pipelined: while one waits for its acks the next is read,
and a Produce is appended at once (kctl.produce.pipeline.depth; _pipeline_produce says why). Fetch responses
carry open segment files, sent with sendfile (zero-copy) on plaintext connections; over TLS the file ranges are read and written through the TLS transport (Kafka's SslTransportLayer).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcli.broker.connection_quotas import (
    ConnectionLimits,
    ConnectionQuotas,
    TooManyConnectionsError,
)
from kcli.broker.handlers.common import CloseConnection
from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.purgatory import request_waiting
from kcli.broker.quotas import RequestCharge
from kcli.broker.security import ANONYMOUS, PLAINTEXT_SESSION, Session
from kcli.broker.security.listener_config import ListenerSecurity
from kcli.protocol import (
    ApiKey,
    LocalProtocolError,
    ProtocolError,
    ServerConnection,
    UnsupportedVersionError,
    api_versions_response,
)

if TYPE_CHECKING:
    from kcli.broker.metrics import BrokerMetrics

log = logging.getLogger("kcli.broker")
security_log = logging.getLogger("kcli.broker.security")

_STREAM_LIMIT = 1 << 20
# Produce pipelining (SocketServer._pipeline_produce): at most this many Produce requests of one connection, and
# this many bytes of them, wait for their acks at a time. librdkafka pipelines up to 1,000,000 requests and the Java
# producer 5; a Python broker under load needs a deep pipeline to keep up with a librdkafka producer's linger.ms.
PRODUCE_PIPELINE_DEPTH = 64  # kctl.produce.pipeline.depth
PRODUCE_PIPELINE_BYTES = 16 << 20
_TLS_READ_CHUNK = 256 * 1024  # file bytes read per write over TLS (Kafka's SslTransportLayer uses 32 KiB buffers)


@dataclass
class ListenerPipeline:
    """What one listener adds before the request loop: TLS (a server context and the DN mapping rules) and SASL."""

    security: ListenerSecurity
    context: ssl.SSLContext | None = None
    mapper: Any = None  # kcli.broker.security.tls.SslPrincipalMapper


def listener_pipeline(security: ListenerSecurity) -> ListenerPipeline:
    if not security.tls:
        return ListenerPipeline(security)
    from kcli.broker.security.tls import SslPrincipalMapper, server_ssl_context

    assert security.ssl is not None
    return ListenerPipeline(security, server_ssl_context(security.ssl, security.listener_name),
                            SslPrincipalMapper.from_rules(security.ssl.principal_mapping_rules))


class SocketServer:
    def __init__(self, apis: KafkaApis, *, max_frame_bytes: int,
                 produce_pipeline_depth: int = PRODUCE_PIPELINE_DEPTH, quotas: ConnectionQuotas | None = None,
                 metrics: BrokerMetrics | None = None) -> None:
        self.apis = apis
        self.max_frame_bytes = max_frame_bytes
        self.quotas = quotas  # None: no limits (made in start, for the counts)
        self.metrics = metrics  # None: metrics off (metrics.http.listener unset)
        self._listening: list[socket.socket] = []
        self._acceptors: list[asyncio.Task] = []
        self._open: dict[asyncio.Task, str] = {}  # every served connection's task -> its listener, oldest first
        self._slot_freed = asyncio.Event()
        self._connections: set[asyncio.Task] = set()
        self.bound: list[tuple[str, int]] = []
        # (api, version) -> [requests, client software names]: the version ledger's evidence
        self.served: dict[tuple[str, int], list[Any]] = {}
        # Produce requests of one connection that may wait for their acks at a time (1: Kafka's one request
        # at a time); see _pipeline_produce
        self.produce_pipeline_depth = produce_pipeline_depth

    async def start(self, listeners: list[tuple[str, int]] | list[tuple[str, int, ListenerSecurity]]) -> None:
        """Bind every listener: (host, port) for PLAINTEXT, or (host, port, ListenerSecurity). TLS contexts are
        built before anything is bound (a bad keystore stops the start naming the listener)."""
        keep_large_buffers_in_heap()
        pipelines = [listener_pipeline(item[2]) if len(item) > 2 else None for item in listeners]  # type: ignore[misc]
        names = [p.security.listener_name if p is not None else "PLAINTEXT" for p in pipelines]
        if self.quotas is None:
            self.quotas = ConnectionQuotas(ConnectionLimits(), names, names[0] if names else "PLAINTEXT")
        loop = asyncio.get_running_loop()
        for item, pipeline, name in zip(listeners, pipelines, names):
            host, port = item[0], item[1]
            if pipeline is None or pipeline.security.security_protocol == "PLAINTEXT":
                session = PLAINTEXT_SESSION if name == "PLAINTEXT" else Session(listener_name=name)

                async def handler(reader, writer, session=session):
                    await self._serve_connection(reader, writer, session)
            else:
                async def handler(reader, writer, pipeline=pipeline):
                    await self._serve_secured(reader, writer, pipeline)
            for sock in await _listen(loop, host, port):
                self._listening.append(sock)
                self.bound.append(sock.getsockname()[:2])
                self._acceptors.append(loop.create_task(self._accept(sock, name, handler)))

    async def stop(self) -> None:
        for task in self._acceptors:
            task.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        for sock in self._listening:
            sock.close()
        for task in list(self._connections | set(self._open)):
            task.cancel()

    def update_limits(self, limits: ConnectionLimits) -> None:
        """New connection limits (a dynamic config change): a waiting acceptor looks again at once (Kafka's
        updateBrokerMaxConnections notifies its acceptors)."""
        if self.quotas is not None:
            self.quotas.update(limits)
            self._slot_freed.set()

    async def _accept(self, sock: socket.socket, listener: str, handler: Any) -> None:
        """Kafka's Acceptor with its ConnectionQuotas: accept one connection, wait (accepting nothing else) while
        the creation rate throttles or no slot is free, then count it; over max.connections.per.ip it is closed
        at once. Until the acceptor accepts again, the kernel's listen backlog holds new connections."""
        loop = asyncio.get_running_loop()
        quotas = self.quotas
        assert quotas is not None
        stats = quotas.listeners[listener]
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:  # EMFILE and the like: Kafka logs and goes on accepting
                log.warning("accepting a connection on listener %s failed: %s", listener, exc)
                await asyncio.sleep(0.1)
                continue
            address = str(peer[0]) if peer else ""
            throttle_ms = quotas.record_creation(listener)
            if throttle_ms > 0 or not quotas.slot_available(listener):
                started = time.monotonic_ns()
                deadline = time.monotonic() + throttle_ms / 1000
                try:
                    while (wait := deadline - time.monotonic()) > 0 or not quotas.slot_available(listener):
                        self._slot_freed.clear()
                        try:
                            await asyncio.wait_for(self._slot_freed.wait(), wait if wait > 0 else None)
                        except TimeoutError:
                            pass
                except BaseException:  # the broker stops: the connection held here goes too
                    conn.close()
                    raise
                stats.blocked_ns += time.monotonic_ns() - started
            try:
                quotas.inc(listener, address)
            except TooManyConnectionsError as exc:
                log.info("%s", exc)  # Kafka's Acceptor: info, and the connection closed at once
                quotas.dec(listener, address)
                conn.close()
                continue
            if quotas.excess_connections():
                self._close_oldest(listener)
            task = loop.create_task(self._serve_accepted(conn, listener, address, handler))
            self._open[task] = listener

    async def _serve_accepted(self, conn: socket.socket, listener: str, address: str, handler: Any) -> None:
        try:
            # The server side of a stream, as asyncio.start_server makes it (start_tls then shakes hands as the
            # server). The stream's buffer limit: a frame of up to 2x this is read without pausing the transport
            # once per 256 KiB read (producers send batches of up to about 1 MiB).
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
            made: asyncio.Future[asyncio.StreamWriter] = loop.create_future()
            protocol = asyncio.StreamReaderProtocol(
                reader, lambda _reader, writer: None if made.done() else made.set_result(writer), loop=loop)
            try:
                await loop.connect_accepted_socket(lambda: protocol, conn)
                writer = await made
            except OSError:
                conn.close()
            else:
                await handler(reader, writer)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._open.pop(task, None)
            assert self.quotas is not None
            self.quotas.dec(listener, address)
            self._slot_freed.set()

    def _close_oldest(self, listener: str) -> None:
        """The protected (inter-broker) listener took a connection over max.connections: close one on another
        listener (Kafka's Processor.closeExcessConnections closes its least recently used; kctl the oldest)."""
        assert self.quotas is not None
        for task, name in self._open.items():
            if name != listener and not self.quotas.protected(name):
                log.info("closing the oldest connection of listener %s: max.connections reached and listener %s "
                         "is exempt", name, listener)
                task.cancel()
                return

    async def _serve_secured(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             pipeline: ListenerPipeline) -> None:
        """TLS, then SASL, then the request loop with the authenticated session; never a traceback."""
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        address = peer[0] if peer else ""
        security = pipeline.security
        try:
            principal = ANONYMOUS
            if pipeline.context is not None:
                try:
                    await writer.start_tls(pipeline.context,
                                           ssl_handshake_timeout=security.authentication_timeout_ms / 1000)
                except (OSError, ssl.SSLError, TimeoutError, ConnectionError, EOFError) as exc:
                    security_log.warning("TLS handshake with %s on listener %s failed: %s", _peer_text(peer),
                                         security.listener_name, exc or type(exc).__name__)
                    return
                if not security.sasl:
                    ssl_object = writer.get_extra_info("ssl_object")
                    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
                    from kcli.broker.security.tls import principal_from_certificate

                    try:
                        principal = principal_from_certificate(der, pipeline.mapper)
                    except (LookupError, ValueError) as exc:
                        security_log.info("Failed authentication with %s (%s)", _peer_text(peer), exc)
                        return
            if security.sasl:
                outcome = await self._authenticate(reader, writer, security, address)
                if outcome is None:
                    return
                session, expiry = outcome
            else:
                session = Session(principal, address, security.listener_name, security.security_protocol)
                expiry = None
            security_log.debug("%s on listener %s is %s", _peer_text(peer), security.listener_name, session.principal)
            await self._serve_connection(reader, writer, session, expiry=expiry, security=security,
                                         tls=pipeline.context is not None, registered=True)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a bug must cost one connection, never the broker
            log.exception("internal error serving %s; closing the connection", peer)
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            security: ListenerSecurity, address: str, first: bytes | None = None,
                            previous: Session | None = None) -> tuple[Session, float | None] | None:
        """The SASL exchange (kafka-security.md §2.1); None when the connection is to be closed. ``first`` and
        ``previous``: a re-authentication that began with the SaslHandshake frame ``first`` (KIP-368)."""
        from kcli.broker.security.authenticator import SaslAuthenticator

        credentials = getattr(self.apis.services, "credentials", None)
        auth = SaslAuthenticator(security, client_address=address, credentials=credentials,
                                 reauthenticating=previous, on_request=self._record)
        try:
            async with asyncio.timeout(security.authentication_timeout_ms / 1000):
                while True:
                    if first is not None:
                        frame, first = first, None
                    else:
                        try:
                            (size,) = struct.unpack(">i", await reader.readexactly(4))
                        except asyncio.IncompleteReadError:
                            return None
                        if size < 0 or size > auth.max_frame():
                            step = auth.oversized(size)
                            await self._finish_failed(writer, security, step.response)
                            return None
                        try:
                            frame = await reader.readexactly(size)
                        except asyncio.IncompleteReadError:
                            return None
                    step = auth.receive(frame)
                    if step.fail:
                        await self._finish_failed(writer, security, step.response)
                        return None
                    if step.response is not None:
                        writer.write(step.response)
                        await writer.drain()
                    if step.close:
                        return None
                    if step.complete:
                        assert auth.session is not None
                        return auth.session, auth.session_expiry
        except TimeoutError:
            security_log.info("SASL authentication of %s on listener %s not finished within %d ms; closing", address,
                              security.listener_name, security.authentication_timeout_ms)
            return None

    async def _finish_failed(self, writer: asyncio.StreamWriter, security: ListenerSecurity,
                             response: bytes | None) -> None:
        """KIP-306: stop reading, wait connection.failed.authentication.delay.ms, then send the error and close."""
        delay = security.failed_authentication_delay_ms / 1000
        if delay > 0:
            await asyncio.sleep(delay)
        if response is not None:
            try:
                writer.write(response)
                await writer.drain()
            except ConnectionError:
                pass

    def _record(self, request: Any) -> None:
        entry = self.served.setdefault((request.api_key.name, request.api_version), [0, set()])
        entry[0] += 1
        entry[1].add(_client_family(request.client_id))

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                session: Session = PLAINTEXT_SESSION, *, expiry: float | None = None,
                                security: ListenerSecurity | None = None, tls: bool = False,
                                registered: bool = False) -> None:
        task = asyncio.current_task()
        if task is not None and not registered:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        if session.client_address == "" and peer:
            session = Session(session.principal, peer[0], session.listener_name, session.security_protocol,
                              session.sasl_mechanism)
        conn = ServerConnection(max_frame_bytes=self.max_frame_bytes)
        if isinstance(getattr(writer.transport, "max_size", None), int):
            # asyncio's selector transport reads at most 256 KiB per recv; a 1 MiB produce then takes four
            # rounds of the event loop (and four wake-ups of the reading task) instead of one.
            writer.transport.max_size = _STREAM_LIMIT  # type: ignore[attr-defined]
        # Kafka's lastReauthenticationStartNanos: 0 until the first re-authentication, which is always allowed (the
        # once-a-second limit is between re-authentications; a session shorter than a second, such as one whose
        # OAUTHBEARER token was about to expire, re-authenticates within a second of its first authentication)
        reauth_started = float("-inf")
        host = peer[0] if peer else ""
        inflight = _Pipeline()  # pipelined produces, oldest first
        try:
            while True:
                # Whole frames straight from the stream's buffer: the size prefix (checked before the frame is
                # read), then the frame, one copy; EOF, even inside a frame, ends the connection.
                try:
                    size = conn.frame_size(await reader.readexactly(4))
                    data = await reader.readexactly(size)
                except asyncio.IncompleteReadError:
                    return
                metrics = self.metrics  # TotalTimeMs: from the whole frame read to its response written
                received = time.perf_counter() if metrics is not None else 0.0
                if expiry is not None:
                    # KIP-368: a SaslHandshake on an expiring session re-authenticates (at most once a second);
                    # any other request after the expiry closes the connection unanswered
                    now = time.monotonic()
                    if data[:2] == b"\x00\x11" and now - reauth_started >= 1.0 and security is not None:
                        if not await _all_answered(inflight):
                            return
                        reauth_started = now
                        outcome = await self._authenticate(reader, writer, security, session.client_address,
                                                           first=data, previous=session)
                        if outcome is None:
                            return
                        session, expiry = outcome
                        security_log.debug("%s on listener %s re-authenticated", session.principal,
                                           session.listener_name)
                        continue
                    if now >= expiry:
                        key = struct.unpack_from(">h", data)[0] if len(data) >= 2 else -1
                        security_log.info("session of %s on listener %s expired %d ms before a request (api key %d) "
                                          "was read; closing the connection (%d produce(s) waiting for acks)",
                                          session.principal, session.listener_name, (now - expiry) * 1000, key,
                                          len(inflight.tasks))
                        return
                try:
                    request = conn.receive_frame(data)
                except UnsupportedVersionError as exc:
                    if exc.response is None:
                        raise
                    if not await _all_answered(inflight):
                        return
                    writer.write(exc.response)  # ApiVersions too new: our ranges in the v0 layout (KIP-511)
                    continue
                del data
                await inflight.muted()
                charge = RequestCharge(request_size=size)
                if request.api_key == ApiKey.PRODUCE and self.produce_pipeline_depth > 1:
                    if not await self._pipeline_produce(inflight, conn, request, size, host, session, writer, peer,
                                                        charge):
                        return
                else:
                    if not await _all_answered(inflight):
                        return
                    if metrics is not None:
                        await self._answer_counted(conn, request, host, session, writer, tls, received, metrics,
                                                   charge)
                    else:
                        frame = await self._answer(conn, request, host, session, charge)
                        if frame is not None:
                            await self._write_frame(writer, frame, tls)
                    # KIP-219: the response went out at once; the next request waits out the throttle (an acks=0
                    # produce over its quota has no response, and still mutes)
                    inflight.mute_for(charge.throttle_ms)
                # One request per connection per turn, as Kafka's processors serve them: a client pipelining
                # produces would otherwise be answered a whole buffer (1 MiB of requests) before anyone else.
                await asyncio.sleep(0)
        except (CloseConnection, ProtocolError) as exc:
            _log_close(exc, peer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a handler bug must cost one connection, never the broker
            log.exception("internal error serving %s; closing the connection", peer)
        finally:
            inflight.cancel()
            if task is not None and not registered:
                self._connections.discard(task)
            writer.close()

    async def _pipeline_produce(self, inflight: _Pipeline, conn: ServerConnection, request: Any, size: int,
                                host: str, session: Session, writer: asyncio.StreamWriter, peer: Any,
                                charge: RequestCharge) -> bool:
        """Serve a Produce so that the connection's next request can be read while this one waits for its acks.

        Kafka mutes a channel until its response is sent, so a producer pipelining acks=all requests on one
        connection gets one request served per replication round trip; a Python broker's round trip is longer
        than a librdkafka producer's linger, and the requests queue up (a SaslHandshake queued behind them is
        then read after the session expired, and KIP-368 closes the connection). Here the request is appended at
        once, in order; while it waits in the produce purgatory (or behind an earlier response) the next frame
        is read, and if it is a Produce too it is appended as well. Responses are still written in request
        order, and any other request waits until every earlier response is sent, as in Kafka. At most
        ``produce_pipeline_depth`` produces (PRODUCE_PIPELINE_BYTES of them) wait at a time. False: the
        connection is to be closed."""
        if not inflight.prune():
            return False
        while inflight.tasks and (len(inflight.tasks) >= self.produce_pipeline_depth - 1
                                  or inflight.bytes + size > PRODUCE_PIPELINE_BYTES):
            if not await inflight.oldest_answered():
                return False
        waiting = asyncio.get_running_loop().create_future()
        token = request_waiting.set(waiting)
        try:
            # the task copies the context: its purgatory wait (or its turn to write) sets `waiting`
            answer = asyncio.create_task(self._respond_in_order(
                conn, request, host, session, writer, peer, inflight.last(), waiting, charge, inflight))
        finally:
            request_waiting.reset(token)
        await asyncio.wait((answer, waiting), return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            return answer.result()
        inflight.add(answer, size)
        return True

    async def _respond_in_order(self, conn: ServerConnection, request: Any, host: str, session: Session,
                                writer: asyncio.StreamWriter, peer: Any, previous: asyncio.Task | None,
                                waiting: asyncio.Future, charge: RequestCharge, inflight: _Pipeline) -> bool:
        """One pipelined request: its response, written after ``previous``'s. A request that fails closes the
        connection after the earlier ones are answered (as if they had been served before it was read). False
        when the connection is closing; the failure is logged once, by the request that failed."""
        failure: Exception | None = None
        response: Any = None
        metrics = self.metrics  # TotalTimeMs from here, the moment the frame was read
        received = time.perf_counter() if metrics is not None else 0.0
        if metrics is not None:
            metrics.requests_in_progress += 1
        try:
            response = await self._handle(request, host, session, charge)
        except Exception as exc:  # noqa: BLE001 - re-raised below, once the earlier responses are out
            failure = exc
        finally:
            if metrics is not None:
                metrics.requests_in_progress -= 1
        if not waiting.done():
            waiting.set_result(None)
        try:
            if previous is not None and not await previous:
                return False
            if failure is not None:
                raise failure
            frame = self._encode(conn, request, response)
            if frame is not None:
                if metrics is not None:
                    metrics.responses_in_progress += 1
                try:
                    writer.write(frame)  # Produce responses are bytes (only Fetch's carry file regions)
                    await writer.drain()
                finally:
                    if metrics is not None:
                        metrics.responses_in_progress -= 1
            inflight.mute_for(charge.throttle_ms)  # KIP-219: the requests not yet served wait it out
            if metrics is not None:
                metrics.request_done(request.api_key, received, time.perf_counter(), request.body)
                if charge.throttle_ms:
                    metrics.record_throttle(_request_name(request.api_key), charge.throttle_ms)
            return True
        except (CloseConnection, ProtocolError) as exc:
            _log_close(exc, peer)
        except ConnectionError:
            pass
        except Exception:  # a handler bug must cost one connection, never the broker
            log.exception("internal error serving %s; closing the connection", peer)
        writer.close()  # the reading side then sees the end of the stream
        return False

    async def _answer_counted(self, conn: ServerConnection, request: Any, host: str, session: Session,
                              writer: asyncio.StreamWriter, tls: bool, received: float, metrics: BrokerMetrics,
                              charge: RequestCharge | None = None) -> None:
        """One request answered and its response written, with metrics on: the request and response queue
        gauges around each step, then its total time from ``received`` (the frame read)."""
        metrics.requests_in_progress += 1
        try:
            frame = await self._answer(conn, request, host, session, charge)
        finally:
            metrics.requests_in_progress -= 1
        if frame is not None:
            metrics.responses_in_progress += 1
            try:
                await self._write_frame(writer, frame, tls)
            finally:
                metrics.responses_in_progress -= 1
        metrics.request_done(request.api_key, received, time.perf_counter(), request.body)
        if charge is not None and charge.throttle_ms:
            metrics.record_throttle(_request_name(request.api_key), charge.throttle_ms)

    async def _write_frame(self, writer: asyncio.StreamWriter, frame: bytes | list[Any], tls: bool) -> None:
        """A response frame out: bytes, or a Fetch's bytes and file regions (_send_parts)."""
        if isinstance(frame, list):
            await self._send_parts(writer, frame, tls=tls)
        else:
            writer.write(frame)
        await writer.drain()

    async def _answer(self, conn: ServerConnection, request: Any, client_host: str,
                      session: Session = PLAINTEXT_SESSION, charge: RequestCharge | None = None
                      ) -> bytes | list[Any] | None:
        return self._encode(conn, request, await self._handle(request, client_host, session, charge))

    async def _handle(self, request: Any, client_host: str, session: Session,
                      charge: RequestCharge | None = None) -> Any:
        """The response body for ``request`` (None: no response); ``charge`` collects its quota throttle."""
        entry = self.served.setdefault((request.api_key.name, request.api_version), [0, set()])
        entry[0] += 1
        entry[1].add(_client_family(request.client_id))
        if request.api_key == ApiKey.API_VERSIONS:
            return api_versions_response(version=request.api_version)
        try:
            return await self.apis.handle(request.api_key, request.api_version, request.body,
                                          client_id=request.client_id or "", client_host=client_host,
                                          correlation_id=request.correlation_id, session=session, charge=charge)
        except LookupError:  # advertised but unhandled would be a bug: cost the connection, not the broker
            raise LocalProtocolError(f"no handler for {request.name}", request=request.name,
                                     correlation_id=request.correlation_id) from None

    @staticmethod
    def _encode(conn: ServerConnection, request: Any, response: Any) -> bytes | list[Any] | None:
        """The response frame (a Fetch's: bytes and file regions); requests are answered in the order read."""
        if response is None:
            return None
        if request.api_key == ApiKey.FETCH:
            return conn.send_parts(request, response)
        return conn.send(request, response)

    async def _send_parts(self, writer: asyncio.StreamWriter, parts: list[Any], *, tls: bool = False) -> None:
        """Bytes through the stream; open segment regions with sendfile, or over TLS read and written (the bytes
        must go through the TLS transport, kafka-security.md §3.4). Every region is closed afterwards, sent or not.

        The bytes between regions go in one send (the size prefix and the fields before the records: one send,
        not two; a remote read's records buffer with them, uncopied: _write_buffers). TCP_CORK around the whole
        response measured no better in bench/bench_rdkafka.py."""
        loop = asyncio.get_running_loop()
        try:
            pending: list[Any] = []
            for part in parts:
                if isinstance(part, (bytes, bytearray, memoryview)):
                    pending.append(part)
                    continue
                if pending:
                    _write_buffers(writer, pending, tls)
                    pending.clear()
                await writer.drain()
                with part.opened() as segment:
                    if tls:
                        await _write_region(writer, segment, part.position, part.length)
                    else:
                        await _sendfile(loop, writer, segment, part.position, part.length)
            if pending:
                _write_buffers(writer, pending, tls)
        finally:
            for part in parts:
                close = getattr(part, "close", None)
                if close is not None:
                    close()


async def _listen(loop: asyncio.AbstractEventLoop, host: str, port: int, backlog: int = 100) -> list[socket.socket]:
    """Listening sockets for ``host`` (every address it resolves to; "" is every interface), as asyncio's
    create_server binds them: SO_REUSEADDR, IPv6 sockets IPv6-only, non-blocking."""
    infos = await loop.getaddrinfo(host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host does not have (IPv6 disabled)
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(exc.errno, f"error while attempting to bind on address {address!r}: "
                                         f"{exc.strerror.lower() if exc.strerror else exc}") from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _Pipeline:
    """The pipelined requests of one connection whose responses are not written yet, oldest first, and the
    connection's quota mute."""

    def __init__(self) -> None:
        self.tasks: collections.deque[tuple[asyncio.Task, int]] = collections.deque()
        self.bytes = 0
        self._muted_until = 0.0  # (monotonic) the connection's quota throttle: no request is served before it

    def mute_for(self, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self._muted_until = max(self._muted_until, time.monotonic() + throttle_ms / 1000)

    async def muted(self) -> None:
        """KIP-219, Kafka's MUTED_AND_THROTTLED: a throttled response goes out at once, and the connection's next
        request is served only once the throttle has passed (a pipelined produce's throttle is known when it is
        answered, possibly after later requests were read)."""
        delay = self._muted_until - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def add(self, task: asyncio.Task, size: int) -> None:
        self.tasks.append((task, size))
        self.bytes += size

    def last(self) -> asyncio.Task | None:
        return self.tasks[-1][0] if self.tasks else None

    def prune(self) -> bool:
        """Forget the answered ones at the head; False when one of them closed the connection."""
        while self.tasks and self.tasks[0][0].done():
            if not self._pop().result():
                return False
        return True

    async def oldest_answered(self) -> bool:
        return await self._pop()

    def _pop(self) -> asyncio.Task:
        task, size = self.tasks.popleft()
        self.bytes -= size
        return task

    def cancel(self) -> None:
        for task, _ in self.tasks:
            task.cancel()


async def _all_answered(inflight: _Pipeline) -> bool:
    """Wait until every pipelined request has been answered; False when one of them closed the connection."""
    while inflight.tasks:
        if not await inflight.oldest_answered():
            return False
    return True


def _request_name(api_key: int) -> str:
    from kcli.broker.metrics import (
        request_name,  # only with metrics on (and a throttle): its module loads then
    )

    return request_name(api_key)


def _log_close(exc: Exception, peer: Any) -> None:
    if isinstance(exc, CloseConnection):  # Kafka's closeConnection: e.g. an acks=0 produce that failed
        log.info("closing connection from %s: %s", peer, exc)
    else:  # malformed frames close this connection only; everyone else is served on
        log.warning("closing connection from %s: %s", peer, exc)


async def _write_region(writer: asyncio.StreamWriter, segment: Any, offset: int, count: int) -> None:
    """A file region read in large slices and written through the (TLS) stream."""
    fd = segment.fileno()
    while count > 0:
        chunk = os.pread(fd, min(count, _TLS_READ_CHUNK), offset)
        if not chunk:
            raise ConnectionError("segment file ended before the region did")
        writer.write(chunk)
        offset += len(chunk)
        count -= len(chunk)
        await writer.drain()


_IOV_MAX = 512  # buffers per writev, well under Linux's IOV_MAX (1024)


def _write_buffers(writer: asyncio.StreamWriter, buffers: list[Any], tls: bool) -> None:
    """Buffers into the stream in order, with no copy of what the socket takes at once: writev straight to the
    socket while the transport has nothing buffered (as _sendfile does), the rest through the transport, which
    keeps only what is left over. A remote read's MiB of records (issue 28) then goes from the chunk cache to
    the socket; ``b"".join`` cost a copy of it per response. Over TLS, the transport encrypts a join."""
    sock = None if tls else writer.get_extra_info("socket")
    if (sock is None or len(buffers) == 1 or writer.transport.is_closing()  # closing: the transport drops it
            or writer.transport.get_write_buffer_size() > 0):
        writer.write(buffers[0] if len(buffers) == 1 else b"".join(buffers))
        return
    fd = sock.fileno()
    while buffers:
        batch = buffers[:_IOV_MAX]
        try:
            sent = os.writev(fd, batch)
        except (BlockingIOError, InterruptedError):
            break
        whole = sent == sum(len(buffer) for buffer in batch)
        buffers = _unsent(buffers, sent)
        if not whole:  # the socket's buffer is full: the transport waits for it
            break
    for buffer in buffers:
        writer.write(buffer)


def _unsent(buffers: list[Any], sent: int) -> list[Any]:
    """What is left of ``buffers`` after ``sent`` bytes went: a buffer cut in the middle becomes a view of its
    rest."""
    for i, buffer in enumerate(buffers):
        if sent < len(buffer):
            return [memoryview(buffer)[sent:] if sent else buffer, *buffers[i + 1:]]
        sent -= len(buffer)
    return []


def _peer_text(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if peer else "an unknown peer"


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
