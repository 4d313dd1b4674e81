"""Tiered storage (KIP-405), in process: a broker with a ``file://`` remote store copies rolled segments,
records them in ``__remote_log_metadata``, keeps only the local tail, serves fetches and ListOffsets below the
local log start from the remote store, applies the total retention to remote segments, and refuses what Kafka
refuses."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from pathlib import Path

import pytest

from inprocess_broker import running_broker, run
from kcli.broker.errors import InvalidConfigError, InvalidRequestError
from kcli.broker.partition import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP
from kcli.broker.replica_manager import FetchParams, FetchPartition
from kcli.records import BatchReader, Record
from kcli.records.batch import build_record_batch
from kcli.records.remote_log_metadata import REMOTE_LOG_METADATA_TOPIC, decode_remote_log_metadata
from kcli.storage.remote import RemoteStorageError

SEGMENT = 4096
VALUE = b"v" * 200


def tiered_overrides(store: Path, **extra: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "rsm.config.url": store.as_uri(),
            "remote.log.manager.task.interval.ms": "50", "log.retention.check.interval.ms": "50",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3", **extra}


def create_tiered(server, topic: str, extra: dict[str, str] | None = None) -> None:
    """A one-partition tiered topic of SEGMENT-byte segments, one segment kept locally, deleted at once."""
    server.admin.create_topic(topic, 1, 1, configs={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.bytes": str(SEGMENT),
        "file.delete.delay.ms": "0", **(extra or {})})


async def produce(server, topic: str, batches: int, per_batch: int = 4, start: int = 0) -> None:
    for b in range(batches):
        records = [Record(i, int(time.time() * 1000), f"k{start + b * per_batch + i}".encode(), VALUE)
                   for i in range(per_batch)]
        result = server.replica_manager.append_records(1, {(topic, 0): build_record_batch(records)})
        assert int(result[(topic, 0)].error) == 0


async def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def consume_all(server, topic: str, start: int, end: int) -> list[int]:
    """Every record offset from ``start`` to ``end`` through the ReplicaManager's fetch, as a consumer would."""
    offsets: list[int] = []
    offset = start
    params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False)
    while offset < end:
        [result] = await server.replica_manager.fetch_messages(params, [FetchPartition(topic, 0, offset, 10_000)])
        assert int(result.error) == 0, result
        records = result.read.records
        raw = records.read() if hasattr(records, "read") else bytes(records)
        if hasattr(records, "close"):
            records.close()
        assert raw, f"no records at offset {offset}"
        for batch in BatchReader(raw):
            batch.ensure_valid()
            for record in batch.records():
                if record.offset >= offset:
                    offsets.append(record.offset)
            offset = batch.next_offset
    return offsets


def test_segments_move_to_the_remote_store_and_are_read_back(tmp_path):
    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(store)) as broker:
            server = broker.server
            create_tiered(server, "tiered", {"local.retention.bytes": str(2 * SEGMENT)})
            await produce(server, "tiered", 60)  # ~60 * 900 bytes: about a dozen segments
            partition = server.replica_manager.get_partition("tiered", 0)
            end = partition.log_end_offset
            assert end == 240
            await wait_for(lambda: partition.log.local_log_start_offset > 0 and len(partition.log.segments) <= 4,
                           what="local segments deleted after their copy")
            log_ = partition.log
            assert log_.log_start_offset == 0  # the log still starts at 0: the rest is remote
            assert log_.highest_offset_in_remote_storage >= log_.local_log_start_offset - 1
            # the local tail: at most local.retention.bytes plus the active segment
            assert sum(s.size for s in log_.log_segments[:-1]) <= 2 * SEGMENT + SEGMENT
            # remote keys by topic, partition and offset
            [partition_dir] = [p for p in store.iterdir() if p.name.startswith("tiered-0-")]
            logs = sorted(p.name for p in partition_dir.glob("*.log"))
            assert logs and logs[0].startswith("00000000000000000000-")
            kinds = {p.suffix for p in partition_dir.iterdir()}
            assert {".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint"} <= kinds
            # every record once and in order, remote part and local part together
            assert await consume_all(server, "tiered", 0, end) == list(range(end))
            # ListOffsets: earliest is the log start, earliest-local (KIP-1005) the local start
            assert partition.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
            assert partition.offset_for_timestamp(EARLIEST_LOCAL_TIMESTAMP).offset == log_.local_log_start_offset
            # the metadata topic holds Kafka's records: COPY_SEGMENT_STARTED then FINISHED per segment
            states = []
            for meta in server.replica_manager.partitions.values():
                if meta.topic != REMOTE_LOG_METADATA_TOPIC:
                    continue
                found = meta.log.read(0, 1 << 22)
                if found is None:
                    continue
                for batch in BatchReader(found.read()):
                    for record in batch.records():
                        states.append(decode_remote_log_metadata(record.value))
            adds = [r for r in states if r.type_id == 0]
            updates = [r.data["remoteLogSegmentState"] for r in states if r.type_id == 1]
            assert adds and all(r.data["remoteLogSegmentState"] == 0 for r in adds)
            assert updates.count(1) == len(adds)  # each copy finished
            assert "RemoteLogSegmentMetadata{remoteLogSegmentId=RemoteLogSegmentId{topicIdPartition=" in adds[0].text()

    run(body(), timeout=90)


async def _remote_segments(server, topic: str, batches: int = 60) -> list:
    """A tiered topic of ``batches`` batches whose older segments are remote: the finished remote segments."""
    create_tiered(server, topic, {"local.retention.bytes": str(2 * SEGMENT)})
    await produce(server, topic, batches)
    partition = server.replica_manager.get_partition(topic, 0)
    await wait_for(lambda: partition.log.local_log_start_offset > 0 and len(partition.log.segments) <= 4,
                   what="local segments deleted after their copy")
    remote = server.remote_log_manager.cache.view(topic, 0).finished()
    assert len(remote) >= 3
    return remote


def _count_gets(rlm, fail: set | None = None, hold: dict | None = None) -> collections.Counter:
    """Every chunk GET of the remote storage manager, counted by (segment id, start); a GET in ``fail`` raises
    once, one in ``hold`` waits for its event."""
    gets: collections.Counter = collections.Counter()
    real = rlm.rsm.fetch_log_segment

    def fetch_log_segment(ref, start, end=None):
        key = (ref.segment_id, start)
        gets[key] += 1
        if fail is not None and key in fail:
            fail.discard(key)
            raise RemoteStorageError(f"GET of {ref.stem} refused by the test")
        if hold is not None and key in hold:
            assert hold.pop(key).wait(30)
        return real(ref, start, end)

    rlm.rsm.fetch_log_segment = fetch_log_segment
    return gets


def test_sequential_remote_reads_fetch_the_next_segment_ahead_once(tmp_path):
    """A consumer reading the remote part from offset 0: after each segment's read the next segment's chunk is
    fetched ahead in the reader pool, and every chunk is fetched once whether the read or the prefetch gets
    there first."""

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(tmp_path / "remote")) as broker:
            server = broker.server
            remote = await _remote_segments(server, "ahead")
            rlm = server.remote_log_manager
            gets = _count_gets(rlm)
            log_ = server.replica_manager.get_partition("ahead", 0).log
            end = log_.log_end_offset
            read_remotely = [s for s in remote if s.end_offset < log_.local_log_start_offset]  # the rest is local
            assert len(read_remotely) >= 3
            assert await consume_all(server, "ahead", 0, end) == list(range(end))
            await wait_for(lambda: not rlm._chunks_in_flight, what="prefetches done")
            assert [gets[(s.ref.segment_id, 0)] for s in read_remotely] == [1] * len(read_remotely)
            assert rlm.chunks_prefetched >= len(read_remotely) - 1

    run(body(), timeout=90)


def test_a_read_waits_for_the_running_get_of_its_chunk_and_a_failed_prefetch_is_retried(tmp_path):
    """The next segment's GET, started ahead, is held: a read of that segment waits for it instead of sending a
    second GET. A prefetch that fails costs nothing but a GET: the read that needs the chunk sends its own."""

    class Watched(dict):  # tells when a read finds a GET running for its chunk
        def __init__(self, found: threading.Event) -> None:
            super().__init__()
            self.found = found

        def get(self, key, default=None):
            value = super().get(key, default)
            if value is not None:
                self.found.set()
            return value

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(tmp_path / "remote")) as broker:
            server = broker.server
            first, second, third = (await _remote_segments(server, "held"))[:3]
            rlm = server.remote_log_manager
            release, found = threading.Event(), threading.Event()
            rlm._chunks_in_flight = Watched(found)
            gets = _count_gets(rlm, fail={(third.ref.segment_id, 0)}, hold={(second.ref.segment_id, 0): release})
            assert await asyncio.to_thread(rlm.read, "held", 0, 0, 1000, 1 << 62)  # the prefetch of `second` starts
            reading = asyncio.ensure_future(asyncio.to_thread(rlm.read, "held", 0, second.start_offset, 1000, 1 << 62))
            assert await asyncio.to_thread(found.wait, 30)  # the read found the held GET running
            release.set()
            data = await reading
            assert data and gets[(second.ref.segment_id, 0)] == 1
            # reading `second` prefetched `third`, and that GET failed: the read of `third` sends its own
            await wait_for(lambda: gets[(third.ref.segment_id, 0)] == 1 and not rlm._chunks_in_flight,
                           what="the failed prefetch")
            assert await asyncio.to_thread(rlm.read, "held", 0, third.start_offset, 1000, 1 << 62)
            assert gets[(third.ref.segment_id, 0)] == 2

    run(body(), timeout=90)


def test_total_retention_deletes_remote_segments(tmp_path):
    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(store)) as broker:
            server = broker.server
            create_tiered(server, "shrinking", {"retention.bytes": str(4 * SEGMENT)})
            await produce(server, "shrinking", 60)
            partition = server.replica_manager.get_partition("shrinking", 0)
            rlm = server.remote_log_manager
            await wait_for(lambda: partition.log.log_start_offset > 0, what="remote retention")
            await wait_for(lambda: rlm.sizes("shrinking", 0)[1] + sum(
                s.size for s in partition.log.log_segments if s.base_offset > partition.log.highest_offset_in_remote_storage)
                <= 4 * SEGMENT + SEGMENT, what="total size within retention.bytes")

            def remote_starts_at_log_start() -> bool:
                # a retention pass may have deleted every remote segment just before the next copy finishes
                finished = rlm.cache.state("shrinking", 0).finished()
                return bool(finished) and finished[0].start_offset == partition.log.log_start_offset

            await wait_for(remote_starts_at_log_start, what="the remote part starting at the log start")
            start = partition.log.log_start_offset
            finished = rlm.cache.state("shrinking", 0).finished()
            assert finished and finished[0].start_offset == start
            # the deleted segments' objects are gone from the store
            await wait_for(lambda: all(int(p.name.split("-")[0]) >= partition.log.log_start_offset
                                       for p in store.rglob("*.log")), what="deleted segments' objects gone")
            # a fetch below the log start is out of range; from the log start every record is there
            params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False)
            [result] = await server.replica_manager.fetch_messages(params, [FetchPartition("shrinking", 0, 0, 10_000)])
            assert result.error.name == "offset_out_of_range"
            end = partition.log_end_offset
            assert await consume_all(server, "shrinking", start, end) == list(range(start, end))

    run(body(), timeout=90)


def test_a_new_leader_resumes_from_the_metadata(tmp_path):
    """A restart (the same broker leads again): the remote segments come back from __remote_log_metadata,
    the log starts at 0 again though the loader only sees the local tail, and copying resumes after the
    highest finished segment without copying any again."""
    store = tmp_path / "remote"
    overrides = tiered_overrides(store)

    async def first():
        async with running_broker(tmp_path / "logs", **overrides) as broker:
            server = broker.server
            create_tiered(server, "again")
            await produce(server, "again", 40)
            partition = server.replica_manager.get_partition("again", 0)
            await wait_for(lambda: partition.log.local_log_start_offset > 0, what="local deletes")
            return server.remote_log_manager.copied_segments

    async def second(copied_before: int):
        async with running_broker(tmp_path / "logs", **overrides) as broker:
            server = broker.server
            partition = server.replica_manager.get_partition("again", 0)
            await wait_for(lambda: partition.log.log_start_offset == 0, what="the log start back at 0")
            await produce(server, "again", 20, start=160)
            end = partition.log_end_offset
            assert end == 240
            await wait_for(lambda: partition.log.highest_offset_in_remote_storage > 160, what="copies resumed")
            assert await consume_all(server, "again", 0, end) == list(range(end))
            segments = server.remote_log_manager.cache.state("again", 0).finished()
            starts = [s.start_offset for s in segments]
            assert starts == sorted(set(starts))  # no segment copied twice
            for a, b in zip(segments, segments[1:]):
                assert a.end_offset + 1 == b.start_offset  # contiguous

    copied = run(first(), timeout=90)
    assert copied > 0
    run(second(copied), timeout=90)


def test_refusals(tmp_path):
    async def body():
        async with running_broker(tmp_path / "plain") as broker:
            admin = broker.server.admin
            with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
                admin.create_topic("t", 1, 1, configs={"remote.storage.enable": "true"})
        async with running_broker(tmp_path / "logs", **tiered_overrides(tmp_path / "remote")) as broker:
            admin = broker.server.admin
            with pytest.raises(InvalidConfigError, match="unsupported for the compacted topics"):
                admin.create_topic("c", 1, 1, configs={"remote.storage.enable": "true", "cleanup.policy": "compact"})
            with pytest.raises(InvalidConfigError, match="local.retention.ms"):
                admin.create_topic("r", 1, 1, configs={"remote.storage.enable": "true", "retention.ms": "1000",
                                                       "local.retention.ms": "5000"})
            admin.create_topic("on", 1, 1, configs={"remote.storage.enable": "true"})
            with pytest.raises(InvalidConfigError, match="Disabling remote storage"):
                admin.set_config("on", {"remote.storage.enable": "false"})
            with pytest.raises(InvalidConfigError, match="Disabling remote storage"):
                admin.incremental_config("on", [("remote.storage.enable", 1, None)])
            admin.incremental_config("on", [("retention.ms", 0, "100000")])  # other changes keep it on

    run(body(), timeout=60)


def test_broker_without_a_store_url_does_not_start():
    from kcli.broker.config import build_config
    from kcli.broker.config_error import ConfigError

    with pytest.raises(ConfigError, match="rsm.config.url"):
        build_config({"remote.log.storage.system.enable": "true", "log.dirs": "/tmp/x"})


def test_a_copy_killed_midway_leaves_no_half_segment(tmp_path):
    """Crash safety: an upload that dies after COPY_SEGMENT_STARTED and some objects (a kill -9 mid-copy) is
    never FINISHED, so the local segment stays; the next leader deletes the half upload (DELETE_SEGMENT_*) and
    copies the segment again."""
    store = tmp_path / "remote"
    overrides = tiered_overrides(store)

    async def crash():
        async with running_broker(tmp_path / "logs", **overrides) as broker:
            server = broker.server
            rlm = server.remote_log_manager
            attempts = []

            def dies_midway(ref, files):
                attempts.append(ref)
                rlm.rsm.fs.makedirs(f"{rlm.rsm.root}/{ref.partition_dir}", exist_ok=True)
                rlm.rsm.fs.pipe_file(rlm.rsm.key(ref, "index"), b"\0" * 8)  # one object of six, then the end
                raise OSError("killed")

            async def no_cleanup(partition):
                return None

            rlm.rsm.copy_log_segment_data = dies_midway
            rlm._expire = no_cleanup  # the broker died: nothing tidies up after it
            create_tiered(server, "crash")
            await produce(server, "crash", 20)
            partition = server.replica_manager.get_partition("crash", 0)
            await wait_for(lambda: attempts, what="a copy attempt")
            await asyncio.sleep(0.3)  # retention passes run: nothing local may go
            assert partition.log.highest_offset_in_remote_storage == -1
            assert partition.log.local_log_start_offset == 0
            assert rlm.cache.state("crash", 0).finished() == []
            return attempts[0]

    async def restart(half):
        async with running_broker(tmp_path / "logs", **overrides) as broker:
            server = broker.server
            partition = server.replica_manager.get_partition("crash", 0)
            rlm = server.remote_log_manager
            await wait_for(lambda: partition.log.local_log_start_offset > 0, what="copies after the restart")
            # the half upload is gone: its cleanup runs beside the copies, in no set order with them
            await wait_for(lambda: not (store / half.partition_dir / f"{half.stem}.index").exists(),
                           what="the half upload deleted")
            await wait_for(lambda: half.segment_id not in rlm.cache.state("crash", 0).segments,
                           what="DELETE_SEGMENT_FINISHED of the half upload")
            assert await consume_all(server, "crash", 0, partition.log_end_offset) == list(range(80))

    half = run(crash(), timeout=60)
    run(restart(half), timeout=60)


def test_verify_and_dump_the_remote_store(tmp_path):
    """`kctl verify` over the remote store (an fsspec URL) is clean; a corrupt remote object is reported with its
    URL and byte position; `kctl dump-log --remote-log-metadata-decoder` prints the metadata records."""
    import kctl_fork

    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(store)) as broker:
            server = broker.server
            create_tiered(server, "checked")
            await produce(server, "checked", 30)
            partition = server.replica_manager.get_partition("checked", 0)
            await wait_for(lambda: partition.log.local_log_start_offset > 0, what="copies")

    run(body(), timeout=60)
    clean = kctl_fork.run("verify", store.as_uri())
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.startswith("clean:")
    meta = next(p for p in (tmp_path / "logs").iterdir() if p.name.startswith("__remote_log_metadata-")
                and any(p.glob("*.log")) and next(p.glob("*.log")).stat().st_size > 0)
    dumped = kctl_fork.run("dump-log", "--remote-log-metadata-decoder", "--print-data-log", str(meta))
    assert dumped.returncode == 0, dumped.stderr
    assert "payload: RemoteLogSegmentMetadata{remoteLogSegmentId=RemoteLogSegmentId{topicIdPartition=" in dumped.stdout
    assert "state=COPY_SEGMENT_FINISHED" in dumped.stdout
    # kctl cat reads the remote segments as local ones: offsets from 0, each once, in order
    catted = kctl_fork.run("cat", "-f", "%o\\n", store.as_uri())
    assert catted.returncode == 0, catted.stderr
    offsets = [int(x) for x in catted.stdout.split()]
    assert offsets and offsets == list(range(len(offsets)))
    assert "remote: file:///" in catted.stderr
    scanned = kctl_fork.run("scan", "--json", store.as_uri())
    assert scanned.returncode == 0, scanned.stderr
    assert '"topic": "checked"' in scanned.stdout.replace('":"', '": "') and str(len(offsets)) in scanned.stdout
    # one flipped byte inside a remote segment's second batch
    victim = sorted(store.rglob("*.log"))[0]
    raw = bytearray(victim.read_bytes())
    second = 12 + int.from_bytes(raw[8:12], "big")
    raw[second + 70] ^= 0xFF
    victim.write_bytes(bytes(raw))
    broken = kctl_fork.run("verify", store.as_uri())
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"{victim.as_uri()}:{second}" in broken.stderr.replace("file:///", "file:///"), broken.stderr


def test_list_offsets_by_time_reaches_the_remote_segments(tmp_path):
    """ListOffsets by timestamp searches the remote segments first (their time indexes, then the records), as
    Kafka's findOffsetByTimestamp does, then the local log."""
    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(store)) as broker:
            server = broker.server
            create_tiered(server, "timed", {"retention.ms": "-1"})
            base = 1_700_000_000_000
            for b in range(60):  # record i of batch b at base + 10 * (4 * b + i)
                records = [Record(i, base + 10 * (4 * b + i), None, VALUE) for i in range(4)]
                server.replica_manager.append_records(1, {("timed", 0): build_record_batch(records)})
            partition = server.replica_manager.get_partition("timed", 0)
            await wait_for(lambda: partition.log.local_log_start_offset > 40, what="copies")
            rlm = server.remote_log_manager
            match = await rlm.offset_for_timestamp_async("timed", 0, base + 10 * 21, 0)
            assert (match.offset, match.timestamp) == (21, base + 10 * 21)
            match = await rlm.offset_for_timestamp_async("timed", 0, base + 10 * 21 + 5, 0)
            assert (match.offset, match.timestamp) == (22, base + 10 * 22)
            assert await rlm.offset_for_timestamp_async("timed", 0, base + 10 * 10_000, 0) is None
            assert (await rlm.offset_for_timestamp_async("timed", 0, 0, 0)).offset == 0

    run(body(), timeout=60)


def test_deleting_a_tiered_topic_deletes_its_remote_data(tmp_path):
    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(store)) as broker:
            server = broker.server
            create_tiered(server, "doomed", {"local.retention.bytes": "-2"})
            await produce(server, "doomed", 30)
            partition = server.replica_manager.get_partition("doomed", 0)
            await wait_for(lambda: partition.log.highest_offset_in_remote_storage > 0, what="copies")
            assert list(store.rglob("*.log"))
            await server.admin.delete_topic_async("doomed")
            await wait_for(lambda: not list(store.rglob("*.log")), what="the remote objects deleted")
            # the partition's metadata goes when its RemotePartitionDeleteMetadata is read back, after the objects
            await wait_for(lambda: server.remote_log_manager.cache.partitions.get(("doomed", 0)) is None,
                           what="the partition's remote metadata forgotten")

    run(body(), timeout=60)


def test_read_committed_from_the_remote_store_gets_the_aborted_transactions(tmp_path):
    """A read_committed fetch below the local log start carries the aborted transactions of the remote
    segments' transaction indexes (KIP-98 over KIP-405), so the consumer drops their records."""
    from kcli.records.control import ControlRecordType

    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(store)) as broker:
            server = broker.server
            create_tiered(server, "txns")
            partition = server.replica_manager.get_partition("txns", 0)
            aborted_starts = []
            for t in range(20):  # transactions of 4 records, every third aborted
                start = partition.log_end_offset
                records = [Record(start + i, int(time.time() * 1000), None, VALUE) for i in range(4)]
                raw = build_record_batch(records, producer_id=7, producer_epoch=0, base_sequence=4 * t,
                                         is_transactional=True, base_offset=start)
                with partition.managed.lock:
                    partition.log.append_raw(raw)
                    abort = t % 3 == 0
                    partition.log.append_marker(ControlRecordType.ABORT if abort else ControlRecordType.COMMIT,
                                                producer_id=7, producer_epoch=0, timestamp=int(time.time() * 1000))
                if abort:
                    aborted_starts.append(start)
            await wait_for(lambda: partition.log.local_log_start_offset > 30, what="copies")
            params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=True)
            [result] = await server.replica_manager.fetch_messages(params, [FetchPartition("txns", 0, 0, 1 << 20)])
            assert int(result.error) == 0
            assert result.read.records  # from the remote store
            got = sorted(t.first_offset for t in result.read.aborted)
            fetched_end = max(b.next_offset for b in BatchReader(bytes(result.read.records)))
            # every aborted transaction the fetched records belong to (those after them may come too, as the
            # local path gives them up to the last stable offset)
            assert {s for s in aborted_starts if s < fetched_end} <= set(got) <= set(aborted_starts)
            assert fetched_end <= partition.log.local_log_start_offset
            # again: the transaction indexes are cached now, so the answer comes from the event loop, the same
            rlm = server.remote_log_manager
            assert rlm.aborted_transactions("txns", 0, 0, fetched_end, partition.reader(), cached_only=True)
            [again] = await server.replica_manager.fetch_messages(params, [FetchPartition("txns", 0, 0, 1 << 20)])
            assert sorted(t.first_offset for t in again.read.aborted) == got

    run(body(), timeout=60)


def test_copy_and_fetch_quotas_hold_back_and_let_go_when_raised(tmp_path):
    """KIP-956: at 1 byte/s the copier copies one segment, then waits (counted) instead of copying the rest; a
    consumer's remote read goes through once, then is skipped (no records, no error) while the readers are over
    their bound. Raising both bounds dynamically (AlterConfigs of the broker) lets everything through."""
    store = tmp_path / "remote"

    async def body():
        async with running_broker(tmp_path / "logs", **tiered_overrides(
                store, **{"remote.log.manager.copy.max.bytes.per.second": "1",
                          "remote.log.manager.fetch.max.bytes.per.second": "1"})) as broker:
            server = broker.server
            create_tiered(server, "slow")
            await produce(server, "slow", 40)
            partition = server.replica_manager.get_partition("slow", 0)
            rlm = server.remote_log_manager
            await wait_for(lambda: rlm.copy_throttled_ms > 0, what="the copier waiting for its quota")
            assert rlm.copied_segments == 1 and len(partition.log.log_segments) > 3
            await wait_for(lambda: partition.log.local_log_start_offset > 0, what="the copied segment gone locally")
            params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False)
            [first] = await server.replica_manager.fetch_messages(params, [FetchPartition("slow", 0, 0, 10_000)])
            assert first.error.name == "none" and len(bytes(first.read.records)) > 0
            [second] = await server.replica_manager.fetch_messages(params, [FetchPartition("slow", 0, 0, 10_000)])
            assert second.error.name == "none" and len(bytes(second.read.records)) == 0
            assert rlm.fetches_throttled == 1
            with pytest.raises(InvalidRequestError, match="Value must be at least 1"):  # RemoteLogManagerConfig
                server.admin.dynamic.alter("", {"remote.log.manager.copy.max.bytes.per.second": "0"})
            # the bounds raised: every rolled segment goes, and the remote part reads again
            server.admin.dynamic.alter("", {"remote.log.manager.copy.max.bytes.per.second": str(1 << 30),
                                             "remote.log.manager.fetch.max.bytes.per.second": str(1 << 30)})
            await wait_for(lambda: partition.log.highest_offset_in_remote_storage >=
                           partition.log.log_segments[-1].base_offset - 1, what="every rolled segment copied")
            end = partition.log_end_offset
            assert await consume_all(server, "slow", 0, end) == list(range(end))

    run(body(), timeout=90)
