"""Text checkpoints and small metadata files: offset checkpoints, leader-epoch-checkpoint,
partition.metadata, meta.properties, .kafka_cleanshutdown and KRaft quorum-state.

Ports Kafka `CheckpointFile`, `OffsetCheckpointFile`, `LeaderEpochCheckpointFile`, `PartitionMetadataFile`,
`MetaProperties` and `CleanShutdownFileHandler`; errors carry Kafka's messages. Writes go through a `.tmp`
file, fsync and an atomic rename, as Kafka's do.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from kcli.errors import CorruptCheckpointError, InputError, KcliError
from kcli.storage.files import open_regular, parse_partition_dir_name, write_atomically

T = TypeVar("T")
TopicPartition = tuple[str, int]

# Java's BufferedReader.readLine ends lines at \n, \r or \r\n; Java's \s is exactly these six characters.
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_PARTITION_METADATA_SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_URL_SAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_INT_BITS = 32
_LONG_BITS = 64


def _read_bytes(path: Path) -> bytes:
    try:
        with os.fdopen(open_regular(path), "rb") as file:  # a FIFO is refused, not waited on
            return file.read()
    except InputError as error:
        raise InputError(error.reason.replace("cannot open:", "cannot read:"), path=str(path)) from error
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", path=str(path)) from error


def _java_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(byte position, line) pairs split as Java's readLine does; a final unterminated line counts."""
    lines = []
    end = 0
    for match in _LINE.finditer(data):
        lines.append((match.start(), match.group().rstrip(b"\r\n")))
        end = match.end()
    if end < len(data):
        lines.append((end, data[end:]))
    return lines


def _java_split(pattern: re.Pattern[str], text: str) -> list[str]:
    """Java `String.split`: a leading empty field stays, trailing empty fields go."""
    fields = pattern.split(text)
    while fields and not fields[-1]:
        fields.pop()
    return fields


def _java_int(text: str, bits: int = _INT_BITS) -> int:
    """Java `Integer.parseInt` / `Long.parseLong`: no surrounding whitespace, range-checked."""
    if not _JAVA_INTEGER.fullmatch(text):
        raise ValueError(f"For input string: {text!r}")
    value = int(text)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"For input string: {text!r}")
    return value


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka `Uuid.toString`: 22 characters of URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_base64(text: str) -> uuid.UUID:
    """Kafka `Uuid.fromString`; raises ValueError for anything that is not 16 bytes of URL-safe base64."""
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
    if not _URL_SAFE_BASE64.fullmatch(text):
        raise ValueError(f"Input string `{text}` is not URL-safe base64")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as error:
        raise ValueError(f"Input string `{text}` is not URL-safe base64: {error}") from error
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected 16 bytes "
            "of a base64-encoded UUID"
        )
    return uuid.UUID(bytes=raw)


class CheckpointFile(ABC, Generic[T]):
    """Kafka `CheckpointFile`: line 1 the version, line 2 the entry count, then one entry per line.

    An empty file (or one holding only the version) has no entries. Entry fields are split on runs of
    whitespace; a subclass turns fields into an entry and back.
    """

    VERSION: ClassVar[int] = 0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @abstractmethod
    def decode_entry(self, fields: list[str]) -> T:
        """Entry from the whitespace-split fields of one line; ValueError if they do not form one."""

    @abstractmethod
    def encode_entry(self, entry: T) -> str: ...

    def read(self) -> list[T]:
        return self.parse(_read_bytes(self.path))

    def parse(self, data: bytes) -> list[T]:
        """The entries of a checkpoint's bytes read elsewhere (a remote store's copy: ``path`` then names it in
        errors)."""
        lines = _java_lines(data)
        if not lines:
            return []
        version = self._int_line(*lines[0])
        if version != self.VERSION:
            raise self._error(
                f"Unrecognised version:{version}, expected version: {self.VERSION} "
                f"in checkpoint file at: {self._location()}",
                lines[0][0],
            )
        if len(lines) == 1:
            return []
        expected = self._int_line(*lines[1])
        entries = []
        for position, line in lines[2:]:
            try:
                entries.append(self.decode_entry(_java_split(_JAVA_WHITESPACE, line.decode("utf-8"))))
            except ValueError as error:  # UnicodeDecodeError is a ValueError too
                raise self._malformed(line, position) from error
        if len(entries) != expected:
            raise self._error(
                f"Expected [{expected}] entries in checkpoint file [{self._location()}], "
                f"but found only [{len(entries)}]",
                lines[1][0],
            )
        return entries

    def write(self, entries: Iterable[T]) -> None:
        lines = [self.encode_entry(entry) for entry in entries]
        text = "".join(f"{line}\n" for line in (str(self.VERSION), str(len(lines)), *lines))
        write_atomically(self.path, text.encode("utf-8"))

    def _int_line(self, position: int, line: bytes) -> int:
        try:
            return _java_int(line.decode("utf-8"))
        except ValueError as error:
            raise self._malformed(line, position) from error

    def _malformed(self, line: bytes, position: int) -> CorruptCheckpointError:
        text = line.decode("utf-8", errors="replace")
        return self._error(f"Malformed line in checkpoint file [{self._location()}]: {text}", position)

    def _error(self, reason: str, position: int) -> CorruptCheckpointError:
        return CorruptCheckpointError(reason, path=str(self.path), position=position)

    def _location(self) -> str:
        return os.path.abspath(self.path)


class OffsetCheckpointFile(CheckpointFile[tuple[TopicPartition, int]]):
    """The four root checkpoints (recovery point, replication/high watermark, log start, cleaner):
    `<topic> <partition> <offset>` lines, version 0."""

    def decode_entry(self, fields: list[str]) -> tuple[TopicPartition, int]:
        if len(fields) != 3:
            raise ValueError(f"expected 3 fields, found {len(fields)}")
        topic, partition, offset = fields
        return (topic, _java_int(partition)), _java_int(offset, _LONG_BITS)

    def encode_entry(self, entry: tuple[TopicPartition, int]) -> str:
        (topic, partition), offset = entry
        return f"{topic} {partition} {offset}"

    def read_offsets(self) -> dict[TopicPartition, int]:
        return dict(self.read())

    def write_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.write(offsets.items())


def read_partition_entry(partition_dir: str | os.PathLike[str], name: str) -> int | None:
    """The partition's entry in its log dir's offset checkpoint ``name``; an unreadable file counts as absent,
    as at broker startup."""
    directory = Path(partition_dir)
    parsed = parse_partition_dir_name(directory.name)
    path = directory.parent / name
    if parsed is None or not path.is_file():
        return None
    try:
        return OffsetCheckpointFile(path).read_offsets().get(parsed)
    except KcliError:
        return None


def write_partition_entry(partition_dir: str | os.PathLike[str], name: str, offset: int, *,
                          create: bool = True) -> bool:
    """Set the partition's entry in its log dir's offset checkpoint ``name`` (other entries kept; an unreadable
    file is replaced). False when the directory is not named like a partition, or the file is missing and
    ``create`` is off."""
    directory = Path(partition_dir)
    parsed = parse_partition_dir_name(directory.name)
    path = directory.parent / name
    if parsed is None or not (create or path.is_file()):
        return False
    offsets: dict[TopicPartition, int] = {}
    if path.is_file():
        try:
            offsets = dict(OffsetCheckpointFile(path).read_offsets())
        except KcliError:
            offsets = {}
    offsets[parsed] = offset
    OffsetCheckpointFile(path).write_offsets(offsets)
    return True


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry]):
    """`leader-epoch-checkpoint` in a partition dir: `<leaderEpoch> <startOffset>` lines, version 0."""

    def decode_entry(self, fields: list[str]) -> EpochEntry:
        if len(fields) != 2:
            raise ValueError(f"expected 2 fields, found {len(fields)}")
        return EpochEntry(_java_int(fields[0]), _java_int(fields[1], _LONG_BITS))

    def encode_entry(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"


PARTITION_METADATA_VERSION = 0
ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    topic_id: uuid.UUID
    version: int = PARTITION_METADATA_VERSION


def read_partition_metadata(path: str | os.PathLike[str]) -> PartitionMetadata:
    """Parse `version: 0\ntopic_id: <base64 uuid>`; lines after the second are ignored, as Kafka does.

    Kafka wraps every failure, its own "Invalid topic ID" and "Unrecognized version" errors included,
    into "Malformed line"; here those two keep their specific message.
    """
    path = Path(path)
    location = os.path.abspath(path)
    data = _read_bytes(path)
    lines = _java_lines(data)

    def malformed(index: int) -> CorruptCheckpointError:
        position, line = lines[index] if index < len(lines) else (len(data), None)
        text = "null" if line is None else line.decode("utf-8", errors="replace")
        return CorruptCheckpointError(
            f"Malformed line in checkpoint file {location}: {text}", path=str(path), position=position
        )

    def value(index: int) -> str:
        try:
            fields = _java_split(_PARTITION_METADATA_SEPARATOR, lines[index][1].decode("utf-8"))
        except (IndexError, ValueError):
            raise malformed(index) from None
        if len(fields) != 2:
            raise malformed(index)
        return fields[1]

    try:
        version = _java_int(value(0))
    except ValueError:
        raise malformed(0) from None
    if version != PARTITION_METADATA_VERSION:
        raise CorruptCheckpointError(
            f"Unrecognized version of partition metadata file ({location}): {version}", path=str(path), position=0
        )
    try:
        topic_id = uuid_from_base64(value(1))
    except ValueError as error:
        raise CorruptCheckpointError(str(error), path=str(path), position=lines[1][0]) from error
    if topic_id == ZERO_UUID:
        raise CorruptCheckpointError(
            f"Invalid topic ID in partition metadata file ({location})", path=str(path), position=lines[1][0]
        )
    return PartitionMetadata(topic_id, version)


def write_partition_metadata(path: str | os.PathLike[str], topic_id: uuid.UUID, *, sync: bool = True) -> None:
    if topic_id == ZERO_UUID:
        raise ValueError("the all-zero topic id is reserved")
    text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_base64(topic_id)}"  # no final newline
    write_atomically(path, text.encode("utf-8"), sync=sync)


# Properties.load/store escapes: `\t \n \r \f` by letter, the separators and comment markers by backslash.
_PROPERTY_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_PROPERTY_ESCAPES.update({c: "\\" + c for c in "=:#!"})
_PROPERTY_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_PROPERTY_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_PROPERTY_LINE = re.compile(r"((?:\\.|[^=: \t\f\\])*)[ \t\f]*[=:]?[ \t\f]*(.*)", re.DOTALL)
_NEWLINE = re.compile(r"\r\n|\r|\n")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _property_unescape(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        code = match[1]
        return chr(int(code[1:], 16)) if len(code) == 5 else _PROPERTY_UNESCAPES.get(code, code)

    return _PROPERTY_ESCAPE.sub(replace, text)


def _property_escape(text: str, *, key: bool) -> str:
    # Properties.store escapes every space in a key but only a leading space in a value.
    return "".join(
        "\\ " if char == " " and (key or i == 0) else _PROPERTY_ESCAPES.get(char, char)
        for i, char in enumerate(text)
    )


def parse_java_properties(text: str) -> dict[str, str]:
    """Java `Properties.load`: `#`/`!` comments, `=`/`:`/whitespace separators, continuations, escapes."""
    props: dict[str, str] = {}
    lines = iter(_NEWLINE.split(text))
    for line in lines:
        line = line.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2:
            line = line[:-1] + next(lines, "").lstrip(" \t\f")
        key, value = _PROPERTY_LINE.fullmatch(line).groups()  # everything is optional: always matches
        props[_property_unescape(key)] = _property_unescape(value)
    return props


def format_java_properties(props: Mapping[str, str], *, now: datetime | None = None) -> str:
    """Java `Properties.store(writer, "")`: an empty comment line, a `#<java.util.Date>` line, key=value."""
    now = now or datetime.now(timezone.utc)
    date = (
        f"{_WEEKDAYS[now.weekday()]} {_MONTHS[now.month - 1]} {now:%d %H:%M:%S} {now.tzname() or 'UTC'} {now:%Y}"
    )
    lines = ["#", f"#{date}"]
    lines += [f"{_property_escape(k, key=True)}={_property_escape(v, key=False)}" for k, v in props.items()]
    return "".join(f"{line}\n" for line in lines)


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """meta.properties: version 0 (ZooKeeper mode, `broker.id`) or 1 (KRaft, `node.id` + `cluster.id`)."""

    version: int
    node_id: int  # broker.id in version 0, node.id in version 1
    cluster_id: str | None = None
    directory_id: uuid.UUID | None = None  # Kafka 3.7+ (JBOD in KRaft)

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = uuid_to_base64(self.directory_id)
        return props


def read_meta_properties(path: str | os.PathLike[str]) -> MetaProperties:
    path = Path(path)

    def fail(reason: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(reason, path=str(path))

    try:
        props = parse_java_properties(_read_bytes(path).decode("latin-1"))  # Properties.load(InputStream)
    except ValueError as error:
        raise fail(f"cannot parse properties: {error}") from error
    text = props.get("version", "0")
    try:
        version = _java_int(text.strip())
    except ValueError as error:
        raise fail(f"Invalid meta.properties version string '{text}'") from error
    if version not in (0, 1):
        raise fail(f"Unknown meta.properties version number {version}")
    id_key = "broker.id" if version == 0 else "node.id"
    if id_key not in props:
        raise fail(f"Failed to find {id_key}")
    try:
        node_id = _java_int(props[id_key])
    except ValueError as error:
        raise fail(f"Unable to read {id_key} as a base-10 number.") from error
    cluster_id = props.get("cluster.id")
    if version == 1 and cluster_id is None:
        raise fail("cluster.id was not found.")
    directory_id = None
    if "directory.id" in props:
        try:
            directory_id = uuid_from_base64(props["directory.id"])
        except ValueError as error:
            raise fail(f"Unable to read directory.id as a Uuid: {error}") from error
    return MetaProperties(version, node_id, cluster_id, directory_id)


def write_meta_properties(path: str | os.PathLike[str], meta: MetaProperties, *, now: datetime | None = None) -> None:
    if meta.version not in (0, 1):
        raise ValueError(f"Unknown meta.properties version number {meta.version}")
    if meta.version == 1 and meta.cluster_id is None:
        raise ValueError("meta.properties version 1 requires a cluster.id")
    write_atomically(path, format_java_properties(meta.to_properties(), now=now).encode("utf-8"))


@dataclass(frozen=True, slots=True)
class CleanShutdown:
    """A `.kafka_cleanshutdown` marker; only its existence matters to recovery."""

    broker_epoch: int | None  # None: empty file (Kafka <= 3.6) or content Kafka could not read either


def read_clean_shutdown(path: str | os.PathLike[str]) -> CleanShutdown | None:
    """The marker, or None if absent.

    Kafka 3.7+ (KIP-966) writes `{"version":"0","broker_epoch":"<long>"}`: a Jackson map of strings.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return CleanShutdown(None)
    try:
        content = json.loads(text)
        return CleanShutdown(int(content["broker_epoch"]))
    except (ValueError, TypeError, KeyError):
        return CleanShutdown(None)


def write_clean_shutdown(path: str | os.PathLike[str], broker_epoch: int | None = None) -> None:
    """Without an epoch, the empty marker of Kafka <= 3.6."""
    content = {"version": "0", "broker_epoch": str(broker_epoch)}
    data = b"" if broker_epoch is None else json.dumps(content, separators=(",", ":")).encode("utf-8")
    write_atomically(path, data)


@dataclass(frozen=True, slots=True)
class QuorumState:
    """KRaft `quorum-state` (JSON, `QuorumStateData`) in `__cluster_metadata-0`."""

    data_version: int
    leader_id: int
    leader_epoch: int
    voted_id: int
    applied_offset: int
    current_voters: tuple[int, ...] | None  # None from data_version 1 on: voters live in the log (KIP-853)
    cluster_id: str | None


def read_quorum_state(path: str | os.PathLike[str]) -> QuorumState:
    path = Path(path)
    try:
        content = json.loads(_read_bytes(path))
        voters = content.get("currentVoters")
        return QuorumState(
            data_version=int(content.get("data_version", 0)),
            leader_id=int(content.get("leaderId", -1)),
            leader_epoch=int(content.get("leaderEpoch", -1)),
            voted_id=int(content.get("votedId", -1)),
            applied_offset=int(content.get("appliedOffset", -1)),
            current_voters=None if voters is None else tuple(int(voter["voterId"]) for voter in voters),
            cluster_id=content.get("clusterId"),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise CorruptCheckpointError(f"cannot parse quorum-state: {error}", path=str(path)) from error
