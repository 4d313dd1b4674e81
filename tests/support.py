"""Paths and helpers shared by test modules (importable thanks to pytest's ``pythonpath = tests``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "kafka-fixtures"


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
