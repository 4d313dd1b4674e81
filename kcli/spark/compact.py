"""`kctl compact --engine spark`: Kafka's cleaner with the offset map computed by Spark.

The local cleaner holds an offset map (key -> latest offset) in memory and cleans in several passes when it
does not fit. Here Spark computes the map's verdicts instead, for any key space: from the ``kafka-log`` data
source (read_committed, control records hidden, exactly the records the map is built from), per partition

* ``latest``: max(offset) per key over the dirty section [first dirty offset, first uncleanable offset);
* ``superseded``: offsets below the first uncleanable offset whose key has a later offset in ``latest``;

then the superseded offsets are shuffled by partition and sorted, and each executor task streams its
partitions' offsets into the same filter and crash-safe swap the local engine uses
(``plan_with_superseded`` + ``apply_compaction``), so memory stays flat whatever the key count. Planning
(dirty section, producers, aborted transactions) and the ``.lock`` of each log dir stay on the driver; the
partition directories must be visible to executors at the same paths (local mode, or a shared filesystem).
The result is byte for byte the local engine's, and so are the safety rules (``compaction_targets``): the
log dirs' ``.lock``, no partition with unreadable entries, none whose known cleanup.policy is delete unless
forced, and the ``cleaner-offset-checkpoint`` only in a log dir.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from kcli.errors import KcliError
from kcli.spark.schema import FORMAT
from kcli.spark.session import local_python
from kcli.storage.cleaner import (
    CompactionPlan,
    OffsetMap,
    SupersededOffsets,
    apply_compaction,
    plan_with_superseded,
    prepare_compaction,
    write_cleaner_checkpoint,
)
from kcli.storage.cleanup_policy import KnownPolicies
from kcli.storage.files import parse_partition_dir_name
from kcli.tools.compact import (
    CompactReport,
    PartitionCompaction,
    compaction_targets,
    compare,
    latest_values,
    split_cleanup_policy,
)

def compact(spark: Any, paths: list[str], *, dry_run: bool = False, config_overrides: dict[str, str] | None = None,
            include_active: bool = False, verify_after: bool = False, now_ms: int | None = None, force: bool = False,
            topic_policies: KnownPolicies | None = None) -> CompactReport:
    """``kcli.tools.compact.compact`` on Spark: same arguments (no ``max_memory``: Spark's map has no bound,
    so every partition is cleaned in one pass; no ``jobs``), same refusals, same report."""
    started = time.perf_counter()
    config, given_policy = split_cleanup_policy(config_overrides)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = CompactReport(list(paths), dry_run, config, verify_after and not dry_run)
    with compaction_targets(paths, report, force=force, cleanup_policy=given_policy,
                            topic_policies=topic_policies) as targets:
        plans: dict[tuple[str, int], CompactionPlan] = {}
        order: list[PartitionCompaction | tuple[str, int]] = []
        for target in targets:
            if target.refused is not None:
                order.append(target.refused)
                continue
            directory = target.directory
            parsed = parse_partition_dir_name(directory.name)
            if parsed is None:
                order.append(PartitionCompaction(str(directory), [], problems=[
                    f"{directory}: not named <topic>-<partition>: the Spark engine keys partitions by name"]))
                continue
            try:
                plans[parsed] = prepare_compaction(directory, now_ms=now, config=config,
                                                   include_active=include_active)
                order.append(parsed)
            except KcliError as exc:
                order.append(PartitionCompaction(str(directory), [], problems=[exc.describe()]))
        done = _clean_on_spark(spark, plans, dry_run=dry_run, verify_after=verify_after) if plans else {}
        report.partitions = [done[item] if isinstance(item, tuple) else item for item in order]
        for target, result in zip(targets, report.partitions):  # one result per target, in the local engine's
            if result.applied and result.passes and target.in_log_dir:  # order, so the file reads the same
                end = result.passes[-1].end_offset
                result.checkpoint = end if write_cleaner_checkpoint(Path(result.directory), end) else None
    report.seconds = time.perf_counter() - started
    return report


def _clean_on_spark(spark: Any, plans: dict[tuple[str, int], CompactionPlan], *, dry_run: bool,
                    verify_after: bool) -> dict[tuple[str, int], PartitionCompaction]:
    from pyspark.sql import functions as F

    bounds = spark.createDataFrame(
        [(topic, partition, plan.first_dirty_offset, plan.uncleanable_offset)
         for (topic, partition), plan in plans.items()],
        "topic string, partition int, dirty long, stop long")
    records = (_read(spark, plans).where(F.col("key").isNotNull())
               .select("topic", "partition", "offset", "key")
               .join(F.broadcast(bounds), ["topic", "partition"])
               .where(F.col("offset") < F.col("stop")))
    latest = (records.where(F.col("offset") >= F.col("dirty"))
              .groupBy("topic", "partition", "key").agg(F.max("offset").alias("latest")))
    superseded = (records.join(latest, ["topic", "partition", "key"])
                  .where(F.col("offset") < F.col("latest"))
                  .select("topic", "partition", "offset", F.lit(None).cast("long").alias("keys")))
    # One row per partition ahead of its offsets (offset -1 sorts first): every partition gets a task even
    # with nothing superseded (expired tombstones, aborted data), and it carries the partition's key count.
    keys = latest.groupBy("topic", "partition").agg(F.count(F.lit(1)).alias("keys"))
    heads = (bounds.join(keys, ["topic", "partition"], "left")
             .select("topic", "partition", F.lit(-1).cast("long").alias("offset"),
                     F.coalesce(F.col("keys"), F.lit(0)).cast("long").alias("keys")))
    tasks = max(1, min(len(plans), spark.sparkContext.defaultParallelism * 2))
    stream = (superseded.unionByName(heads).repartition(tasks, "topic", "partition")
              .sortWithinPartitions("topic", "partition", "offset"))
    with local_python(spark):
        results = stream.rdd.mapPartitions(_CleanTask(plans, dry_run, verify_after)).collect()
    return dict(results)


def _read(spark: Any, plans: dict[tuple[str, int], CompactionPlan]) -> Any:
    """One load per log dir (each load costs a planning round trip to a Python worker), topics pushed down;
    the join with the bounds then keeps exactly the planned partitions."""
    from pyspark.sql import functions as F

    reader = spark.read.format(FORMAT).option("isolation", "read_committed").option("includeControl", "false")
    topics_by_dir: dict[str, set[str]] = {}
    for (topic, _partition), plan in plans.items():
        topics_by_dir.setdefault(str(plan.partition_dir.parent), set()).add(topic)
    frame = None
    for log_dir, topics in sorted(topics_by_dir.items()):
        part = reader.load(log_dir).where(F.col("topic").isin(sorted(topics)))
        frame = part if frame is None else frame.unionByName(part)
    return frame


class _CleanTask:
    """Runs on executors: the rows of a Spark partition, sorted by (topic, partition, offset), each Kafka
    partition's head row first; cleans those partitions one after the other."""

    def __init__(self, plans: dict[tuple[str, int], CompactionPlan], dry_run: bool, verify_after: bool) -> None:
        self.plans, self.dry_run, self.verify_after = plans, dry_run, verify_after

    def __call__(self, rows: Any) -> Any:
        for (topic, partition), group in itertools.groupby(rows, key=lambda r: (r[0], r[1])):
            head = next(group)
            plan = self.plans[(topic, partition)]
            superseded = SupersededOffsets((row[2] for row in group), plan.uncleanable_offset - 1, head[3] or 0)
            yield (topic, partition), clean_partition(plan, superseded, dry_run=self.dry_run,
                                                      verify_after=self.verify_after)


def clean_partition(plan: CompactionPlan, superseded: SupersededOffsets, *, dry_run: bool,
                    verify_after: bool) -> PartitionCompaction:
    """One partition, given its map verdicts; what the local engine's per-partition step reports."""
    directory = plan.partition_dir
    try:
        plan = plan_with_superseded(plan, superseded, count=dry_run)
    except (KcliError, OSError) as exc:
        return PartitionCompaction(str(directory), [], problems=[str(exc)])
    result = PartitionCompaction(str(directory), [plan])
    if not dry_run:
        before = latest_values(directory) if verify_after else None
        try:
            applied = apply_compaction(plan, write_checkpoint=False)  # the driver writes it: tasks share the file
        except (KcliError, OSError) as exc:
            result.problems.append(f"{directory}: compaction not applied: {exc}")
        else:
            result.applied, result.passes, result.checkpoint = True, applied.passes, applied.checkpoint
            if before is not None:
                result.mismatches = compare(before, latest_values(directory), plan.now_ms,
                                            plan.config.delete_retention_ms)
    for done in result.passes:
        done.offset_map = OffsetMap(0)  # consumed; not shipped back to the driver
    return result


__all__ = ["clean_partition", "compact"]
