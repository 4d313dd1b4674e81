"""Expectations parsed from ../shared/kafka-fixtures/INDEX.md, so tests check what that file promises."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

_COUNTS = re.compile(r"(\d+) batch\(es\), (\d+) record\(s\), offsets (\S+?)\.\.(\S+?);")
_LAYOUT = re.compile(r"batch layout \(baseOffset,magic,codec,count\): ((?:\(\d+,\d,\w+,\d+\) ?)+)")
_KEYS = re.compile(r"expects keys (\[[^\]]*\])")
_FIRST = re.compile(r"@(\d+) key=(None|'[^']*') value=(None|'[^']*')")


@dataclass
class Expectation:
    path: Path
    batches: int
    records: int
    first_offset: int | None
    last_offset: int | None
    layout: list[tuple[int, int, str, int]] = field(default_factory=list)
    keys: list[str] | None = None
    first_records: list[tuple[int, str | None, str | None]] = field(default_factory=list)
    undecodable: bool = False
    truncated_tail: bool = False


def _offset(text: str) -> int | None:
    return None if text == "None" else int(text)


def _first_records(cell: str) -> list[tuple[int, str | None, str | None]]:
    out = []
    for off, key, value in _FIRST.findall(cell):
        out.append((int(off), None if key == "None" else key[1:-1], None if value == "None" else value[1:-1]))
    return out


def load_expectations(fixtures: Path) -> list[Expectation]:
    text = (fixtures / "INDEX.md").read_text()
    out: list[Expectation] = []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| source") or line.startswith("| directory"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) < 5:
            continue
        files_cell, verdict = cells[1], cells[-1]
        extracted = re.findall(r"`([^`]+_extracted/[^`]+\.bin)`", files_cell)
        if extracted:
            parts = verdict.split("<br>")
            counts = [m for p in parts for m in _COUNTS.finditer(p)]
            # multi-partition rows list one "topic ... pN" block per extracted file, in file order
            for name, m in zip(extracted, counts if len(counts) == len(extracted) else counts[:1] * len(extracted)):
                exp = Expectation(
                    fixtures / name, int(m.group(1)), int(m.group(2)), _offset(m.group(3)), _offset(m.group(4))
                )
                if len(extracted) == 1:
                    if lay := _LAYOUT.search(verdict):
                        exp.layout = [
                            (int(a), int(b), c, int(d))
                            for a, b, c, d in re.findall(r"\((\d+),(\d),(\w+),(\d+)\)", lay.group(1))
                        ]
                    if keys := _KEYS.search(verdict):
                        exp.keys = ast.literal_eval(keys.group(1))
                    exp.first_records = _first_records(verdict)
                    exp.undecodable = "undecodable records" in verdict
                    exp.truncated_tail = "TRUNCATED tail" in verdict
                out.append(exp)
            continue
        dir_match = re.match(r"`([^`]+/)`$", cells[0])
        if not dir_match:
            continue
        directory = fixtures / dir_match.group(1)
        for section in verdict.split("<br>"):
            m = re.match(r"\*\*(log|[0-9\-]+\.checkpoint)\*\*: (.*)", section)
            if not m:
                continue
            counts = _COUNTS.search(m.group(2))
            if not counts:
                continue
            name = "00000000000000000000.log" if m.group(1) == "log" else m.group(1)
            exp = Expectation(
                directory / name, int(counts.group(1)), int(counts.group(2)), _offset(counts.group(3)), _offset(counts.group(4))
            )
            exp.first_records = _first_records(m.group(2))
            out.append(exp)
    return out
