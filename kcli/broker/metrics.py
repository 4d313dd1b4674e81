"""The broker's metrics and their Prometheus text exposition (format 0.0.4), named as the Prometheus JMX exporter's
kafka rules name Kafka's MBeans (jmx_exporter example_configs/kafka-2_0_0.yml): a meter's count
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` is
``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``, a gauge ``kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions`` is ``kafka_server_replicamanager_underreplicatedpartitions``, a histogram's count and
percentiles are ``..._count`` and ``...{quantile="0.99"}``.

Off unless metrics.http.listener is set: the broker then builds one BrokerMetrics and the socket edge, the
ReplicaManager, the Fetch handler and the server feed it. The cost on the request path is kept to integer
increments and one bisect into fixed histogram buckets per request; everything else (gauges, quantiles, the
text) is computed when /metrics is scraped.

Other parts of the broker add their own with ``registry``: ``counter``, ``gauge`` and ``summary`` return a family
whose ``labels(...)`` child is incremented, set or observed (e.g. the client quotas' throttle times, which
``record_throttle`` also takes per request).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

# Upper bounds (ms) of the latency buckets: the quantiles are interpolated within them (Kafka's Yammer histograms
# keep an exponentially decaying sample instead; these count every request since the start).
LATENCY_BOUNDS_MS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
                     5000.0, 10000.0, 30000.0, 60000.0)
# what a collector yields per family: (name, type, help, samples); a sample is (labels, value), (sample name,
# labels, value) for a summary's quantiles, _sum and _count, or a line already formatted
Collected = tuple[str, str, str, list[Any]]
# the JMX exporter's quantile labels for a histogram's 50thPercentile ... 999thPercentile
QUANTILES = ((0.5, "0.50"), (0.75, "0.75"), (0.95, "0.95"), (0.98, "0.98"), (0.99, "0.99"), (0.999, "0.999"))


class Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int | float = 1) -> None:
        self.value += amount


class Gauge:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def set(self, value: float) -> None:
        self.value = value


class Histogram:
    """Counts per fixed bucket, a count and a sum: observing is one bisect and three additions."""

    __slots__ = ("bounds", "buckets", "count", "sum", "max")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BOUNDS_MS) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)  # the last: above every bound
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        if value > self.max:
            self.max = value

    def quantile(self, q: float) -> float:
        """The q-quantile, interpolated linearly within its bucket and never above the largest value seen (0 with
        no observation)."""
        if self.count == 0:
            return 0.0
        rank = q * self.count
        seen = 0
        for index, n in enumerate(self.buckets):
            if n and seen + n >= rank:
                low = self.bounds[index - 1] if index > 0 else 0.0
                high = min(self.bounds[index] if index < len(self.bounds) else self.max, self.max)
                return min(low + (high - low) * max(rank - seen, 0) / n, self.max) if high > low else self.max
            seen += n
        return self.max


class Family:
    """One metric name: its type, help, label names and a child per label values."""

    def __init__(self, name: str, kind: str, help_text: str, labelnames: tuple[str, ...],
                 make: Callable[[], Any]) -> None:
        self.name = name
        self.kind = kind
        self.help = help_text
        self.labelnames = labelnames
        self.children: dict[tuple[str, ...], Any] = {}
        self._make = make

    def labels(self, *values: Any) -> Any:
        key = tuple(str(v) for v in values)
        child = self.children.get(key)
        if child is None:
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name} has labels {self.labelnames}, given {key}")
            child = self.children[key] = self._make()
        return child

    def remove(self, *values: Any) -> None:
        self.children.pop(tuple(str(v) for v in values), None)


class MetricsRegistry:
    """Families by name, plus collectors: callables run at each scrape that yield (name, kind, help, samples)
    for values read from the broker's state then (gauges)."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}
        self.collectors: list[Callable[[], Iterable[Collected]]] = []

    def _family(self, name: str, kind: str, help_text: str, labelnames: Iterable[str], make: Callable[[], Any]) -> Family:
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = Family(name, kind, help_text, tuple(labelnames), make)
        elif family.kind != kind:
            raise ValueError(f"{name} is a {family.kind}, not a {kind}")
        return family

    def counter(self, name: str, help_text: str, labelnames: Iterable[str] = ()) -> Family:
        return self._family(name, "counter", help_text, labelnames, Counter)

    def gauge(self, name: str, help_text: str, labelnames: Iterable[str] = ()) -> Family:
        return self._family(name, "gauge", help_text, labelnames, Gauge)

    def summary(self, name: str, help_text: str, labelnames: Iterable[str] = (),
                bounds: tuple[float, ...] = LATENCY_BOUNDS_MS) -> Family:
        return self._family(name, "summary", help_text, labelnames, lambda: Histogram(bounds))

    def render(self) -> str:
        out: list[str] = []
        for family in self.families.values():
            if not family.children:
                continue
            _header(out, family.name, family.kind, family.help)
            for values, child in family.children.items():
                labels = dict(zip(family.labelnames, values))
                if isinstance(child, Histogram):
                    _histogram(out, family.name, labels, child)
                else:
                    out.append(f"{family.name}{_labels(labels)} {_number(child.value)}")
        for collect in self.collectors:
            for name, kind, help_text, samples in collect():
                if not samples:
                    continue
                _header(out, name, kind, help_text)
                for sample in samples:  # a ready line, (labels, value), or (sample name, labels, value)
                    if isinstance(sample, str):
                        out.append(sample)
                        continue
                    sample_name, labels, value = sample if len(sample) == 3 else (name, *sample)
                    out.append(f"{sample_name}{_labels(labels)} {_number(value)}")
        return "\n".join(out) + "\n"


def _header(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
    out.append(f"# TYPE {name} {kind}")


def _histogram(out: list[str], name: str, labels: dict[str, str], h: Histogram) -> None:
    for q, text in QUANTILES:
        out.append(f"{name}{_labels({**labels, 'quantile': text})} {_number(h.quantile(q))}")
    out.append(f"{name}_sum{_labels(labels)} {_number(h.sum)}")
    out.append(f"{name}_count{_labels(labels)} {h.count}")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2**53):
        return str(int(value))
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


_FETCH, _FETCH_CONSUMER, _FETCH_FOLLOWER = 1, "FetchConsumer", "FetchFollower"  # RequestMetrics' fetch names


def request_name(api_key: int | str) -> str:
    """Kafka's ApiKeys name of a key: PRODUCE -> Produce, API_VERSIONS -> ApiVersions."""
    from kcli.protocol import ApiKey

    if isinstance(api_key, str):
        return api_key
    try:
        return ApiKey(api_key).name.title().replace("_", "")
    except ValueError:
        return str(api_key)


class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic (or of all topics): the meters' counts."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out", "produce_requests", "failed_produce_requests",
                 "fetch_requests", "failed_fetch_requests")

    def __init__(self) -> None:
        self.bytes_in = self.messages_in = self.bytes_out = 0
        self.produce_requests = self.failed_produce_requests = 0
        self.fetch_requests = self.failed_fetch_requests = 0


# TopicStats attribute -> the JMX exporter's name of Kafka's BrokerTopicMetrics meter (its count)
_TOPIC_METERS = (
    ("bytes_in", "bytesin", "Bytes appended by clients (BytesInPerSec)"),
    ("messages_in", "messagesin", "Records appended by clients (MessagesInPerSec)"),
    ("bytes_out", "bytesout", "Record bytes sent to consumers (BytesOutPerSec)"),
    ("produce_requests", "totalproducerequests", "Produce requests, per partition (TotalProduceRequestsPerSec)"),
    ("failed_produce_requests", "failedproducerequests", "Failed produce requests, per partition"),
    ("fetch_requests", "totalfetchrequests", "Fetch requests, per partition (TotalFetchRequestsPerSec)"),
    ("failed_fetch_requests", "failedfetchrequests", "Failed fetch requests, per partition"),
)


class BrokerMetrics:
    """What the broker counts for /metrics. The socket edge calls ``request_done``; the ReplicaManager
    ``appended`` and ``produce_failed``; the Fetch handler ``fetched``; the server ``log_flushed``; the rest is
    read from the broker's state by the collectors ``bind`` installs."""

    def __init__(self, registry: MetricsRegistry | None = None) -> None:
        self.registry = registry or MetricsRegistry()
        self.topics: dict[str, TopicStats] = {}
        self.all_topics = TopicStats()
        self.replication_bytes_out = 0
        # API key (and FetchConsumer, FetchFollower) -> TotalTimeMs
        self.total_time: dict[int | str, Histogram] = {_FETCH_CONSUMER: Histogram(), _FETCH_FOLLOWER: Histogram()}
        self.requests_in_progress = 0  # RequestChannel's RequestQueueSize: read, not answered yet
        self.responses_in_progress = 0  # ResponseQueueSize: answered, not written yet
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.log_flush = Histogram()
        self.throttle_time = self.registry.summary(
            "kafka_network_requestmetrics_throttletimems", "Throttle time per request (ms)", ("request",))
        self.registry.collectors.append(self._collect_own)

    # -- the request path ------------------------------------------------------------------------------
    def request_done(self, api_key: int, started: float, now: float, body: Any = None) -> None:
        """A request answered: its time in ms from receipt to its response written (TotalTimeMs). A Fetch counts
        under Fetch and, as Kafka's RequestChannel does, under FetchConsumer or FetchFollower (``body``'s
        replica id)."""
        value = (now - started) * 1000
        h = self.total_time.get(api_key)
        if h is None:
            h = self.total_time[int(api_key)] = Histogram()
        if api_key == _FETCH:
            self.total_time[_FETCH_FOLLOWER if getattr(body, "replica_id", -1) >= 0 else _FETCH_CONSUMER].observe(value)
        h.buckets[bisect_left(h.bounds, value)] += 1  # Histogram.observe, inline: this runs once per request
        h.count += 1
        h.sum += value
        if value > h.max:
            h.max = value

    def topic(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def appended(self, topic: str, size: int, records: int) -> None:
        stats = self.topic(topic)
        stats.bytes_in += size
        stats.messages_in += records
        stats.produce_requests += 1
        every = self.all_topics
        every.bytes_in += size
        every.messages_in += records
        every.produce_requests += 1

    def produce_failed(self, topic: str) -> None:
        stats = self.topic(topic)
        stats.produce_requests += 1
        stats.failed_produce_requests += 1
        self.all_topics.produce_requests += 1
        self.all_topics.failed_produce_requests += 1

    def fetched(self, topic: str, size: int, *, follower: bool, failed: bool) -> None:
        """One partition of a Fetch: a consumer's record bytes count as BytesOut, a follower's as
        ReplicationBytesOut (all topics only, as Kafka)."""
        if follower:
            self.replication_bytes_out += size
            return
        stats = self.topic(topic)
        stats.fetch_requests += 1
        stats.bytes_out += size
        every = self.all_topics
        every.fetch_requests += 1
        every.bytes_out += size
        if failed:
            stats.failed_fetch_requests += 1
            every.failed_fetch_requests += 1

    def topic_deleted(self, topic: str) -> None:
        """Kafka's BrokerTopicStats.removeMetrics: a deleted topic's meters go."""
        self.topics.pop(topic, None)

    def log_flushed(self, ms: float) -> None:
        self.log_flush.observe(ms)

    def record_throttle(self, request: str, throttle_ms: float) -> None:
        """A response's throttle time (a quota's): kafka.network RequestMetrics ThrottleTimeMs."""
        self.throttle_time.labels(request).observe(throttle_ms)

    # -- state read at each scrape ---------------------------------------------------------------------
    def bind(self, *, served: dict[tuple[str, int], list[Any]] | None = None, replica_manager: Any = None,
             controller: Any = None, standalone: bool = True, quotas: Any = None,
             remote_log_manager: Any = None) -> None:
        """Install the collectors that read the broker's state at each scrape: the socket edge's per-version
        request counts, the ReplicaManager's partitions, the controller and the connection counts."""
        if served is not None:
            self.registry.collectors.append(lambda: _requests(served))
        if replica_manager is not None:
            self.registry.collectors.append(lambda: _replicas(replica_manager))
        self.registry.collectors.append(lambda: _controller(controller, standalone))
        if quotas is not None:
            self.registry.collectors.append(lambda: _connections(quotas))
        if remote_log_manager is not None and replica_manager is not None:
            self.registry.collectors.append(lambda: _remote_storage(remote_log_manager, replica_manager))

    def render(self) -> str:
        return self.registry.render()

    def _collect_own(self) -> Iterable[Collected]:
        # one line per topic and meter: formatted here directly (thousands of topics, every scrape)
        topics = [(f'{{topic="{_escape(t)}"}} ', s) for t, s in sorted(self.topics.items())]
        for attribute, name, help_text in _TOPIC_METERS:
            full = f"kafka_server_brokertopicmetrics_{name}_total"
            samples: list[Any] = [f"{full} {getattr(self.all_topics, attribute)}"]
            samples += [f"{full}{label}{getattr(s, attribute)}" for label, s in topics]
            yield full, "counter", help_text, samples
        yield ("kafka_server_brokertopicmetrics_replicationbytesout_total", "counter",
               "Record bytes sent to followers (ReplicationBytesOutPerSec)", [({}, self.replication_bytes_out)])
        yield ("kafka_network_requestchannel_requestqueuesize", "gauge",
               "Requests read and not yet answered (RequestQueueSize)", [({}, self.requests_in_progress)])
        yield ("kafka_network_requestchannel_responsequeuesize", "gauge",
               "Responses not yet written to their connection (ResponseQueueSize)", [({}, self.responses_in_progress)])
        yield ("kafka_server_replicamanager_isrshrinks_total", "counter", "ISR shrinks (IsrShrinksPerSec)",
               [({}, self.isr_shrinks)])
        yield ("kafka_server_replicamanager_isrexpands_total", "counter", "ISR expansions (IsrExpandsPerSec)",
               [({}, self.isr_expands)])
        yield _summary("kafka_network_requestmetrics_totaltimems",
                       "Time from a request's receipt to its response written (ms)",
                       [({"request": n}, h) for n, h in sorted((request_name(k), h) for k, h in
                                                                  self.total_time.items() if h.count)])
        yield _summary("kafka_log_logflushstats_logflushrateandtimems", "Log flush time (ms)",
                       [({}, self.log_flush)] if self.log_flush.count else [])


def _summary(name: str, help_text: str, items: list[tuple[dict[str, str], Histogram]]) -> Collected:
    """A summary's samples: the quantiles, then the sum and the count, each under its own sample name."""
    samples: list[Any] = []
    for labels, h in items:
        samples += [(name, {**labels, "quantile": text}, h.quantile(q)) for q, text in QUANTILES]
        samples += [(f"{name}_sum", labels, h.sum), (f"{name}_count", labels, h.count)]
    return name, "summary", help_text, samples


def _requests(served: dict[tuple[str, int], list[Any]]):
    samples = [({"request": name.title().replace("_", ""), "version": str(version)}, entry[0])
               for (name, version), entry in sorted(served.items())]
    yield "kafka_network_requestmetrics_requests_total", "counter", "Requests per API and version (RequestsPerSec)", samples


def _replicas(replica_manager: Any):
    partitions = list(replica_manager.partitions.values())
    leaders = [p for p in partitions if p.is_leader]
    under = sum(1 for p in leaders if len(p.isr) < len(p.replicas))
    under_min = sum(1 for p in leaders if len(p.isr) < p.log.config.min_insync_replicas)
    yield "kafka_server_replicamanager_partitioncount", "gauge", "Partitions hosted here", [({}, len(partitions))]
    yield "kafka_server_replicamanager_leadercount", "gauge", "Partitions led here", [({}, len(leaders))]
    yield ("kafka_server_replicamanager_underreplicatedpartitions", "gauge",
           "Partitions led here whose ISR is smaller than their replicas", [({}, under)])
    yield ("kafka_server_replicamanager_underminisrpartitioncount", "gauge",
           "Partitions led here whose ISR is below min.insync.replicas", [({}, under_min)])


def _remote_storage(remote: Any, replica_manager: Any):
    """Tiered storage (KIP-405), Kafka 3.7's RemoteStorageMetrics of BrokerTopicMetrics: RemoteLogSizeBytes and
    RemoteLogMetadataCount per topic (the sum over the tiered partitions led here, from their finished copies in
    the metadata) and for all topics; the copy and delete lags (KIP-963); the copy, fetch, delete and aux-state
    meters with their errors (RemoteStorageStats)."""
    from kcli.broker.remote_log_manager import copy_candidates

    per_topic: dict[str, list[int]] = {}
    for p in list(replica_manager.partitions.values()):
        if not p.is_leader or not getattr(p.log, "remote_log_enabled", False):
            continue
        count, size = remote.sizes(p.topic, p.index)
        entry = per_topic.setdefault(p.topic, [0, 0])
        entry[0] += count
        entry[1] += size
    topics = sorted(per_topic.items())
    for name, at, help_text in (("remotelogsizebytes", 1, ("Bytes of the finished remote segments of the tiered "
                                                           "partitions led here (RemoteLogSizeBytes)")),
                                ("remotelogmetadatacount", 0, ("Finished remote segments of the tiered partitions "
                                                               "led here (RemoteLogMetadataCount)"))):
        samples: list[Any] = [({}, sum(v[at] for _, v in topics))]
        samples += [({"topic": t}, v[at]) for t, v in topics]
        yield f"kafka_server_brokertopicmetrics_{name}", "gauge", help_text, samples
    # KIP-963's lags: the rolled segments not yet copied (up to the last stable offset, as the copier takes them)
    # and what the running expiry pass still has to delete
    lags: dict[str, list[int]] = {}
    for p in list(replica_manager.partitions.values()):
        if not p.is_leader or not getattr(p.log, "remote_log_enabled", False):
            continue
        with p.managed.lock:
            pending = [seg.size for seg, _ in copy_candidates(list(p.log.log_segments),
                                                              p.log.highest_offset_in_remote_storage,
                                                              p.log.log_start_offset, p.last_stable_offset)]
        entry = lags.setdefault(p.topic, [0, 0, 0, 0])
        entry[0] += len(pending)
        entry[1] += sum(pending)
    for (topic, _), (count, size) in list(remote.stats.delete_lag.items()):
        entry = lags.setdefault(topic, [0, 0, 0, 0])
        entry[2] += count
        entry[3] += size
    for name, at, help_text in (("remotecopylagsegments", 0, "Rolled segments of tiered partitions led here not "
                                                             "yet copied (RemoteCopyLagSegments)"),
                                ("remotecopylagbytes", 1, "Bytes of those segments (RemoteCopyLagBytes)"),
                                ("remotedeletelagsegments", 2, "Remote segments the running expiry pass has still "
                                                               "to delete (RemoteDeleteLagSegments)"),
                                ("remotedeletelagbytes", 3, "Bytes of those segments (RemoteDeleteLagBytes)")):
        samples = [({}, sum(v[at] for v in lags.values()))]
        samples += [({"topic": t}, v[at]) for t, v in sorted(lags.items())]
        yield f"kafka_server_brokertopicmetrics_{name}", "gauge", help_text, samples
    counters = remote.stats.snapshot()
    # every topic with any remote activity gets all the meters (Kafka makes a topic's meters together)
    active = sorted({t for per_topic in counters.values() for t in per_topic})
    for key, name, help_text in _REMOTE_COUNTERS:
        per_topic = counters.get(key, {})
        samples = [({}, sum(per_topic.values()))] + [({"topic": t}, per_topic.get(t, 0)) for t in active]
        yield f"kafka_server_brokertopicmetrics_{name}_total", "counter", help_text, samples
    yield ("kctl_remote_log_copied_segments_total", "counter", "Segments this broker copied to the remote store",
           [({}, getattr(remote, "copied_segments", 0))])
    yield ("kctl_remote_copy_throttle_time_ms_total", "counter", "Milliseconds the copier waited for "
           "remote.log.manager.copy.max.bytes.per.second (KIP-956)", [({}, getattr(remote, "copy_throttled_ms", 0))])
    yield ("kctl_remote_fetch_throttled_total", "counter", "Remote reads skipped for "
           "remote.log.manager.fetch.max.bytes.per.second (KIP-956)", [({}, getattr(remote, "fetches_throttled", 0))])


# kcli.broker.remote_log_manager.RemoteStorageStats' counters, named as the JMX exporter's common rules name Kafka
# 3.7's RemoteStorageMetrics meters (kafka.server:type=BrokerTopicMetrics,name=<Name>PerSec[,topic=T] Count)
_REMOTE_COUNTERS = (
    ("remote_copy_bytes", "remotecopybytes", "Segment bytes copied to the remote store (RemoteCopyBytesPerSec)"),
    ("remote_copy_requests", "remotecopyrequests", "Segment copies started (RemoteCopyRequestsPerSec)"),
    ("remote_copy_errors", "remotecopyerrors", "Segment copies failed (RemoteCopyErrorsPerSec)"),
    ("remote_fetch_bytes", "remotefetchbytes", "Bytes read from the remote store for fetches "
                                               "(RemoteFetchBytesPerSec)"),
    ("remote_fetch_requests", "remotefetchrequests", "Fetches served from the remote store "
                                                     "(RemoteFetchRequestsPerSec)"),
    ("remote_fetch_errors", "remotefetcherrors", "Remote fetches failed (RemoteFetchErrorsPerSec)"),
    ("remote_delete_requests", "remotedeleterequests", "Remote segment deletions (RemoteDeleteRequestsPerSec)"),
    ("remote_delete_errors", "remotedeleteerrors", "Remote segment deletions failed (RemoteDeleteErrorsPerSec)"),
    ("build_remote_log_aux_state_requests", "buildremotelogauxstaterequests",
     "Followers' restores of leader epochs and producer state from the store "
     "(BuildRemoteLogAuxStateRequestsPerSec)"),
    ("build_remote_log_aux_state_errors", "buildremotelogauxstateerrors",
     "Those restores failed (BuildRemoteLogAuxStateErrorsPerSec)"),
)


def _controller(controller: Any, standalone: bool):
    """ActiveControllerCount and OfflinePartitionsCount: 1 and the partitions in OfflinePartition state on the
    active controller, 0 and 0 elsewhere; a standalone broker is its own controller and leads every partition."""
    active, offline = (1, 0) if standalone else (0, 0)
    if controller is not None and controller.is_active:
        active = 1
        inner = getattr(controller, "controller", None)
        context = getattr(inner, "ctx", None)
        if context is not None:
            for _attempt in range(3):  # the controller's thread changes the states: read a copy, retry a race
                try:
                    states = list(context.partition_states.items())
                    deleting = set(getattr(context, "topics_to_be_deleted", ()) or ())
                except RuntimeError:
                    continue
                offline = sum(1 for tp, state in states if int(state) == 2 and tp.topic not in deleting)
                break
    yield ("kafka_controller_kafkacontroller_activecontrollercount", "gauge",
           "1 on the active controller", [({}, active)])
    yield ("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
           "Partitions without a live leader (on the active controller)", [({}, offline)])


def _connections(quotas: Any):
    listeners = list(quotas.listeners.values())

    def each(attribute: str) -> list[tuple[dict[str, str], float]]:
        return [({"listener": l.name, "networkProcessor": "0"}, getattr(l, attribute)) for l in listeners]

    yield "kafka_server_socket_server_metrics_connection_count", "gauge", "Open connections", each("count")
    yield ("kafka_server_socket_server_metrics_connection_creation_total", "counter", "Connections accepted",
           each("created"))
    yield "kafka_server_socket_server_metrics_connection_close_total", "counter", "Connections closed", each("closed")
    yield ("kafka_network_acceptor_acceptorblockedpercent_count", "counter",
           "Nanoseconds the acceptor waited for a connection slot or the creation rate (AcceptorBlockedPercent)",
           [({"listener": l.name}, l.blocked_ns) for l in listeners])
    yield ("kctl_network_connections_rejected_total", "counter",
           "Connections closed at once by max.connections.per.ip (Kafka logs them only)",
           [({"listener": l.name, "reason": "max.connections.per.ip"}, l.rejected) for l in listeners])
    yield ("kctl_network_connection_accepts_throttled_total", "counter",
           "Accepts delayed by a max.connection.creation.rate", [({"listener": l.name}, l.throttled) for l in listeners])
