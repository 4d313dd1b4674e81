"""Producer-state `.snapshot` files: the idempotent/transactional producer table at an offset.

Ports Kafka `ProducerStateManager.readSnapshot/writeSnapshot` (schema `ProducerSnapshot`, version 1,
unchanged since 0.11). The file name is the offset the snapshot covers: state *before* that offset.

    ProducerSnapshot => Version:int16 Crc:uint32 [ProducerEntry]      crc = CRC-32C of bytes [6, EOF)
    ProducerEntry => ProducerId:int64 Epoch:int16 LastSequence:int32 LastOffset:int64 OffsetDelta:int32
                     Timestamp:int64 CoordinatorEpoch:int32 CurrentTxnFirstOffset:int64
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import CorruptSnapshotError, InputError
from kcli.records.crc import crc32c
from kcli.storage.files import offset_from_filename, write_atomically

PRODUCER_SNAPSHOT_VERSION = 1
SNAPSHOT_HEADER = struct.Struct(
    ">"
    "h"  # version: 1 is the only version Kafka has ever written
    "I"  # crc: CRC-32C of everything after this field
    "i"  # producer entry count (the schema's array length prefix)
)
PRODUCER_ENTRY = struct.Struct(
    ">"
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # lastSequence of the last batch
    "q"  # lastOffset of the last batch; < 0 means no batch metadata
    "i"  # offsetDelta: lastOffset - firstOffset of that batch (equally the sequence delta)
    "q"  # timestamp: max timestamp of that batch (the producer's lastTimestamp)
    "i"  # coordinatorEpoch of the last transaction marker
    "q"  # currentTxnFirstOffset: first offset of the ongoing transaction, -1 if none
)
CRC_SCOPE_START = struct.calcsize(">hI")

# Kafka's schema field names, in layout order, for its "Error reading field '<name>'" messages.
_HEADER_FIELDS = ("version", "crc", "producer_entries")
_ENTRY_FIELDS = (
    "producer_id",
    "epoch",
    "last_sequence",
    "last_offset",
    "offset_delta",
    "timestamp",
    "coordinator_epoch",
    "current_txn_first_offset",
)
_UNDERFLOW = "java.nio.BufferUnderflowException"
_INT32_MAX = 0x7FFFFFFF
NO_SEQUENCE = -1
NO_OFFSET = -1


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka `DefaultRecordBatch.decrementSequence`: sequences wrap from Int.MAX back to 0."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int = NO_OFFSET

    @property
    def has_batch_metadata(self) -> bool:
        return self.last_offset >= 0

    @property
    def first_sequence(self) -> int:
        return decrement_sequence(self.last_sequence, self.offset_delta) if self.has_batch_metadata else NO_SEQUENCE

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta if self.has_batch_metadata else NO_OFFSET


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    offset: int  # from the file name: the snapshot holds producer state before this offset
    entries: tuple[ProducerStateEntry, ...]
    stored_crc: int | None  # None: the file is shorter than the header
    computed_crc: int
    version: int | None = PRODUCER_SNAPSHOT_VERSION  # None: the file is shorter than the header
    problems: tuple[CorruptSnapshotError, ...] = ()  # in the order Kafka checks: schema, version, CRC


def encode_producer_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    entries = tuple(entries)
    buffer = bytearray(SNAPSHOT_HEADER.size + PRODUCER_ENTRY.size * len(entries))
    for position, entry in zip(itertools.count(SNAPSHOT_HEADER.size, PRODUCER_ENTRY.size), entries):
        PRODUCER_ENTRY.pack_into(
            buffer,
            position,
            entry.producer_id,
            entry.producer_epoch,
            entry.last_sequence,
            entry.last_offset,
            entry.offset_delta,
            entry.timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
    SNAPSHOT_HEADER.pack_into(buffer, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(entries))
    crc = crc32c(memoryview(buffer)[CRC_SCOPE_START:])
    SNAPSHOT_HEADER.pack_into(buffer, 0, PRODUCER_SNAPSHOT_VERSION, crc, len(entries))
    return bytes(buffer)


def decode_producer_snapshot(data: bytes, *, offset: int, path: str | None = None) -> ProducerSnapshot:
    """Decode as much as the bytes allow; every check Kafka makes becomes an entry in `problems`."""
    problems: list[CorruptSnapshotError] = []

    def problem(reason: str, position: int) -> None:
        problems.append(CorruptSnapshotError(reason, path=path, position=position))

    def schema_problem(detail: str, position: int) -> None:
        problem(f"Snapshot failed schema validation: {detail}", position)

    version = stored_crc = None
    entries: list[ProducerStateEntry] = []
    if len(data) < SNAPSHOT_HEADER.size:
        name, start = _underflowing_field(SNAPSHOT_HEADER, _HEADER_FIELDS, len(data))
        schema_problem(f"Error reading field '{name}': {_UNDERFLOW}", start)
    else:
        version, stored_crc, count = SNAPSHOT_HEADER.unpack_from(data)
        available = len(data) - SNAPSHOT_HEADER.size
        array = "Error reading field 'producer_entries': "
        if count < 0:
            schema_problem(f"{array}Array size {count} cannot be negative", CRC_SCOPE_START)
        elif count > available:
            # Kafka's ArrayOf compares the element count with the remaining *bytes*.
            schema_problem(
                f"{array}Error reading array of size {count}, only {available} bytes available", CRC_SCOPE_START
            )
        else:
            complete = min(count, available // PRODUCER_ENTRY.size)
            entries = [
                ProducerStateEntry(*fields)  # dataclass fields follow PRODUCER_ENTRY's order
                for fields in PRODUCER_ENTRY.iter_unpack(
                    data[SNAPSHOT_HEADER.size : SNAPSHOT_HEADER.size + complete * PRODUCER_ENTRY.size]
                )
            ]
            if complete < count:
                partial = available - complete * PRODUCER_ENTRY.size
                name, start = _underflowing_field(PRODUCER_ENTRY, _ENTRY_FIELDS, partial)
                position = SNAPSHOT_HEADER.size + complete * PRODUCER_ENTRY.size + start
                schema_problem(f"{array}Error reading field '{name}': {_UNDERFLOW}", position)
    if version is not None and version != PRODUCER_SNAPSHOT_VERSION:
        problem(f"Snapshot contained an unknown file version {version}", 0)
    computed_crc = crc32c(data[CRC_SCOPE_START:])
    if stored_crc is not None and stored_crc != computed_crc:
        problem(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. Computed crc: {computed_crc}",
            struct.calcsize(">h"),
        )
    return ProducerSnapshot(offset, tuple(entries), stored_crc, computed_crc, version, tuple(problems))


def inspect_producer_snapshot(path: str | os.PathLike[str]) -> ProducerSnapshot:
    """Read a snapshot without stopping at corruption: problems are returned, not raised (verify)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read producer snapshot: {error.strerror or error}", path=str(path)) from error
    return decode_producer_snapshot(data, offset=offset_from_filename(path.name), path=str(path))


def read_producer_snapshot(path: str | os.PathLike[str]) -> ProducerSnapshot:
    """Read a snapshot as Kafka does, raising CorruptSnapshotError with Kafka's message on the first problem."""
    snapshot = inspect_producer_snapshot(path)
    if snapshot.problems:
        raise snapshot.problems[0]
    return snapshot


def write_producer_snapshot(path: str | os.PathLike[str], entries: Iterable[ProducerStateEntry], *,
                            sync: bool = True) -> None:
    """Write atomically (tmp file, fsync, rename); Kafka itself writes in place and fsyncs. ``sync=False``
    skips the fsync (the caller fsyncs the file later)."""
    write_atomically(path, encode_producer_snapshot(entries), sync=sync)


def _underflowing_field(layout: struct.Struct, names: tuple[str, ...], available: int) -> tuple[str, int]:
    """(name, start) of the first field of `layout` that does not fit in `available` bytes."""
    start = 0
    for name, code in zip(names, layout.format.lstrip(">")):
        end = start + struct.calcsize(">" + code)
        if end > available:
            return name, start
        start = end
    raise ValueError(f"{available} bytes hold the whole {layout.format} layout")
