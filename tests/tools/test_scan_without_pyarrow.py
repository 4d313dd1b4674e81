"""`kctl scan --sql` after the README's plain install (no pyarrow: it is only in the spark and parquet extras),
on copies of real brokers' log dirs; `--output` without pyarrow is one line naming the extra, exit 2."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcli.cli.app import app
from support import writable_copy
from support import fixture_records


@pytest.fixture
def log_dir(fixtures_dir, tmp_path) -> Path:
    return writable_copy(fixtures_dir / "VolodymyrZee__kafka", tmp_path / "kafka-logs")


@pytest.fixture
def no_pyarrow(monkeypatch):
    """As after `pip install kcli`: importing pyarrow fails (the forked scan workers inherit this)."""
    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)


def _run(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "internal error" not in result.output and "Traceback" not in result.output, result.output
    return result


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sql_needs_only_the_standard_library(log_dir, no_pyarrow, workers):
    """Was "internal error: ModuleNotFoundError: No module named 'pyarrow'"."""
    sql = ("SELECT topic, partition, count(*) AS n, sum(value_bytes IS NULL) AS tombstones FROM records "
           "GROUP BY topic, partition ORDER BY topic, partition")
    result = _run("scan", "--workers", workers, "--json", "--sql", sql, str(log_dir))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    got = {(topic, partition): (n, tombstones) for topic, partition, n, tombstones in doc["rows"]}
    # kafka-python reads the same segments independently
    want: Counter = Counter()
    dead: Counter = Counter()
    for segment in log_dir.glob("*-*/*.log"):
        topic, _, partition = segment.parent.name.rpartition("-")
        for control, _offset, _key, value in fixture_records(segment):
            if not control:
                want[(topic, int(partition))] += 1
                dead[(topic, int(partition))] += value is None
    assert got == {tp: (n, dead[tp]) for tp, n in want.items() if n}
    assert sum(n for n, _ in got.values()) > 100


def test_sql_text_columns_without_pyarrow(log_dir, no_pyarrow):
    result = _run("scan", "--workers", "1", "--json", "--sql",
                  "SELECT offset, key, value, key_bytes IS NULL, headers, timestamp_ms > 0 FROM records "
                  "WHERE topic = 'first_topic' AND partition = 1 ORDER BY offset LIMIT 2", str(log_dir))
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    records = [r for r in fixture_records(log_dir / "first_topic-1" / "00000000000000000000.log") if not r[0]][:2]
    assert [(r[0], r[2]) for r in rows] == [(offset, value.decode()) for _c, offset, _k, value in records]
    assert all(r[3] == 1 and r[4] == "[]" and r[5] == 1 for r in rows)


def test_output_without_pyarrow_names_the_extra(log_dir, no_pyarrow, tmp_path):
    out = tmp_path / "parquet"
    result = _run("scan", "--workers", "1", "--output", str(out), str(log_dir))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'kcli[parquet]'" in lines[0], result.stderr
    assert not out.exists() and result.stdout == ""
