"""Cleaner: compaction against an independent model of Kafka's cleaner rules, multi-pass offset maps, the swap."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import T0
from kcli.records import Record, RecordBatch
from kcli.records.control import ControlRecordType
from kcli.storage.cleaner import CleanerConfig, OffsetMap, apply_compaction, iter_visible_records, plan_compaction
from kcli.storage.log import LogConfig, PartitionLog
from kcli.storage.segment import FileBatchReader
from kcli.tools.verify import verify

NOW = T0 + 10_000_000
KEYS = [f"k{i}".encode() for i in range(6)]

# One op: ("data", records) | ("txn", records, commit) | ("roll",); a record is (key index or None, value or None).
_record = st.tuples(st.one_of(st.none(), st.integers(0, len(KEYS) - 1)),
                    st.one_of(st.none(), st.binary(min_size=0, max_size=8)))
_ops = st.lists(st.one_of(
    st.tuples(st.just("data"), st.lists(_record, min_size=1, max_size=4)),
    st.tuples(st.just("txn"), st.lists(_record, min_size=1, max_size=3), st.booleans()),
    st.tuples(st.just("roll")),
), min_size=1, max_size=40)


def _write(directory: Path, ops) -> list[tuple[int, bytes | None, bytes | None, bool]]:
    """Append the ops; returns every data record as (offset, key, value, aborted)."""
    written = []
    pid = 5000
    with PartitionLog(directory, config=LogConfig(segment_bytes=600)) as log:
        for i, op in enumerate(ops):
            if op[0] == "roll":
                if log.segment.size:
                    log.roll()
                continue
            records = [Record(0, T0 + i, None if k is None else KEYS[k], v) for k, v in op[1]]
            base = log.log_end_offset
            if op[0] == "data":
                log.append(records)
                aborted = False
            else:
                pid += 1  # one producer per transaction, one data batch each
                log.append(records, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)
                log.append_marker(ControlRecordType.COMMIT if op[2] else ControlRecordType.ABORT, producer_id=pid,
                                  producer_epoch=0, timestamp=T0 + i)
                aborted = not op[2]
            written.extend((base + j, None if k is None else KEYS[k], v, aborted) for j, (k, v) in enumerate(op[1]))
    return written


def _active_base(directory: Path) -> int:
    return max(int(p.name.split(".")[0]) for p in directory.glob("*.log"))


def _data_records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    found = []
    for log in sorted(directory.glob("*.log")):
        for batch in FileBatchReader(log):
            if not batch.is_control:
                found.extend((r.offset, r.key, r.value) for r in batch.records())
    return found


def _model(written, cleanable_end: int, *, drop_tombstones: bool):
    """Kafka's rules, independently: below cleanable_end aborted and keyless records go, the latest record per
    key (latest among non-aborted records below cleanable_end) stays, tombstones stay unless their horizon passed."""
    latest = {}
    for offset, key, _value, aborted in written:
        if offset < cleanable_end and key is not None and not aborted:
            latest[key] = offset
    kept = []
    for offset, key, value, aborted in written:
        if offset >= cleanable_end:
            kept.append((offset, key, value))
        elif not aborted and key is not None and latest[key] == offset and (value is not None or not drop_tombstones):
            kept.append((offset, key, value))
    return kept


def _assert_verify_clean(directory: Path) -> None:
    report = verify([str(directory)])
    bad = [p for p in report.problems if p.code != "offset_gap"]
    assert bad == [], [(p.code, p.reason) for p in bad]


def _files(directory: Path, base: int) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob(f"{base:020d}.*"))}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, max_memory=st.sampled_from([24 * 5, 24 * 9, 1 << 20]))
def test_compaction_matches_model(tmp_path_factory, ops, max_memory):
    directory = tmp_path_factory.mktemp("logs") / "topic-0"
    written = _write(directory, ops)
    active = _active_base(directory)
    active_files = _files(directory, active)
    config = CleanerConfig(delete_retention_ms=1000)

    plan = plan_compaction(directory, now_ms=NOW, config=config, max_memory=max_memory)
    assert plan.end_offset <= active
    result = apply_compaction(plan)
    assert _data_records(directory) == _model(written, active, drop_tombstones=False)
    assert _files(directory, active) == active_files  # the active segment is never cleaned
    assert result.checkpoint == active
    _assert_verify_clean(directory)

    # Same clock: nothing left to do.
    again = plan_compaction(directory, now_ms=NOW, config=config, max_memory=max_memory)
    assert again.changed_groups == []

    # Past the delete horizon the tombstones of the cleaned section go (a pass with an empty dirty section).
    apply_compaction(plan_compaction(directory, now_ms=NOW + 1000, config=config, max_memory=max_memory))
    assert _data_records(directory) == _model(written, active, drop_tombstones=True)
    assert _files(directory, active) == active_files
    _assert_verify_clean(directory)


def test_tombstone_batches_get_a_delete_horizon(tmp_path):
    directory = tmp_path / "t-0"
    with PartitionLog(directory) as log:
        log.append([Record(0, T0, b"a", b"1"), Record(0, T0 + 1, b"b", b"2")])
        log.append([Record(0, T0 + 2, b"a", None)])
        log.roll()
        log.append([Record(0, T0 + 3, b"c", b"3")])
    apply_compaction(plan_compaction(directory, now_ms=NOW, config=CleanerConfig(delete_retention_ms=500)))
    batches = list(FileBatchReader(directory / f"{0:020d}.log"))
    assert [b.base_offset for b in batches] == [0, 2]
    assert [r.offset for r in batches[0].records()] == [1]
    assert batches[0].last_offset_delta == 1 and batches[0].delete_horizon_ms is None
    assert batches[1].delete_horizon_ms == NOW + 500 and batches[1].records()[0].value is None


def test_producer_last_batch_kept_empty(tmp_path):
    directory = tmp_path / "t-0"
    with PartitionLog(directory) as log:
        log.append([Record(0, T0, b"a", b"1"), Record(0, T0, b"a", b"2")], producer_id=7, producer_epoch=1,
                   base_sequence=10)
        log.append([Record(0, T0 + 1, b"a", b"3")])
        log.roll()
        log.append([Record(0, T0 + 3, b"c", b"3")])
    apply_compaction(plan_compaction(directory, now_ms=NOW))
    first = next(iter(FileBatchReader(directory / f"{0:020d}.log")))
    assert isinstance(first, RecordBatch)
    assert (first.size, first.records_count, first.base_offset, first.last_offset_delta) == (61, 0, 0, 1)
    assert (first.producer_id, first.producer_epoch, first.last_sequence) == (7, 1, 11)
    _assert_verify_clean(directory)


def test_small_offset_map_cleans_in_passes(tmp_path):
    directory = tmp_path / "t-0"
    with PartitionLog(directory, config=LogConfig(segment_bytes=300)) as log:
        for i in range(40):
            log.append([Record(0, T0 + i, f"k{i % 10}".encode(), f"v{i}".encode())])
        log.roll()
        log.append([Record(0, T0, b"x", b"y")])
    plan = plan_compaction(directory, now_ms=NOW, max_memory=24 * 6)  # 5 usable entries
    assert not plan.complete and plan.keys_mapped == 5
    result = apply_compaction(plan)
    assert len(result.passes) > 1 and result.checkpoint == 40
    assert [(o, k) for o, k, _v in _data_records(directory)] == [(30 + i, f"k{i}".encode()) for i in range(10)] + [(40, b"x")]
    _assert_verify_clean(directory)


@pytest.mark.parametrize("max_memory", [24 * 8, 1 << 20], ids=["map-fills-up", "map-fits"])
def test_parallel_workers_write_what_one_process_writes(tmp_path, max_memory):
    """jobs=2 (forked workers for the offset map and the groups) leaves the same bytes and counts as jobs=1,
    including when a worker's segment map would overflow and that segment is redone record by record."""
    import random

    rng = random.Random(7)
    ops = []
    for _ in range(120):
        kind = rng.random()
        records = [(rng.choice([None, *range(len(KEYS))]), rng.choice([None, b"v", b"value"]))
                   for _ in range(rng.randint(1, 4))]
        ops.append(("roll",) if kind < 0.08 else ("txn", records, rng.random() < 0.5) if kind < 0.3
                   else ("data", records))
    runs = {}
    for jobs in (1, 2):
        directory = tmp_path / f"jobs{jobs}" / "topic-0"
        _write(directory, ops)
        dry = plan_compaction(directory, now_ms=NOW, max_memory=max_memory, jobs=jobs)
        plan = plan_compaction(directory, now_ms=NOW, max_memory=max_memory, count=False, jobs=jobs)
        result = apply_compaction(plan, jobs=jobs)
        runs[jobs] = (dry.to_json() | {"partition": None}, [p.to_json() | {"partition": None} for p in result.passes],
                      {f.name: f.read_bytes() for f in sorted(directory.iterdir())})
        _assert_verify_clean(directory)
    assert runs[1] == runs[2]
    assert runs[1][0]["records_dropped"] > 0


def test_superseded_offsets_from_elsewhere_clean_as_the_offset_map_does(tmp_path):
    """The hook the Spark engine uses: map verdicts computed outside (here by a plain dict over the visible
    records) stream in as sorted offsets, and the cleaned partition is byte for byte the offset map's."""
    import random

    from kcli.storage.cleaner import SupersededOffsets, plan_with_superseded, prepare_compaction
    from kcli.tools.compact import latest_values

    rng = random.Random(11)
    ops = [("txn", [(rng.randrange(6), b"t")], rng.random() < 0.5) if i % 5 == 0 else ("roll",) if i % 17 == 0
           else ("data", [(rng.choice([None, *range(6)]), rng.choice([None, b"v"])) for _ in range(3)])
           for i in range(150)]
    dirs = []
    for name in ("map", "streamed"):
        directory = tmp_path / name / "topic-0"
        _write(directory, ops)
        dirs.append(directory)
    expected_dry = plan_compaction(dirs[0], now_ms=NOW).to_json() | {"partition": None}
    expected = apply_compaction(plan_compaction(dirs[0], now_ms=NOW, count=False))

    skeleton = prepare_compaction(dirs[1], now_ms=NOW)
    start, end = skeleton.first_dirty_offset, skeleton.uncleanable_offset
    visible = [(r.offset, r.key) for _b, r in iter_visible_records(dirs[1]) if r.key is not None and r.offset < end]
    latest = {key: offset for offset, key in visible if offset >= start}
    superseded = sorted(o for o, k in visible if k in latest and o < latest[k])
    dry = plan_with_superseded(prepare_compaction(dirs[1], now_ms=NOW),
                               SupersededOffsets(iter(superseded), end - 1, len(latest)))
    assert dry.to_json() | {"partition": None} == expected_dry
    plan = plan_with_superseded(skeleton, SupersededOffsets(iter(superseded), end - 1, len(latest)), count=False)
    result = apply_compaction(plan)
    assert [p.to_json() | {"partition": None} for p in result.passes] == [
        p.to_json() | {"partition": None} for p in expected.passes]
    assert {f.name: f.read_bytes() for f in dirs[0].iterdir()} == {f.name: f.read_bytes() for f in dirs[1].iterdir()}
    assert latest_values(dirs[1]).latest == latest_values(dirs[0]).latest
    with pytest.raises(RuntimeError, match="consumed once"):
        plan.offset_map.superseded(0)


def test_min_compaction_lag_and_dry_plan(tmp_path):
    directory = tmp_path / "t-0"
    with PartitionLog(directory, config=LogConfig(segment_bytes=200)) as log:
        for i in range(12):
            log.append([Record(0, T0 + i * 1000, b"k", f"v{i}".encode())])
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    plan = plan_compaction(directory, now_ms=T0 + 12_000, config=CleanerConfig(min_compaction_lag_ms=5000))
    assert plan.uncleanable_offset < 12
    assert all(o < plan.uncleanable_offset for g in plan.groups for o in g.segments)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before  # planning changes nothing


def test_offset_map_keys_short_keys_exactly_and_hashes_long_ones_with_md5():
    assert OffsetMap.hash(b"key") == b"key"
    assert OffsetMap.hash(b"k" * 15) == b"k" * 15
    assert OffsetMap.hash(b"k" * 16) == hashlib.md5(b"k" * 16).digest()
    # A 15-byte key and a digest never share a map key: digests are always 16 bytes.
    assert len(OffsetMap.hash(b"x" * 1000)) == 16
    assert OffsetMap(24 * 100).capacity == 90


@pytest.mark.parametrize("name", ["__consumer_offsets-12", "__consumer_offsets-18"])
def test_real_consumer_offsets_keep_latest_value_per_key(tmp_path, name):
    from support import FIXTURES, fixture_records

    source = FIXTURES / "VolodymyrZee__kafka" / name
    directory = tmp_path / name
    shutil.copytree(source, directory)
    for p in directory.iterdir():
        p.chmod(0o644)
    latest = {}
    for is_control, offset, key, value in fixture_records(source / f"{0:020d}.log"):
        if not is_control:
            latest[key] = (offset, value)
    apply_compaction(plan_compaction(directory, now_ms=NOW, include_active=True))
    after = [(offset, key, value) for is_control, offset, key, value in fixture_records(directory / f"{0:020d}.log")
             if not is_control]
    assert sorted(after) == sorted((o, k, v) for k, (o, v) in latest.items())
    _assert_verify_clean(directory)
    assert plan_compaction(directory, now_ms=NOW, include_active=True).changed_groups == []


def test_open_transaction_bounds_the_cleaning(tmp_path):
    directory = tmp_path / "t-0"
    with PartitionLog(directory, config=LogConfig(segment_bytes=200)) as log:
        for i in range(4):
            log.append([Record(0, T0 + i, b"k", f"v{i}".encode())])
        log.append([Record(0, T0 + 5, b"k", b"open")], producer_id=9, producer_epoch=0, base_sequence=0,
                   is_transactional=True)
        for i in range(6):
            log.append([Record(0, T0 + 10 + i, b"k", f"w{i}".encode())])
    bases = sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
    lso_segment = max(b for b in bases if b <= 4)
    plan = plan_compaction(directory, now_ms=NOW, include_active=True)
    assert plan.uncleanable_offset == lso_segment and plan.end_offset == lso_segment
    apply_compaction(plan)
    assert [o for o, _k, _v in _data_records(directory) if o >= lso_segment] == list(range(lso_segment, 11))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_messages_are_compacted_in_their_own_format(tmp_path, magic):
    """Magic 0/1 logs (clusters upgraded from before 0.11 keep them in compacted topics for years): wrappers
    keep their magic and codec and lose only superseded records; tombstones follow Kafka's legacy rule."""
    import os

    from kcli.records import Codec
    from kcli.records.legacy import LegacyMessage, build_legacy_messages
    from kcli.storage.cleaner import SupersededOffsets, plan_with_superseded, prepare_compaction
    from kcli.tools.compact import compare, latest_values

    directory = tmp_path / "old-0"
    offset = 0
    with PartitionLog(directory, config=LogConfig(segment_bytes=700)) as log:
        for i in range(60):
            codec = Codec(i % 4)  # zstd did not exist before magic 2
            count = 1 if codec == Codec.NONE else 3
            records = [Record(offset + j, T0 + i, f"k{(i * 3 + j) % 7}".encode(),
                              None if (i + j) % 11 == 0 else f"v{i}-{j}".encode()) for j in range(count)]
            log.append_raw(build_legacy_messages(records, magic=magic, codec=codec))
            offset += count
        log.append_raw(build_legacy_messages([Record(offset, T0 + 99, b"k0", None)], magic=magic))  # a live delete
        offset += 1
    before = latest_values(directory)
    copy = tmp_path / "streamed" / "old-0"
    shutil.copytree(directory, copy)

    result = apply_compaction(plan_compaction(directory, now_ms=NOW, include_active=True))
    after = latest_values(directory)
    assert compare(before, after, NOW, 86_400_000) == []
    assert result.total("records_dropped") > 60 and result.total("tombstones_kept") > 0
    batches = [b for log in sorted(directory.glob("*.log")) for b in FileBatchReader(log)]
    assert all(isinstance(b, LegacyMessage) and b.magic == magic and b.is_valid for b in batches)
    assert any(b.codec_id and len(b.records()) < 3 for b in batches)  # a wrapper that lost some records
    _assert_verify_clean(directory)
    # The Spark engine's path (verdicts streamed in) leaves the same bytes.
    skeleton = prepare_compaction(copy, now_ms=NOW, include_active=True)
    end = skeleton.uncleanable_offset
    visible = [(r.offset, r.key) for _b, r in iter_visible_records(copy) if r.key is not None and r.offset < end]
    latest = {k: o for o, k in visible}
    streamed = SupersededOffsets(iter(sorted(o for o, k in visible if o < latest[k])), end - 1, len(latest))
    apply_compaction(plan_with_superseded(skeleton, streamed, count=False))
    assert {f.name: f.read_bytes() for f in directory.iterdir()} == {f.name: f.read_bytes() for f in copy.iterdir()}

    # Tombstones go once their segment is older than the last clean segment's mtime minus delete.retention.ms.
    for path in directory.glob("*.log"):
        os.utime(path, (1_000, 1_000))
    with PartitionLog.open(directory, config=LogConfig(segment_bytes=700)) as log:
        log.roll()
        log.append_raw(build_legacy_messages([Record(offset, T0, b"new", b"x")], magic=magic))
    assert any(value is None for _o, _k, value in _data_records(directory))
    apply_compaction(plan_compaction(directory, now_ms=NOW, config=CleanerConfig(delete_retention_ms=0)))
    assert all(value is not None for _o, _k, value in _data_records(directory))
    _assert_verify_clean(directory)
