"""Shared pytest fixtures: where the real Kafka fixtures live."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import FIXTURES


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"real Kafka fixtures not found at {FIXTURES}")
    return FIXTURES
