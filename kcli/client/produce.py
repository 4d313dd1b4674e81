"""Producing records to a topic (``kctl produce``): kcat -P's and kafka-console-producer's job on kcli's client.

Records go into one v2 batch per partition (kcli.records.build_record_batch, compressed with the batch's codec)
until the batch reaches ``batch_size`` bytes or ``linger_ms`` passes; ready batches go to each partition's leader
in Produce requests (one batch per partition per request, as Kafka requires), pipelined up to ``MAX_IN_FLIGHT``
requests per leader. Partitions: the one asked for, else the Java client's default partitioner: murmur2 of the
key (``Utils.toPositive(Utils.murmur2(key)) % partitions``), and for null keys one "sticky" partition that changes
when its batch is sent (KIP-480/794). Retriable errors (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, a lost
connection...) refresh the metadata and resend; what is still refused is reported per partition, never raised.
``idempotent`` asks InitProducerId for a producer id and epoch and numbers each partition's batches (base
sequence), so a resend cannot duplicate; a partition that answers UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER
(its leader lost the producer's state or its last batches: retention, an unclean leader change) gets the epoch
bumped as Kafka's producer does since KIP-360: InitProducerId again with the current producer id and epoch, and
every batch not yet acknowledged renumbered from sequence 0 and resent. acks=0 sends without waiting for any
answer (Kafka sends none).

The input side is here too, pure: ``split_records`` cuts a byte stream into records at a delimiter and splits the
key off at a key delimiter (kcat -K: the first occurrence; no delimiter in a record: a null key; empty records
are skipped, as kcat skips them). Nothing here prints.
"""

from __future__ import annotations

import os
import random
import select
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from kio.schema.errors import ErrorCode

from kcli.client.client import (BrokerConnection, BrokerUnreachableError, KafkaClient, KafkaClientError,
                                KafkaRequestError, _build, error_name)
from kcli.client.topics import request_module
from kcli.protocol.api import ApiKey
from kcli.records import Codec, Header, Record, build_record_batch

# The highest versions asked for (the request and response shapes used below): Kafka 2.8-3.x serve Produce v9,
# Fetch v12 (v13 names topics by id), InitProducerId v4.
CAPS: dict[ApiKey, int] = {ApiKey.PRODUCE: 9, ApiKey.FETCH: 12, ApiKey.INIT_PRODUCER_ID: 4, ApiKey.METADATA: 9}
MAX_IN_FLIGHT = 5  # pipelined Produce requests per leader (max.in.flight.requests.per.connection)
DEFAULT_BATCH_SIZE = 16384  # batch.size
DEFAULT_LINGER_MS = 5  # linger.ms (Kafka 3.x: 0; 4.0: 5)
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_RETRIES = 10  # metadata and InitProducerId attempts
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000  # delivery.timeout.ms: how long a batch is retried (Kafka's retries=MAX_INT)
RECORD_FRAMING_ESTIMATE = 21  # what batching counts for a v2 record's own varint framing beyond key, value, headers
RETRIABLE_PRODUCE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
    ErrorCode.request_timed_out, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.network_exception, ErrorCode.kafka_storage_error, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress})
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def versioned_module(connection: BrokerConnection, api_key: ApiKey) -> tuple[int, Any]:
    """The highest version of ``api_key`` that the broker serves, kio has, and is at most CAPS[api_key]."""
    return request_module(connection, api_key, CAPS)


# -- the default partitioner ------------------------------------------------------------------------------------
def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit murmur2 hash with seed 0x9747b28c, as a signed int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    left = length & 3
    if left == 3:
        h ^= data[whole + 2] << 16
    if left >= 2:
        h ^= data[whole + 1] << 8
    if left >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The Java client's partition for a non-null key: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# -- input -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProducerRecord:
    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    partition: int | None = None
    timestamp: int | None = None  # ms; None: now (CreateTime)


IDLE = None  # what ``read_chunks`` yields when no input came for a while (the producer sends lingering batches)


def read_chunks(stream: IO[bytes], idle_s: float = 0.1, size: int = 1 << 16) -> Iterator[bytes | None]:
    """The bytes of ``stream`` as they come; from a pipe or a terminal, ``IDLE`` (None) whenever nothing came
    for ``idle_s`` seconds, so that records typed slowly still go out (linger.ms), not at end of input."""
    try:
        fd = stream.fileno()
        waits = not stat.S_ISREG(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):
        fd, waits = -1, False
    while True:
        if waits:
            ready, _, _ = select.select([fd], [], [], idle_s)
            if not ready:
                yield IDLE
                continue
            data = os.read(fd, size)
        else:
            data = stream.read(size)
        if not data:
            return
        yield data


def split_records(chunks: Iterable[bytes | None], delimiter: bytes = b"\n", key_delimiter: bytes | None = None
                  ) -> Iterator[tuple[bytes | None, bytes] | None]:
    """(key, value) per record of a byte stream cut at ``delimiter`` (the last record needs none); the key is
    what comes before the first ``key_delimiter`` (none in the record: a null key). Empty records are skipped
    (kcat's rule). ``IDLE`` chunks pass through as None."""
    if not delimiter:
        raise ValueError("the record delimiter is empty")
    if key_delimiter is not None and not key_delimiter:
        raise ValueError("the key delimiter is empty")
    pending = b""
    for chunk in chunks:
        if chunk is None:
            yield None
            continue
        data = pending + chunk if pending else chunk
        parts = data.split(delimiter)
        pending = parts.pop()
        for part in parts:
            if part:
                yield _split_key(part, key_delimiter)
    if pending:
        yield _split_key(pending, key_delimiter)


def _split_key(data: bytes, key_delimiter: bytes | None) -> tuple[bytes | None, bytes]:
    if key_delimiter is None:
        return None, data
    key, found, value = data.partition(key_delimiter)
    return (key, value) if found else (None, data)


def parse_header(text: str) -> Header:
    """``name=value`` (kcat -H); ``name`` alone: a null value."""
    name, found, value = text.partition("=")
    if not name:
        raise ValueError(f"header {text!r}: expected name=value")
    return Header(name, value.encode("utf-8", "surrogateescape") if found else None)


# -- results ---------------------------------------------------------------------------------------------------
@dataclass
class PartitionResult:
    partition: int
    records: int = 0  # acknowledged (acks=0: sent)
    bytes: int = 0  # key + value bytes of those records
    batches: int = 0
    first_offset: int | None = None  # of the acknowledged records (None with acks=0)
    last_offset: int | None = None
    failed: int = 0  # records not acknowledged
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "records": self.records, "bytes": self.bytes, "batches": self.batches,
                "first_offset": self.first_offset, "last_offset": self.last_offset, "failed": self.failed,
                "errors": list(self.errors)}


@dataclass
class ProduceSummary:
    topic: str
    acks: int
    compression: str
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: dict[int, PartitionResult] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # not of one partition (the topic unknown...)
    epoch_bumps: list[str] = field(default_factory=list)  # KIP-360: why the idempotent producer bumped its epoch

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions.values())

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions.values())

    @property
    def failed(self) -> int:
        return sum(p.failed for p in self.partitions.values())

    @property
    def ok(self) -> bool:
        return not self.failed and not self.errors

    def result(self, partition: int) -> PartitionResult:
        found = self.partitions.get(partition)
        if found is None:
            found = self.partitions[partition] = PartitionResult(partition)
        return found

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "records": self.records, "bytes": self.bytes, "failed": self.failed,
                "acks": "all" if self.acks == -1 else str(self.acks), "compression": self.compression,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "partitions": [self.partitions[p].to_json() for p in sorted(self.partitions)],
                "errors": list(self.errors), "epoch_bumps": list(self.epoch_bumps)}


class ProduceError(KafkaClientError):
    """The topic cannot be produced to at all (it does not exist, no partition like the one asked)."""


# -- the producer ----------------------------------------------------------------------------------------------
@dataclass
class _Batch:
    partition: int
    records: list[Record] = field(default_factory=list)
    size: int = 61  # the v2 batch header
    data_bytes: int = 0
    created: float = 0.0
    raw: bytes | None = None  # built when closed
    base_sequence: int = -1
    attempts: int = 0
    serial: int = 0  # the order batches were closed in (renumbering after an epoch bump keeps it)
    final: bool = False  # its next failure is its last (an epoch bump failed)


class Producer:
    """Records in (``send``), batches out to the leaders; ``close()`` sends what is left and returns the summary.
    Use as a context manager or call ``close``; ``poll()`` sends batches older than ``linger_ms``."""

    def __init__(self, client: KafkaClient, topic: str, *, acks: int = -1, compression: Codec = Codec.NONE,
                 batch_size: int = DEFAULT_BATCH_SIZE, linger_ms: float = DEFAULT_LINGER_MS,
                 idempotent: bool = False, request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 retries: int = DEFAULT_RETRIES, auto_create: bool = True,
                 delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS) -> None:
        if acks not in (0, 1, -1):
            raise ValueError(f"acks {acks}: expected 0, 1 or -1 (all)")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=all (Kafka's rule)")
        self.client = client
        self.topic = topic
        self.acks = acks
        self.codec = Codec(compression)
        self.batch_size = max(1, batch_size)
        self.linger_s = max(0.0, linger_ms / 1000)
        self.request_timeout_ms = request_timeout_ms
        self.retries = retries
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.auto_create = auto_create
        self.summary = ProduceSummary(topic, acks, self.codec.label)
        self._open: dict[int, _Batch] = {}
        self._ready: list[_Batch] = []  # closed, in the order they were closed
        self._leaders: dict[int, int] = {}
        self._sticky: int | None = None
        self._sequences: dict[int, int] = {}
        self._closed = 0
        self._bump_reason: str | None = None  # an epoch bump to do before the next resend (KIP-360)
        self._refresh_metadata()
        if idempotent:
            self._init_producer_id()

    # -- metadata ---------------------------------------------------------------------------------------------
    def _refresh_metadata(self, attempts: int = 10) -> None:
        for attempt in range(attempts):
            connection = self.client._any()
            version, m = versioned_module(connection, ApiKey.METADATA)
            body = connection.call(ApiKey.METADATA, _build(
                m, "MetadataRequest", topics=(_build(m, "MetadataRequestTopic", name=self.topic, topic_id=None),),
                allow_auto_topic_creation=self.auto_create, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False))
            self.client._brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
            topic = next((t for t in body.topics if t.name == self.topic), None)
            error = topic.error_code if topic is not None else ErrorCode.unknown_topic_or_partition
            if error == ErrorCode.none and topic is not None and topic.partitions:
                self._leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
                return
            retriable = error in (ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition) and (
                self.auto_create or error == ErrorCode.leader_not_available)
            if not retriable or attempt == attempts - 1:
                raise ProduceError(f"topic {self.topic!r}: MetadataResponse v{version} topics[{self.topic}]"
                                   f".error_code = {error_name(error)}" + (
                                       " (the topic does not exist and the broker does not create topics)"
                                       if error == ErrorCode.unknown_topic_or_partition else ""))
            time.sleep(min(0.05 * (attempt + 1), 0.5))

    @property
    def partition_count(self) -> int:
        return len(self._leaders)

    def _init_producer_id(self, current: tuple[int, int] = (-1, -1)) -> None:
        """A producer id and epoch; with ``current`` (v3+, KIP-360) the one to bump (a broker gives an
        idempotent producer a new id, epoch 0; Kafka's own answer)."""
        for attempt in range(self.retries):
            connection = self.client._any()
            version, m = versioned_module(connection, ApiKey.INIT_PRODUCER_ID)
            pid, epoch = current if version >= 3 else (-1, -1)
            body = connection.call(ApiKey.INIT_PRODUCER_ID, _build(
                m, "InitProducerIdRequest", transactional_id=None, transaction_timeout=_ms(60_000),
                producer_id=pid, producer_epoch=epoch))
            if body.error_code == ErrorCode.none:
                self.summary.producer_id = int(body.producer_id)
                self.summary.producer_epoch = int(body.producer_epoch)
                return
            if body.error_code not in RETRIABLE_PRODUCE | {ErrorCode.coordinator_not_available,
                                                           ErrorCode.not_coordinator} or attempt == self.retries - 1:
                raise KafkaRequestError("", request=f"InitProducerIdResponse v{version}", field="error_code",
                                        error=body.error_code)
            time.sleep(0.1 * (attempt + 1))

    # -- accumulating -----------------------------------------------------------------------------------------
    def send(self, record: ProducerRecord) -> None:
        partition = record.partition
        if partition is None:
            if record.key is not None:
                partition = partition_for_key(record.key, self.partition_count)
            else:
                if self._sticky is None:
                    self._sticky = self._next_sticky()
                partition = self._sticky
        elif partition not in self._leaders:
            raise ProduceError(f"topic {self.topic!r} has no partition {partition} "
                               f"(it has {self.partition_count})")
        size = RECORD_FRAMING_ESTIMATE + len(record.key or b"") + len(record.value or b"") + sum(
            len(h.key_bytes()) + len(h.value or b"") + 10 for h in record.headers)
        batch = self._open.get(partition)
        if batch is not None and batch.records and batch.size + size > self.batch_size:
            self._close(batch)
            batch = None
        if batch is None:
            batch = self._open[partition] = _Batch(partition, created=time.monotonic())
        timestamp = int(time.time() * 1000) if record.timestamp is None else record.timestamp
        batch.records.append(Record(len(batch.records), timestamp, record.key, record.value, record.headers))
        batch.size += size
        batch.data_bytes += len(record.key or b"") + len(record.value or b"")
        if batch.size >= self.batch_size:
            self._close(batch)
        if len(self._ready) >= MAX_IN_FLIGHT * max(1, len(set(self._leaders.values()))):
            self._send_ready()

    def _next_sticky(self) -> int:
        candidates = [p for p, leader in self._leaders.items() if leader >= 0] or list(self._leaders)
        if self._sticky is not None and len(candidates) > 1:
            candidates = [p for p in candidates if p != self._sticky]
        return random.choice(candidates)

    def _close(self, batch: _Batch) -> None:
        del self._open[batch.partition]
        if batch.partition == self._sticky:
            self._sticky = None  # the next null-key record picks another partition (KIP-480)
        self._closed += 1
        batch.serial = self._closed
        self._number(batch)
        self._ready.append(batch)

    def _number(self, batch: _Batch) -> None:
        """The batch's bytes, with the partition's next sequence when idempotent."""
        if self.summary.producer_id >= 0:
            batch.base_sequence = self._sequences.get(batch.partition, 0)
            self._sequences[batch.partition] = (batch.base_sequence + len(batch.records)) & 0x7FFFFFFF
        batch.raw = build_record_batch(
            batch.records, base_offset=0, codec=self.codec, producer_id=self.summary.producer_id,
            producer_epoch=self.summary.producer_epoch, base_sequence=batch.base_sequence)

    def _bump_epoch(self, unacknowledged: list[_Batch]) -> None:
        """KIP-360: a new epoch (InitProducerId with the current id and epoch), every partition's sequence back
        to 0, and the batches not acknowledged yet renumbered in the order they were closed."""
        reason, self._bump_reason = self._bump_reason, None
        before = (self.summary.producer_id, self.summary.producer_epoch)
        self._init_producer_id(before)
        self._sequences.clear()
        for batch in sorted(unacknowledged, key=lambda b: b.serial):
            self._number(batch)
        self.summary.epoch_bumps.append(
            f"{reason}: producer id {before[0]} epoch {before[1]} bumped to producer id "
            f"{self.summary.producer_id} epoch {self.summary.producer_epoch}; {len(unacknowledged)} batches "
            "renumbered and resent")

    def poll(self) -> None:
        """Send the batches that have lingered long enough (and every closed one)."""
        now = time.monotonic()
        for batch in list(self._open.values()):
            if now - batch.created >= self.linger_s:
                self._close(batch)
        if self._ready:
            self._send_ready()

    def flush(self) -> None:
        for batch in list(self._open.values()):
            self._close(batch)
        while self._ready:
            self._send_ready()

    def close(self) -> ProduceSummary:
        self.flush()
        return self.summary

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.flush()

    # -- sending ----------------------------------------------------------------------------------------------
    def _send_ready(self) -> None:
        """Send every ready batch, retrying the retriable failures; what fails for good is counted."""
        pending, self._ready = self._ready, []
        while pending:
            retry: list[_Batch] = []
            by_leader: dict[int, list[_Batch]] = {}
            for batch in pending:
                by_leader.setdefault(self._leaders.get(batch.partition, -1), []).append(batch)
            for leader, batches in by_leader.items():
                if leader < 0:
                    retry.extend(self._failed(b, "no leader (LEADER_NOT_AVAILABLE)") for b in batches)
                    continue
                retry.extend(self._send_to(leader, batches))
            pending = [b for b in retry if b is not None]
            if self._bump_reason is not None:
                try:
                    self._bump_epoch(pending)
                except KafkaClientError as exc:
                    for batch in pending:
                        batch.final = True
                    self.summary.errors.append(f"the epoch bump failed: {exc.describe()}")
            if pending:
                time.sleep(min(0.1 * max(b.attempts for b in pending), 1.0))
                try:
                    self._refresh_metadata()
                except KafkaClientError:
                    pass  # the resend finds the same leaders; the attempts still run out

    def _failed(self, batch: _Batch, reason: str, retriable: bool = True) -> _Batch | None:
        """A batch to resend (retriable, within delivery.timeout.ms of its creation, as Kafka's producer retries:
        a leader moving under a loaded cluster can take seconds to show in the metadata), else None with the
        failure counted."""
        batch.attempts += 1
        if retriable and not batch.final and time.monotonic() - batch.created < self.delivery_timeout_s:
            return batch
        result = self.summary.result(batch.partition)
        result.failed += len(batch.records)
        result.errors.append(reason + (f" (after {batch.attempts} attempts)" if batch.attempts > 1 else ""))
        return None

    def _send_to(self, leader: int, batches: list[_Batch]) -> list[_Batch | None]:
        # requests: the i-th of them carries the i-th batch of each partition (one batch per partition each)
        per_partition: dict[int, list[_Batch]] = {}
        for batch in batches:
            per_partition.setdefault(batch.partition, []).append(batch)
        rounds: list[list[_Batch]] = []
        for queue in per_partition.values():
            for i, batch in enumerate(queue):
                if i == len(rounds):
                    rounds.append([])
                rounds[i].append(batch)
        out: list[_Batch | None] = []
        try:
            connection = self.client._node(leader)
            version, m = versioned_module(connection, ApiKey.PRODUCE)
        except KafkaClientError as exc:
            return [self._failed(b, exc.describe(), retriable=isinstance(exc, BrokerUnreachableError) or
                                 "not in the cluster's metadata" in exc.describe()) for b in batches]
        for start in range(0, len(rounds), MAX_IN_FLIGHT):
            group = rounds[start:start + MAX_IN_FLIGHT]
            bodies = [_build(m, "ProduceRequest", transactional_id=None, acks=self.acks,
                             timeout=_ms(self.request_timeout_ms), topic_data=(_build(
                                 m, "TopicProduceData", name=self.topic, partition_data=tuple(
                                     _build(m, "PartitionProduceData", index=b.partition, records=b.raw)
                                     for b in round_)),)) for round_ in group]
            try:
                if self.acks == 0:
                    _send_only(connection, bodies)
                    answers: list[Any] = [None] * len(bodies)
                else:
                    answers = connection.call_many(ApiKey.PRODUCE, bodies)
            except KafkaClientError as exc:
                unreachable = isinstance(exc, BrokerUnreachableError)
                out.extend(self._failed(b, exc.describe(), retriable=unreachable) for r in group for b in r)
                continue
            label = f"ProduceResponse v{version}"
            for round_, answer in zip(group, answers):
                if answer is None:  # acks=0
                    for batch in round_:
                        self._acknowledged(batch, None)
                    continue
                codes = {}
                for t in answer.responses:
                    for p in t.partition_responses:
                        codes[int(p.index)] = p
                for batch in round_:
                    p = codes.get(batch.partition)
                    if p is None:
                        out.append(self._failed(batch, f"{label}: no answer for partition {batch.partition}"))
                    elif p.error_code == ErrorCode.none:
                        self._acknowledged(batch, int(p.base_offset))
                    elif p.error_code == ErrorCode.duplicate_sequence_number:
                        self._acknowledged(batch, None)  # written by an earlier attempt (idempotence)
                    else:
                        field_path = f"responses[{self.topic}].partitions[{batch.partition}].error_code"
                        reason = KafkaRequestError(p.error_message or "", request=label, field=field_path,
                                                   error=p.error_code).describe()
                        # (an idempotent partition's batches after one that failed are out of order: they
                        # go again behind it)
                        behind = any(o is not None and o.partition == batch.partition for o in out)
                        retriable = p.error_code in RETRIABLE_PRODUCE or (
                            p.error_code == ErrorCode.out_of_order_sequence_number and behind)
                        if not retriable and not behind and self.summary.producer_id >= 0 and p.error_code in (
                                ErrorCode.unknown_producer_id, ErrorCode.out_of_order_sequence_number):
                            # the leader lost this producer's state or its last batches (KIP-360): bump
                            self._bump_reason = self._bump_reason or (
                                f"partition {batch.partition}: {error_name(p.error_code)}")
                            retriable = True
                        out.append(self._failed(batch, reason, retriable))
        return out

    def _acknowledged(self, batch: _Batch, base_offset: int | None) -> None:
        result = self.summary.result(batch.partition)
        result.records += len(batch.records)
        result.bytes += batch.data_bytes
        result.batches += 1
        if base_offset is not None and base_offset >= 0:
            last = base_offset + len(batch.records) - 1
            result.first_offset = base_offset if result.first_offset is None else min(result.first_offset,
                                                                                      base_offset)
            result.last_offset = last if result.last_offset is None else max(result.last_offset, last)


def _ms(ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=ms)


def _send_only(connection: BrokerConnection, bodies: Sequence[Any]) -> None:
    """Produce with acks=0: the broker sends no response, so none is awaited (nor matched)."""
    if connection._sock is None:
        raise BrokerUnreachableError(f"the connection to {connection.address} is closed")
    version = type(bodies[0]).__version__
    frames = [connection._wire.send_request(ApiKey.PRODUCE, version, body, expects_response=False)[1]
              for body in bodies]
    try:
        connection._sock.sendall(b"".join(frames))
    except OSError as exc:
        connection.close()
        raise BrokerUnreachableError(f"lost the connection to the Kafka broker at {connection.address}: "
                                     f"{exc.strerror or exc}") from None


def produce(client: KafkaClient, topic: str, records: Iterable[ProducerRecord | None], **options: Any
            ) -> ProduceSummary:
    """Send ``records`` (a None in them: no input for a while, so send what lingered) and return the summary."""
    producer = Producer(client, topic, **options)
    polled = time.monotonic()
    for record in records:
        if record is not None:
            producer.send(record)
        now = time.monotonic()
        if record is None or now - polled >= producer.linger_s:
            producer.poll()
            polled = now
    return producer.close()
