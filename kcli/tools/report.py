"""The report contract shared by verify, recover, compact, scan and offsets: ``ok``, ``problems`` (each with
file, position and code) and ``to_json()``. The CLI derives the exit status from it in one place."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

# Problem codes that mean "this input could not be read" (exit status 3), not "the data is damaged" (1).
UNREADABLE = "unreadable"  # permission denied, I/O error, not a regular file, a dangling symlink
VANISHED = "vanished"  # listed, then gone before it was read (a live broker's retention or compaction)
UNREADABLE_CODES = frozenset({UNREADABLE, VANISHED})


class Severity(Enum):
    ERROR = "error"  # damage: exit status 1
    WARNING = "warning"  # legitimate in some histories (compaction gaps, old index semantics, crash leftovers)


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    position: int | None
    base_offset: int | None
    reason: str
    code: str
    severity: Severity = Severity.ERROR

    @property
    def unreadable(self) -> bool:
        return self.code in UNREADABLE_CODES

    def describe(self) -> str:
        where = self.file if self.position is None else f"{self.file}:{self.position}"
        offset = "" if self.base_offset is None else f" (offset {self.base_offset})"
        return f"{where}{offset}: {self.reason} [{self.code}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "position": self.position,
            "base_offset": self.base_offset,
            "reason": self.reason,
            "code": self.code,
            "severity": self.severity.value,
        }


def os_problem(path: object, exc: OSError) -> Problem:
    """The problem an OSError while reading ``path`` stands for: ``vanished`` for a file gone since it was
    listed, else ``unreadable`` with the system's reason."""
    name = str(exc.filename if exc.filename is not None else path)
    if isinstance(exc, FileNotFoundError):
        return Problem(name, None, None, "disappeared while being read (deleted by a running broker?)", VANISHED)
    return Problem(name, None, None, f"cannot read: {exc.strerror or exc}", UNREADABLE)


def as_problem(item: Problem | str, file: str, code: str = "failed") -> Problem:
    """Older producers of reports hand plain strings; give them the shared shape."""
    return item if isinstance(item, Problem) else Problem(file, None, None, str(item), code)


class Report(Protocol):
    """What every tool's report offers: the verdict, the problems, and the JSON document (which holds ``ok``
    and ``problems`` as lists of ``Problem.to_json()``)."""

    @property
    def ok(self) -> bool: ...

    @property
    def problems(self) -> list[Problem]: ...

    def to_json(self) -> dict[str, Any]: ...
