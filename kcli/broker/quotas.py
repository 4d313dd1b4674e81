"""Client quotas on a broker (Kafka's ClientQuotaManager, ClientRequestQuotaManager, QuotaUtils; KIP-13, KIP-55,
KIP-124, KIP-219; kafka-security.md §5).

Three quota types: produce bytes/s (``producer_byte_rate``), fetch bytes/s (``consumer_byte_rate``) and request
handler time in percent of one thread (``request_percentage``). A connection's quota of each type comes from the
first of KIP-55's eight entities that holds that key (``QuotaCache.resolve``); the entity also decides the bucket,
the (user, client id) metric tags that requests share one rate sensor under.

The rate is Kafka's ``Rate`` over a ``SampledStat`` of ``quota.window.num`` samples of ``quota.window.size.seconds``
(11 x 1 s): the samples' sum over the time since the oldest retained sample began, never less than 10 windows.
A recording that takes the rate above the bound costs ``round((rate - bound) / bound * window_ms)``
(QuotaUtils.throttleTime). The throttle time goes into the response's throttle_time_ms and the socket edge then
stops reading that connection for as long (KIP-219: respond at once, then mute).

The quota values come from ZooKeeper or the local store (kcli.zk.quotas): read once at the start (``load``), then
kept current through ``/config/changes`` and AlterClientQuotas (``update``); recording runs on the event loop.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kcli.zk.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, Entity

log = logging.getLogger("kcli.broker")

QUOTA_WINDOW_NUM = 11  # quota.window.num
QUOTA_WINDOW_SIZE_SECONDS = 1  # quota.window.size.seconds
NANOS_TO_PERCENTAGE = 100.0 / 1e9  # ClientQuotaManager.NanosToPercentagePerSecond
INACTIVE_SENSOR_EXPIRY_MS = 3600 * 1000  # ClientQuotaManager.InactiveSensorExpirationTimeSeconds


# -- Kafka's Rate over a SampledStat (org.apache.kafka.common.metrics.stats) ------------------------------------
class _Sample:
    __slots__ = ("start_ms", "value", "events")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0
        self.events = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0
        self.events = 0


class Rate:
    """A windowed sum per second (``Rate`` with a ``WindowedSum``): ``samples`` windows of ``window_ms`` each."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_SECONDS * 1000) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        """SampledStat.record: into the current sample, a new one once it is complete (its window has passed)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        self.last_record_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _purge(self, now_ms: int) -> None:
        """SampledStat.purgeObsoleteSamples: samples older than samples x window start over (empty) now."""
        expire_age = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_age:
                sample.reset(now_ms)

    def window_size(self, now_ms: int) -> int:
        """Rate.windowSize: the time since the oldest sample began, at least samples - 1 full windows, >= 1 ms."""
        self._purge(now_ms)
        oldest = min(self._samples, key=lambda s: s.start_ms) if self._samples else None
        if oldest is None:
            self._samples.append(_Sample(now_ms))
            oldest = self._samples[0]
        elapsed = now_ms - oldest.start_ms
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Rate.measure: the retained samples' sum per second of the window."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size(now_ms) / 1000.0)


def throttle_time_ms(rate: float, bound: float, window_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay that brings the rate back to the bound if nothing else arrives."""
    return round((rate - bound) / bound * window_ms)


# -- the quota values and KIP-55's precedence ------------------------------------------------------------------
Tags = tuple[str, str]  # (user, client id) of a sensor; "" = that component not part of the bucket


class QuotaCache:
    """entity -> {quota key: value}, from /config/users, /config/clients (or the local store)."""

    def __init__(self) -> None:
        self.overrides: dict[Entity, dict[str, float]] = {}
        self.version = 0  # bumped on every change: resolved buckets are cached per version
        self._enabled: dict[str, bool] = {}

    def update(self, entity: Entity, values: Mapping[str, float]) -> None:
        """The entity's quota values now ({} removes them all): DynamicConfigManager's QuotaConfigHandler."""
        if values:
            self.overrides[entity] = dict(values)
        else:
            self.overrides.pop(entity, None)
        self.version += 1
        self._enabled = {}

    def replace_all(self, overrides: Mapping[Entity, Mapping[str, float]]) -> None:
        self.overrides = {e: dict(v) for e, v in overrides.items() if v}
        self.version += 1
        self._enabled = {}

    def enabled(self, key: str) -> bool:
        """ClientQuotaManager.quotasEnabled: some entity has a quota of this type (until then nothing is
        recorded)."""
        found = self._enabled.get(key)
        if found is None:
            found = self._enabled[key] = any(key in v for v in self.overrides.values())
        return found

    def resolve(self, key: str, user: str, client_id: str) -> tuple[Tags, float | None]:
        """KIP-55's order (ClientQuotaManager's quotaMetricTags and quotaLimit): the first entity holding ``key``
        gives the bound; its level gives the bucket. Without any, the client id's bucket and no bound."""
        U, C = ("user", user), ("client-id", client_id)
        DU, DC = ("user", None), ("client-id", None)
        both = (user, client_id)
        levels: tuple[tuple[Entity, Tags], ...] = (
            ((U, C), both),            # /config/users/<user>/clients/<client-id>
            ((U, DC), both),           # /config/users/<user>/clients/<default>
            ((U,), (user, "")),        # /config/users/<user>
            ((DU, C), both),           # /config/users/<default>/clients/<client-id>
            ((DU, DC), both),          # /config/users/<default>/clients/<default>
            ((DU,), (user, "")),       # /config/users/<default>
            ((C,), ("", client_id)),   # /config/clients/<client-id>
            ((DC,), ("", client_id)),  # /config/clients/<default>
        )
        for entity, tags in levels:
            value = self.overrides.get(entity, {}).get(key)
            if value is not None:
                return tags, value
        return ("", client_id), None


# -- the managers ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class RequestCharge:
    """What one request costs and how long its connection is to be muted after the response (Kafka's
    RequestChannel.Request fields apiThrottleTimeMs and requestThreadTimeNanos); made by the socket edge."""

    request_size: int = 0  # the request's bytes (Produce quota: request.sizeInBytes)
    thread_ns: int = 0  # handler CPU time on the event loop so far (ClientRequestQuotaManager's measure)
    throttle_ms: int = 0  # the throttle put in the response; the edge mutes the connection for as long
    request_quota_recorded: bool = False  # the handler recorded the request quota itself (Produce, Fetch)

    def throttle(self, ms: int) -> None:
        self.throttle_ms = max(self.throttle_ms, ms)


class ClientQuotaManager:
    """The three quota managers of a broker (Kafka's QuotaManagers fetch/produce/request), over one QuotaCache."""

    def __init__(self, *, window_num: int = QUOTA_WINDOW_NUM, window_size_seconds: int = QUOTA_WINDOW_SIZE_SECONDS,
                 clock: Callable[[], float] = time.time, store: Any = None) -> None:
        # where the quotas live: kcli.zk.scram.ZkNodes over the broker's ZooKeeper session, or a standalone
        # broker's LocalMetadataStore (the same paths and JSON); None: in memory only (tests)
        self.store = store
        self.cache = QuotaCache()
        self.window_num = window_num
        self.window_ms = window_size_seconds * 1000
        self.clock = clock
        self._sensors: dict[tuple[str, Tags], Rate] = {}
        self._last_expiry_ms = 0

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- configuration ------------------------------------------------------------------------------------------
    def load(self) -> int:
        """Every entity's quotas from the store (the broker's start, before the listeners open; blocking I/O);
        answers how many entities have some."""
        if self.store is None:
            return 0
        from kcli.zk.quotas import read_all

        overrides = read_all(self.store)
        self.cache.replace_all(overrides)
        if overrides:
            log.info("loaded client quotas of %d entities", len(overrides))
        return len(overrides)

    def entity_config_changed(self, kind: str, sanitized_name: str, config: Mapping[str, str]) -> None:
        """A users/clients/ips change notification with the node's config now (Kafka's QuotaConfigHandler):
        the entity's quota keys replace what it had."""
        from kcli.zk.quotas import entity_of, quota_values

        entity = entity_of(kind, sanitized_name)
        if entity is not None:
            self.update(entity, quota_values(config, where=f"/config/{kind}/{sanitized_name}"))

    def update(self, entity: Entity, values: Mapping[str, float]) -> None:
        self.cache.update(entity, values)
        log.info("client quotas of %s: %s", _entity_text(entity),
                 ", ".join(f"{k}={v:g}" for k, v in sorted(values.items())) or "none")

    def enabled(self, key: str) -> bool:
        return self.cache.enabled(key)

    # -- recording -----------------------------------------------------------------------------------------------
    def _sensor(self, key: str, tags: Tags, now_ms: int) -> Rate:
        sensor = self._sensors.get((key, tags))
        if sensor is None:
            self._expire(now_ms)
            sensor = self._sensors[(key, tags)] = Rate(self.window_num, self.window_ms)
        return sensor

    def _expire(self, now_ms: int) -> None:
        """Sensors idle for an hour go (Kafka's inactive sensor expiration), looked at most once a minute."""
        if now_ms - self._last_expiry_ms < 60_000:
            return
        self._last_expiry_ms = now_ms
        for name in [n for n, s in self._sensors.items() if now_ms - s.last_record_ms > INACTIVE_SENSOR_EXPIRY_MS]:
            del self._sensors[name]

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
        """ClientQuotaManager.maybeRecordAndGetThrottleTimeMs: record ``value`` in the client's bucket; the
        throttle time in ms when that takes its rate above its bound, else 0. Nothing is recorded while no entity
        has a quota of this type."""
        if not self.cache.enabled(key):
            return 0
        now_ms = self.now_ms() if now_ms is None else now_ms
        tags, bound = self.cache.resolve(key, user, client_id)
        sensor = self._sensor(key, tags, now_ms)
        sensor.record(value, now_ms)
        if bound is None:
            return 0
        rate = sensor.measure(now_ms)
        if rate <= bound:  # Quota.acceptable (an upper bound)
            return 0
        if bound <= 0:  # a quota of 0 admits nothing: the longest wait Kafka's formula tends to
            return self.window_ms * self.window_num
        throttle = throttle_time_ms(rate, bound, sensor.window_size(now_ms))
        log.debug("quota %s of %s violated: %.1f > %.1f, throttle %d ms", key, tags, rate, bound, throttle)
        return throttle

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """ClientQuotaManager.unrecordQuotaSensor: a throttled fetch is answered empty, so its bytes come off."""
        if not self.cache.enabled(key):
            return
        now_ms = self.now_ms() if now_ms is None else now_ms
        tags, _ = self.cache.resolve(key, user, client_id)
        self._sensor(key, tags, now_ms).record(-value, now_ms)

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """ClientQuotaManager.getMaxValueInQuotaWindow: the bound x (samples - 1) x window seconds (the fetch
        size cap that keeps one fetch from always being throttled); None without a bound."""
        if not self.cache.enabled(key):
            return None
        _, bound = self.cache.resolve(key, user, client_id)
        if bound is None:
            return None
        return bound * (self.window_num - 1) * self.window_ms / 1000

    def record_request_time(self, user: str, client_id: str, thread_ns: int, now_ms: int | None = None) -> int:
        """ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs: the handler time as a percentage of one
        thread's second; the throttle capped at one quota window (maxThrottleTimeMs)."""
        throttle = self.record(REQUEST_PERCENTAGE, user, client_id, thread_ns * NANOS_TO_PERCENTAGE, now_ms)
        return min(throttle, self.window_ms)

    def bucket_rate(self, key: str, user: str, client_id: str, now_ms: int | None = None) -> float:
        """The measured rate of the client's bucket (0.0 before anything is recorded): for tests and metrics."""
        now_ms = self.now_ms() if now_ms is None else now_ms
        tags, _ = self.cache.resolve(key, user, client_id)
        sensor = self._sensors.get((key, tags))
        return 0.0 if sensor is None else sensor.measure(now_ms)


def _entity_text(entity: Entity) -> str:
    return ", ".join(f"{k}={'<default>' if n is None else n}" for k, n in entity)


# -- a handler's request CPU time on the event loop ---------------------------------------------------------------
class TimedCoroutine:
    """Awaits a coroutine and adds the thread CPU time of each of its steps to ``charge.thread_ns`` (Kafka measures
    the request handler thread's time; here a request's steps run interleaved with others' on one loop, so each
    step is timed on its own and the waits in between are not counted)."""

    __slots__ = ("coro", "charge")

    def __init__(self, coro: Any, charge: RequestCharge) -> None:
        self.coro = coro
        self.charge = charge

    def __await__(self) -> Iterator[Any]:
        coro, charge = self.coro, self.charge
        send: Any = None
        error: BaseException | None = None
        while True:
            started = time.thread_time_ns()
            try:
                step = coro.throw(error) if error is not None else coro.send(send)
            except StopIteration as stop:
                charge.thread_ns += time.thread_time_ns() - started
                return stop.value
            except BaseException:
                charge.thread_ns += time.thread_time_ns() - started
                raise
            charge.thread_ns += time.thread_time_ns() - started
            try:
                send, error = (yield step), None
            except BaseException as exc:  # noqa: BLE001 - cancellation and the like go into the coroutine
                send, error = None, exc


__all__ = ["ClientQuotaManager", "QuotaCache", "Rate", "RequestCharge", "TimedCoroutine", "throttle_time_ms",
           "CONSUMER_BYTE_RATE", "PRODUCER_BYTE_RATE", "REQUEST_PERCENTAGE"]
