"""`kctl compact`: compact partitions offline with Kafka's cleaner semantics."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kcli.cli.common import Engine, ExitCode, MasterOpt, err_console, exit_on_errors, fail, finish, spark_session

if TYPE_CHECKING:  # the cleaner is imported when the command runs
    from kcli.storage.cleanup_policy import KnownPolicies
    from kcli.tools.compact import CompactReport

# kcli.storage.cleaner.DEFAULT_MAX_MEMORY (log.cleaner.dedupe.buffer.size), which --max-memory's default shows
# (kept here: importing the cleaner for --help costs tens of milliseconds; tests/cli/test_startup.py checks the
# two agree).
DEFAULT_MAX_MEMORY = 128 * 1024 * 1024


def compact_cmd(
    paths: Annotated[list[str], typer.Argument(help="Partition directories or log directories.", show_default=False)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be kept and dropped; change nothing.")] = False,
    config: Annotated[Optional[list[str]], typer.Option("--config", help="Topic config KEY=VALUE (repeatable): cleanup.policy (compact: the topics given are compacted ones), delete.retention.ms, min.compaction.lag.ms, segment.bytes, index.interval.bytes, segment.index.bytes.", show_default=False)] = None,
    include_active: Annotated[bool, typer.Option("--include-active", help="Clean the active (last) segment too.")] = False,
    max_memory: Annotated[int, typer.Option("--max-memory", help="Offset map memory in bytes (24 bytes a key); several passes when the dirty section does not fit.")] = DEFAULT_MAX_MEMORY,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0, help="Worker processes per partition (offset map and segment groups in parallel); 0: the CPU count.")] = 0,
    verify: Annotated[bool, typer.Option("--verify", help="Prove the result equivalent: same latest value per key, kept offsets unchanged.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
    engine: Annotated[Engine, typer.Option("--engine", help="local: this machine (--jobs processes); spark: Spark computes each partition's offset map (any key count, one pass) and executors rewrite the partitions.")] = Engine.LOCAL,
    master: MasterOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Compact even a partition whose cleanup.policy is delete or unknown (never KRaft's __cluster_metadata).")] = False,
    zookeeper: Annotated[Optional[str], typer.Option("--zookeeper", "-z", envvar="KCTL_ZOOKEEPER", show_default=False, help="host:port[/chroot]: read the topics' cleanup.policy from ZooKeeper (a ZooKeeper-mode cluster's log dir does not hold it).")] = None,
) -> None:
    """Compact partitions as Kafka's log cleaner would: keep the latest record per key at its offset, tombstones
    until their delete horizon, drop aborted transactional data and obsolete markers; the broker must be stopped.

    Only topics known to be compacted are touched, as Kafka's cleaner does: cleanup.policy containing compact in
    ZooKeeper (-z), the log dir's KRaft metadata or kctl broker configs, or --config cleanup.policy=compact;
    __consumer_offsets and __transaction_state. Any other partition is refused (exit 1) and named;
    __cluster_metadata always.

    Exit status: 0 compacted (or nothing to do), 1 problems or --verify mismatches or a locked log dir,
    2 usage error, 3 unreadable input.
    """
    overrides: dict[str, str] = {}
    for item in config or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise fail(f"--config takes KEY=VALUE, got {item!r}", ExitCode.USAGE)
        overrides[key.strip()] = value
    from kcli.tools.compact import compact

    policies = _zookeeper_policies(zookeeper) if zookeeper and not force else None
    session = spark_session(engine, master, "kctl compact")
    with exit_on_errors(ValueError):
        if session is not None:
            from kcli.spark.compact import compact as compact_on_spark

            report = compact_on_spark(session, paths, dry_run=dry_run, config_overrides=overrides,
                                      include_active=include_active, verify_after=verify, force=force,
                                      topic_policies=policies)
        else:
            report = compact(paths, dry_run=dry_run, config_overrides=overrides, include_active=include_active,
                             max_memory=max_memory, verify_after=verify, jobs=jobs or os.cpu_count() or 1,
                             force=force, topic_policies=policies)
    raise finish(report, lambda: _render(report), json_out=json_out)

def _zookeeper_policies(zookeeper: str) -> KnownPolicies:
    """Every topic's cleanup.policy as the cluster's brokers see it (errors go to the exit-status table)."""
    from kcli.zk.registry import ZkRegistry

    with ZkRegistry(zookeeper) as registry:
        return registry.cleanup_policies()


def _render(report: CompactReport) -> None:
    from kcli.tools.report import Severity

    out = sys.stdout
    verb = "would keep" if report.dry_run else "kept"
    for p in report.partitions:
        if p.passes:
            out.write(f"{p.directory}: {verb} {p.total('records_kept')} of {p.total('records_before')} records, "
                      f"{p.total('bytes_before')} -> {p.total('bytes_after')} bytes; dropped "
                      f"{p.total('records_dropped')} ({p.total('tombstones_dropped')} tombstones, "
                      f"{p.total('keyless_dropped')} without key, {p.total('aborted_dropped')} aborted, "
                      f"{p.total('markers_dropped')} markers); {p.total('tombstones_kept')} tombstones kept; "
                      f"{p.groups_changed} segment groups {'to rewrite' if report.dry_run else 'rewritten'}"
                      f"{'' if p.complete or not report.dry_run else '; more passes needed (offset map full)'}\n")
    for problem in report.problems:
        err_console.print(f"{problem.severity.value}: {problem.describe()}", markup=False)
    for lock in report.locked:
        err_console.print(f"note: {lock} is held by another process (a running broker?): this dry run read the "
                          "files as they were; stop it before compacting", markup=False)
    failed = {p.directory for p in report.partitions if p.issues}
    done = [p for p in report.partitions if p.directory not in failed]
    summary = f"{len(done)} partition{'s' if len(done) != 1 else ''}"
    errors = [p for p in report.problems if p.severity is Severity.ERROR]
    trouble = f"; PROBLEMS FOUND ({len(errors)})" if errors else ""
    if report.dry_run:
        out.write(f"dry run: {summary} planned, nothing changed{trouble}\n")
    else:
        checked = "; verified equivalent" if report.verified and not report.mismatches else ""
        out.write(f"compacted: {summary}{checked}{trouble}\n")


__all__ = ["compact_cmd"]
