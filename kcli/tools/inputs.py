"""Expand what the user named (files, partition directories, log directories) into files, in Kafka's order.

The one discovery of partitions for every offline tool. A directory holding no sub-directory, or named like a
partition and holding segment files, is a partition; any other directory is a log dir (or a tree of them) and
is searched. Found in a
log dir, a partition must be named as Kafka's ``UnifiedLog.parseTopicPartitionName`` requires:
``<topic>-<partition>``, or ``<topic>-<partition>.<id>-delete|-future|-stray`` for one renamed by the broker
(the ``marker``; each tool decides what it does with those). Any other directory there is not read, with a
warning: Kafka's ``LogManager.loadLogs`` refuses to start on a log dir holding it. A directory the user names
is read as a partition whatever its name, with a warning when Kafka would not load it.

Only regular files are ever opened: FIFOs, sockets, devices, dangling symlinks, directories named like segment
files and unreadable directories are listed as skipped with their reason, never followed into a hang or a
traceback. A path under which nothing is Kafka data is an ``InputError`` ("no Kafka log data under PATH").
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kcli.errors import InputError
from kcli.storage.files import (
    BOOTSTRAP_CHECKPOINT,
    LOG_SUFFIX,
    MANIFEST_NAME,
    QUARANTINE_DIR_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    parse_partition_dir_name,
    partition_dir_marker,
    special_file_reason,
)
from kcli.tools.report import Problem, Severity

# Within one base offset: the .log first, then its indexes (kafka-dump-log needs the .log for them).
_SEGMENT_ORDER = {
    FileKind.LOG: 0,
    FileKind.INDEX: 1,
    FileKind.TIME_INDEX: 2,
    FileKind.TXN_INDEX: 3,
    FileKind.PRODUCER_SNAPSHOT: 4,
    FileKind.KRAFT_CHECKPOINT: 5,
    FileKind.KAFKA07_LOG: 0,  # a Kafka 0.7 segment (kcli.tools.kafka07)
}
# Directories a log dir may hold that are never Kafka data: a filesystem's own, tiered storage's index cache
# (LogManager.loadLogs skips RemoteIndexCache.DIR_NAME), and kcli's quarantines (by their suffix).
NOT_KAFKA_DIRS = ("lost+found", "remote-log-index-cache")  # skipped quietly (Kafka skips them too)
# What only a log dir's root holds (a partition dir never does)
_LOG_DIR_KINDS = (FileKind.META_PROPERTIES, FileKind.OFFSET_CHECKPOINT, FileKind.CLEAN_SHUTDOWN)
NOT_A_PARTITION = "not_a_partition_dir"  # Problem code of the warnings about directories Kafka would not load
_LISTED_SKIPS = 20  # skipped entries named in an error message


@dataclass(frozen=True, slots=True)
class InputFile:
    path: Path
    kind: FileKind
    given: str  # the path as the user wrote it (kafka-dump-log echoes it back)
    quarantined: dict | None = None  # QUARANTINED_LOG: its kctl recover manifest entry
    from_dir: bool = False  # found by walking a directory (not named by the user)


def quarantine_entries(directory: Path) -> dict[str, dict]:
    """Quarantined file name -> manifest entry, for a kctl recover quarantine directory (else empty)."""
    import json

    manifest = directory / MANIFEST_NAME
    try:
        if not manifest.is_file():
            return {}
        document = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("format") != "kctl-recover-quarantine":
        return {}
    return {r["quarantine_file"]: r for r in document.get("actions", [])
            if isinstance(r, dict) and r.get("quarantine_file") and str(r.get("file", "")).endswith(LOG_SUFFIX)}


def _input(path: Path, given: str, fragments: dict[str, dict] | None = None, from_dir: bool = False) -> InputFile:
    kind = classify(path)
    if kind is FileKind.UNKNOWN:
        entry = (quarantine_entries(path.parent) if fragments is None else fragments).get(path.name)
        if entry is not None:
            return InputFile(path, FileKind.QUARANTINED_LOG, given, entry, from_dir)
    return InputFile(path, kind, given, None, from_dir)


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry not read. ``unreadable``: it looks like Kafka data (or might hold some) but cannot be read."""

    path: str
    reason: str
    unreadable: bool = False


@dataclass(frozen=True, slots=True)
class PartitionDir:
    """A directory read as one partition. ``topic``/``partition`` are None when its name is not
    ``<topic>-<partition>`` (only a directory the user named is read then); ``marker`` is ``-delete``,
    ``-future`` or ``-stray`` for a partition directory the broker renamed; ``named``: given by the user."""

    path: Path
    topic: str | None
    partition: int | None
    marker: str | None
    named: bool

    @property
    def kafka_name(self) -> bool:
        return self.topic is not None


@dataclass
class Inputs:
    files: list[InputFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    partitions: list[PartitionDir] = field(default_factory=list)  # in the order their files are listed
    warnings: list[Problem] = field(default_factory=list)  # directories not read, or read though Kafka would not

    @property
    def unreadable(self) -> list[Skipped]:
        return [s for s in self.skipped if s.unreadable]


def _sort_key(path: Path) -> tuple:
    kind = classify(path)
    if kind in _SEGMENT_ORDER:
        try:
            return (0, offset_from_filename(path.name), _SEGMENT_ORDER[kind], path.name)
        except (ValueError, InputError):
            return (0, -1, _SEGMENT_ORDER[kind], path.name)
    return (1, 0, 0, path.name)


def _entry_type(path: Path) -> tuple[str, str | None]:
    """('file' | 'dir' | 'other' | 'gone', reason): what ``path`` is, following symlinks, without opening it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return "other", f"dangling symbolic link to {os.readlink(path)}"
        return "gone", "disappeared while being listed"
    except OSError as exc:
        return "other", f"cannot read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return "file", None
    if stat.S_ISDIR(mode):
        return "dir", None
    return "other", special_file_reason(mode)


def _kafka_named(name: str) -> bool:
    return classify(name) is not FileKind.UNKNOWN


def _list_dir(path: Path, out: Inputs) -> tuple[list[Path], list[Path]] | None:
    """(regular files, directories to walk) of ``path``; None when it cannot be listed (recorded in ``out``)."""
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        out.skipped.append(Skipped(str(path), f"cannot list directory: {exc.strerror or exc}", unreadable=True))
        return None
    files: list[Path] = []
    dirs: list[Path] = []
    for name in names:
        child = path / name
        what, reason = _entry_type(child)
        if what == "file":
            files.append(child)
        elif what == "dir":
            if name in NOT_KAFKA_DIRS or name.endswith(QUARANTINE_DIR_SUFFIX):
                out.skipped.append(Skipped(str(child), "not Kafka data"))
            elif _kafka_named(name):
                out.skipped.append(Skipped(str(child), "a directory named like a Kafka file", unreadable=True))
            else:
                dirs.append(child)
        elif what == "gone":
            continue  # deleted between listing and looking: as if it had never been there
        else:
            out.skipped.append(Skipped(str(child), reason or "not a regular file", unreadable=_kafka_named(name)))
    return files, dirs


def partition_files(directory: Path) -> list[Path]:
    listed = _list_dir(directory, Inputs())
    return [] if listed is None else sorted(listed[0], key=_sort_key)


def _holds_segments(files: list[Path]) -> bool:
    return any(classify(p) in _SEGMENT_ORDER and p.name != BOOTSTRAP_CHECKPOINT for p in files)


def _is_log_dir_root(files: list[Path]) -> bool:
    """Only a log dir's own files (meta.properties, offset checkpoints): an empty broker log dir."""
    return not _holds_segments(files) and any(classify(p) in _LOG_DIR_KINDS for p in files)


def _walk_dir(path: Path, out: Inputs, *, named: bool = False) -> None:
    """A directory without sub-directories, or named like a partition and holding segments, is a partition; any
    other is a log dir (or a tree of them): its own files, then each sub-directory."""
    listed = _list_dir(path, out)
    if listed is None:
        return
    files, subdirs = listed
    fragments = quarantine_entries(path)  # a kctl recover quarantine of one partition
    parsed = parse_partition_dir_name(path.name)
    if not fragments and ((subdirs and (parsed is None or not _holds_segments(files)))
                          or (not subdirs and _is_log_dir_root(files))):
        # Kafka reads only the sub-directories of a log dir: files beside them (a stray segment) are its own
        out.files.extend(_input(p, str(p), fragments, True) for p in files)
        for sub in subdirs:
            _walk_dir(sub, out)
        return
    if parsed is None and not fragments:  # a quarantine keeps the name of the partition it holds
        if not named:
            out.warnings.append(Problem(str(path), None, None, "not read: not a partition directory (not named "
                                        "<topic>-<partition>); Kafka refuses to load a log dir holding it",
                                        NOT_A_PARTITION, Severity.WARNING))
            return
        out.warnings.append(Problem(str(path), None, None, "read as a partition directory, but it is not named "
                                    "<topic>-<partition>: Kafka would not load it", NOT_A_PARTITION, Severity.WARNING))
    for sub in subdirs:  # Kafka's LogLoader reads only the files of a partition directory
        out.warnings.append(Problem(str(sub), None, None, f"not read: a directory inside the partition directory "
                                    f"{path.name} (Kafka reads only its files)", NOT_A_PARTITION, Severity.WARNING))
    topic, partition = parsed if parsed is not None else (None, None)
    out.partitions.append(PartitionDir(path, topic, partition, partition_dir_marker(path.name), named))
    out.files.extend(_input(p, str(p), fragments, True) for p in sorted(files, key=_sort_key))


def _no_data_error(given: str, skipped: list[Skipped]) -> InputError:
    unreadable = [s for s in skipped if s.unreadable]
    shown = unreadable or skipped
    listing = "; ".join(f"{s.path} ({s.reason})" for s in shown[:_LISTED_SKIPS])
    if len(shown) > _LISTED_SKIPS:
        listing += f"; and {len(shown) - _LISTED_SKIPS} more"
    if unreadable:
        return InputError(f"no readable Kafka log data; unreadable: {listing}", path=given)
    return InputError(f"no Kafka log data under {given}" + (f"; skipped: {listing}" if listing else ""), path=given)


def collect_inputs(paths: list[str]) -> Inputs:
    """Files as given; a partition dir's files in offset order; a log dir's root files, then each partition.

    Raises InputError for a path that does not exist or holds no Kafka data at all; entries that cannot be
    read are in ``skipped`` (``unreadable``) for the caller to report.
    """
    out = Inputs()
    for given in paths:
        path = Path(given)
        what, reason = _entry_type(path)
        if what == "gone":
            raise InputError("No such file or directory", path=given)
        if what == "other":
            raise InputError(reason or "not a regular file", path=given)
        if what == "file":
            item = _input(path, given)
            if item.kind is FileKind.UNKNOWN:
                raise InputError(f"no Kafka log data under {given}: not a Kafka file by its name", path=given)
            out.files.append(item)
            continue
        if not os.access(path, os.R_OK | os.X_OK):
            raise InputError("Permission denied", path=given)
        part = Inputs()
        _walk_dir(path, part, named=True)
        if not any(f.kind is not FileKind.UNKNOWN for f in part.files):
            raise _no_data_error(given, part.skipped + [Skipped(w.file, w.reason) for w in part.warnings])
        out.files.extend(part.files)
        out.skipped.extend(part.skipped)
        out.partitions.extend(part.partitions)
        out.warnings.extend(part.warnings)
    return out


def log_dir_partitions(log_dir: str | os.PathLike[str]) -> dict[tuple[str, int], Path]:
    """(topic, partition) -> directory of the partitions a broker would serve from ``log_dir`` (those named
    ``<topic>-<partition>``, not renamed ``-delete``/``-future``/``-stray``), by ``collect_inputs``' rules; empty
    for a log dir holding none (or that cannot be listed)."""
    root = Path(log_dir)
    found = Inputs()
    _walk_dir(root, found)
    return {(p.topic, p.partition): p.path for p in found.partitions  # type: ignore[misc]
            if p.path.parent == root and p.kafka_name and p.marker is None}


def expand_inputs(paths: list[str]) -> list[InputFile]:
    """The files of ``collect_inputs`` (entries that cannot be read are left out)."""
    return collect_inputs(paths).files


def file_size(path: Path) -> int:
    """Size for progress totals; 0 for a file gone since it was listed."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
