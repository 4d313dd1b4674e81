"""ConnectionQuotas: how many connections a broker takes, from whom and how fast (Kafka's ConnectionQuotas in
SocketServer.scala; KIP-402 max.connections, KIP-612 max.connection.creation.rate).

The socket edge asks before it serves a connection it accepted, as Kafka's Acceptor does:

* ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``): a connection beyond its address's limit is
  closed at once and counted; the others are served on.
* ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections``: with no slot free the acceptor stops
  accepting (the kernel's listen backlog holds the next ones) until a connection closes. The inter-broker listener
  is exempt from the broker-wide limit when there are several listeners; a connection it accepts over the limit
  makes the broker close one on another listener (Kafka closes the least recently used; kctl the oldest).
* ``max.connection.creation.rate`` and ``listener.name.<l>.max.connection.creation.rate``: connections are recorded
  in a rate over quota.window.num (11) windows of quota.window.size.seconds (1 s); above the rate the acceptor
  waits the throttle time Kafka computes (at most one window) before it accepts the next.

All of them are dynamic broker configs (KIP-226): ``update`` takes the new values. This module keeps counts and
makes decisions; it never touches a socket.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.config_error import ConfigError

INT32_MAX = 2**31 - 1
QUOTA_WINDOW_NUM = 11  # quota.window.num, Kafka's default
QUOTA_WINDOW_MS = 1000  # quota.window.size.seconds, Kafka's default: also the longest accept throttle
KEYS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
        "max.connection.creation.rate")
LISTENER_KEYS = ("max.connections", "max.connection.creation.rate")  # the ones a listener prefix may carry


class TooManyConnectionsError(Exception):
    """Kafka's TooManyConnectionsException: the address already has its maximum of connections."""

    def __init__(self, address: str, limit: int) -> None:
        super().__init__(f"Rejected connection from {address}, address already has the configured maximum of "
                         f"{limit} connections.")
        self.address = address
        self.limit = limit


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits in force; INT32_MAX (Kafka's default) means none."""

    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # resolved address -> limit
    max_connection_creation_rate: int = INT32_MAX
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)  # listener name -> limit
    listener_max_creation_rate: Mapping[str, int] = field(default_factory=dict)


def parse_overrides(text: str, key: str = "max.connections.per.ip.overrides") -> dict[str, int]:
    """``host:count,host:count`` (Kafka's getMap); hosts are resolved to addresses as Kafka's InetAddress.getByName
    does, once, here. An IPv6 address is everything before the last colon."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        try:
            limit = int(count.strip())
        except ValueError:
            limit = -1
        if not sep or not host or limit < 0:
            raise ConfigError(f"Invalid value {text!r} for configuration {key}: {item!r} is not host:count")
        try:
            address = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
        except (OSError, UnicodeError) as exc:
            raise ConfigError(f"Invalid value {text!r} for configuration {key}: cannot resolve {host!r} "
                              f"({exc})") from None
        out[str(address)] = limit
    return out


def _int_value(text: Any, key: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: not an integer") from None
    if not 0 <= value <= INT32_MAX:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: must be between 0 and {INT32_MAX}")
    return value


def connection_limits(config: Any, dynamic: Mapping[str, str], listeners: list[str]) -> ConnectionLimits:
    """The limits of ``config`` (a BrokerConfig) with the dynamic broker configs ``dynamic`` over them (this
    broker's own over the cluster default, already merged), for the listeners named. A listener-prefixed value,
    dynamic or static, wins over the broker-wide one. Kafka's check: max.connections.per.ip may be 0 only with
    overrides."""

    def value(key: str) -> Any:
        return dynamic[key] if key in dynamic else config[key]

    def listener_value(name: str, key: str) -> int | None:
        prefixed = f"listener.name.{name.lower()}.{key}"
        if prefixed in dynamic:
            return _int_value(dynamic[prefixed], prefixed)
        if config.listener_has(name, key):
            return _int_value(config.listener_value(name, key), prefixed)
        return None

    per_ip = _int_value(value("max.connections.per.ip"), "max.connections.per.ip")
    overrides = parse_overrides(str(value("max.connections.per.ip.overrides") or ""))
    if per_ip == 0 and not overrides:
        raise ConfigError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                          "property is set.")
    listener_max = {n: v for n in listeners if (v := listener_value(n, "max.connections")) is not None}
    listener_rate = {n: v for n in listeners if (v := listener_value(n, "max.connection.creation.rate")) is not None}
    return ConnectionLimits(
        max_connections=_int_value(value("max.connections"), "max.connections"),
        max_connections_per_ip=per_ip, per_ip_overrides=overrides,
        max_connection_creation_rate=_int_value(value("max.connection.creation.rate"), "max.connection.creation.rate"),
        listener_max_connections=listener_max, listener_max_creation_rate=listener_rate)


class SampledRate:
    """Kafka's Rate over a SampledStat: events counted in ``samples`` windows of ``window_ms``; the rate is their sum
    over the time since the oldest window began, but never less than samples - 1 windows (Rate.windowSize)."""

    __slots__ = ("samples", "window_ms", "_windows")

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._windows: deque[list[float]] = deque()  # [start ms, value], oldest first

    def record(self, now_ms: float, value: float = 1.0) -> None:
        if not self._windows or now_ms - self._windows[-1][0] >= self.window_ms:
            self._windows.append([now_ms, 0.0])
            while len(self._windows) > self.samples:
                self._windows.popleft()
        self._windows[-1][1] += value

    def window_size_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        elapsed = now_ms - self._windows[0][0] if self._windows else 0.0
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Events per second."""
        window = self.window_size_ms(now_ms)
        return sum(w[1] for w in self._windows) / (window / 1000)

    def throttle_ms(self, now_ms: float, bound: float) -> int:
        """Kafka's QuotaUtils.boundedThrottleTime after a violation: the delay that brings the rate back to
        ``bound``, at most one quota window; 0 when the rate is within it."""
        rate = self.measure(now_ms)
        if rate <= bound:
            return 0
        delay = round((rate - bound) / bound * self.window_size_ms(now_ms)) if bound > 0 else self.window_ms
        return int(min(delay, self.window_ms))

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms  # SampledStat.purgeObsoleteSamples
        while self._windows and now_ms - self._windows[0][0] >= expire:
            self._windows.popleft()


@dataclass
class ListenerConnections:
    """One listener's counters (Kafka's socket-server-metrics connection-count, -creation-total, -close-total,
    and the acceptor's blocked time) and its own creation rate."""

    name: str
    count: int = 0
    created: int = 0
    closed: int = 0
    rejected: int = 0  # refused by max.connections.per.ip (kctl's own counter; Kafka only logs them)
    blocked_ns: int = 0  # AcceptorBlockedPercent's count: time the acceptor waited for a slot or the rate
    throttled: int = 0  # accepts delayed by a creation rate
    rate: SampledRate = field(default_factory=SampledRate)


class ConnectionQuotas:
    """Counts of open connections by address and listener, and the decisions of Kafka's ConnectionQuotas."""

    def __init__(self, limits: ConnectionLimits, listeners: list[str], inter_broker_listener: str,
                 clock_ms: Callable[[], float] | None = None) -> None:
        import time

        self.limits = limits
        self.inter_broker_listener = inter_broker_listener
        self.listeners = {n: ListenerConnections(n) for n in listeners}
        self.counts: dict[str, int] = {}
        self.total = 0
        self.broker_rate = SampledRate()
        self._clock = clock_ms or (lambda: time.monotonic() * 1000)

    def update(self, limits: ConnectionLimits) -> None:
        """New limits (a dynamic config change): they apply to the next connections; open ones stay."""
        self.limits = limits

    def protected(self, listener: str) -> bool:
        """Kafka's protectedListener: the inter-broker listener, when there are others."""
        return listener == self.inter_broker_listener and len(self.listeners) > 1

    def slot_available(self, listener: str) -> bool:
        """Kafka's connectionSlotAvailable: the listener's own limit, then (not for the protected listener)
        max.connections."""
        if self.listeners[listener].count >= self.limits.listener_max_connections.get(listener, INT32_MAX):
            return False
        return self.protected(listener) or self.total < self.limits.max_connections

    def record_creation(self, listener: str) -> int:
        """A connection accepted on ``listener`` is recorded in the listener's and (not for the protected
        listener) the broker's creation rate; the milliseconds the acceptor must wait before accepting more
        (Kafka's recordConnectionAndGetThrottleTimeMs: the longer of the two)."""
        now = self._clock()
        throttle = 0
        if not self.protected(listener):
            self.broker_rate.record(now)
            if self.limits.max_connection_creation_rate < INT32_MAX:
                throttle = self.broker_rate.throttle_ms(now, self.limits.max_connection_creation_rate)
        stats = self.listeners[listener]
        stats.rate.record(now)
        bound = self.limits.listener_max_creation_rate.get(listener, INT32_MAX)
        if bound < INT32_MAX:
            throttle = max(throttle, stats.rate.throttle_ms(now, bound))
        if throttle > 0:
            stats.throttled += 1
        return throttle

    def inc(self, listener: str, address: str) -> None:
        """Count a connection; raises TooManyConnectionsError (the connection is counted: the caller closes it
        and calls ``dec``, as Kafka's acceptor does) when its address is over max.connections.per.ip."""
        count = self.counts.get(address, 0)
        self.counts[address] = count + 1
        self.total += 1
        stats = self.listeners[listener]
        stats.count += 1
        stats.created += 1
        limit = self.limits.per_ip_overrides.get(address, self.limits.max_connections_per_ip)
        if count >= limit:
            stats.rejected += 1
            raise TooManyConnectionsError(address, limit)

    def dec(self, listener: str, address: str) -> None:
        count = self.counts.get(address, 0)
        if count <= 1:
            self.counts.pop(address, None)
        else:
            self.counts[address] = count - 1
        self.total = max(self.total - 1, 0)
        stats = self.listeners[listener]
        stats.count = max(stats.count - 1, 0)
        stats.closed += 1

    def excess_connections(self) -> bool:
        """Over max.connections: the protected listener got in anyway, and a connection of another listener is to
        be closed for it (Kafka's maxConnectionsExceeded, asked by every other listener's processors)."""
        return self.total > self.limits.max_connections
