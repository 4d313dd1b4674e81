"""Paths and helpers shared by test modules (importable thanks to pytest's ``pythonpath = tests``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "kafka-fixtures"
