"""Offline tools over Kafka 0.7 logs (``<20-digit byte offset>.kafka`` segments): dump, verify, and convert a 0.7
partition into a modern one (offsets renumbered, a map from byte offsets to offsets written beside it).

Dump lines follow Kafka 0.7's DumpLogSegments (``offset: <byte offset> isvalid: ... compresscodec: ...``). The
conversion plans first and applies only when asked; it builds the new partition in a staging directory beside the
log dir (``<log dir>.kctl-convert/``, which no broker loads) and renames it into place when it is complete, so a
crash leaves either nothing or the whole partition. Returns dataclasses; never prints.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError, UsageError
from kcli.records.compression import Codec
from kcli.records.message07 import Message07, Stop, StopKind, iter_message_set
from kcli.records.types import Record
from kcli.storage.files import KAFKA07_SUFFIX, fsync_dir, offset_from_filename, parse_partition_dir_name
from kcli.tools.report import Problem, Severity

READ_CHUNK = 1 << 20
OFFSET_MAP_NAME = "kafka07-offsets.csv"  # beside the converted segments: byte_offset,offset,records
STAGING_SUFFIX = ".kctl-convert"
# Scala case objects' names, as 0.7's DumpLogSegments prints compressionCodec
CODEC_NAMES = {Codec.NONE: "NoCompressionCodec", Codec.GZIP: "GZIPCompressionCodec",
               Codec.SNAPPY: "SnappyCompressionCodec"}


def is_kafka07_input(paths: list[str]) -> bool:
    """Whether every path is a .kafka segment, or a directory holding .kafka segments and no modern .log."""
    if not paths:
        return False
    for given in paths:
        path = Path(given)
        if path.is_file():
            if not path.name.endswith(KAFKA07_SUFFIX):
                return False
            continue
        if not path.is_dir():
            return False
        found = False
        for _root, _dirs, names in os.walk(path):
            for name in names:
                if name.endswith(".log"):
                    return False  # modern segments: the modern reader's
                found = found or name.endswith(KAFKA07_SUFFIX)
        if not found:
            return False
    return True


def segment_files(paths: list[str]) -> list[Path]:
    """The .kafka segments named or under the directories named, in offset order per directory."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            out.append(path)
            continue
        if not path.is_dir():
            raise InputError("no such file or directory", path=given)
        found = [p for p in path.rglob("*" + KAFKA07_SUFFIX) if p.is_file()]
        if not found:
            raise InputError("no Kafka 0.7 segments (.kafka) here", path=given)
        out.extend(sorted(found, key=lambda p: (str(p.parent), _start(p))))
    return out


def _start(path: Path) -> int:
    try:
        return offset_from_filename(path.name)
    except InputError:
        raise InputError("a 0.7 segment is named by its 20-digit start byte offset", path=str(path)) from None


def _iter_segment(path: Path, *, check_crc: bool = True) -> Iterator[Message07 | Stop]:
    """The segment's messages (positions within the file) then, if it stops early, why; read in chunks."""
    with open(path, "rb") as f:
        base, carry = 0, b""
        while True:
            chunk = f.read(READ_CHUNK)
            data = carry + chunk
            if not data:
                return
            last = None
            for item in iter_message_set(data, check_crc=check_crc):
                if isinstance(item, Stop):
                    last = item
                    break
                yield Message07(base + item.position, item.size, item.magic, item.attributes, item.crc, item.payload)
            if last is None:  # the chunk ended between two messages
                base += len(data)
                carry = b""
                if not chunk:
                    return
                continue
            if last.kind is StopKind.PARTIAL and chunk:
                base += last.position
                carry = data[last.position :]
                continue  # the rest of the message is in the next chunk
            yield Stop(last.kind, base + last.position, last.reason)
            return


# -- dump ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DumpedMessage07:
    offset: int  # byte offset in the partition's log
    position: int  # byte position in the segment
    valid: bool
    payload_size: int
    magic: int
    codec: Codec
    crc: int
    payload: bytes
    inner: tuple[bytes, ...] = ()  # a wrapper's payloads (deep iteration)

    def to_json(self, path: Path, encode: Any) -> dict[str, Any]:
        out = {"type": "message", "file": str(path), "offset": self.offset, "position": self.position,
               "valid": self.valid, "payload_size": self.payload_size, "magic": self.magic,
               "codec": self.codec.label, "crc": self.crc, "payload": encode(self.payload)}
        if self.inner:
            out["messages"] = [encode(p) for p in self.inner]
        return out


@dataclass
class SegmentDump07:
    path: Path
    start_offset: int
    messages: list[DumpedMessage07] = field(default_factory=list)
    tail_offset: int = 0
    problem: Problem | None = None


def dump_segments(paths: list[str], *, deep: bool = False) -> Iterator[SegmentDump07]:
    """Each segment's messages as 0.7's DumpLogSegments walks them, and the problem that stopped the walk."""
    for path in segment_files(paths):
        start = _start(path)
        dump = SegmentDump07(path, start, tail_offset=start)
        try:
            for item in _iter_segment(path, check_crc=False):
                if isinstance(item, Stop):
                    dump.problem = _stop_problem(path, start, item)
                    break
                inner: tuple[bytes, ...] = ()
                if deep and item.codec is not Codec.NONE:
                    try:
                        inner = tuple(m.payload for m in item.inner())
                    except KcliError as exc:
                        dump.problem = Problem(str(path), item.position, start + item.position, exc.reason,
                                               "kafka07_bad_wrapper")
                header = item.size - len(item.payload)
                dump.messages.append(DumpedMessage07(start + item.position, item.position, item.is_valid,
                                                     item.size - header, item.magic, item.codec, item.crc,
                                                     item.payload, inner))
                dump.tail_offset = start + item.next_position
                if not item.is_valid and dump.problem is None:
                    dump.problem = Problem(str(path), item.position, start + item.position,
                                           f"CRC mismatch: stored {item.crc}, computed {item.computed_crc}",
                                           "kafka07_crc_mismatch")
        except OSError as exc:
            dump.problem = Problem(str(path), None, None, exc.strerror or str(exc), "unreadable")
        yield dump


def dump_lines(dump: SegmentDump07, *, print_payload: bool) -> list[str]:
    """Kafka 0.7 DumpLogSegments' lines for one segment (``-noprint`` unless ``print_payload``)."""
    lines = [f"Dumping {dump.path}", f"Starting offset: {dump.start_offset}"]
    for m in dump.messages:
        lines.append(f"offset: {m.offset} isvalid: {str(m.valid).lower()} payloadsize: {m.payload_size} "
                     f"magic: {m.magic} compresscodec: {CODEC_NAMES[m.codec]} crc: {m.crc}")
        if print_payload and m.inner:  # deep iteration: a wrapper's messages rather than its compressed bytes
            lines.extend("| payload:\t" + p.decode("utf-8", "replace") for p in m.inner)
        elif print_payload:
            lines.append("payload:\t" + m.payload.decode("utf-8", "replace"))
    lines.append(f"tail of the log is at offset: {dump.tail_offset}")
    return lines


def _stop_problem(path: Path, start: int, stop: Stop) -> Problem:
    codes = {StopKind.PARTIAL: "kafka07_truncated", StopKind.BAD_SIZE: "kafka07_bad_size",
             StopKind.BAD_MAGIC: "kafka07_bad_magic", StopKind.BAD_CRC: "kafka07_crc_mismatch",
             StopKind.BAD_CODEC: "kafka07_bad_codec"}
    reason = stop.reason
    if stop.kind is StopKind.PARTIAL:
        reason += " (a torn write: the broker's recovery truncates it)"
    return Problem(str(path), stop.position, start + stop.position, reason, codes.get(stop.kind, "kafka07_corrupt"))


# -- verify --------------------------------------------------------------------------------------------------
@dataclass
class Verify07Counts:
    files: int = 0
    bytes: int = 0
    messages: int = 0  # shallow messages (a wrapper counts once)
    records: int = 0  # payloads, a wrapper's inner messages each
    problems: list[Problem] = field(default_factory=list)


def verify_segments(paths: list[Path], *, deep: bool = False) -> Verify07Counts:
    """What 0.7's recovery and validateSegments check: each message whole, a known magic and codec, its payload's
    CRC; (deep) every wrapper decompresses into valid messages; the segments of a directory contiguous (each
    starts where the previous ends)."""
    counts = Verify07Counts()
    by_dir: dict[Path, list[Path]] = {}
    for path in paths:
        by_dir.setdefault(path.parent, []).append(path)
    for segments in by_dir.values():
        previous_end: int | None = None
        previous: Path | None = None
        for path in sorted(segments, key=_start):
            start = _start(path)
            counts.files += 1
            try:
                size = path.stat().st_size
                counts.bytes += size
                if previous_end is not None and start != previous_end:
                    counts.problems.append(Problem(
                        str(path), 0, start, f"the segment starts at byte offset {start} but the previous one, "
                        f"{previous.name if previous else '?'}, ends at {previous_end} (0.7's validateSegments "
                        "refuses to open the log)", "kafka07_segment_gap"))
                for item in _iter_segment(path):
                    if isinstance(item, Stop):
                        counts.problems.append(_stop_problem(path, start, item))
                        break
                    counts.messages += 1
                    if deep and item.codec is not Codec.NONE:
                        try:
                            counts.records += len(item.inner())
                        except KcliError as exc:
                            counts.problems.append(Problem(str(path), item.position, start + item.position,
                                                           exc.reason, "kafka07_bad_wrapper"))
                    else:
                        counts.records += 1
                previous_end, previous = start + size, path
            except OSError as exc:
                counts.problems.append(Problem(str(path), None, None, exc.strerror or str(exc), "unreadable"))
    return counts


# -- convert -------------------------------------------------------------------------------------------------
@dataclass
class Convert07Report:
    source: str
    destination: str
    applied: bool = False
    segments: int = 0
    messages: int = 0  # shallow 0.7 messages
    records: int = 0  # records of the new log (a wrapper's inner messages each)
    first_byte_offset: int | None = None
    next_byte_offset: int | None = None  # where a 0.7 consumer would resume
    log_end_offset: int = 0  # of the new log
    offset_map: str | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.severity is Severity.ERROR for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "applied": self.applied, "source": self.source, "destination": self.destination,
                "segments": self.segments, "messages": self.messages, "records": self.records,
                "first_byte_offset": self.first_byte_offset, "next_byte_offset": self.next_byte_offset,
                "log_end_offset": self.log_end_offset, "offset_map": self.offset_map,
                "problems": [p.to_json() for p in self.problems]}


def _source_messages(source: Path, report: Convert07Report) -> Iterator[tuple[int, int, Message07]]:
    """(byte offset, segment mtime in ms, message) of every valid message, stopping at the first damage as 0.7's
    recovery would (the damage is a problem of the report)."""
    segments = segment_files([str(source)])
    previous_end = None
    for path in segments:
        start = _start(path)
        if previous_end is not None and start != previous_end:
            report.problems.append(Problem(str(path), 0, start, f"segments do not add up: this one starts at "
                                           f"{start}, the previous ends at {previous_end}", "kafka07_segment_gap"))
            return
        report.segments += 1
        mtime = int(path.stat().st_mtime * 1000)
        for item in _iter_segment(path):
            if isinstance(item, Stop):
                report.problems.append(_stop_problem(path, start, item))
                return
            yield start + item.position, mtime, item
        previous_end = start + path.stat().st_size


def convert(source: str, destination: str, *, apply: bool = False, segment_bytes: int = 1024 * 1024 * 1024,
            batch_records: int = 1000) -> Convert07Report:
    """Plan (and with ``apply`` write) a modern partition from a 0.7 partition directory.

    Each uncompressed 0.7 message becomes one record (value = payload, no key, CreateTime = its segment's
    modification time, as 0.7 kept no timestamps), consecutive ones batched up to ``batch_records``; each
    compressed wrapper becomes one batch of the same codec. Offsets are renumbered from 0; the offset map holds,
    per 0.7 message, ``byte_offset,offset,records``.
    """
    src, dest = Path(source), Path(destination)
    report = Convert07Report(str(src), str(dest))
    if not src.exists():
        raise InputError("no such directory", path=source)
    if not src.is_dir():
        raise UsageError("the source is a 0.7 partition directory (<topic>-<partition> holding .kafka segments)",
                         path=source)
    if parse_partition_dir_name(dest.name) is None:
        raise UsageError("the destination must be named <topic>-<partition>, as a modern broker loads it",
                         path=destination)
    if dest.exists() and any(dest.iterdir()):
        raise UsageError("the destination partition directory exists and is not empty", path=destination)
    staging_root = dest.parent.with_name(dest.parent.name + STAGING_SUFFIX)
    staging = staging_root / dest.name
    log = None
    map_file = None
    if apply:
        from kcli.storage.log import LogConfig, PartitionLog

        if staging.exists():
            shutil.rmtree(staging)  # a conversion that crashed: start again
        staging.mkdir(parents=True)
        log = PartitionLog(staging, config=LogConfig(segment_bytes=segment_bytes))
        map_file = open(staging / OFFSET_MAP_NAME, "w", encoding="ascii")
        map_file.write("byte_offset,offset,records\n")
    pending: list[Record] = []

    def flush_pending() -> None:
        if log is not None and pending:
            log.append(list(pending))
        pending.clear()

    try:
        next_offset = 0
        for byte_offset, mtime, message in _source_messages(src, report):
            if report.first_byte_offset is None:
                report.first_byte_offset = byte_offset
            report.next_byte_offset = byte_offset + message.entry_size
            report.messages += 1
            try:
                payloads = [m.payload for m in message.inner()]
            except KcliError as exc:
                report.problems.append(Problem(source, message.position, byte_offset, exc.reason,
                                               "kafka07_bad_wrapper"))
                break
            records = [Record(next_offset + i, mtime, None, p) for i, p in enumerate(payloads)]
            if map_file is not None:
                map_file.write(f"{byte_offset},{next_offset},{len(records)}\n")
            if message.codec is Codec.NONE:
                pending.extend(records)
                if len(pending) >= batch_records:
                    flush_pending()
            else:
                flush_pending()
                if log is not None and records:
                    log.append(records, codec=message.codec)
            next_offset += len(records)
            report.records += len(records)
        flush_pending()
        report.log_end_offset = next_offset
        if not apply or log is None or map_file is None:
            return report
        if not report.ok:
            log.close()
            map_file.close()
            shutil.rmtree(staging, ignore_errors=True)
            raise KcliError("the source is damaged: nothing converted (kctl verify shows where; a 0.7 broker's "
                            "start truncates a torn tail)", path=source)
        log.close()
        map_file.flush()
        os.fsync(map_file.fileno())
        map_file.close()
        fsync_dir(staging)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        os.rename(staging, dest)  # the whole partition appears at once
        fsync_dir(dest.parent)
        if not any(staging_root.iterdir()):
            staging_root.rmdir()
        report.applied = True
        report.offset_map = str(dest / OFFSET_MAP_NAME)
        return report
    finally:
        if map_file is not None and not map_file.closed:
            map_file.close()
