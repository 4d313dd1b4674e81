"""Offline tools over Kafka 0.7 logs: kctl dump-log and kctl verify read .kafka segments (byte offsets), and
kctl convert-07 turns a 0.7 partition into a modern one (offsets renumbered, the byte-offset map beside it) that
kctl verify finds clean and that holds the same payloads; damage is reported at its byte, never a traceback."""

from __future__ import annotations

import json
import os

import pytest

import kctl_fork
from kcli.records import BatchReader
from kcli.records.compression import Codec
from kcli.records.message07 import build_message_set, encode_message
from kcli.storage.log07 import Log07, Log07Config
from kcli.tools.kafka07 import OFFSET_MAP_NAME, convert, dump_segments, verify_segments
from kcli.tools.verify import verify

SETS = [build_message_set([b"a", b"b"], magic=0), build_message_set([b"g1", b"g2", b"g3"], codec=Codec.GZIP),
        build_message_set([b"s1", b"s2"], codec=Codec.SNAPPY), build_message_set([b"c"] * 6)]
PAYLOADS = [b"a", b"b", b"g1", b"g2", b"g3", b"s1", b"s2", *[b"c"] * 6]


@pytest.fixture
def partition07(tmp_path):
    log = Log07(tmp_path / "old" / "events-0", Log07Config(segment_bytes=60, flush_interval_messages=1))
    for message_set in SETS:
        log.append(message_set)
    log.close()
    return tmp_path / "old" / "events-0"


def test_dump_walks_byte_offsets_across_segments(partition07):
    dumps = list(dump_segments([str(partition07)], deep=True))
    assert len(dumps) > 1
    offsets = [m.offset for d in dumps for m in d.messages]
    stored = b"".join(SETS)
    expected, pos = [], 0
    while pos < len(stored):
        expected.append(pos)
        pos += 4 + int.from_bytes(stored[pos : pos + 4], "big")
    assert offsets == expected
    assert [p for d in dumps for m in d.messages for p in (m.inner or (m.payload,))] == PAYLOADS
    for before, after in zip(dumps, dumps[1:]):
        assert before.tail_offset == after.start_offset
    assert all(d.problem is None for d in dumps)


def test_kctl_dump_log_prints_0_7_lines_and_json(partition07):
    first = sorted(partition07.glob("*.kafka"))[0]
    text = kctl_fork.run("dump-log", "--print-data-log", str(first))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[:2] == [f"Dumping {first}", "Starting offset: 0"]
    assert lines[2].startswith("offset: 0 isvalid: true payloadsize: 1 magic: 0 compresscodec: NoCompressionCodec crc: ")
    assert lines[3] == "payload:\ta"
    assert "compresscodec: GZIPCompressionCodec" in text.stdout and "| payload:\tg2" in text.stdout
    assert lines[-1].startswith("tail of the log is at offset: ")
    out = kctl_fork.run("dump-log", "--json", str(partition07))
    objects = [json.loads(line) for line in out.stdout.splitlines()]
    assert [o["payload"] for o in objects if o["type"] == "message"][:2] == ["a", "b"]


def test_verify_is_clean_then_reports_damage_at_its_byte(partition07):
    report = verify([str(partition07)], deep=True)
    assert report.is_clean(strict=True), report.problems
    assert (report.batches, report.records) == (10, len(PAYLOADS))
    last = sorted(partition07.glob("*.kafka"))[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(encode_message(b"crc", crc=1))
    with last.open("ab") as f:
        f.write(encode_message(b"torn")[:-2])
    report = verify([str(partition07)])
    assert [(p.code, p.position, p.base_offset) for p in report.problems] == [
        ("kafka07_crc_mismatch", size, int(last.name[:20]) + size)]
    proc = kctl_fork.run("verify", str(partition07))
    assert proc.returncode == 1 and "kafka07_crc_mismatch" in proc.stderr and "Traceback" not in proc.stderr
    middle = sorted(partition07.glob("*.kafka"))[1]
    os.rename(middle, middle.with_name(f"{int(middle.name[:20]) + 1:020d}.kafka"))
    assert "kafka07_segment_gap" in [p.code for p in verify_segments(sorted(partition07.glob("*.kafka"))).problems]


def test_convert_renumbers_offsets_and_writes_the_map(partition07, tmp_path):
    dest = tmp_path / "kafka-logs" / "events-0"
    plan = convert(str(partition07), str(dest))
    assert not plan.applied and not dest.exists() and plan.records == len(PAYLOADS)
    proc = kctl_fork.run("convert-07", "--json", str(partition07), str(dest))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["applied"] and report["log_end_offset"] == len(PAYLOADS) == report["records"]
    assert not (tmp_path / "kafka-logs.kctl-convert").exists()  # the staging dir is gone once renamed
    batches = [b for s in sorted(dest.glob("*.log")) for b in BatchReader(s.read_bytes())]
    records = [r for b in batches for r in b.records()]
    assert [r.value for r in records] == PAYLOADS and [r.offset for r in records] == list(range(len(PAYLOADS)))
    assert {b.codec for b in batches} == {Codec.NONE, Codec.GZIP, Codec.SNAPPY}
    lines = (dest / OFFSET_MAP_NAME).read_text().splitlines()
    assert lines[0] == "byte_offset,offset,records"
    rows = [tuple(map(int, line.split(","))) for line in lines[1:]]
    dumped = [m.offset for d in dump_segments([str(partition07)]) for m in d.messages]
    assert [r[0] for r in rows] == dumped and [r[2] for r in rows] == [1, 1, 3, 2, *[1] * 6]
    assert all(r[1] == sum(x[2] for x in rows[:i]) for i, r in enumerate(rows))
    assert verify([str(dest)], deep=True).is_clean(strict=True)
    again = kctl_fork.run("convert-07", str(partition07), str(dest))
    assert again.returncode == 2 and "not empty" in again.stderr


def test_convert_refuses_a_damaged_source_and_writes_nothing(partition07, tmp_path):
    last = sorted(partition07.glob("*.kafka"))[-1]
    with last.open("ab") as f:
        f.write(encode_message(b"torn")[:-1])
    dest = tmp_path / "kafka-logs" / "events-0"
    proc = kctl_fork.run("convert-07", str(partition07), str(dest))
    assert proc.returncode == 1 and "damaged" in proc.stderr and "Traceback" not in proc.stderr
    assert not dest.exists() and not any((tmp_path / "kafka-logs.kctl-convert").glob("*"))


def test_reading_in_small_chunks_finds_the_same_messages(partition07, monkeypatch):
    """Messages that straddle the reader's chunks (1 MiB in use; 7 bytes here) are read whole, and a torn tail
    is still reported where it starts."""
    import kcli.storage.log07 as log07
    import kcli.tools.kafka07 as tools07

    whole = [m.offset for d in dump_segments([str(partition07)]) for m in d.messages]
    monkeypatch.setattr(tools07, "READ_CHUNK", 7)
    assert [m.offset for d in dump_segments([str(partition07)]) for m in d.messages] == whole
    last = sorted(partition07.glob("*.kafka"))[-1]
    kept = last.read_bytes()
    last.write_bytes(kept + encode_message(b"torn")[:-1])
    (problem,) = verify_segments([last]).problems
    assert (problem.code, problem.position) == ("kafka07_truncated", len(kept))
    monkeypatch.setattr(log07, "READ_CHUNK", 7)
    recovered = Log07(partition07, Log07Config(), recover=True)
    assert recovered.recovery.truncated_bytes == len(encode_message(b"torn")) - 1 and last.read_bytes() == kept
    recovered.close()
