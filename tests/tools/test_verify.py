"""kctl verify: clean on real Kafka data, and every kind of damage reported at the right byte."""

from __future__ import annotations

import shutil
import struct

import pytest

from builders import build_partition
from kcli.records import BatchReader
from kcli.records.crc import crc32c
from kcli.tools.verify import Severity, verify


def _codes(report, severity=None):
    return [p.code for p in report.problems if severity is None or p.severity is severity]


def test_fixture_log_dirs_are_clean(fixtures_dir):
    for log_dir in ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem/data"):
        report = verify([str(fixtures_dir / log_dir)], deep=True)
        assert report.is_clean(strict=True), report.problems
        assert report.segments >= 10


def test_fixture_record_counts(fixtures_dir):
    report = verify([str(fixtures_dir / "rjmfernandes__flink-on-prem/data/loyalty_levels-0")], deep=True)
    assert (report.batches, report.records) == (2074, 17204)
    shallow = verify([str(fixtures_dir / "rjmfernandes__flink-on-prem/data/loyalty_levels-0")])
    assert shallow.records == 17204


@pytest.fixture
def partition(tmp_path):
    return build_partition(tmp_path / "orders-0")


def _segments(partition):
    return sorted(partition.glob("*.log"))


def _batches(log_path):
    return list(BatchReader(log_path.read_bytes()))


def test_built_partition_is_clean(partition):
    report = verify([str(partition)], deep=True)
    assert report.is_clean(strict=True), report.problems
    assert len(_segments(partition)) > 2


def test_flipped_bit_in_middle_batch(partition):
    log = _segments(partition)[0]
    victim = _batches(log)[5]
    data = bytearray(log.read_bytes())
    data[victim.position + 70] ^= 0x10
    log.write_bytes(bytes(data))
    report = verify([str(partition)])
    (problem,) = report.errors
    assert (problem.code, problem.position, problem.base_offset, problem.file) == (
        "crc_mismatch", victim.position, victim.base_offset, str(log))


@pytest.mark.parametrize("cut", [1, 17, 18, 40, -1])
def test_truncated_last_batch(partition, cut):
    log = _segments(partition)[-1]
    last = _batches(log)[-1]
    keep = last.position + (cut if cut > 0 else last.size - 1)
    log.write_bytes(log.read_bytes()[:keep])
    report = verify([str(partition)])
    codes = _codes(report, Severity.ERROR)
    assert codes[0] in ("truncated_batch", "invalid_bytes_at_end")
    assert report.errors[0].position == last.position


def test_garbage_appended(partition):
    log = _segments(partition)[-1]
    size = log.stat().st_size
    with open(log, "ab") as out:
        out.write(b"\xde\xad\xbe\xef" * 3)
    report = verify([str(partition)])
    assert [(p.code, p.position) for p in report.errors] == [("invalid_bytes_at_end", size)]


def test_zero_filled_tail(partition):
    log = _segments(partition)[-1]
    size = log.stat().st_size
    with open(log, "ab") as out:
        out.write(bytes(4096))
    report = verify([str(partition)])
    assert [(p.code, p.position) for p in report.errors] == [("corrupt_batch_size", size)]


def test_offsets_going_backwards(partition):
    log = _segments(partition)[0]
    batches = _batches(log)
    victim = batches[3]
    data = bytearray(log.read_bytes())
    struct.pack_into(">q", data, victim.position, batches[1].base_offset)  # base offset is outside the CRC
    log.write_bytes(bytes(data))
    report = verify([str(partition)])
    assert ("offset_not_increasing", victim.position) in [(p.code, p.position) for p in report.errors]


def test_index_entry_pointing_mid_batch(partition):
    index = _segments(partition)[0].with_suffix(".index")
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, 0)
    struct.pack_into(">ii", data, 0, rel, pos + 3)
    index.write_bytes(bytes(data))
    report = verify([str(partition)])
    assert [(p.code, p.position, p.file) for p in report.errors] == [("index_position_not_batch_start", 0, str(index))]


def test_index_offset_mismatch(partition):
    index = _segments(partition)[0].with_suffix(".index")
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, 8)
    struct.pack_into(">ii", data, 8, rel - 1, pos)
    index.write_bytes(bytes(data))
    report = verify([str(partition)])
    assert [(p.code, p.position) for p in report.errors] == [("index_mismatch", 8)]


def test_preallocated_index_is_a_warning(partition):
    """On an older segment (a broker trims indexes when it rolls); the active segment's is only a note."""
    index = _segments(partition)[0].with_suffix(".index")
    with open(index, "ab") as out:
        out.write(bytes(8 * 100))
    report = verify([str(partition)])
    assert report.is_clean() and not report.is_clean(strict=True)
    assert _codes(report) == ["index_preallocated"]
    active = _segments(partition)[-1].with_suffix(".index")
    with open(active, "ab") as out:
        out.write(bytes(8 * 100))
    report = verify([str(partition)])
    assert _codes(report) == ["index_preallocated"] and report.preallocated_active == 1 and report.notes


def test_time_index_timestamp_mismatch(partition):
    tindex = _segments(partition)[0].with_suffix(".timeindex")
    data = bytearray(tindex.read_bytes())
    ts, rel = struct.unpack_from(">qi", data, 0)
    struct.pack_into(">qi", data, 0, ts - 5, rel)
    tindex.write_bytes(bytes(data))
    report = verify([str(partition)])
    assert ("time_index_timestamp_mismatch", 0) in [(p.code, p.position) for p in report.errors]


def test_missing_txn_index_entry(partition):
    (txn,) = partition.glob("*.txnindex")
    txn.write_bytes(b"")
    report = verify([str(partition)])
    assert _codes(report, Severity.ERROR) == ["txn_index_missing_entry"]


def test_corrupt_producer_snapshot(partition):
    snapshot = sorted(partition.glob("*.snapshot"))[-1]
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 0xFF
    snapshot.write_bytes(bytes(data))
    report = verify([str(partition)])
    (problem,) = report.errors
    assert problem.code == "snapshot_corrupt" and "Stored crc" in problem.reason and problem.position == 2


def test_malformed_leader_epoch_checkpoint(partition):
    (partition / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n1 x\n")
    report = verify([str(partition)])
    (problem,) = report.errors
    assert problem.code == "checkpoint_corrupt" and "Malformed line" in problem.reason


def test_leftover_swap_file_warns(partition):
    shutil.copy(_segments(partition)[0], str(_segments(partition)[0]) + ".swap")
    report = verify([str(partition)])
    assert report.is_clean() and _codes(report) == ["leftover_temp_file"]


def test_deep_finds_bad_records_behind_valid_crc(partition):
    log = _segments(partition)[0]
    victim = next(b for b in _batches(log) if b.codec_id == 0 and b.position > 0)
    data = bytearray(log.read_bytes())
    data[victim.position + 61] = 0x7E  # first record length now wrong
    struct.pack_into(">I", data, victim.position + 17, crc32c(bytes(data[victim.position + 21 : victim.position + victim.size])))
    log.write_bytes(bytes(data))
    assert verify([str(partition)]).is_clean()
    report = verify([str(partition)], deep=True)
    assert [(p.code, p.position) for p in report.errors] == [("corrupt_records", victim.position)]


def test_a_running_brokers_log_dir(tmp_path):
    """Active segments' preallocated indexes are normal: one note, no per-partition warnings, and only the
    entries count as data read (not 10 MiB of zeros per index)."""
    import uuid

    from kcli.records import Record
    from kcli.storage.log import LogConfig, PartitionLog

    logs = []
    for n in range(6):
        # an index entry every 512 bytes: the active segment's (lazy) indexes are opened, so preallocated
        log = PartitionLog(tmp_path / "logs" / f"live-{n}",
                           config=LogConfig(segment_bytes=4096, index_interval_bytes=512),
                           topic_id=uuid.UUID(int=n + 1))
        for i in range(60):
            log.append([Record(0, 1700000000000 + i, b"k", b"v" * 100)])
        log.flush_to_os()  # as the broker does after its appends
        logs.append(log)  # open, as a running broker holds them
    preallocated = [p for p in (tmp_path / "logs").rglob("*index") if p.stat().st_size > 10_000_000]
    assert len(preallocated) == 12
    report = verify([str(tmp_path / "logs")])
    assert "index_preallocated" not in {p.code for p in report.problems}, report.problems
    assert report.is_clean(strict=True) and report.preallocated_active == 12 and len(report.notes) == 1
    on_disk = sum(p.stat().st_size for p in (tmp_path / "logs").rglob("*") if p.is_file() and p.suffix != ".index"
                  and p.suffix != ".timeindex")
    assert report.bytes < on_disk + 64 * 1024, (report.bytes, on_disk)
    for log in logs:
        log.close()


def test_txn_index_entry_of_an_aborted_transaction_whose_data_was_compacted_away(tmp_path):
    """Kafka's cleaner removes an aborted transaction's batches and keeps its ABORT marker and .txnindex entry
    for a pass (CleanedTransactionMetadata): an entry with its marker but no data is not an error; an entry
    without a marker still is."""
    from kcli.records import Record
    from kcli.records.control import ControlRecordType
    from kcli.storage.index import AbortedTxn, TransactionIndex
    from kcli.storage.log import PartitionLog

    log = PartitionLog(tmp_path / "__consumer_offsets-0")
    log.append([Record(0, 1, b"k", b"v")])
    log.append_marker(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, timestamp=2)  # offset 1
    log.close()
    with TransactionIndex(tmp_path / "__consumer_offsets-0" / "00000000000000000000.txnindex", 0) as index:
        index.append(AbortedTxn(7, 0, 1, 2))  # the transaction's data at offset 0 is gone, its marker stays
    assert verify([str(tmp_path / "__consumer_offsets-0")]).errors == []
    with TransactionIndex(tmp_path / "__consumer_offsets-0" / "00000000000000000000.txnindex", 0) as index:
        index.append(AbortedTxn(8, 0, 5, 6))
    assert _codes(verify([str(tmp_path / "__consumer_offsets-0")]), Severity.ERROR) == ["txn_index_without_marker"]
