"""The compiled cleaner (kcli/storage/_cleaner.c) against the pure-Python path: byte-identical output segments
and reports on bench-like data and on real Kafka partitions, the same decisions and rewritten batches for
random batches, and kcli working without the extension.

The extension is what `pip install -e .` builds; where the tree has none (a checkout without build_ext) the
tests build it from source into a temp dir first, so the C code is exercised wherever a compiler exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import T0, build_partition
from support import FIXTURES, REPO
from kcli.records import Codec, Header, Record, RecordBatch, build_record_batch
from kcli.records.batch import retain_records
from kcli.storage import cleaner
from kcli.storage.cleaner import CleanerConfig, OffsetMap, apply_compaction, plan_compaction
from kcli.storage.log import LogConfig, PartitionLog
from kcli.records.types import TimestampType

NOW = T0 + 10**9


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    """The compiled module: the in-tree build, else one built here from kcli/storage/_cleaner.c."""
    try:
        from kcli.storage import _cleaner
        return _cleaner
    except ImportError:
        pass
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: only the pure cleaner can run here")
    out = tmp_path_factory.mktemp("ext")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(out),
                           "--build-temp", str(out / "tmp")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = out.rglob("_cleaner*.so")
    spec = importlib.util.spec_from_file_location("kcli.storage._cleaner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def use(monkeypatch, native):
    """use(True): the compiled cleaner from now on; use(False): the pure one."""
    def choose(compiled: bool) -> None:
        monkeypatch.setattr(cleaner, "_native_module", native if compiled else None)
    return choose


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _json(plan) -> dict:
    return plan.to_json() | {"partition": None}


def _compact_both(use, source: Path, tmp_path: Path, now_ms: int = NOW, **kwargs) -> tuple[dict, dict]:
    """Compact two copies of ``source``, compiled and pure; assert identical plans, results and files."""
    outputs = []
    for compiled in (True, False):
        use(compiled)
        directory = tmp_path / ("compiled" if compiled else "pure") / source.name
        shutil.copytree(source, directory)
        for p in directory.iterdir():
            p.chmod(0o644)
        dry = plan_compaction(directory, now_ms=now_ms, **kwargs)
        assert (dry.offset_map.native is not None) == compiled
        result = apply_compaction(plan_compaction(directory, now_ms=now_ms, count=False, **kwargs),
                                  jobs=kwargs.get("jobs", 1))
        outputs.append((_json(dry), [_json(p) for p in result.passes], _files(directory)))
    assert outputs[0][0] == outputs[1][0], "dry-run plans differ"
    assert outputs[0][1] == outputs[1][1], "applied passes differ"
    assert outputs[0][2].keys() == outputs[1][2].keys()
    for name in outputs[0][2]:
        assert outputs[0][2][name] == outputs[1][2][name], f"{name} differs"
    return outputs[0][0], outputs[1][0]


def _bench_like(directory: Path, *, batches: int = 240, seed: int = 5, keyless: float = 0.01) -> Path:
    """bench_recover_compact.py's partition in small: every codec, ~100 B and ~1 KiB values, each key about four
    times, 2 % tombstones, headers; plus keyless records, long keys (MD5 in the map) and transactions."""
    rng = random.Random(seed)
    key_space = batches * 26 // 4
    with PartitionLog(directory, config=LogConfig(segment_bytes=64 * 1024)) as log:
        for i in range(batches):
            count, size = (40, 100) if i % 2 == 0 else (12, 1024)
            records = []
            for j in range(count):
                k = rng.randrange(key_space)
                key = None if rng.random() < keyless else (b"key-%09d" % k if k % 7 else b"long-key-%040d" % k)
                value = None if rng.random() < 0.02 else rng.randbytes(8).hex().encode() * (size // 16)
                headers = (Header("trace", rng.randbytes(8)),) if j % 4 == 0 else ()
                records.append(Record(0, T0 + i * 100 + j, key, value, headers))
            log.append(records, codec=Codec(i % 5), partition_leader_epoch=0)
            if i % 60 == 30:
                pid = 5000 + i
                log.append([Record(0, T0 + i * 100, b"key-%09d" % 1, b"in-txn")], producer_id=pid, producer_epoch=0,
                           base_sequence=0, is_transactional=True, partition_leader_epoch=0)
                from kcli.records.control import ControlRecordType
                kind = ControlRecordType.ABORT if i % 120 == 30 else ControlRecordType.COMMIT
                log.append_marker(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=1,
                                  timestamp=T0 + i * 100, partition_leader_epoch=0)
    return directory


@pytest.fixture(scope="module")
def bench_partition(tmp_path_factory) -> Path:
    return _bench_like(tmp_path_factory.mktemp("bench") / "bench-0")


@pytest.mark.parametrize("kwargs", [
    {},
    {"config": CleanerConfig(delete_retention_ms=0)},  # tombstones dropped, horizons set on a second run
    {"include_active": True, "config": CleanerConfig(segment_bytes=256 * 1024)},
    {"max_memory": 24 * 700},  # the map fills up mid-batch: several passes
    {"jobs": 2},
], ids=["default", "delete-retention-0", "include-active", "small-map", "jobs-2"])
def test_compiled_and_pure_write_identical_segments_on_bench_like_data(use, bench_partition, tmp_path, kwargs):
    dry, _ = _compact_both(use, bench_partition, tmp_path, **kwargs)
    assert dry["records_dropped"] > 0


@pytest.fixture(scope="module")
def keyed_partition(tmp_path_factory) -> Path:
    """The bench-like partition without keyless records: superseded batches are dropped from their headers."""
    return _bench_like(tmp_path_factory.mktemp("keyed") / "keyed-0", keyless=0.0)


@pytest.mark.parametrize("kwargs", [
    {},
    {"config": CleanerConfig(delete_retention_ms=0)},
    {"include_active": True, "config": CleanerConfig(segment_bytes=256 * 1024)},
    {"max_memory": 24 * 700},
    {"jobs": 2},
], ids=["default", "delete-retention-0", "include-active", "small-map", "jobs-2"])
def test_superseded_batches_dropped_undecoded_write_what_the_pure_cleaner_writes(use, keyed_partition, tmp_path,
                                                                                monkeypatch, kwargs):
    decoded = []
    real = cleaner.decompress_v2
    monkeypatch.setattr(cleaner, "decompress_v2", lambda codec, data: decoded.append(codec) or real(codec, data))
    dry, _ = _compact_both(use, keyed_partition, tmp_path, **kwargs)
    assert dry["records_dropped"] > 0 and dry["keyless_dropped"] == 0
    if "jobs" not in kwargs and "max_memory" not in kwargs:  # (workers decompress in their own processes)
        # The compiled run filters fewer compressed batches than it maps: the superseded ones went undecoded.
        use(True)
        directory = tmp_path / "again" / keyed_partition.name
        shutil.copytree(keyed_partition, directory)
        plan = plan_compaction(directory, now_ms=NOW, count=False, **kwargs)
        mapped, decoded[:] = len(decoded), []
        apply_compaction(plan)
        assert 0 < len(decoded) < 0.8 * mapped


def test_next_value_and_keyless_count(native):
    offset_map = native.OffsetMap(24 * 100)
    records = [Record(10 + i, T0, key, b"v") for i, key in enumerate((b"a", None, b"b", b"a"))]
    batch = RecordBatch(build_record_batch(records, base_offset=10))
    assert offset_map.add_batch(batch.payload(), 4, 10, 0) == 0
    assert offset_map.keyless == 1 and len(offset_map) == 2  # a -> 13, b -> 12
    assert [offset_map.next_value(o) for o in (0, 12, 13, 14)] == [12, 12, 13, 2**63 - 1]
    offset_map.put(b"c", 11)  # a change rebuilds the sorted offsets
    assert offset_map.next_value(0) == 11
    assert offset_map.add_batch(batch.payload(), 4, 10, 12) == 0 and offset_map.keyless == 1  # before start
    offset_map.keyless += 2
    assert offset_map.keyless == 3


def test_second_compaction_sets_and_honours_delete_horizons_identically(use, bench_partition, tmp_path):
    """A first clean stamps delete horizons (KIP-534); a later one past them drops the tombstones."""
    first = tmp_path / "first"
    first.mkdir()
    use(False)
    directory = first / bench_partition.name
    shutil.copytree(bench_partition, directory)
    apply_compaction(plan_compaction(directory, now_ms=NOW, include_active=True))
    dry, _ = _compact_both(use, directory, tmp_path / "second", now_ms=NOW + 2 * 86_400_000, include_active=True,
                           first_dirty_offset=0)
    assert dry["tombstones_dropped"] > 0


def test_compiled_and_pure_agree_on_the_test_suites_partition(use, tmp_path):
    source = build_partition(tmp_path / "src" / "t-0", batches=90)
    _compact_both(use, source, tmp_path / "out", include_active=True, config=CleanerConfig(delete_retention_ms=0))


def _fixture_partitions() -> list[Path]:
    if not FIXTURES.is_dir():
        return []
    return sorted({p.parent for p in FIXTURES.rglob("*.log") if p.stat().st_size > 0})


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared/kafka-fixtures not present")
def test_compiled_and_pure_agree_on_real_kafka_partitions(use, tmp_path):
    compared = 0
    for source in _fixture_partitions():
        try:
            use(False)
            plan_compaction(source, now_ms=NOW, include_active=True)  # readable at all? (some are corrupt on purpose)
        except Exception:  # noqa: BLE001 - a fixture the cleaner refuses is no comparison
            continue
        dry, _ = _compact_both(use, source, tmp_path / str(compared), include_active=True)
        compared += 1
    assert compared >= 10


# -- the C functions against their Python counterparts, on random batches ------------------------------------

_blobs = st.one_of(st.none(), st.binary(max_size=40))
_keys = st.one_of(st.none(), st.binary(max_size=20), st.sampled_from([b"a", b"b", b"c" * 16, b"d" * 30]))


@st.composite
def _batches(draw):
    count = draw(st.integers(1, 14))
    base_offset = draw(st.integers(0, 2**40))
    base_ts = draw(st.integers(0, 2**41))
    records = [Record(base_offset + i, base_ts + draw(st.integers(-1000, 10**6)), draw(_keys), draw(_blobs),
                      tuple(Header(draw(st.text(max_size=5)), draw(_blobs)) for _ in range(draw(st.integers(0, 2)))))
               for i in range(count)]
    ts_type = draw(st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]))
    old_horizon = draw(st.one_of(st.none(), st.integers(0, 2**41)))
    raw = build_record_batch(records, codec=draw(st.sampled_from(list(Codec))), timestamp_type=ts_type,
                             delete_horizon_ms=old_horizon, partition_leader_epoch=draw(st.integers(-1, 5)))
    return RecordBatch(raw)


@given(batch=_batches(), mapped=st.lists(st.tuples(_keys.filter(lambda k: k is not None), st.integers(0, 2**41)),
                                          max_size=8),
       latest_shift=st.integers(-3, 20), drop=st.booleans(), horizon=st.one_of(st.none(), st.integers(0, 2**41)))
@settings(max_examples=300, deadline=None)
def test_native_decisions_and_rewrites_equal_the_pure_ones(native, batch, mapped, latest_shift, drop, horizon):
    payload = batch.payload()
    count = batch.records_count
    entries = [(r.offset, r.key, r.value is None) for r in batch.records()]
    fast, pure = native.OffsetMap(24 * 1000), {}
    for key, offset in mapped:
        fast.put(key, offset)
        pure[cleaner.map_key(key)] = offset
    latest = batch.base_offset + latest_shift
    # the map pass
    fast_map, pure_map = native.OffsetMap(24 * 1000), {}
    assert fast_map.add_batch(payload, count, batch.base_offset, batch.base_offset + 1) == 0
    for offset, key, _ in entries:
        if key is not None and offset >= batch.base_offset + 1:
            pure_map[cleaner.map_key(key)] = offset
    assert len(fast_map) == len(pure_map)
    assert all(fast_map.get(key) == pure_map.get(cleaner.map_key(key), -1) for _, key, _ in entries if key is not None)
    # the filter pass (cleaner._filter_group's loop)
    keep, keyless, dropped, tombstones = [], 0, 0, 0
    for i, (offset, key, tombstone) in enumerate(entries):
        if offset <= latest:
            if key is None:
                keyless += 1
                continue
            if offset < pure.get(cleaner.map_key(key), -1):
                continue
            if tombstone and drop:
                dropped += 1
                continue
        keep.append(i)
        tombstones += tombstone
    mask, kept, f_keyless, f_dropped, f_tombstones = fast.filter_batch(payload, count, batch.base_offset, latest, drop)
    assert (kept, f_keyless, f_dropped, f_tombstones) == (len(keep), keyless, dropped, tombstones)
    assert (mask is None) == (len(keep) == count)
    if mask is not None:
        assert [i for i, m in enumerate(mask) if m] == keep
    # the rewrite of a batch that keeps some records
    if keep:
        horizon = horizon if batch.delete_horizon_ms is None else batch.delete_horizon_ms
        mask = bytes(1 if i in keep else 0 for i in range(count))
        saved, cleaner._native_module = cleaner._native_module, native
        try:
            got = cleaner._retain_native(batch, payload, mask, len(keep), horizon)
        finally:
            cleaner._native_module = saved
        assert native.retain(payload, count, mask, batch.base_timestamp, horizon,
                             batch.max_timestamp if batch.attributes & 0x08 else None) is not None
        assert got == retain_records(batch, keep, payload=payload, delete_horizon_ms=horizon)


@given(batch=_batches(), data=st.data())
@settings(max_examples=200, deadline=None)
def test_native_rejects_what_it_cannot_read_instead_of_guessing(native, batch, data):
    """A damaged records area: the C walk either rejects it (the pure path then decides or reports it) or
    reads exactly what the pure decoder reads."""
    payload = bytearray(batch.payload())
    for _ in range(data.draw(st.integers(1, 3))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    payload = bytes(payload)
    count = batch.records_count + data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    fast = native.OffsetMap(24 * 1000)
    status = fast.add_batch(payload, count, batch.base_offset, 0)
    decided = fast.filter_batch(payload, count, batch.base_offset, 2**62, False)
    try:
        from kcli.records.batch import _decode_records
        records = _decode_records(batch, payload, count)
    except Exception:  # noqa: BLE001 - the pure decoder refuses it: so must C
        assert status == -1 and decided is None
        return
    if status == -1:
        return  # stricter than the pure decoder is allowed: it falls back
    assert decided is not None
    keyed = {cleaner.map_key(r.key): r.offset for r in records if r.key is not None}
    assert len(fast) == len(keyed)


def test_a_record_before_its_batch_base_is_rejected_not_skipped(native):
    """Found by the property above: a damaged offset delta of -1 put a record at offset -1, which the C map skipped
    (below its start, and -1 reads as an empty slot) where the pure decoder reads it; the C walk rejects it."""
    batch = RecordBatch(build_record_batch([Record(5, T0, b"a", b"1"), Record(4, T0, b"", b"2")]))
    payload = batch.payload()
    fast = native.OffsetMap(24 * 1000)
    assert fast.add_batch(payload, batch.records_count, 5, 0) == -1
    assert fast.filter_batch(payload, batch.records_count, 5, 2**62, False) is None
    assert len(fast) == 0


def test_map_keys_are_exact_below_16_bytes_and_md5_above(native):
    for n in (0, 1, 15, 16, 17, 55, 56, 63, 64, 65, 119, 120, 1000):
        key = bytes(random.Random(n).randrange(256) for _ in range(n))
        if n >= 16:
            assert native.map_key(key) == hashlib.md5(key).digest()
        else:
            assert native.map_key(key) == key + bytes(15 - n) + bytes([n])
    assert native.map_key(b"a") != native.map_key(b"a\0")


@pytest.mark.parametrize("max_memory", [0, 23, 24, 24 * 3, 24 * 100, 1000, 128 * 1024 * 1024])
def test_native_map_has_the_pure_capacity_and_fills_as_it_does(native, use, max_memory):
    use(False)
    pure = OffsetMap(max_memory)
    fast = native.OffsetMap(max_memory)
    assert fast.capacity == pure.capacity
    tried = min(pure.capacity + 3, 5000)
    for i in range(tried):
        assert fast.put(b"k%d" % i, i) == (i < pure.capacity)
    assert len(fast) == min(tried, pure.capacity)
    assert fast.memory_bytes <= max(max_memory, 0) and fast.memory_bytes % 24 == 0
    merged = native.OffsetMap(max_memory)
    merged.merge(fast.dump())
    assert len(merged) == len(fast) and all(merged.get(b"k%d" % i) == fast.get(b"k%d" % i) for i in range(50))


def test_offset_map_memory_is_reported_per_key(use, bench_partition):
    sizes = {}
    for compiled in (True, False):
        use(compiled)
        plan = plan_compaction(bench_partition, now_ms=NOW, count=False)
        sizes[compiled] = plan.offset_map_bytes / plan.keys_mapped
    assert 24 <= sizes[True] <= 64  # 24-byte slots, grown by doubling at 3/4 load
    assert sizes[False] > sizes[True]


def test_kcli_runs_the_pure_cleaner_without_the_extension(tmp_path):
    """KCLI_NO_EXTENSIONS=1 (and an install whose build failed) leaves the pure path, which still compacts."""
    partition = build_partition(tmp_path / "logs" / "t-0", batches=30, transactions=False)
    code = ("import sys; from kcli.storage.cleaner import native_cleaner; from kcli.tools.compact import compact; "
            "assert native_cleaner() is None; r = compact(sys.argv[1:], verify_after=True, include_active=True, "
            "config_overrides={'cleanup.policy': 'compact'}); "
            "assert r.is_ok() and r.total('records_dropped') > 0, r.to_json()")
    env = {**os.environ, "KCLI_NO_EXTENSIONS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    proc = subprocess.run([sys.executable, "-c", code, str(partition)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_jobs_2_writes_what_jobs_1_writes(use, bench_partition, tmp_path):
    """Workers filtering the segments of one group each replay the transaction state before their segment (plain
    segments only advance it); the joined result is jobs=1's, byte for byte."""
    use(True)
    outputs = []
    for jobs in (1, 2):
        directory = tmp_path / f"jobs{jobs}" / bench_partition.name
        shutil.copytree(bench_partition, directory)
        result = apply_compaction(plan_compaction(directory, now_ms=NOW, count=False, jobs=jobs), jobs=jobs)
        assert len(result.passes[0].groups) < 2  # one group: its segments are filtered in parallel
        outputs.append(([_json(p) for p in result.passes], _files(directory)))
    assert outputs[0] == outputs[1]


def test_offset_maps_pickle_compiled_and_pure(use, native):
    """A plan travels to Spark executors pickled; a compiled map unpickled without the extension turns pure."""
    import pickle

    use(True)
    compiled = OffsetMap(24 * 1000)
    for i, key in enumerate([b"a", b"key-1", b"x" * 15, b"y" * 16, b"z" * 100]):
        compiled.put(key, 10 + i)
    compiled.latest_offset = 14
    copy = pickle.loads(pickle.dumps(compiled))
    assert copy.native is not None and len(copy) == 5 and copy.latest_offset == 14
    use(False)
    pure = pickle.loads(pickle.dumps(compiled))
    assert pure.native is None and pure.capacity == compiled.capacity
    for i, key in enumerate([b"a", b"key-1", b"x" * 15, b"y" * 16, b"z" * 100]):
        assert copy.get(key) == pure.get(key) == 10 + i
    assert pickle.loads(pickle.dumps(OffsetMap(0))).get(b"a") == -1
