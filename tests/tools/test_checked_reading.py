"""Issue 22, defect 2: no silent wrong answers offline. Every reader goes through the checked path verify uses:
damage is reported with its file and byte position (exit 1), special files are refused (exit 3).

On copies of a real Kafka 2.x log dir (VolodymyrZee__kafka), damaged in tmp_path: ``first_topic-0`` holds one
segment of 10 uncompressed v2 batches, offsets 0..10, the first batch 80 bytes at position 0, the second at 80."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kctl_fork
from kcli.cli.app import app

SEGMENT = Path("first_topic-0") / "00000000000000000000.log"


def _copy(fixtures_dir: Path, tmp_path: Path) -> Path:
    log_dir = Path(shutil.copytree(fixtures_dir / "VolodymyrZee__kafka", tmp_path / "logs"))
    for root, dirs, files in os.walk(log_dir):  # the shared fixtures are read-only
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    return log_dir


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _run(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def _kctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m kcli`` in a subprocess: a reader that opens a FIFO would hang, and must fail, not hang."""
    try:  # forked from a process that imported kcli once (tests/kctl_fork.py)
        return kctl_fork.run(*args, env={"COLUMNS": "200"}, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kctl {' '.join(args)} hung (more than {timeout}s)")


READERS = {
    "for-time": ["offsets", "for-time", "0"],
    "for-time-latest": ["offsets", "for-time", "latest"],
    "topics": ["topics"],
    "topics-records": ["topics", "--records"],
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_crc_corrupt_first_batch_is_reported_not_answered(reader, fixtures_dir, tmp_path):
    """A byte of the first batch's first record flipped (inside the CRC): before, for-time answered from the
    damaged batch and topics summed it up, both with exit 0 and no word of it."""
    log_dir = _copy(fixtures_dir, tmp_path)
    _flip(log_dir / SEGMENT, 70)
    result = _run(*READERS[reader], str(log_dir))
    assert result.exit_code == 1, result.output
    assert f"{log_dir / SEGMENT}:0 (offset 0): Record is corrupt" in result.output
    assert "[crc_mismatch]" in result.output
    if reader.startswith("for-time"):  # no answer for the damaged partition; the others are answered
        rows = [line.split(":") for line in result.stdout.splitlines()]
        assert ["first_topic", "0"] not in [row[:2] for row in rows]
        assert ["first_topic", "1"] in [row[:2] for row in rows]


def test_base_offset_damaged_outside_the_crc_is_reported(fixtures_dir, tmp_path):
    """The v2 CRC does not cover the base offset: its low byte flipped made the first batch claim offset 255,
    and for-time answered 255 with exit 0. The batch after the answer's is read too: offsets go backwards."""
    log_dir = _copy(fixtures_dir, tmp_path)
    _flip(log_dir / SEGMENT, 7)
    result = _run("offsets", "for-time", "0", "--json", str(log_dir / "first_topic-0"))
    assert result.exit_code == 1, result.output
    assert f"{log_dir / SEGMENT}:80 (offset 1): offsets go backwards: batch starts at 1 after offset 255" \
        in result.output
    doc = json.loads(result.stdout)
    assert doc["offsets"] == [] and [(p["code"], p["position"]) for p in doc["problems"]] == \
        [("offset_not_increasing", 80)]


@pytest.mark.parametrize("reader", sorted(READERS))
def test_fifo_segment_is_refused_not_waited_on(reader, fixtures_dir, tmp_path):
    """A FIFO named like a segment in a partition dir: for-time hung on it (open(2) waits for a writer);
    topics and for-time latest counted it as an empty segment with exit 0."""
    log_dir = _copy(fixtures_dir, tmp_path)
    fifo_partition = log_dir / "fifo_topic-0"
    fifo_partition.mkdir()
    os.mkfifo(fifo_partition / "00000000000000000000.log")
    proc = _kctl(*READERS[reader], str(log_dir))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"{fifo_partition / '00000000000000000000.log'}: a FIFO, not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr
    if reader.startswith("for-time"):  # the other partitions are still answered
        assert "first_topic" in proc.stdout and "fifo_topic" not in proc.stdout


def test_verify_does_not_call_the_offsets_of_a_corrupt_batch_missing(fixtures_dir, tmp_path):
    """The second batch (offset 1) CRC-corrupt: verify reported it, then called offset 1 'missing (normal after
    compaction)', a warning that tells an operator the loss is expected."""
    log_dir = _copy(fixtures_dir, tmp_path)
    _flip(log_dir / SEGMENT, 80 + 70)
    result = _run("verify", "--json", str(log_dir / "first_topic-0"))
    assert result.exit_code == 1, result.output
    assert "missing" not in result.output and "offset_gap" not in result.output
    doc = json.loads(result.stdout)
    assert [(p["code"], p["position"], p["severity"]) for p in doc["problems"]] == [("crc_mismatch", 80, "error")]


def test_offline_groups_report_a_corrupt_offsets_batch(fixtures_dir, tmp_path):
    """Offline groups replay __consumer_offsets: a CRC-corrupt batch there is named with file and position."""
    log_dir = _copy(fixtures_dir, tmp_path)
    segment = log_dir / "__consumer_offsets-12" / "00000000000000000000.log"
    _flip(segment, 100)
    result = _run("groups", "list", "--log-dir", str(log_dir))
    assert result.exit_code == 1, result.output
    assert f"{segment}, byte 0, base offset 0: Record is corrupt" in result.output
