"""Consuming a topic (``kctl consume``): kcat -C's and kafka-console-consumer's job on kcli's client.

Start offsets in kcat's spellings (``parse_offset``): beginning, end, an absolute offset, -N (N before the end),
``s@TS``/``@TS`` (the first record at or after a timestamp, ListOffsets), ``stored`` (a group's committed offset);
``e@TS`` stops a partition at its first record at or after TS. ``Consumer.items()`` fetches from each partition's
leader (Fetch, pipelined per leader, following leader changes through a metadata refresh) and yields the records
of each batch (``Fetched``) and an ``EndOfPartition`` each time a partition reaches its end (the high watermark,
or the last stable offset with read_committed). With read_committed the aborted transactions' records are left
out as Kafka's consumer leaves them out (the Fetch response's aborted transactions, then each producer's ABORT
marker), and control batches are never yielded. Nothing here prints.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import (EARLIEST, LATEST, BrokerUnreachableError, KafkaClient, KafkaClientError,
                                KafkaRequestError, UnknownNodeError, _build)
from kcli.client.produce import versioned_module
from kcli.errors import CorruptRecordError, UsageError
from kcli.protocol.api import ApiKey
from kcli.records import Batch, ControlRecordType, Record, iter_batches

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
RETRIABLE_FETCH = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition, ErrorCode.kafka_storage_error,
    ErrorCode.offset_not_available, ErrorCode.replica_not_available, ErrorCode.network_exception})
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_PARTITION_MAX_BYTES = 1 << 20  # max.partition.fetch.bytes
DEFAULT_MAX_BYTES = 50 << 20  # fetch.max.bytes


# -- start and stop offsets ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OffsetSpec:
    """Where a partition starts: kind is beginning, end, offset (value), tail (value records before the end),
    timestamp (value ms) or stored (the group's committed offset)."""

    kind: str
    value: int = 0


def parse_offset(text: str) -> tuple[OffsetSpec | None, int | None]:
    """kcat's -o: (a start, or None) and (a stop timestamp from ``e@TS``, or None); UsageError otherwise."""
    word = text.strip()
    if word in ("beginning", "earliest", "smallest"):
        return OffsetSpec("beginning"), None
    if word in ("end", "latest", "largest"):
        return OffsetSpec("end"), None
    if word == "stored":
        return OffsetSpec("stored"), None
    for prefix, start in (("s@", True), ("@", True), ("e@", False)):
        if word.startswith(prefix):
            number = word[len(prefix):]
            if not number.lstrip("-").isdigit():
                break
            return (OffsetSpec("timestamp", int(number)), None) if start else (None, int(number))
    else:
        if word.lstrip("-").isdigit():
            value = int(word)
            return (OffsetSpec("tail", -value), None) if value < 0 else (OffsetSpec("offset", value), None)
    raise UsageError(f"-o {text!r}: expected beginning, end, stored, an offset, -N (N before the end), "
                     "s@TIMESTAMP or @TIMESTAMP (ms: the first record at or after it) or e@TIMESTAMP (stop there)")


# -- what the consumer yields ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Fetched:
    """Records of one batch of one partition, in offset order (``next_offset``: the position after them)."""

    topic: str
    partition: int
    batch: Batch
    records: list[Record]
    next_offset: int


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    topic: str
    partition: int
    offset: int  # the position: the high watermark (read_committed: the last stable offset)


@dataclass(frozen=True, slots=True)
class ConsumeNotice:
    """Something a person should know (an offset reset, a leader change retried); not an error."""

    text: str


@dataclass
class _Position:
    partition: int
    offset: int
    leader: int = -1
    stop_timestamp: int | None = None
    done: bool = False  # reached e@TS
    at_end: bool = False
    failures: int = 0


@dataclass
class ConsumeOptions:
    partitions: Sequence[int] | None = None  # None: every partition
    start: OffsetSpec = field(default_factory=lambda: OffsetSpec("beginning"))
    stop_timestamp: int | None = None
    isolation_level: int = READ_UNCOMMITTED
    group: str | None = None  # with start "stored": the group's committed offsets
    offsets: dict[int, int] | None = None  # a start per partition (a group member's committed ones); others: start
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    partition_max_bytes: int = DEFAULT_PARTITION_MAX_BYTES
    retries: int = 20  # consecutive failed fetches of one partition before giving up


class Consumer:
    """One topic's partitions from their start offsets; ``items()`` yields Fetched, EndOfPartition and
    ConsumeNotice items until the caller stops iterating (every partition stopped by e@TS ends it)."""

    def __init__(self, client: KafkaClient, topic: str, options: ConsumeOptions) -> None:
        self.client = client
        self.topic = topic
        self.options = options
        self.positions: dict[int, _Position] = {}
        self._notices: list[str] = []
        leaders = self._leaders()
        wanted = sorted(leaders) if options.partitions is None else list(dict.fromkeys(options.partitions))
        missing = [p for p in wanted if p not in leaders]
        if missing:
            raise UsageError(f"topic {topic!r} has no partition {missing[0]} (it has {len(leaders)})")
        known = options.offsets or {}
        starts = self._start_offsets([p for p in wanted if p not in known], options.start)
        starts.update((p, known[p]) for p in wanted if p in known)
        for p in wanted:
            self.positions[p] = _Position(p, starts[p], leaders[p], options.stop_timestamp)

    # -- metadata and offsets -------------------------------------------------------------------------------
    def _leaders(self) -> dict[int, int]:
        meta = self.client.metadata([self.topic])
        t = meta.topics.get(self.topic)
        if t is None or t.error == ErrorCode.unknown_topic_or_partition:
            raise KafkaClientError(f"topic {self.topic!r} does not exist", path="MetadataResponse")
        if t.error != ErrorCode.none:
            raise KafkaRequestError(f"topic {self.topic}", request="MetadataResponse",
                                    field=f"topics[{self.topic}].error_code", error=t.error)
        return dict(t.partitions)

    def _list_offsets(self, partitions: Sequence[int], timestamp: int) -> dict[int, int]:
        """ListOffsets per partition (EARLIEST, LATEST or a time; -1 where no record is at or after the time).
        A partition whose leader is moving (NOT_LEADER_OR_FOLLOWER, no leader yet, an unreachable broker) is
        asked again after a fresh Metadata, as Kafka's consumer retries its offset lookups, up to ``retries``
        times (about 15 s) before the error is the consumer's."""
        from kcli.client.offsets_time import offsets_for_time

        out: dict[int, int] = {}
        pending = list(partitions)
        for attempt in range(self.options.retries + 1):
            last = attempt == self.options.retries
            try:
                found = offsets_for_time(self.client, [(self.topic, p) for p in pending], timestamp,
                                         read_committed=self.options.isolation_level == READ_COMMITTED)
            except (BrokerUnreachableError, UnknownNodeError):
                if last:
                    raise
                found = []  # every pending partition is asked again
            else:
                pending = []
            for o in found:
                if o.error is None:
                    out[o.partition] = o.offset if timestamp in (EARLIEST, LATEST) else (o.seek_offset or 0)
                elif not last and o.error_code in RETRIABLE_FETCH:
                    pending.append(o.partition)
                else:
                    raise KafkaClientError(f"{self.topic}-{o.partition}: {o.error}")
            if not pending:
                break
            time.sleep(min(0.1 * 2 ** attempt, 1.0))
        return out

    def _start_offsets(self, partitions: Sequence[int], start: OffsetSpec) -> dict[int, int]:
        if not partitions:
            return {}
        if start.kind == "offset":
            return {p: start.value for p in partitions}
        if start.kind == "beginning":
            return self._list_offsets(partitions, EARLIEST)
        if start.kind == "end":
            return self._list_offsets(partitions, LATEST)
        if start.kind == "timestamp":
            return self._list_offsets(partitions, start.value)
        if start.kind == "tail":
            first, end = self._list_offsets(partitions, EARLIEST), self._list_offsets(partitions, LATEST)
            return {p: max(first[p], end[p] - start.value) for p in partitions}
        if start.kind == "stored":
            if not self.options.group:
                raise UsageError("-o stored needs a group (-G)")
            committed = self.client.offset_fetch(self.options.group, [(self.topic, p) for p in partitions])
            out = {p: committed[(self.topic, p)] for p in partitions if (self.topic, p) in committed}
            rest = [p for p in partitions if p not in out]
            if rest:
                out.update(self._list_offsets(rest, EARLIEST))  # no commit yet: the beginning
            return out
        raise UsageError(f"unknown start {start.kind!r}")

    def _refresh(self) -> None:
        try:
            leaders = self._leaders()
        except KafkaClientError as exc:
            self._notices.append(f"metadata refresh failed: {exc.describe()}")
            return
        for p, position in self.positions.items():
            position.leader = leaders.get(p, -1)

    # -- fetching -------------------------------------------------------------------------------------------
    def items(self) -> Iterator[Fetched | EndOfPartition | ConsumeNotice]:
        while not self.finished:
            yield from self.round()

    @property
    def finished(self) -> bool:
        """Every partition stopped (e@TS) and every notice yielded."""
        return all(p.done for p in self.positions.values()) and not self._notices

    def round(self, wait: bool | None = None) -> Iterator[Fetched | EndOfPartition | ConsumeNotice]:
        """One fetch from each leader of the partitions still read (a group member interleaves the rounds of
        its topics' consumers); ``wait``: whether the broker may hold the fetch for max_wait_ms (default: when
        every partition is at its end, or one leader has them all)."""
        for text in self._notices:
            yield ConsumeNotice(text)
        self._notices.clear()
        live = [p for p in self.positions.values() if not p.done]
        if not live:
            return
        by_leader: dict[int, list[_Position]] = {}
        for position in live:
            by_leader.setdefault(position.leader, []).append(position)
        refresh = -1 in by_leader
        if wait is None:
            wait = all(p.at_end for p in live) or len(by_leader) == 1
        for leader, positions in sorted(by_leader.items()):
            if leader < 0:
                continue
            try:
                yield from self._fetch(leader, positions, wait=wait)
            except KafkaClientError as exc:
                refresh = True
                for position in positions:
                    self._failed(position, exc.describe(),
                                 retriable=isinstance(exc, (BrokerUnreachableError, UnknownNodeError)))
        if refresh:
            time.sleep(0.2)
            self._refresh()

    def _failed(self, position: _Position, reason: str, *, retriable: bool) -> None:
        position.failures += 1
        if not retriable or position.failures > self.options.retries:
            raise KafkaClientError(f"{self.topic}-{position.partition}: {reason}")
        self._notices.append(f"{self.topic}-{position.partition}: {reason}; retrying")

    def _fetch(self, leader: int, positions: list[_Position], *, wait: bool
               ) -> Iterator[Fetched | EndOfPartition | ConsumeNotice]:
        connection = self.client._node(leader)
        version, m = versioned_module(connection, ApiKey.FETCH)
        parts = tuple(_build(m, "FetchPartition", partition=p.partition, current_leader_epoch=-1,
                             fetch_offset=p.offset, last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=self.options.partition_max_bytes)
                      for p in positions)
        body = connection.call(ApiKey.FETCH, _build(
            m, "FetchRequest", replica_id=-1, max_wait=_ms(self.options.max_wait_ms if wait else 0), min_bytes=1,
            max_bytes=DEFAULT_MAX_BYTES, isolation_level=self.options.isolation_level, session_id=0,
            session_epoch=-1, topics=(_build(m, "FetchTopic", topic=self.topic, topic_id=None, partitions=parts),),
            forgotten_topics_data=(), rack_id=""))
        label = f"FetchResponse v{version}"
        if getattr(body, "error_code", ErrorCode.none) != ErrorCode.none:
            raise KafkaRequestError("", request=label, field="error_code", error=body.error_code)
        by_partition = {p.partition: p for p in positions}
        for t in body.responses:
            for data in t.partitions:
                position = by_partition.get(int(data.partition_index))
                if position is None:
                    continue
                yield from self._partition(position, data, label)

    def _partition(self, position: _Position, data: Any, label: str
                   ) -> Iterator[Fetched | EndOfPartition | ConsumeNotice]:
        error = ErrorCode(data.error_code)
        if error == ErrorCode.offset_out_of_range:
            reset = self._list_offsets([position.partition], EARLIEST)[position.partition]
            end = self._list_offsets([position.partition], LATEST)[position.partition]
            target = reset if position.offset < reset else end
            yield ConsumeNotice(f"{self.topic}-{position.partition}: offset {position.offset} is out of range "
                                f"(the log holds {reset}-{end}); starting at {target}")
            position.offset = target
            return
        if error != ErrorCode.none:
            field_path = f"responses[{self.topic}].partitions[{position.partition}].error_code"
            reason = KafkaRequestError("", request=label, field=field_path, error=error).describe()
            self._failed(position, reason, retriable=error in RETRIABLE_FETCH)
            if error in RETRIABLE_FETCH:
                position.leader = -1  # a metadata refresh before the next fetch
            return
        position.failures = 0
        committed = self.options.isolation_level == READ_COMMITTED
        end = int(data.last_stable_offset) if committed and int(data.last_stable_offset) >= 0 else int(
            data.high_watermark)
        aborted = [(int(a.first_offset), int(a.producer_id)) for a in (data.aborted_transactions or ())]
        heapq.heapify(aborted)
        aborted_producers: set[int] = set()
        records_bytes = data.records or b""
        progressed = False
        for batch in iter_batches(bytes(records_bytes)):
            if batch.next_offset <= position.offset:
                continue  # a batch before the position (a fetch inside a batch returns the whole batch)
            try:
                if committed and batch.magic >= 2 and batch.producer_id >= 0:
                    while aborted and aborted[0][0] <= batch.last_offset:
                        aborted_producers.add(heapq.heappop(aborted)[1])
                    if batch.is_control:
                        if _is_abort_marker(batch):
                            aborted_producers.discard(batch.producer_id)
                    elif batch.is_transactional and batch.producer_id in aborted_producers:
                        position.offset = batch.next_offset
                        progressed = True
                        continue
                if getattr(batch, "is_control", False):
                    position.offset = batch.next_offset
                    progressed = True
                    continue
                records = [r for r in batch.records() if r.offset >= position.offset]
            except CorruptRecordError as exc:
                raise KafkaClientError(f"{self.topic}-{position.partition}: a corrupt batch at offset "
                                       f"{batch.base_offset} from the broker: {exc.describe()}") from None
            if position.stop_timestamp is not None:
                kept = []
                for r in records:
                    if r.timestamp >= position.stop_timestamp:
                        position.done = True
                        break
                    kept.append(r)
                records = kept
            next_offset = records[-1].offset + 1 if position.done and records else batch.next_offset
            position.offset = next_offset
            progressed = True
            if records:
                position.at_end = False
                yield Fetched(self.topic, position.partition, batch, records, next_offset)
            if position.done:
                return
        if not progressed and records_bytes and position.offset < end:
            # a batch larger than the partition's fetch size: ask for more next time (KIP-74 brokers never need it)
            self.options.partition_max_bytes = min(self.options.partition_max_bytes * 2, DEFAULT_MAX_BYTES)
        if position.offset >= end and not position.at_end:
            position.at_end = True
            yield EndOfPartition(self.topic, position.partition, position.offset)


def _is_abort_marker(batch: Batch) -> bool:
    for record in batch.records():
        return batch.control_type(record) is ControlRecordType.ABORT
    return False


def _ms(ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=ms)
