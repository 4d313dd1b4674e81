"""Paths and helpers shared by test modules (importable thanks to pytest's ``pythonpath = tests``)."""

from __future__ import annotations

import re
import shutil
import stat
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "kafka-fixtures"


def writable_copy(source: Path, target: Path) -> Path:
    """A copy of a shared fixture that the test may change (the fixtures are read-only)."""
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


def fixture_records(path: Path):
    """(is_control, offset, key, value) of every record of a segment or .checkpoint file, read with
    kafka-python: an independent reader, so codec tests do not lean on kcli's own."""
    from kafka.record import MemoryRecords

    records = MemoryRecords(path.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        for record in batch:
            key = None if record.key is None else bytes(record.key)
            value = None if record.value is None else bytes(record.value)
            yield bool(batch.is_control_batch), record.offset, key, value


ON_DISK_SOURCES = ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem")


def index_md_findings() -> dict[str, dict[str, str]]:
    """INDEX.md rows of the on-disk fixture sources: {"<source>/.../<dir>/": {"index": "...", "partition.metadata": ...}}."""
    index_md = FIXTURES / "INDEX.md"
    if not index_md.is_file():
        return {}
    rows = {}
    for line in index_md.read_text(encoding="utf-8").splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) == 5 and cells[0][3:].startswith(ON_DISK_SOURCES):
            items = (re.fullmatch(r"\*\*(.+?)\*\*: (.*)", item) for item in cells[4].rstrip(" |").split("<br>"))
            rows[cells[0][3:].strip("`")] = {m[1]: m[2] for m in items if m}
    return rows
