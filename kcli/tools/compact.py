"""Compact partition directories or log directories offline with Kafka's cleaner semantics.

Refuses a log dir whose ``.lock`` another process holds (a running broker), plans every partition, and unless
it is a dry run applies the plans. With ``verify_after`` it proves the result equivalent: for every key the
latest value is unchanged (a tombstoned key may vanish only once its delete horizon has passed) and every kept
record still has its offset. Returns a ``CompactReport``; never prints.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.storage.cleaner import (
    DEFAULT_MAX_MEMORY,
    CleanerConfig,
    CompactionPlan,
    apply_compaction,
    iter_visible_records,
    plan_compaction,
)
from kcli.storage.cleanup_policy import (
    CLEANUP_POLICY,
    CleanupPolicy,
    KnownPolicies,
    is_metadata_log,
    log_dir_policies,
    resolve_policy,
)
from kcli.storage.files import CLEANER_OFFSET_CHECKPOINT, LOCK_FILE, holds_log_dir_metadata, parse_partition_dir_name
from kcli.tools.recover import find_partitions, log_dir_in_use, log_dir_lock
from kcli.tools.report import UNREADABLE, Problem, Severity, as_problem, code_for_error, os_problem

_TOTALS = ("bytes_before", "bytes_after", "records_before", "records_kept", "records_dropped", "keyless_dropped",
           "tombstones_kept", "tombstones_dropped", "aborted_dropped", "markers_dropped", "empty_batches_kept")


@dataclass
class PartitionCompaction:
    directory: str
    passes: list[CompactionPlan]
    applied: bool = False
    checkpoint: int | None = None
    mismatches: list[str] = field(default_factory=list)
    problems: list[Problem | str] = field(default_factory=list)  # plain strings from older producers (kcli.spark)

    @property
    def issues(self) -> list[Problem]:
        """Problems and --verify mismatches, in the shared report shape."""
        return [as_problem(p, self.directory, "compaction_failed") for p in self.problems] + \
            [Problem(self.directory, None, None, m, "verify_mismatch") for m in self.mismatches]

    def total(self, name: str) -> int:
        return sum(p.total(name) for p in self.passes)

    @property
    def groups_changed(self) -> int:
        return sum(len(p.changed_groups) for p in self.passes)

    @property
    def complete(self) -> bool:
        return bool(self.passes) and self.passes[-1].complete

    @property
    def keys_mapped(self) -> int:
        return max((p.keys_mapped for p in self.passes), default=0)

    @property
    def offset_map_bytes(self) -> int:
        """The largest offset map of its passes (compiled: 24-byte slots; pure: a dict and its objects; 0 for
        verdicts computed elsewhere, e.g. by Spark). Not in ``to_json``: the engines' reports stay equal."""
        return max((p.offset_map_bytes for p in self.passes), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.directory,
            "applied": self.applied,
            "complete": self.complete,
            "groups_changed": self.groups_changed,
            "checkpoint": self.checkpoint,
            **{name: self.total(name) for name in _TOTALS},
            "passes": [p.to_json() for p in self.passes],
            "mismatches": self.mismatches,
            "problems": [p.to_json() for p in self.issues],
        }


@dataclass
class CompactReport:
    paths: list[str]
    dry_run: bool
    config: CleanerConfig
    verified: bool
    partitions: list[PartitionCompaction] = field(default_factory=list)
    seconds: float = 0.0
    unreadable: list[Problem] = field(default_factory=list)  # entries that could not be read at all, and warnings
    locked: list[str] = field(default_factory=list)  # dry run: .lock files another process (a broker) holds

    @property
    def mismatches(self) -> list[str]:
        return [m for p in self.partitions for m in p.mismatches]

    @property
    def problems(self) -> list[Problem]:
        return self.unreadable + [m for p in self.partitions for m in p.issues]

    @property
    def ok(self) -> bool:
        return self.is_ok()

    def total(self, name: str) -> int:
        return sum(p.total(name) for p in self.partitions)

    def is_ok(self) -> bool:
        return not self.mismatches and not any(p.severity is Severity.ERROR for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.is_ok(),
            "dry_run": self.dry_run,
            "verified": self.verified,
            "paths": self.paths,
            "config": self.config.to_json(),
            **{name: self.total(name) for name in _TOTALS},
            "seconds": round(self.seconds, 3),
            "locked": self.locked,
            "partitions": [p.to_json() for p in self.partitions],
            "problems": [p.to_json() for p in self.problems],
        }


def _policy_refusal(directory: Path, topic: str | None, found: CleanupPolicy) -> Problem | None:
    """Kafka's cleaner compacts a log only if its effective cleanup.policy contains compact; so does kctl."""
    if found.compacts:
        return None
    how = "--config cleanup.policy=compact (or --force) if the topic is compacted"
    if found.policy is None:
        return Problem(str(directory), None, None,
                       f"not compacted: the cleanup.policy of topic {topic!r} is unknown ({found.source}) and Kafka's "
                       "default is delete; to compact it, read the policy from ZooKeeper (-z HOST:PORT[/chroot]) or "
                       f"state it: {how}", "cleanup_policy_unknown")
    return Problem(str(directory), None, None,
                   f"not compacted: cleanup.policy is {found.policy} ({found.source}); Kafka's cleaner never "
                   "compacts this topic and compaction would drop records it keeps until retention; override: "
                   f"{how}", "cleanup_policy_delete")


def _metadata_refusal(directory: Path) -> Problem:
    return Problem(str(directory), None, None,
                   "not compacted: KRaft's metadata log is never cleaned (snapshots replace its history, KIP-630); "
                   "no option overrides this", "metadata_log")


@dataclass(frozen=True)
class CompactTarget:
    """A partition found under the paths given to a compaction, and what the safety rules allow there."""

    directory: Path
    in_log_dir: bool  # its parent holds a broker's own files: the cleaner-offset-checkpoint may be written there
    refused: PartitionCompaction | None = None  # not to be compacted (unreadable entries, not a compacted topic)


@contextmanager
def compaction_targets(paths: list[str], report: CompactReport, *, force: bool = False,
                       cleanup_policy: str | None = None,
                       topic_policies: KnownPolicies | None = None) -> Iterator[list[CompactTarget]]:
    """The partitions under ``paths``, in order, with the rules every engine follows (kept here once): the
    ``.lock`` of each log dir held meanwhile (RecoveryRefusedError if a broker holds it); a partition holding
    entries that cannot be read is refused; KRaft's metadata log always; any other partition unless its topic's
    cleanup.policy is known to contain ``compact`` (``cleanup_policy`` from --config, else ``topic_policies``,
    e.g. from ZooKeeper, the log dir's KRaft metadata or kctl broker configs, Kafka's own compacted topics) or
    ``force``; the checkpoint goes only into a log dir. Unreadable entries go to ``report``."""
    partitions = list(find_partitions(paths, report.unreadable))
    with ExitStack() as locks:
        for log_dir in sorted({d.resolve().parent for d in partitions}):
            if report.dry_run:  # changes nothing: allowed beside a running broker, which the report says
                if log_dir_in_use(log_dir):
                    report.locked.append(str(log_dir / LOCK_FILE))
                continue
            locks.enter_context(log_dir_lock(log_dir, "compaction"))
        blocked = {Path(p.file).parent.absolute() for p in report.unreadable if p.unreadable}
        in_dir: dict[Path, list[KnownPolicies]] = {}
        targets = []
        for directory in partitions:
            log_dir = directory.parent
            target = CompactTarget(directory, holds_log_dir_metadata(log_dir))
            topic = (parse_partition_dir_name(directory.name) or (None, None))[0]
            refusal: Problem | None = None
            if directory in blocked:  # never rewrite a partition with a segment-like entry we cannot read
                refusal = Problem(str(directory), None, None, "not compacted: it holds entries that cannot be read",
                                  "skipped")
            elif is_metadata_log(directory, topic):
                refusal = _metadata_refusal(directory)
            elif not force:
                if cleanup_policy is not None:
                    found = CleanupPolicy(cleanup_policy, "--config")
                else:
                    if log_dir not in in_dir:
                        in_dir[log_dir] = log_dir_policies(log_dir)
                    sources = ([topic_policies] if topic_policies is not None else []) + in_dir[log_dir]
                    found = resolve_policy(topic, sources) if topic is not None else \
                        CleanupPolicy(None, f"{directory.name} is not named <topic>-<partition>")
                refusal = _policy_refusal(directory, topic, found)
            if refusal is not None:
                target = CompactTarget(directory, target.in_log_dir,
                                       PartitionCompaction(str(directory), [], problems=[refusal]))
            targets.append(target)
        yield targets


def split_cleanup_policy(config_overrides: dict[str, str] | None) -> tuple[CleanerConfig, str | None]:
    """The cleaner's settings and the ``cleanup.policy`` among topic config overrides (which only gates)."""
    overrides = dict(config_overrides or {})
    policy = overrides.pop(CLEANUP_POLICY, None)
    return CleanerConfig.from_overrides(overrides), policy


def compact(paths: list[str], *, dry_run: bool = False, config_overrides: dict[str, str] | None = None,
            include_active: bool = False, max_memory: int = DEFAULT_MAX_MEMORY, verify_after: bool = False,
            now_ms: int | None = None, jobs: int = 1, force: bool = False,
            topic_policies: KnownPolicies | None = None) -> CompactReport:
    """Plan (and unless ``dry_run`` apply) compaction of every partition under ``paths``.

    ``jobs``: worker processes per partition, for building the offset map and writing segment groups.
    Only partitions whose topic is known to be compacted are compacted (``compaction_targets``): the
    ``cleanup.policy`` in ``config_overrides``, else ``topic_policies`` (e.g. read from ZooKeeper), else what
    the log dir holds (KRaft metadata, a kctl broker's topic configs), else Kafka's own compacted topics; any
    other partition is refused unless ``force``, KRaft's metadata log always. The ``cleaner-offset-checkpoint``
    is written only into a log dir (one holding meta.properties or a checkpoint).

    Raises ValueError for bad ``config_overrides``, InputError for missing inputs, RecoveryRefusedError for a
    log dir a broker holds.
    """
    started = time.perf_counter()
    config, given_policy = split_cleanup_policy(config_overrides)
    if max_memory < 24:
        raise ValueError("max memory must hold at least one 24-byte offset map entry")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = CompactReport(list(paths), dry_run, config, verify_after and not dry_run)
    with compaction_targets(paths, report, force=force, cleanup_policy=given_policy,
                            topic_policies=topic_policies) as targets:
        for target in targets:
            if target.refused is not None:
                report.partitions.append(target.refused)
                continue
            directory, in_log_dir = target.directory, target.in_log_dir
            try:
                # Applying counts while it rewrites: only a dry run needs the separate counting pass.
                plan = plan_compaction(directory, now_ms=now, config=config, include_active=include_active,
                                       max_memory=max_memory, count=dry_run, jobs=jobs)
            except OSError as exc:  # unreadable, or a file deleted since it was listed
                report.partitions.append(PartitionCompaction(str(directory), [], problems=[os_problem(directory, exc)]))
                continue
            except InputError as exc:
                report.partitions.append(PartitionCompaction(str(directory), [], problems=[
                    Problem(str(exc.path or directory), None, None, exc.reason, UNREADABLE)]))
                continue
            except KcliError as exc:  # damage: nothing is rewritten until `kctl recover` has dealt with it
                report.partitions.append(PartitionCompaction(str(directory), [], problems=[Problem(
                    str(exc.path or directory), exc.position, exc.base_offset,
                    f"not compacted: {exc.reason}; check with `kctl verify`, repair with `kctl recover` first",
                    code_for_error(exc))]))
                continue
            result = PartitionCompaction(str(directory), [plan])
            report.partitions.append(result)
            if dry_run:
                continue
            before = latest_values(directory) if verify_after else None
            checkpoint = directory.parent / CLEANER_OFFSET_CHECKPOINT
            had_checkpoint = checkpoint.exists()
            try:
                # Only a log dir gets a cleaner-offset-checkpoint; a multi-pass compaction needs it between passes,
                # so outside a log dir the one it wrote is removed again.
                applied = apply_compaction(plan, jobs=jobs, write_checkpoint=in_log_dir or not plan.complete)
                if not in_log_dir and not had_checkpoint:
                    checkpoint.unlink(missing_ok=True)
                    applied.checkpoint = None
            except (KcliError, OSError) as exc:
                result.problems.append(Problem(str(directory), None, None, f"compaction not applied: {exc}",
                                               "not_applied"))
                continue
            result.applied, result.passes, result.checkpoint = True, applied.passes, applied.checkpoint
            if before is not None:
                result.mismatches = compare(before, latest_values(directory), now, config.delete_retention_ms)
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class KeyState:
    """What a consumer reading the partition to its end knows: the latest record per key and every record."""

    latest: dict[bytes, tuple[int, bytes | None, int | None]]  # key -> (offset, value digest, tombstone horizon)
    records: dict[int, tuple[bytes | None, bytes | None]]  # offset -> (key, value digest)


def _digest(value: bytes | None) -> bytes | None:
    return None if value is None else hashlib.sha256(value).digest()


def latest_values(partition_dir: str | os.PathLike[str]) -> KeyState:
    latest: dict[bytes, tuple[int, bytes | None, int | None]] = {}
    records: dict[int, tuple[bytes | None, bytes | None]] = {}
    for batch, record in iter_visible_records(Path(partition_dir)):
        value = _digest(record.value)
        records[record.offset] = (record.key, value)
        if record.key is not None:
            latest[record.key] = (record.offset, value, batch.delete_horizon_ms)
    return KeyState(latest, records)


def compare(before: KeyState, after: KeyState, now_ms: int, delete_retention_ms: int) -> list[str]:
    """Equivalence of a compaction: same latest value per key, kept records at their old offsets."""
    mismatches = []
    for offset, (key, value) in after.records.items():
        if before.records.get(offset) != (key, value):
            mismatches.append(f"offset {offset}: record not present with this key and value before compaction")
    for key, (offset, value, horizon) in before.latest.items():
        now_latest = after.latest.get(key)
        if now_latest is None:
            if value is not None:
                mismatches.append(f"key {key!r}: latest value (offset {offset}) lost")
            elif (horizon if horizon is not None else now_ms + delete_retention_ms) > now_ms:
                mismatches.append(f"key {key!r}: tombstone at offset {offset} removed before its delete horizon")
            continue
        if now_latest[:2] != (offset, value):
            mismatches.append(f"key {key!r}: latest record was offset {offset}, is offset {now_latest[0]} after")
    for key in after.latest.keys() - before.latest.keys():
        mismatches.append(f"key {key!r}: appeared by compaction")
    return mismatches


__all__ = ["CompactReport", "CompactTarget", "PartitionCompaction", "compact", "compaction_targets", "compare",
           "latest_values", "split_cleanup_policy"]
