"""Expand what the user named (files, partition directories, log directories) into files, in Kafka's order."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import InputError
from kcli.storage.files import FileKind, classify, offset_from_filename

# Within one base offset: the .log first, then its indexes (kafka-dump-log needs the .log for them).
_SEGMENT_ORDER = {
    FileKind.LOG: 0,
    FileKind.INDEX: 1,
    FileKind.TIME_INDEX: 2,
    FileKind.TXN_INDEX: 3,
    FileKind.PRODUCER_SNAPSHOT: 4,
    FileKind.KRAFT_CHECKPOINT: 5,
}


@dataclass(frozen=True, slots=True)
class InputFile:
    path: Path
    kind: FileKind
    given: str  # the path as the user wrote it (kafka-dump-log echoes it back)


def _sort_key(path: Path) -> tuple:
    kind = classify(path)
    if kind in _SEGMENT_ORDER:
        try:
            return (0, offset_from_filename(path.name), _SEGMENT_ORDER[kind], path.name)
        except (ValueError, InputError):
            return (0, -1, _SEGMENT_ORDER[kind], path.name)
    return (1, 0, 0, path.name)


def partition_files(directory: Path) -> list[Path]:
    return sorted((p for p in directory.iterdir() if p.is_file()), key=_sort_key)


def _walk_dir(path: Path) -> list[InputFile]:
    """A partition dir holds only files; any other dir (a log dir, or a tree of them) is walked."""
    children = sorted(path.iterdir(), key=lambda p: p.name)
    subdirs = [c for c in children if c.is_dir()]
    if not subdirs:
        return [InputFile(p, classify(p), str(p)) for p in partition_files(path)]
    out = [InputFile(p, classify(p), str(p)) for p in children if p.is_file()]
    for sub in subdirs:
        out.extend(_walk_dir(sub))
    return out


def expand_inputs(paths: list[str]) -> list[InputFile]:
    """Files as given; a partition dir's files in offset order; a log dir's root files, then each partition."""
    out: list[InputFile] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise InputError("No such file or directory", path=given)
        if path.is_file():
            out.append(InputFile(path, classify(path), given))
            continue
        if not os.access(path, os.R_OK | os.X_OK):
            raise InputError("Permission denied", path=given)
        out.extend(_walk_dir(path))
    return out
