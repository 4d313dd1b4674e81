"""Consumer offsets moved between stores (ZooKeeper, Kafka, a stopped broker's log dir, CSV/JSON files):
plan -> backup -> apply -> verify, as report dataclasses with to_json(). Nothing here prints.

A store is any object with ``kind``, ``location``, ``list_groups()``, ``read(groups, progress)`` ->
{group: {(topic, partition): offset}}, ``live_members(groups)`` -> {group: why it is live, or None} and, as a
target, ``write(group, offsets)`` -> {(topic, partition): error or None}. The log ranges come from an object
with ``topic_partitions(topics)`` -> {topic: partition count or None} and ``log_offsets(partitions)`` ->
{(topic, partition): (log start, log end)}: kcli.client.KafkaOffsetStore, or LogDirOffsetStore here.
The CLI wires them (kcli.zk.offsets.ZkOffsetStore, kcli.client.KafkaOffsetStore).
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kcli.errors import InputError, KcliError
from kcli.records import Record
from kcli.records.consumer_offsets import (
    DEFAULT_OFFSETS_PARTITIONS,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_offset_commit,
    partition_for_group,
)
from kcli.storage.checked import CheckedBatchReader
from kcli.storage.checkpoint import read_partition_entry, write_partition_entry
from kcli.storage.files import (
    CLEAN_SHUTDOWN,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    FileKind,
    classify,
    offset_from_filename,
    segment_path,
)
from kcli.storage.log import PartitionLog
from kcli.storage.offsets_topic import iter_offsets_topic
from kcli.tools.inputs import log_dir_partitions
from kcli.tools.report import Problem

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]
Progress = Callable[[int], None]
OFFSETS_TOPIC = "__consumer_offsets"

# Partition actions. A group with any refused partition, or live members, is refused as a whole: a group
# is committed completely or not at all.
COMMIT, UNCHANGED, CLAMPED = "commit", "unchanged", "clamp"
OUT_OF_RANGE, UNKNOWN_TOPIC, UNKNOWN_PARTITION = "refuse-out-of-range", "refuse-unknown-topic", "refuse-unknown-partition"
REFUSALS = frozenset({OUT_OF_RANGE, UNKNOWN_TOPIC, UNKNOWN_PARTITION})


class OffsetsError(KcliError):
    """A store refused a read or write, or a file is not an offsets file."""


class LogDirLockedError(OffsetsError):
    """A running broker holds the log dir's .lock."""


class OffsetStore(Protocol):
    kind: str
    location: str

    def list_groups(self) -> list[str]: ...

    def read(self, groups: Sequence[str], progress: Progress | None = None) -> dict[str, Offsets]: ...

    def live_members(self, groups: Sequence[str]) -> dict[str, str | None]: ...

    def write(self, group: str, offsets: Offsets) -> dict[TopicPartition, str | None]: ...


class LogRanges(Protocol):
    def topic_partitions(self, topics: Sequence[str]) -> dict[str, int | None]: ...

    def log_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]: ...


# -- the plan ----------------------------------------------------------------------------------------------
@dataclass
class PartitionPlan:
    topic: str
    partition: int
    source_offset: int
    target_offset: int | None  # what the target holds now (None: nothing)
    log_start_offset: int | None
    log_end_offset: int | None
    planned_offset: int | None  # what the target will hold (None: refused)
    action: str
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "source_offset": self.source_offset,
                "target_offset": self.target_offset, "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset, "planned_offset": self.planned_offset,
                "action": self.action, "reason": self.reason}


@dataclass
class GroupPlan:
    group: str
    partitions: list[PartitionPlan] = field(default_factory=list)
    live: list[str] = field(default_factory=list)  # why the group counts as running (refused unless --force)
    forced: bool = False
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the source's offsets of this group cannot be read
    missing: bool = False  # named with --group, but the source has no such group

    @property
    def refusals(self) -> list[str]:
        out = list(self.errors)
        out += [] if self.forced else list(self.live)
        out += [f"{p.topic}-{p.partition}: {p.reason}" for p in self.partitions if p.action in REFUSALS]
        return out

    @property
    def status(self) -> str:
        if self.missing:
            return "not_found"
        if self.refusals:
            return "refused"
        if not self.partitions:
            return "empty"
        if all(p.action == UNCHANGED for p in self.partitions):
            return "unchanged"
        return "commit"

    @property
    def to_write(self) -> Offsets:
        return {(p.topic, p.partition): p.planned_offset for p in self.partitions  # type: ignore[misc]
                if p.action in (COMMIT, CLAMPED)}

    @property
    def planned(self) -> Offsets:
        return {(p.topic, p.partition): p.planned_offset for p in self.partitions  # type: ignore[misc]
                if p.planned_offset is not None}

    @property
    def previous(self) -> Offsets:
        return {(p.topic, p.partition): p.target_offset for p in self.partitions  # type: ignore[misc]
                if p.target_offset is not None}

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "status": self.status, "live": self.live, "forced": self.forced,
                "refusals": self.refusals, "errors": self.errors, "notes": self.notes,
                "partitions": [p.to_json() for p in self.partitions]}


@dataclass
class TransferPlan:
    source: str
    source_location: str
    target: str
    target_location: str
    groups: list[GroupPlan]
    clamp: bool = False
    force: bool = False

    def count(self, status: str) -> int:
        return sum(g.status == status for g in self.groups)

    @property
    def partitions(self) -> int:
        return sum(len(g.partitions) for g in self.groups)

    @property
    def ok(self) -> bool:
        return not any(g.status in ("refused", "not_found") for g in self.groups)

    @property
    def problems(self) -> list[Problem]:
        """Refused groups and groups not found, in the shared report shape (file: the group's location)."""
        out = []
        for g in self.groups:
            where = f"{self.source_location} group {g.group}"
            if g.missing:
                out.append(Problem(where, None, None, f"no group {g.group} in {self.source}", "group_not_found"))
            out += [Problem(where, None, None, reason, "group_refused") for reason in g.refusals]
        return out

    def summary(self) -> dict[str, int]:
        return {"groups": len(self.groups), "partitions": self.partitions,
                **{f"groups_{s}": self.count(s) for s in ("commit", "unchanged", "refused", "empty", "not_found")},
                "partitions_to_write": sum(len(g.to_write) for g in self.groups if g.status == "commit")}

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "source_location": self.source_location, "target": self.target,
                "target_location": self.target_location, "clamp": self.clamp, "force": self.force, "ok": self.ok,
                "summary": self.summary(), "groups": [g.to_json() for g in self.groups],
                "problems": [p.to_json() for p in self.problems]}


def _select(offsets: Offsets, topics: set[str] | None) -> Offsets:
    return {tp: o for tp, o in offsets.items() if topics is None or tp[0] in topics}


def plan_transfer(source: OffsetStore, target: OffsetStore, ranges: LogRanges, *,
                  groups: Sequence[str] | None = None, topics: Sequence[str] | None = None, clamp: bool = False,
                  force: bool = False, live_checks: Sequence[OffsetStore] = (),
                  progress: Progress | None = None, on_total: Progress | None = None) -> TransferPlan:
    """What moving ``source``'s offsets to ``target`` would do, per group and partition. Reads only.

    ``on_total`` learns the number of groups once known; ``progress`` then advances as groups are read.
    """
    names = sorted(set(groups)) if groups is not None else sorted(source.list_groups())
    if on_total is not None:
        on_total(len(names))
    wanted = set(topics) if topics else None
    source_offsets = source.read(names, progress)
    read_errors: dict[str, str] = dict(getattr(source, "read_errors", None) or {})
    # A group asked for by name that the source does not have is a typo to report, not "no offsets".
    known = set(source.list_groups()) if groups is not None else set(names)
    names = [g for g in names if not wanted or _select(source_offsets.get(g, {}), wanted) or groups is not None]
    target_offsets = target.read(names) if names else {}
    live: dict[str, list[str]] = {g: [] for g in names}
    for store in live_checks:
        for group, why in store.live_members(names).items():
            if why and group in live:
                live[group].append(why)
    all_topics = sorted({t for g in names for t, _ in _select(source_offsets.get(g, {}), wanted)})
    counts = ranges.topic_partitions(all_topics) if all_topics else {}
    existing = sorted({tp for g in names for tp in _select(source_offsets.get(g, {}), wanted)
                       if counts.get(tp[0]) is not None and tp[1] < counts[tp[0]]})  # type: ignore[operator]
    log_ranges = ranges.log_offsets(existing) if existing else {}
    plans = []
    for group in names:
        plan = GroupPlan(group, live=live[group], forced=force and bool(live[group]))
        offsets = _select(source_offsets.get(group, {}), wanted)
        if group in read_errors:
            plan.errors.append(read_errors[group])
        elif group not in known and not offsets:
            plan.missing = True
            plan.notes.append(f"no group {group} in {source.kind}")
        elif group not in source_offsets or not offsets:
            plan.notes.append(f"no offsets in {source.kind}")
        current = target_offsets.get(group, {})
        for (topic, partition), offset in sorted(offsets.items()):
            before = current.get((topic, partition))
            start, end = log_ranges.get((topic, partition), (None, None))
            p = PartitionPlan(topic, partition, offset, before, start, end, offset, COMMIT)
            if counts.get(topic) is None:
                p.action, p.planned_offset, p.reason = UNKNOWN_TOPIC, None, f"topic {topic} does not exist"
            elif (topic, partition) not in log_ranges:
                p.action, p.planned_offset = UNKNOWN_PARTITION, None
                p.reason = f"topic {topic} has {counts[topic]} partitions"
            elif not start <= offset <= end:  # type: ignore[operator]
                if clamp:
                    p.planned_offset = min(max(offset, start), end)  # type: ignore[type-var]
                    p.action = CLAMPED
                    p.reason = f"offset {offset} outside the log [{start}, {end}]: clamped to {p.planned_offset}"
                else:
                    p.action, p.planned_offset = OUT_OF_RANGE, None
                    p.reason = f"offset {offset} outside the log [{start}, {end}] (use --clamp)"
            if p.planned_offset is not None and p.planned_offset == before:
                p.action = UNCHANGED
            plan.partitions.append(p)
        plans.append(plan)
    return TransferPlan(source.kind, source.location, target.kind, target.location, plans, clamp, force)


# -- backup, apply, verify ---------------------------------------------------------------------------------
@dataclass
class Difference:
    group: str
    topic: str
    partition: int
    planned_offset: int
    found_offset: int | None

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "partition": self.partition,
                "planned_offset": self.planned_offset, "found_offset": self.found_offset}


@dataclass
class ApplyResult:
    plan: TransferPlan
    backup: str | None = None
    committed: list[str] = field(default_factory=list)  # groups written completely
    failed_group: str | None = None
    error: str | None = None
    partition_errors: dict[str, dict[str, str]] = field(default_factory=dict)  # group -> "t-p" -> error
    not_attempted: list[str] = field(default_factory=list)
    verified: bool = False
    nothing_to_verify: bool = False  # no group was written or found unchanged (all refused, or none planned)
    differences: list[Difference] = field(default_factory=list)
    no_previous: int = 0  # partitions the target had no offset for (a roll-back from the backup cannot remove them)
    elapsed_s: float = 0.0
    exception: KcliError | None = field(default=None, repr=False)  # what stopped the run, for the caller to map

    @property
    def ok(self) -> bool:
        return (self.plan.ok and self.error is None and not self.partition_errors
                and (self.verified or self.nothing_to_verify) and not self.differences)

    @property
    def problems(self) -> list[Problem]:
        out = list(self.plan.problems)
        if self.error is not None:
            out.append(Problem(f"{self.plan.target_location} group {self.failed_group}", None, None, self.error,
                               "write_failed"))
        for group, errors in self.partition_errors.items():
            out += [Problem(f"{self.plan.target_location} group {group}", None, None, f"{tp}: {e}", "write_failed")
                    for tp, e in errors.items()]
        out += [Problem(f"{self.plan.target_location} group {d.group}", None, None,
                        f"{d.topic}-{d.partition}: planned {d.planned_offset}, found {d.found_offset}",
                        "verify_mismatch") for d in self.differences]
        return out

    @property
    def partitions_written(self) -> int:
        by_group = {g.group: g for g in self.plan.groups}
        return sum(len(by_group[g].to_write) for g in self.committed)

    def to_json(self) -> dict[str, Any]:
        rate = self.partitions_written / self.elapsed_s if self.elapsed_s > 0 else None
        return {"plan": self.plan.to_json(), "executed": True, "ok": self.ok, "backup": self.backup,
                "committed_groups": self.committed, "failed_group": self.failed_group, "error": self.error,
                "partition_errors": self.partition_errors, "not_attempted_groups": self.not_attempted,
                "verified": self.verified, "differences": [d.to_json() for d in self.differences],
                "partitions_without_previous_offset": self.no_previous,
                "partitions_written": self.partitions_written, "elapsed_s": round(self.elapsed_s, 3),
                "partitions_per_s": round(rate, 1) if rate else None,
                "problems": [p.to_json() for p in self.problems]}


def write_backup(plan: TransferPlan, path: Path) -> int:
    """The target's offsets before the change, for every partition about to be written, as a CSV that
    ``kafka-consumer-groups --reset-offsets --from-file`` reads: ``topic,partition,offset`` when one group
    changes, ``group,topic,partition,offset`` when several do. Returns the number of lines; with none (the
    target held no offset for any of them) no file is written: an empty backup would restore nothing."""
    groups = [g for g in plan.groups if g.status == "commit"]
    rows = []
    for g in groups:
        previous = g.previous
        for tp in sorted(g.to_write):
            if tp in previous:
                rows.append((g.group, tp[0], tp[1], previous[tp]))
    if not rows:
        return 0
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", newline="") as out:
            writer = csv.writer(out, lineterminator="\n")
            for group, topic, partition, offset in rows:
                writer.writerow([topic, partition, offset] if len(groups) == 1 else [group, topic, partition, offset])
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise OffsetsError(f"cannot write the backup: {exc.strerror}", path=str(path)) from None
    return len(rows)


def apply_plan(plan: TransferPlan, target: OffsetStore, *, backup: Path | None,
               progress: Progress | None = None, on_group: Callable[[str], None] | None = None) -> ApplyResult:
    """Back up, then write group by group (one request per group), then read back and compare.

    Refused, unchanged and empty groups are not written. A failure stops the run: the result names the groups
    written before it, the group that failed and those not attempted.
    """
    started = time.monotonic()
    result = ApplyResult(plan)
    todo = [g for g in plan.groups if g.status == "commit"]
    result.no_previous = sum(1 for g in todo for tp in g.to_write if tp not in g.previous)
    if todo and backup is not None and write_backup(plan, backup):
        result.backup = str(backup)
    for index, group in enumerate(todo):
        try:
            errors = target.write(group.group, group.to_write)
        except KcliError as exc:
            result.failed_group, result.error, result.exception = group.group, exc.describe(), exc
            result.not_attempted = [g.group for g in todo[index + 1:]]
            result.elapsed_s = time.monotonic() - started
            return result
        bad = {f"{t}-{p}": e for (t, p), e in errors.items() if e}
        if bad:
            result.partition_errors[group.group] = bad
        else:
            result.committed.append(group.group)
        if progress is not None:
            progress(1)
        if on_group is not None:
            on_group(group.group)
    checked = [g for g in plan.groups if g.status in ("commit", "unchanged")]
    try:
        result.differences = verify(plan, target, checked)
        # "verified" means offsets were read back and compared: never said of a run whose groups were all refused
        result.verified = bool(checked)
        result.nothing_to_verify = not checked
    except KcliError as exc:
        result.error, result.exception = f"verification failed: {exc.describe()}", exc
    result.elapsed_s = time.monotonic() - started
    return result


def verify(plan: TransferPlan, target: OffsetStore, groups: Sequence[GroupPlan]) -> list[Difference]:
    """Read the target back: every planned offset must be there exactly."""
    if not groups:
        return []
    found = target.read([g.group for g in groups])
    out = []
    for g in groups:
        now = found.get(g.group, {})
        for (topic, partition), offset in sorted(g.planned.items()):
            if now.get((topic, partition)) != offset:
                out.append(Difference(g.group, topic, partition, offset, now.get((topic, partition))))
    return out


# -- files: CSV and JSON -----------------------------------------------------------------------------------
def dump_offsets(offsets: dict[str, Offsets], fmt: str, *, source: str = "", location: str = "") -> str:
    """CSV as kafka-consumer-groups --export writes it (``topic,partition,offset`` for one group,
    ``group,topic,partition,offset`` for several) or JSON ``{"source", "location", "groups": [{"group",
    "offsets": [{"topic", "partition", "offset"}]}]}``."""
    if fmt == "json":
        return json.dumps({"source": source, "location": location, "groups": [
            {"group": g, "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(tps.items())]}
            for g, tps in sorted(offsets.items())]}, indent=1) + "\n"
    if fmt != "csv":
        raise OffsetsError(f"unknown format {fmt!r} (csv or json)")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    single = len(offsets) == 1
    for g, tps in sorted(offsets.items()):
        for (t, p), o in sorted(tps.items()):
            writer.writerow([t, p, o] if single else [g, t, p, o])
    return out.getvalue()


def load_offsets(path: Path, *, group: str | None = None, fmt: str | None = None) -> dict[str, Offsets]:
    """Offsets from a CSV (3 columns need ``group``) or JSON file written by dump_offsets/write_backup."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    fmt = fmt or ("json" if path.suffix == ".json" or text.lstrip().startswith("{") else "csv")
    out: dict[str, Offsets] = {}
    if fmt == "json":
        try:
            document = json.loads(text)
            for entry in document["groups"]:
                tps = out.setdefault(str(entry["group"]), {})
                for o in entry["offsets"]:
                    tps[(str(o["topic"]), _nonneg(o["partition"]))] = _nonneg(o["offset"])
        except (ValueError, KeyError, TypeError) as exc:
            raise OffsetsError(f"not an offsets JSON file ({type(exc).__name__}: {exc})", path=str(path)) from None
        return out
    for line_no, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip():
            continue
        try:
            if len(row) == 3:
                if group is None:
                    raise OffsetsError("three columns (topic,partition,offset) need the group: give --group")
                g, (t, p, o) = group, row
            elif len(row) == 4:
                g, t, p, o = row
            else:
                raise OffsetsError(f"expected topic,partition,offset or group,topic,partition,offset; "
                                   f"found {len(row)} fields")
            out.setdefault(g.strip(), {})[(t.strip(), _nonneg(p))] = _nonneg(o)
        except (ValueError, TypeError) as exc:
            raise OffsetsError(f"line {line_no}: {exc}", path=str(path)) from None
        except OffsetsError as exc:
            raise OffsetsError(f"line {line_no}: {exc.reason}", path=str(path)) from None
    return out


def _nonneg(value: Any) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isascii() or not text.isdigit():
        raise ValueError(f"{value!r} is not a non-negative integer")
    return int(text)


class FileOffsetStore:
    """Offsets from a file, as a source (never live, never written)."""

    kind = "file"

    def __init__(self, path: Path, *, group: str | None = None, fmt: str | None = None) -> None:
        self.location = str(path)
        self.offsets = load_offsets(path, group=group, fmt=fmt)

    def list_groups(self) -> list[str]:
        return sorted(self.offsets)

    def read(self, groups: Sequence[str], progress: Progress | None = None) -> dict[str, Offsets]:
        if progress is not None:
            progress(len(groups))
        return {g: dict(self.offsets.get(g, {})) for g in groups}

    def live_members(self, groups: Sequence[str]) -> dict[str, str | None]:
        return {g: None for g in groups}

    def write(self, group: str, offsets: Offsets) -> dict[TopicPartition, str | None]:
        raise OffsetsError("a file is not a target", path=self.location)


# -- offline: a stopped broker's log dir -------------------------------------------------------------------
class LogDirOffsetStore:
    """``__consumer_offsets`` of a stopped broker, read and appended to directly (Kafka's record format:
    OffsetCommitKey v1 / OffsetCommitValue v3, one batch per group in partition
    abs(groupId.hashCode) % partitions). Holds the log dir's ``.lock`` while open: a running broker refuses
    to start, and a running broker's lock makes this refuse.
    """

    kind = "log-dir"

    def __init__(self, log_dir: Path, *, offsets_partitions: int | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.location = str(self.log_dir)
        if not self.log_dir.is_dir():
            raise InputError("not a directory", path=str(self.log_dir))
        self._fd = os.open(self.log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise LogDirLockedError(f"a running broker holds {self.log_dir / LOCK_FILE}: stop it first (offline "
                                    "mode appends to the log directly)", path=str(self.log_dir)) from None
        self._dirs: dict[TopicPartition, Path] = log_dir_partitions(self.log_dir)
        present = [p for t, p in self._dirs if t == OFFSETS_TOPIC]
        # Groups hash over the topic's partition count, which is not the number of directories here (a broker of
        # a cluster holds only the partitions it replicates): the count given, else the highest partition the log
        # dir knows (its directories and checkpoint files) + 1. A group whose partition is not here is refused.
        known = present + [p for t, p in _checkpointed_partitions(self.log_dir) if t == OFFSETS_TOPIC]
        self.offsets_partitions = max(known) + 1 if present else 0
        if offsets_partitions is not None and present:
            if offsets_partitions <= max(known):
                self.close()
                raise OffsetsError(f"--offsets-partitions {offsets_partitions} is not more than partition "
                                   f"{max(known)} of {OFFSETS_TOPIC} this log dir knows", path=str(self.log_dir))
            self.offsets_partitions = offsets_partitions
        if not present:
            if offsets_partitions is None:
                self.close()
                raise OffsetsError(f"no {OFFSETS_TOPIC} partitions in the log dir: give --offsets-partitions N "
                                   f"(the broker's offsets.topic.num.partitions, default "
                                   f"{DEFAULT_OFFSETS_PARTITIONS}) to create them", path=str(self.log_dir))
            self._create_offsets_topic(offsets_partitions)
        self._cache: dict[int, dict[str, Offsets]] = {}

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _create_offsets_topic(self, count: int) -> None:
        topic_id = uuid.uuid4()
        for index in range(count):
            directory = self.log_dir / f"{OFFSETS_TOPIC}-{index}"
            PartitionLog(directory, topic_id=topic_id).close()
            self._dirs[(OFFSETS_TOPIC, index)] = directory
        self.offsets_partitions = count

    # -- log ranges ----------------------------------------------------------------------------------
    def topic_partitions(self, topics: Sequence[str]) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for topic in topics:
            indexes = [p for t, p in self._dirs if t == topic]
            out[topic] = max(indexes) + 1 if indexes else None
        return out

    def log_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        out = {}
        for tp in partitions:
            directory = self._dirs.get(tp)
            if directory is not None:
                out[tp] = log_range(directory)
        return out

    # -- offsets ---------------------------------------------------------------------------------------
    def _partition_offsets(self, index: int) -> dict[str, Offsets]:
        cached = self._cache.get(index)
        if cached is not None:
            return cached
        committed: dict[str, Offsets] = {}
        directory = self._dirs.get((OFFSETS_TOPIC, index))
        if directory is None:  # not here: "no offsets" would be a wrong answer given in silence
            raise OffsetsError(f"{OFFSETS_TOPIC}-{index} is not in this log dir (a partition another broker "
                               f"holds?): the groups hashed to it (of {self.offsets_partitions} partitions) cannot "
                               "be read or written here", path=str(self.log_dir))
        # Aborted TxnOffsetCommits are skipped; group metadata of newer versions is not offsets.
        for _offset, key, value in iter_offsets_topic(directory, checked=True):
            if isinstance(key, OffsetCommitKey):
                tps = committed.setdefault(key.group, {})
                if value is None:
                    tps.pop((key.topic, key.partition), None)
                elif isinstance(value, OffsetCommitValue):
                    tps[(key.topic, key.partition)] = value.offset
        self._cache[index] = committed
        return committed

    def list_groups(self) -> list[str]:
        """The groups with offsets in the partitions held here."""
        held = sorted(p for t, p in self._dirs if t == OFFSETS_TOPIC)
        return sorted({g for i in held for g, tps in self._partition_offsets(i).items() if tps})

    def read(self, groups: Sequence[str], progress: Progress | None = None) -> dict[str, Offsets]:
        out = {}
        for group in groups:
            index = partition_for_group(group, self.offsets_partitions)
            out[group] = dict(sorted(self._partition_offsets(index).get(group, {}).items()))
        if progress is not None:
            progress(len(groups))
        return out

    def live_members(self, groups: Sequence[str]) -> dict[str, str | None]:
        return {g: None for g in groups}  # the broker is stopped: nobody is connected

    def write(self, group: str, offsets: Offsets) -> dict[TopicPartition, str | None]:
        index = partition_for_group(group, self.offsets_partitions)
        self._partition_offsets(index)  # refuses a partition not held here, by name
        directory = self._dirs[(OFFSETS_TOPIC, index)]
        clean = (self.log_dir / CLEAN_SHUTDOWN).exists()
        now = int(time.time() * 1000)
        pairs = [encode_offset_commit(group, t, p, o, commit_timestamp=now) for (t, p), o in sorted(offsets.items())]
        log = PartitionLog.open(directory, recover=not clean)
        try:
            log.append([Record(i, now, k, v) for i, (k, v) in enumerate(pairs)], partition_leader_epoch=0)
        finally:
            log.close()
        self._checkpoint_recovery_point((OFFSETS_TOPIC, index), log.log_end_offset)
        self._cache.pop(index, None)
        return {tp: None for tp in offsets}

    def _checkpoint_recovery_point(self, tp: TopicPartition, end: int) -> None:
        directory = self._dirs.get(tp, self.log_dir / f"{tp[0]}-{tp[1]}")
        write_partition_entry(directory, RECOVERY_POINT_CHECKPOINT, end, create=False)


def _checkpointed_partitions(log_dir: Path) -> set[TopicPartition]:
    """The partitions a log dir's offset checkpoints name (a broker writes every partition it holds there)."""
    from kcli.storage.checkpoint import OffsetCheckpointFile
    from kcli.storage.files import OFFSET_CHECKPOINTS

    found: set[TopicPartition] = set()
    for name in sorted(OFFSET_CHECKPOINTS):
        try:
            found.update(OffsetCheckpointFile(log_dir / name).read_offsets())
        except (OSError, KcliError):
            continue  # absent or damaged: verify reports it; the directories still count
    return found


def _segment_bases(directory: Path) -> list[int]:
    return sorted(offset_from_filename(p.name) for p in directory.iterdir() if classify(p) is FileKind.LOG)


def log_range(directory: Path) -> tuple[int, int]:
    """(log start, log end) of a partition directory without opening it for appends."""
    bases = _segment_bases(directory)
    if not bases:
        return 0, 0
    end = bases[-1]
    for batch in CheckedBatchReader(segment_path(directory, bases[-1], LOG_SUFFIX)):  # damage raises, with its place
        end = batch.last_offset + 1
    start = bases[0]
    recorded = read_partition_entry(directory, LOG_START_OFFSET_CHECKPOINT)
    if recorded is not None and start < recorded <= end:
        start = recorded
    return start, end


def iter_rows(offsets: dict[str, Offsets]) -> Iterable[tuple[str, str, int, int]]:
    for g, tps in sorted(offsets.items()):
        for (t, p), o in sorted(tps.items()):
            yield g, t, p, o
