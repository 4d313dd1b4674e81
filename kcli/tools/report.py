"""The report contract shared by verify, recover, compact, scan and offsets: ``ok``, ``problems`` (each with
file, position and code) and ``to_json()``. The CLI derives the exit status from it in one place."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from kcli.errors import (
    CorruptBatchSizeError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptSnapshotError,
    InputError,
    KcliError,
    UnsupportedCodecError,
)

# Problem codes that mean "this input could not be read" (exit status 3), not "the data is damaged" (1).
UNREADABLE = "unreadable"  # permission denied, I/O error, not a regular file, a dangling symlink
VANISHED = "vanished"  # listed, then gone before it was read (a live broker's retention or compaction)
UNREADABLE_CODES = frozenset({UNREADABLE, VANISHED})

# The codes every tool gives the same damage (verify's names; dump-log's JSON notices, scan, topics and
# offsets for-time use them too), so that a script reads one vocabulary. kctl-verify(1) lists them all.
CRC_MISMATCH = "crc_mismatch"  # a batch (or inner message) fails its CRC or is otherwise invalid
CORRUPT_BATCH_SIZE = "corrupt_batch_size"  # a batch length below the minimum: reading cannot go on
TRUNCATED_BATCH = "truncated_batch"  # the last batch declares more bytes than the file holds
INVALID_BYTES_AT_END = "invalid_bytes_at_end"  # bytes after the last batch too short for a batch header
CORRUPT_RECORDS = "corrupt_records"  # the records of a batch do not decode
UNKNOWN_CODEC = "unknown_codec"
INDEX_CORRUPT = "index_corrupt"
SNAPSHOT_CORRUPT = "snapshot_corrupt"
CHECKPOINT_CORRUPT = "checkpoint_corrupt"


def code_for_error(exc: KcliError) -> str:
    """The shared code of a library error met while reading data (an error that names verify's code for the
    check it failed, as kcli.storage.checked's do, keeps it)."""
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    if isinstance(exc, InputError):
        return UNREADABLE
    if isinstance(exc, UnsupportedCodecError):
        return UNKNOWN_CODEC
    if isinstance(exc, CorruptIndexError):
        return INDEX_CORRUPT
    if isinstance(exc, CorruptSnapshotError):
        return SNAPSHOT_CORRUPT
    if isinstance(exc, CorruptCheckpointError):
        return CHECKPOINT_CORRUPT
    if isinstance(exc, CorruptBatchSizeError):
        return CORRUPT_BATCH_SIZE
    return CORRUPT_RECORDS


def tail_code(partial_batch: bool) -> str:
    """The code of bytes after the last complete batch: a batch cut short, or too few bytes for a header."""
    return TRUNCATED_BATCH if partial_batch else INVALID_BYTES_AT_END


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
