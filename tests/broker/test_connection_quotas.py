"""Kafka's ConnectionQuotas decisions in process (kcli.broker.connection_quotas): per-IP limits and overrides,
connection slots with the protected inter-broker listener, the creation rate's throttle time as Kafka computes it,
the limits read from server.properties and the dynamic configs; and an in-process broker whose listener holds a
connection while max.connections is reached and applies a dynamic change live."""

from __future__ import annotations

import asyncio
import struct

import pytest

from inprocess_broker import running_broker, run
from kcli.broker.config import build_config
from kcli.broker.config_error import ConfigError
from kcli.broker.connection_quotas import (
    INT32_MAX,
    ConnectionLimits,
    ConnectionQuotas,
    SampledRate,
    TooManyConnectionsError,
    connection_limits,
    parse_overrides,
)
from kcli.protocol import ApiKey


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def quotas(limits: ConnectionLimits, listeners=("PLAINTEXT",), inter_broker="PLAINTEXT") -> ConnectionQuotas:
    return ConnectionQuotas(limits, list(listeners), inter_broker, clock_ms=Clock())


def test_per_ip_limit_refuses_the_connection_over_it_and_counts_it():
    q = quotas(ConnectionLimits(max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 3}))
    q.inc("PLAINTEXT", "10.0.0.1")
    q.inc("PLAINTEXT", "10.0.0.1")
    with pytest.raises(TooManyConnectionsError, match="Rejected connection from 10.0.0.1, address already has the "
                       "configured maximum of 2 connections."):
        q.inc("PLAINTEXT", "10.0.0.1")
    q.dec("PLAINTEXT", "10.0.0.1")  # the acceptor closes it, as Kafka's does
    assert q.counts == {"10.0.0.1": 2} and q.listeners["PLAINTEXT"].rejected == 1
    for _ in range(3):  # the override is larger
        q.inc("PLAINTEXT", "10.0.0.9")
    with pytest.raises(TooManyConnectionsError):
        q.inc("PLAINTEXT", "10.0.0.9")
    q.dec("PLAINTEXT", "10.0.0.1")
    q.inc("PLAINTEXT", "10.0.0.1")  # a slot of that address freed
    assert q.total == 6 and q.listeners["PLAINTEXT"].count == 6


def test_slots_follow_max_connections_and_the_listener_limits():
    q = quotas(ConnectionLimits(max_connections=3, listener_max_connections={"EXTERNAL": 1}),
               listeners=("EXTERNAL", "INTERNAL"), inter_broker="INTERNAL")
    assert q.slot_available("EXTERNAL")
    q.inc("EXTERNAL", "a")
    assert not q.slot_available("EXTERNAL")  # its own limit
    q.inc("INTERNAL", "b")
    q.inc("INTERNAL", "c")
    assert not q.excess_connections()
    # the inter-broker listener is protected from max.connections (there are several listeners) ...
    assert q.slot_available("INTERNAL")
    q.inc("INTERNAL", "d")
    # ... and once over it, a connection of another listener is to be closed
    assert q.excess_connections()
    q.dec("EXTERNAL", "a")
    assert not q.excess_connections()
    assert not q.slot_available("EXTERNAL")  # the broker-wide limit now


def test_a_single_listener_is_not_protected():
    q = quotas(ConnectionLimits(max_connections=1))
    q.inc("PLAINTEXT", "a")
    assert not q.protected("PLAINTEXT") and not q.slot_available("PLAINTEXT")


def test_sampled_rate_is_kafkas_rate():
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(0)
    # one event, the window never shorter than 10 windows: 0.1 per second
    assert rate.measure(0) == pytest.approx(0.1)
    for _ in range(49):
        rate.record(0)
    assert rate.measure(0) == pytest.approx(5.0)
    assert rate.throttle_ms(0, 5) == 0
    rate.record(0)
    # Kafka's throttle time: (rate - bound) / bound * window, 5.1 against 5 over 10 s: 200 ms
    assert rate.throttle_ms(0, 5) == 200
    # the time since the oldest window began counts once it is past 10 windows: 52 events over 10.5 s
    rate.record(2500)
    assert rate.window_size_ms(10_500) == 10_500 and rate.measure(10_500) == pytest.approx(52 / 10.5)
    rate.record(2501, 100)
    assert rate.throttle_ms(2501, 5) == 1000  # at most one quota window
    # windows older than samples x window are forgotten
    assert rate.measure(20_000) == 0


def test_creation_rate_throttles_the_acceptor_as_kafka_does():
    clock = Clock()
    q = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=2, listener_max_creation_rate={"B": 1}),
                         ["A", "B"], "B", clock_ms=clock)
    throttles = [q.record_creation("A") for _ in range(21)]
    assert throttles[:20] == [0] * 20 and throttles[20] == 500  # (2.1 - 2) / 2 x 10 s
    assert q.listeners["A"].throttled == 1
    # the protected listener skips the broker-wide rate but not its own
    assert [q.record_creation("B") for _ in range(10)] == [0] * 10
    assert q.record_creation("B") == 1000
    clock.now += 11_000
    assert q.record_creation("A") == 0


def test_limits_from_the_config_and_the_dynamic_configs():
    config = build_config({
        "listeners": "EXTERNAL://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "log.dirs": "/tmp/unused",
        "max.connections": "100", "max.connections.per.ip.overrides": "127.0.0.1:5, 10.0.0.1 : 6",
        "listener.name.external.max.connections": "40"})
    limits = connection_limits(config, {}, ["EXTERNAL", "INTERNAL"])
    assert limits.max_connections == 100 and limits.max_connections_per_ip == INT32_MAX
    assert limits.per_ip_overrides == {"127.0.0.1": 5, "10.0.0.1": 6}
    assert limits.listener_max_connections == {"EXTERNAL": 40}
    assert limits.max_connection_creation_rate == INT32_MAX
    dynamic = {"max.connections": "7", "listener.name.internal.max.connection.creation.rate": "3",
               "listener.name.external.max.connections": "4"}
    limits = connection_limits(config, dynamic, ["EXTERNAL", "INTERNAL"])
    assert (limits.max_connections, limits.listener_max_connections, limits.listener_max_creation_rate) == (
        7, {"EXTERNAL": 4}, {"INTERNAL": 3})
    with pytest.raises(ConfigError, match="can be set to zero only if max.connections.per.ip.overrides"):
        connection_limits(config, {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": ""},
                          ["EXTERNAL", "INTERNAL"])
    with pytest.raises(ConfigError, match="is not host:count"):
        parse_overrides("127.0.0.1")
    assert parse_overrides("[::1]:3,10.1.2.3:0") == {"::1": 3, "10.1.2.3": 0}


# -- an in-process broker ----------------------------------------------------------------------------------
def _api_versions() -> bytes:
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    return struct.pack(">i", len(body)) + body


async def _answered(port: int, writer_out: list, timeout: float) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer_out.append(writer)
    writer.write(_api_versions())
    await writer.drain()
    try:
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
        await reader.readexactly(size)
        return True
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return False


def test_in_process_listener_holds_a_connection_at_max_connections_and_takes_dynamic_limits(tmp_path):
    from kio.schema.incremental_alter_configs.v1 import request as incremental_req

    async def go() -> None:
        async with running_broker(tmp_path, **{"max.connections": "2"}) as broker:
            port = broker.server.bound[0][1]
            writers: list = []
            try:
                assert await _answered(port, writers, 10) and await _answered(port, writers, 10)
                waiting = asyncio.ensure_future(_answered(port, writers, 30))
                await asyncio.sleep(0.5)
                assert not waiting.done()  # accepted by the kernel, not served: no slot
                writers[0].close()
                assert await waiting  # the slot freed: served
                # max.connections.per.ip=1 set dynamically applies to the next connection at once
                request = incremental_req.IncrementalAlterConfigsRequest(validate_only=False, resources=(
                    incremental_req.AlterConfigsResource(resource_type=4, resource_name="0", configs=(
                        incremental_req.AlterableConfig(name="max.connections.per.ip", config_operation=0,
                                                        value="1"),
                        incremental_req.AlterableConfig(name="max.connections", config_operation=0,
                                                        value="10"))),))
                response = await broker.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
                assert response.responses[0].error_code == 0, response
                assert broker.server.socket_server.quotas.limits.max_connections_per_ip == 1
                assert not await _answered(port, writers, 10)  # closed at once: 127.0.0.1 has 2 already
                assert broker.server.socket_server.quotas.listeners["PLAINTEXT"].rejected == 1
            finally:
                for writer in writers:
                    writer.close()

    run(go())


def test_raising_max_connections_wakes_the_waiting_acceptor(tmp_path):
    from kio.schema.incremental_alter_configs.v1 import request as incremental_req

    async def go() -> None:
        async with running_broker(tmp_path, **{"max.connections": "1"}) as broker:
            port = broker.server.bound[0][1]
            writers: list = []
            try:
                assert await _answered(port, writers, 10)
                waiting = asyncio.ensure_future(_answered(port, writers, 30))
                await asyncio.sleep(0.5)
                assert not waiting.done()
                request = incremental_req.IncrementalAlterConfigsRequest(validate_only=False, resources=(
                    incremental_req.AlterConfigsResource(resource_type=4, resource_name="", configs=(
                        incremental_req.AlterableConfig(name="max.connections", config_operation=0, value="5"),)),))
                response = await broker.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
                assert response.responses[0].error_code == 0, response
                assert await waiting  # served with the first connection still open
            finally:
                for writer in writers:
                    writer.close()

    run(go())


def test_bad_dynamic_overrides_are_refused(tmp_path):
    from kio.schema.alter_configs.v2 import request as alter_req

    async def go() -> None:
        async with running_broker(tmp_path) as broker:
            request = alter_req.AlterConfigsRequest(validate_only=False, resources=(alter_req.AlterConfigsResource(
                resource_type=4, resource_name="0", configs=(alter_req.AlterableConfig(
                    name="max.connections.per.ip.overrides", value="nonsense"),)),))
            response = (await broker.call(ApiKey.ALTER_CONFIGS, 2, request)).responses[0]
            assert response.error_code == 42 and "is not host:count" in response.error_message  # INVALID_REQUEST

    run(go())
