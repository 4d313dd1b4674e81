"""The pure parts of kctl produce and kctl consume, in process: the Java client's murmur2 partitioner, cutting
input into records, kcat's -o spellings, and read_committed's filtering of a fetched partition."""

from __future__ import annotations

import io
import types

import pytest

from kcli.client.consume import READ_COMMITTED, ConsumeOptions, Consumer, EndOfPartition, Fetched, OffsetSpec, \
    _Position, parse_offset
from kcli.client.produce import IDLE, murmur2, parse_header, partition_for_key, read_chunks, split_records
from kcli.errors import UsageError
from kcli.records import ControlRecordType, Header, Record, build_record_batch
from kcli.records.control import control_key, end_txn_marker_value


def test_murmur2_is_the_java_clients():
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    assert {k: murmur2(k) for k in cases} == cases
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert murmur2(b"") == murmur2(bytes()) and 0 <= partition_for_key(b"", 3) < 3


def test_split_records_at_delimiters_across_chunks():
    chunks = [b"k1\tv", b"1\n\nk2", IDLE, b"\tv2\nno-key\n", b"last\tone"]
    assert list(split_records(chunks, b"\n", b"\t")) == [
        (b"k1", b"v1"), None, (b"k2", b"v2"), (None, b"no-key"), (b"last", b"one")]
    assert list(split_records([b"a||b||", b"|c"], b"||")) == [(None, b"a"), (None, b"b"), (None, b"|c")]
    assert list(split_records([b"k::v::w\n"], key_delimiter=b"::")) == [(b"k", b"v::w")]  # the first one splits
    with pytest.raises(ValueError):
        list(split_records([b"x"], b""))


def test_read_chunks_of_a_file_and_headers():
    assert list(read_chunks(io.BytesIO(b"abc"), size=2)) == [b"ab", b"c"]
    assert parse_header("a=b=c") == Header("a", b"b=c") and parse_header("flag") == Header("flag", None)
    with pytest.raises(ValueError):
        parse_header("=x")


@pytest.mark.parametrize("text,expected", [
    ("beginning", (OffsetSpec("beginning"), None)), ("end", (OffsetSpec("end"), None)),
    ("stored", (OffsetSpec("stored"), None)), ("42", (OffsetSpec("offset", 42), None)),
    ("-10", (OffsetSpec("tail", 10), None)), ("s@1700000000000", (OffsetSpec("timestamp", 1700000000000), None)),
    ("@5", (OffsetSpec("timestamp", 5), None)), ("e@99", (None, 99)),
])
def test_kcat_offset_spellings(text, expected):
    assert parse_offset(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "s@x", "e@", "1.5"])
def test_bad_offsets_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_offset(text)


def _txn(offset: int, pid: int, values: list[bytes]) -> bytes:
    return build_record_batch([Record(offset + i, 1000, None, v) for i, v in enumerate(values)],
                              producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)


def _marker(offset: int, pid: int, kind: ControlRecordType) -> bytes:
    return build_record_batch([Record(offset, 1000, control_key(kind), end_txn_marker_value(0))],
                              producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)


def test_read_committed_leaves_out_aborted_batches_and_markers():
    records = b"".join([
        _txn(0, 7, [b"aborted-1", b"aborted-2"]),
        _txn(2, 8, [b"committed-1"]),
        _marker(3, 7, ControlRecordType.ABORT),
        build_record_batch([Record(4, 1000, b"k", b"plain")]),
        _marker(5, 8, ControlRecordType.COMMIT),
        _txn(6, 7, [b"committed-2"]),  # producer 7's next transaction, after its ABORT marker
        _marker(7, 7, ControlRecordType.COMMIT),
    ])
    data = types.SimpleNamespace(error_code=0, high_watermark=8, last_stable_offset=8,
                                 aborted_transactions=[types.SimpleNamespace(producer_id=7, first_offset=0)],
                                 records=records)
    consumer = Consumer.__new__(Consumer)
    consumer.topic, consumer.options = "t", ConsumeOptions(isolation_level=READ_COMMITTED)
    position = _Position(0, 1)  # inside the first batch: the whole batch comes back, offset 0 is skipped
    items = list(consumer._partition(position, data, "FetchResponse v12"))
    fetched = [r.value for i in items if isinstance(i, Fetched) for r in i.records]
    assert fetched == [b"committed-1", b"plain", b"committed-2"]
    assert items[-1] == EndOfPartition("t", 0, 8) and position.offset == 8

    consumer.options = ConsumeOptions()  # read_uncommitted: everything but the markers, from the position
    position = _Position(0, 1)
    fetched = [r.value for i in consumer._partition(position, data, "x") if isinstance(i, Fetched) for r in i.records]
    assert fetched == [b"aborted-2", b"committed-1", b"plain", b"committed-2"]
