"""The compiled deep-dump formatter (kcli/records/_dumpfmt.c) against the Python path it replaces:
byte-identical NDJSON and kafka-dump-log text on real Kafka data and on generated records."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcli.records import Codec, Header, Record, TimestampType, accel, build_record_batch, make_batch
from kcli.records.accel import BatchRecords
from kcli.tools.dump import DumpBatch, DumpOptions, DumpRecords, DumpRun, Encodings
from kcli.tools.dump_format import RecordFormat
from kcli.tools.dump_json import _bulk_json, json_lines, json_text
from kcli.tools.dump_text import stdout_lines
from kcli.tools.render import BytesEncoding
from support import FIXTURES, REPO

fmt = accel.dump_formatter()
pytestmark = pytest.mark.skipif(fmt is None, reason="kcli.records._dumpfmt is not built (setup.py build_ext)")

TEXT_OPTIONS = [
    DumpOptions(deep_iteration=True),
    DumpOptions(print_data=True),
    DumpOptions(print_data=True, skip_record_metadata=True),
    DumpOptions(deep_iteration=True, skip_record_metadata=True),
]


@pytest.fixture
def python_path(monkeypatch):
    """Switch the compiled formatter off (as if it were not built) for the duration of a ``with``."""

    class Switch:
        def __enter__(self):
            monkeypatch.setattr(accel, "_dumpfmt", None)

        def __exit__(self, *exc):
            monkeypatch.setattr(accel, "_dumpfmt", fmt)

    return Switch()


def _dump(paths: list[str], options: DumpOptions, json_out: bool | str, enc: Encodings = Encodings()) -> tuple[str, int]:
    """What `kctl dump-log` writes on stdout (``json_out``: True for --json, a kcat format string for --format),
    and how many items went through the compiled formatter."""
    run = DumpRun(paths, options)
    out = []
    bulk = 0
    record_format = RecordFormat(json_out, enc) if isinstance(json_out, str) else None
    for item in run:
        if isinstance(item, DumpRecords) and type(item.records) is BatchRecords:
            bulk += 1
        if record_format is not None:
            out.append(repr(record_format.lines(item)))
            continue
        if json_out:
            out.append(json_text(item, enc))
            continue
        lines = stdout_lines(item, options, enc)
        if lines:
            out.append("\n".join(lines) + "\n")
    out.append(json.dumps(run.summary.to_json()))
    return "".join(out), bulk


def _fixture_inputs(tmp_path: Path) -> list[str]:
    """Every segment and KRaft checkpoint of the fixtures, and the extracted wire captures as segments."""
    if not FIXTURES.is_dir():
        pytest.skip(f"real Kafka fixtures not found at {FIXTURES}")
    paths = sorted(str(p) for p in FIXTURES.rglob("*") if p.suffix in (".log", ".checkpoint") and p.is_file())
    for i, raw in enumerate(sorted(FIXTURES.rglob("_extracted/*.bin"))):
        d = tmp_path / f"capture-{i}"
        d.mkdir()
        shutil.copyfile(raw, d / "00000000000000000000.log")
        paths.append(str(d / "00000000000000000000.log"))
    return paths


def test_fixtures_byte_identical(tmp_path, python_path):
    """All codecs, magic 0/1/2, control batches, headers, null keys and values, truncated tails."""
    paths = _fixture_inputs(tmp_path)
    checks = [(DumpOptions(deep_iteration=True), True)] + [(o, False) for o in TEXT_OPTIONS]
    # selecting without content filters (kctl cat): the payload path too; --format decodes it on demand
    checks += [(DumpOptions(skip_control=True), True), (DumpOptions(skip_control=True, print_data=True), False),
               (DumpOptions(skip_control=True), "%t %p %o %T %k %S %s %h\\n")]
    for options, json_out in checks:
        fast, bulk = _dump(paths, options, json_out)
        with python_path:
            slow, none = _dump(paths, options, json_out)
        assert none == 0
        assert bulk > 50, "the compiled formatter should take the fixtures' v2 batches"
        assert fast == slow, (options, json_out)


def test_templated_lines_match_reference(tmp_path, python_path):
    """json_text (templated batch lines, one string per batch) against json_lines (batch_json through orjson)."""
    paths = _fixture_inputs(tmp_path)
    batches = 0
    with python_path:
        for item in DumpRun(paths, DumpOptions(deep_iteration=True)):
            lines = json_lines(item, Encodings())
            assert json_text(item, Encodings()) == ("\n".join(lines) + "\n" if lines else "")
            batches += isinstance(item, DumpBatch)
    assert batches > 100


def test_python_path_when_not_built(tmp_path):
    """KCLI_NO_EXTENSIONS=1 (or no build): the same output from the pure path, in a fresh interpreter."""
    if not FIXTURES.is_dir():
        pytest.skip(f"real Kafka fixtures not found at {FIXTURES}")
    segment = FIXTURES / "rjmfernandes__flink-on-prem" / "data" / "_schemas-0"
    for command in (["dump-log", "--print-data-log"], ["dump-log", "--json", "--deep-iteration"], ["cat", "--json"],
                    ["cat"]):
        outputs = []
        for env_value in ("", "1"):
            env = {**os.environ, "KCLI_NO_EXTENSIONS": env_value, "PYTHONPATH": str(REPO)}
            proc = subprocess.run([sys.executable, "-m", "kcli", *command, str(segment)],
                                  capture_output=True, env=env, check=True)
            outputs.append(proc.stdout)
        assert outputs[0] == outputs[1] and outputs[0].count(b"\n") > 5, command


# -- generated records -----------------------------------------------------------------------------
_UTF8_EDGES = [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xf0\x9f\x98", b"\xff", b"\x80",
               b"\xe0\x9f\xbf", b"\xf0\x8f\xbf\xbf", b"\xdf", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xe2\x80\xa8",
               b'"', b"\\", b"/", b"\x00", b"\x1f", b"\x7f", b"\n", b"\t", b"\r", b"\x08", b"\x0c", b"a" * 9]
blobs = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.text(max_size=30).map(lambda s: s.encode("utf-8")),
    st.lists(st.sampled_from(_UTF8_EDGES), max_size=12).map(b"".join),
)
header_keys = st.one_of(st.text(max_size=8), st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape")))
records = st.lists(
    st.tuples(blobs, blobs, st.lists(st.tuples(header_keys, blobs), max_size=3), st.integers(-5, 5)),
    min_size=1, max_size=12,
)


def _batch(items, codec: Codec, base_offset: int, base_sequence: int, log_append: bool):
    recs = [Record(base_offset + i, 1_700_000_000_000 + ts, key, value, tuple(Header(k, v) for k, v in hs))
            for i, (key, value, hs, ts) in enumerate(items)]
    kwargs = {"producer_id": 7, "producer_epoch": 0, "base_sequence": base_sequence} if base_sequence >= 0 else {}
    if log_append:
        kwargs.update(timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=1_800_000_000_000)
    raw = build_record_batch(recs, codec=codec, **kwargs)
    return make_batch(raw, 0)


def _utf8(key: str) -> bool:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=records, codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.LZ4]),
       base_offset=st.sampled_from([0, 41, 2**40]), base_sequence=st.sampled_from([-1, 0, 2**31 - 3]),
       log_append=st.booleans(), file=st.sampled_from(["/d/t-0/00000000000000000000.log", 'a "q"\\é.log']))
def test_generated_records_byte_identical(items, codec, base_offset, base_sequence, log_append, file, python_path):
    batch = _batch(items, codec, base_offset, base_sequence, log_append)
    bulk = BatchRecords.of(batch)
    assert bulk is not None and len(bulk) == len(items)
    assert (bulk.first_offset, bulk.last_offset) == (base_offset, base_offset + len(items) - 1)
    fast_item = DumpRecords(file, batch, bulk, "t", 0)
    slow_item = DumpRecords(file, batch, batch.records(), "t", 0)
    # one string for the whole batch from C (the Python path when a header key is not UTF-8)
    utf8_keys = all(_utf8(k) for _, _, hs, _ in items for k, _ in hs)
    whole = 1 if utf8_keys else len(items)
    slow = json_lines(slow_item, Encodings())
    assert json_lines(fast_item, Encodings()) == slow
    assert json_text(fast_item, Encodings()) == json_text(slow_item, Encodings()) == "\n".join(slow) + "\n"
    assert (_bulk_json(fast_item, Encodings()) is not None) == utf8_keys
    for options in TEXT_OPTIONS:
        fast, slow = stdout_lines(fast_item, options), stdout_lines(slow_item, options)
        assert "\n".join(fast) == "\n".join(slow) and len(fast) == (1 if options.skip_record_metadata else whole)
    # forced encodings stay on the Python path, with the records decoded on demand
    forced = Encodings(BytesEncoding.HEX, BytesEncoding.BASE64)
    assert json_lines(fast_item, forced) == json_lines(slow_item, forced)
    assert stdout_lines(fast_item, TEXT_OPTIONS[1], forced) == stdout_lines(slow_item, TEXT_OPTIONS[1], forced)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=64), st.lists(st.sampled_from(_UTF8_EDGES), max_size=16).map(b"".join)))
def test_escaping_matches_orjson_and_replacement_matches_python(data):
    batch = _batch([(data, data, [], 0)], Codec.NONE, 0, -1, False)
    line = BatchRecords.of(batch).format_json(b'{"offset":', b"", b"")
    obj = json.loads(line)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert obj["key"] == {"base64": base64.b64encode(data).decode("ascii")}
    else:
        assert f'"key":{orjson.dumps(text).decode("utf-8")},' in line
    printed = BatchRecords.of(batch).format_text(b"CreateTime", True, True)
    assert printed == "| key: " + data.decode("utf-8", "replace") + " payload: " + data.decode("utf-8", "replace")


def test_malformed_payload_falls_back(python_path):
    """A payload that does not parse strictly is left to the Python path, which reports the corruption."""
    batch = _batch([(b"k", b"v", [], 0), (b"k2", None, [("h", b"x")], 1)], Codec.NONE, 0, -1, False)
    payload = batch.payload()
    assert fmt.scan(payload, 2) == (0, 1, True)
    assert fmt.scan(payload, 3) is None and fmt.scan(payload, 1) is None  # count mismatch, trailing bytes
    assert fmt.scan(payload[:-1], 2) is None
    for cut in range(len(payload)):
        assert fmt.format_json(payload[:cut], 2, 0, 0, 0, False, -1, b"", b"", b"") is None
        assert fmt.format_text(payload[:cut], 2, 0, 0, 0, False, -1, b"CreateTime", True, False) is None
    for count in (0, -1, 2**31 - 1):  # a header's count never sizes a buffer
        assert fmt.format_json(payload, count, 0, 0, 0, False, -1, b"", b"", b"") is None
        assert fmt.format_text(payload, count, 0, 0, 0, False, -1, b"CreateTime", True, False) is None
    # offsets and timestamps beyond int64: the Python path
    assert fmt.format_json(payload, 2, 2**63 - 1, 0, 0, False, -1, b"", b"", b"") is None
    assert fmt.format_text(payload, 2, 0, 2**63 - 1, 0, False, -1, b"CreateTime", True, False) is None


def _reference_batch_line(b) -> str:
    """kafka-dump-log's batch line through RecordBatch's properties (what dump_text.batch_line templates)."""
    def flag(v):
        return "true" if v else "false"

    horizon = "OptionalLong.empty" if b.delete_horizon_ms is None else f"OptionalLong[{b.delete_horizon_ms}]"
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.count} baseSequence: {b.base_sequence} "
        f"lastSequence: {b.last_sequence} producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
        f"partitionLeaderEpoch: {b.partition_leader_epoch} isTransactional: {flag(b.is_transactional)} "
        f"isControl: {flag(b.is_control)} deleteHorizonMs: {horizon} "
        f"position: {b.position} {b.timestamp_type.label}: {b.max_timestamp} size: {b.size} magic: {b.magic} "
        f"compresscodec: {b.codec.label} crc: {b.crc} isvalid: {flag(b.is_valid)}"
    )


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(list(Codec)), transactional=st.booleans(), control=st.booleans(),
       horizon=st.one_of(st.none(), st.integers(0, 2**42)), log_append=st.booleans(),
       sequence=st.sampled_from([-1, 0, 2**31 - 1]), epoch=st.sampled_from([-1, 0, 7]), corrupt=st.booleans())
def test_batch_lines_match_reference(codec, transactional, control, horizon, log_append, sequence, epoch, corrupt):
    recs = [Record(10, 1_700_000_000_000, b"k", b"v"), Record(11, 1_700_000_000_001, None, None)]
    kwargs = {"producer_id": 9, "producer_epoch": 1, "base_sequence": sequence} if sequence >= 0 else {}
    if log_append:
        kwargs.update(timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=1_800_000_000_000)
    raw = bytearray(build_record_batch(recs, codec=codec, is_transactional=transactional, is_control=control,
                                       delete_horizon_ms=horizon, partition_leader_epoch=epoch, **kwargs))
    if corrupt:
        raw[-1] ^= 0xFF
    item = DumpBatch("/x/t-0/00000000000000000000.log", make_batch(bytes(raw), 4096))
    assert stdout_lines(item, DumpOptions()) == [_reference_batch_line(item.batch)]
    assert json_text(item, Encodings()) == orjson.dumps(item.to_json(Encodings())).decode("utf-8") + "\n"
