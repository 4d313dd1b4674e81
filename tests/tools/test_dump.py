"""kctl dump-log as a library: kafka-dump-log's lines, NDJSON objects, filters and corruption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import build_partition
from kcli.tools.dump import Decoder, DumpOptions, DumpRun, Encodings
from kcli.tools.dump_json import json_lines
from kcli.tools.dump_text import stdout_lines, summary_lines
from kcli.tools.render import BytesEncoding

WORKED = bytes.fromhex(
    "000000000000000000000049000000000291eb8e1d0000000000010000018bcfe568000000018bcfe56805ffffffffffffffffffffffffffff"
    "0000000214000000046b300476300018000a02046b31010202680278"
    "0000000000000002000000420000000002a544cffa0030000000000000018bcfe5680a0000018bcfe5680a00000000000003e80000ffffffff"
    "000000012000000008000000010c00000000000300"
)
# kafka-formats.md 4.3: the expected output of `--print-data-log` on the worked example.
WORKED_OUTPUT = """\
Dumping {path}
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000005 size: 85 magic: 2 compresscodec: none crc: 2448133661 isvalid: true
| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k0 payload: v0
| offset: 1 CreateTime: 1700000000005 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [h] key: k1
baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: 1000 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 85 CreateTime: 1700000000010 size: 78 magic: 2 compresscodec: none crc: 2772750330 isvalid: true
| offset: 2 CreateTime: 1700000000010 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 3
"""


def _text(paths, options: DumpOptions) -> tuple[str, DumpRun]:
    run = DumpRun([str(p) for p in paths], options)
    lines = [line for item in run for line in stdout_lines(item, options)]
    return "".join(line + "\n" for line in lines), run


def _json(paths, options: DumpOptions, enc: Encodings = Encodings()) -> list[dict]:
    run = DumpRun([str(p) for p in paths], options)
    return [json.loads(line) for item in run for line in json_lines(item, enc)]


@pytest.fixture
def worked_log(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(WORKED)
    return path


def test_worked_example_matches_kafka_dump_log(worked_log):
    text, run = _text([worked_log], DumpOptions(print_data=True))
    assert text == WORKED_OUTPUT.format(path=worked_log)
    assert run.summary.errors == 0 and summary_lines(run.summary) == []


def test_shallow_prints_batches_only(worked_log):
    text, _ = _text([worked_log], DumpOptions())
    assert [line.split(" ")[0] for line in text.splitlines()] == ["Dumping", "Log", "baseOffset:", "baseOffset:"]


def test_skip_record_metadata(worked_log):
    text, _ = _text([worked_log], DumpOptions(print_data=True, skip_record_metadata=True))
    lines = text.splitlines()
    assert lines[3:] == ["| key: k0 payload: v0", "| key: k1", lines[5], ""]


def test_json_objects(worked_log):
    items = _json([worked_log], DumpOptions(deep_iteration=True))
    kinds = [i["type"] for i in items]
    assert kinds == ["file", "batch", "record", "record", "batch", "record"]
    batch = items[1]
    for field in ("base_offset", "last_offset", "count", "position", "size", "magic", "codec", "crc", "is_valid",
                  "is_transactional", "is_control", "producer_id", "timestamp_type", "max_timestamp"):
        assert field in batch
    assert (batch["crc"], batch["codec"], batch["timestamp_type"]) == (2448133661, "none", "CreateTime")
    r1 = items[3]
    assert (r1["offset"], r1["key"], r1["value"], r1["headers"], r1["is_control"]) == (1, "k1", None, [{"key": "h", "value": "x"}], False)
    marker = items[5]
    assert marker["is_control"] and marker["control_type"] == "COMMIT" and marker["marker"]["coordinatorEpoch"] == 3


def test_json_bytes_encodings(tmp_path):
    from kcli.records import Record, build_record_batch

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_record_batch([Record(0, 1, b"\xff\x00", b"ok")]))
    (rec,) = [i for i in _json([path], DumpOptions(deep_iteration=True)) if i["type"] == "record"]
    assert rec["key"] == {"base64": "/wA="} and rec["value"] == "ok"
    (rec,) = [i for i in _json([path], DumpOptions(deep_iteration=True), Encodings(BytesEncoding.HEX, BytesEncoding.BASE64))
              if i["type"] == "record"]
    assert rec["key"] == "ff00" and rec["value"] == "b2s="


def test_every_fixture_file_dumps(fixtures_dir):
    for log_dir in ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem/data"):
        run = DumpRun([str(fixtures_dir / log_dir)], DumpOptions(deep_iteration=True))
        items = list(run)
        assert run.summary.errors == 0, [i for i in items if getattr(i, "level", None)]
    assert run.summary.records >= 40000


def test_fixture_index_and_snapshot_lines(fixtures_dir):
    part = fixtures_dir / "rjmfernandes__flink-on-prem/data/loyalty_levels-0"
    text, run = _text([part / "00000000000000000000.index", part / "00000000000000017204.snapshot"], DumpOptions())
    lines = text.splitlines()
    assert lines[1] == "offset: 638 position: 17421"  # INDEX.md: first (638, 17421)
    assert sum(1 for line in lines if line.startswith("offset: ")) == 100
    assert lines[-1].startswith("producerId: 43 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty")
    assert "lastSequence: 17203 lastOffset: 17203" in lines[-1]
    assert run.summary.index_mismatches == {}


def test_empty_index_and_sanity_check(fixtures_dir):
    part = fixtures_dir / "VolodymyrZee__kafka"
    text, _ = _text([part / "first_topic-0/00000000000000000000.index"], DumpOptions())
    assert text.splitlines()[-1].endswith("00000000000000000000.index is empty.")
    text, _ = _text([part / "__consumer_offsets-12/00000000000000000000.index"], DumpOptions(index_sanity_check=True))
    assert text.splitlines()[-1].endswith(".index passed sanity check.")


def test_offsets_decoder_on_real_consumer_offsets(fixtures_dir):
    part = fixtures_dir / "VolodymyrZee__kafka/__consumer_offsets-12/00000000000000000000.log"
    text, run = _text([part], DumpOptions(decoder=Decoder.OFFSETS))
    payloads = [line for line in text.splitlines() if line.startswith("| offset:")]
    assert len(payloads) == 470
    assert sum('key: {"type":"1"' in line for line in payloads) == 462
    assert sum('key: {"type":"2"' in line for line in payloads) == 8


def test_range_filter_seeks_with_index(fixtures_dir):
    part = fixtures_dir / "rjmfernandes__flink-on-prem/data/loyalty_levels-0"
    items = _json([part / "00000000000000000000.log"], DumpOptions(deep_iteration=True, start_offset=10000, end_offset=10009))
    records = [i["offset"] for i in items if i["type"] == "record"]
    assert records == list(range(10000, 10010))
    batches = [i for i in items if i["type"] == "batch"]
    assert batches[0]["position"] > 0


def test_time_filter(fixtures_dir):
    part = fixtures_dir / "rjmfernandes__flink-on-prem/data/loyalty_levels-0/00000000000000000000.log"
    start = 1713541500000
    items = _json([part], DumpOptions(deep_iteration=True, start_timestamp=start, end_timestamp=start + 10_000))
    stamps = [i["timestamp"] for i in items if i["type"] == "record"]
    assert stamps and all(start <= t <= start + 10_000 for t in stamps)


def test_truncated_tail_reported(worked_log):
    worked_log.write_bytes(WORKED[:-10])
    text, run = _text([worked_log], DumpOptions())
    assert text.splitlines()[-1] == f"Found {len(WORKED) - 10 - 85} invalid bytes at the end of {worked_log.name}"
    assert run.summary.errors == 1
    text, run = _text([worked_log], DumpOptions(max_bytes=10_000))
    assert "invalid bytes" not in text and run.summary.errors == 0


def test_zero_tail_reported_with_position(worked_log):
    worked_log.write_bytes(WORKED + bytes(64))
    items = _json([worked_log], DumpOptions())
    (notice,) = [i for i in items if i["type"] == "notice"]
    assert notice["position"] == len(WORKED) and notice["level"] == "error"


def test_non_consecutive_offsets(tmp_path):
    from kcli.records import Record, build_record_batch

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_record_batch([Record(0, 1, b"a", b"1"), Record(5, 2, b"b", b"2")]))
    _, run = _text([path], DumpOptions(deep_iteration=True))
    assert summary_lines(run.summary) == [f"Non-consecutive offsets in {path.resolve()}", "  0 is followed by 5"]


def test_partition_dir_dumps_all_kinds(tmp_path):
    part = build_partition(tmp_path / "t-0")
    text, run = _text([part], DumpOptions())
    assert run.summary.errors == 0
    assert "version: 0 producerId: 1000" in text  # txnindex
    assert "epoch: 0 startOffset: 0" in text  # leader-epoch-checkpoint
    assert "producerId: 1001 producerEpoch: 0 coordinatorEpoch: 5" in text  # snapshot


def test_a_file_that_is_no_kafka_data_is_an_input_error(tmp_path):
    """Named on its own, an unrelated file is not "ignored" with success: nothing Kafka was read (exit 3)."""
    from kcli.errors import InputError

    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(InputError, match="no Kafka log data"):
        _json([other], DumpOptions())


def test_unknown_file_in_a_partition_is_ignored(tmp_path):
    partition = build_partition(tmp_path / "t-0", batches=3, transactions=False)
    (partition / "notes.txt").write_text("x")
    items = _json([partition], DumpOptions())
    assert {"type": "notice", "file": str(partition / "notes.txt"), "level": "warning", "code": "unknown_file",
            "message": f"Ignoring unknown file {partition / 'notes.txt'}", "position": None, "base_offset": None} in items


@pytest.mark.parametrize("enc", [Encodings(), Encodings(BytesEncoding.HEX, BytesEncoding.UTF8),
                                 Encodings(BytesEncoding.BASE64, BytesEncoding.BASE64)], ids=["auto", "hex-utf8", "base64"])
def test_fast_json_lines_equal_to_json(fixtures_dir, tmp_path, enc):
    """The templated record lines say exactly what DumpRecord.to_json says."""
    from kcli.tools.dump import DumpRecords

    paths = [fixtures_dir / "rjmfernandes__flink-on-prem/data/promotions-0", build_partition(tmp_path / "t-0")]
    seen = 0
    for path in paths:
        for item in DumpRun([str(path)], DumpOptions(deep_iteration=True)):
            if isinstance(item, DumpRecords):
                fast = [json.loads(line) for line in json_lines(item, enc)]
                assert fast == json.loads(json.dumps(item.to_json(enc)))
                seen += len(fast)
    assert seen > 300


# -- range filters and encodings (kctl dump-log) ---------------------------------------------------------

def _kctl(*args):
    """`kctl` as a process forked from one that imported kcli once (tests/kctl_fork.py)."""
    import kctl_fork

    return kctl_fork.run(*args, env={"COLUMNS": "200"})


def test_end_time_stops_the_output(tmp_path):
    from builders import T0

    partition = build_partition(tmp_path / "t-0", batches=50, records_per_batch=1, transactions=False)
    log = sorted(partition.glob("*.log"))[0]
    proc = _kctl("dump-log", "--end-time", str(T0 + 20), str(log))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("baseOffset: ") == 3, proc.stdout
    deep = _kctl("dump-log", "--deep-iteration", "--end-time", str(T0 + 20), str(log))
    assert deep.stdout.count("baseOffset: ") == 3 and deep.stdout.count("| offset: ") == 3
    items = [json.loads(line) for line in _kctl("dump-log", "--json", "--end-time", str(T0 + 20), str(log)).stdout.splitlines()]
    assert sum(1 for i in items if i["type"] == "batch") == 3


@pytest.mark.parametrize("args", [["--start-offset", "9", "--end-offset", "3"],
                                  ["--start-time", "2024-01-02T00:00:00Z", "--end-time", "2024-01-01T00:00:00Z"],
                                  ["--value-encoding", "hex"], ["--key-encoding", "base64", "--deep-iteration"]],
                         ids=["offsets", "times", "value-encoding-text", "key-encoding-text"])
def test_inverted_ranges_and_text_encodings_are_usage_errors(tmp_path, args):
    """Encodings apply to printed keys and values (--print-data-log, --format, --json): without them, refused."""
    partition = build_partition(tmp_path / "t-0", batches=5, transactions=False)
    proc = _kctl("dump-log", *args, str(partition))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("kctl: ") and "Traceback" not in proc.stderr
