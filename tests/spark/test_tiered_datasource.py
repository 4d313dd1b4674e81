"""The kafka-log source over a tiered topic (KIP-405): with ``remoteStorage`` it reads the remote segments below
each partition's local ones, every offset once. The partition is written by an in-process broker with a
``file://`` remote store, which keeps only the local tail."""

from __future__ import annotations

import asyncio
import time

import pytest
from inprocess_broker import run, running_broker

from kcli.records import Record
from kcli.records.batch import build_record_batch

SEGMENT = 4096


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """(log dir, remote store URL, log end offset, local log start offset) of topic ``tiered``, broker stopped."""
    root = tmp_path_factory.mktemp("tiered")
    store = root / "remote"
    overrides = {"remote.log.storage.system.enable": "true", "rsm.config.url": store.as_uri(),
                 "remote.log.manager.task.interval.ms": "50", "log.retention.check.interval.ms": "50",
                 "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}

    async def body():
        async with running_broker(root / "logs", **overrides) as broker:
            server = broker.server
            server.admin.create_topic("tiered", 1, 1, configs={
                "remote.storage.enable": "true", "segment.bytes": str(SEGMENT),
                "local.retention.bytes": str(2 * SEGMENT), "file.delete.delay.ms": "0"})
            for b in range(60):
                records = [Record(i, int(time.time() * 1000), f"k{b * 4 + i}".encode(), b"v" * 200)
                           for i in range(4)]
                result = server.replica_manager.append_records(1, {("tiered", 0): build_record_batch(records)})
                assert int(result[("tiered", 0)].error) == 0
            partition = server.replica_manager.get_partition("tiered", 0)
            deadline = time.monotonic() + 30
            while partition.log.local_log_start_offset == 0:
                assert time.monotonic() < deadline, "no local segment was deleted after its copy"
                await asyncio.sleep(0.02)
            return partition.log_end_offset, partition.log.local_log_start_offset

    end, _ = run(body(), timeout=60)
    # the local log start as the files left it (retention may have moved it until the broker stopped)
    local_start = min(int(p.name.split(".")[0]) for p in (root / "logs" / "tiered-0").glob("*.log"))
    return root / "logs", store.as_uri(), end, local_start


def _read(options: dict) -> list[tuple[int, str]]:
    from kcli.spark.plan import Bounds, ReadOptions, expand_paths, plan
    from kcli.spark.read import SplitReader
    from kcli.spark.remote import plan_remote

    opts = ReadOptions.parse(options)
    bounds = Bounds.from_options(opts).with_topics(["tiered"])
    dirs = expand_paths(opts.paths)
    splits = plan(dirs, bounds, opts.max_bytes_per_partition)
    if opts.remote_storage:
        splits = plan_remote(dirs, bounds, opts.remote_storage, opts.remote_storage_options) + splits
    rows = []
    for split in splits:
        for cols in SplitReader(split, opts, bounds).chunks():
            rows.extend((offset, split.segment) for offset in cols["offset"])
    return rows


def test_planner_reads_remote_then_local_every_offset_once(tiered):
    log_dir, url, end, local_start = tiered
    assert 0 < local_start < end
    local = _read({"path": str(log_dir)})
    assert [o for o, _ in local] == list(range(local_start, end))
    both = _read({"path": str(log_dir), "remoteStorage": url})
    assert [o for o, _ in both] == list(range(end))
    remote = {segment for o, segment in both if o < local_start}
    assert remote and all(s.startswith("file://") and "/tiered-0-" in s for s in remote)
    # offset bounds prune remote segments as local ones
    some = _read({"path": str(log_dir), "remoteStorage": url, "startingOffset": "10", "endingOffset": "20"})
    assert [o for o, _ in some] == list(range(10, 20))


def test_read_committed_with_a_remote_store_is_refused(tiered):
    from kcli.spark.plan import OptionError, ReadOptions

    with pytest.raises(OptionError, match="read_committed"):
        ReadOptions.parse({"path": "x", "remoteStorage": tiered[1], "isolation": "read_committed"})


@pytest.mark.spark
def test_spark_reads_a_tiered_topic(spark, tiered):
    log_dir, url, end, local_start = tiered
    df = spark.read.format("kafka-log").option("remoteStorage", url).load(str(log_dir)).where("topic = 'tiered'")
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == list(range(end))
    remote_rows = df.where(f"offset < {local_start}").select("segment").distinct().collect()
    assert remote_rows and all(r.segment.startswith("file://") for r in remote_rows)
