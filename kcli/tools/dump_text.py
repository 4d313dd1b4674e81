"""kafka-dump-log's text output, line for line (kafka-formats.md 4.3-4.8), from dump items.

Each function returns the lines to print; ``stdout_lines`` for an item, ``summary_lines`` for the
closing sections that kafka-dump-log writes to stderr.
"""

from __future__ import annotations

from kcli.records import LegacyMessage
from kcli.records.accel import BatchRecords
from kcli.storage.files import FileKind
from kcli.tools.dump import (
    DumpBatch,
    DumpFile,
    DumpIndexEntry,
    DumpNotice,
    DumpOptions,
    DumpRecord,
    DumpRecords,
    DumpSnapshotEntry,
    DumpSummary,
    DumpTextEntry,
    DumpTimeIndexEntry,
    DumpTxnIndexEntry,
    Encodings,
    NoticeLevel,
    _codec_label,
)
from kcli.tools.render import BytesEncoding, encode_bytes


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    """Java's OptionalLong.toString(), which kafka-dump-log prints verbatim."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def file_lines(item: DumpFile) -> list[str]:
    lines = [f"Dumping {item.path}"]
    if item.kind is FileKind.LOG:
        lines.append(f"Log starting offset: {item.base_offset}")
    elif item.kind is FileKind.KRAFT_CHECKPOINT:
        if item.bootstrap:
            lines.append("KRaft bootstrap snapshot")
        else:
            lines.append(f"Snapshot end offset: {item.snapshot_offset}, epoch: {item.snapshot_epoch}")
    return lines


def batch_line(item: DumpBatch) -> str:
    b = item.batch
    codec = _codec_label(b)
    if isinstance(b, LegacyMessage):
        return (
            f"offset: {b.offset} position: {b.position} {b.timestamp_type.label}: {b.timestamp} size: {b.size} "
            f"magic: {b.magic} compresscodec: {codec} crc: {b.crc} isvalid: {_bool(b.is_valid)}"
        )
    a = b.attributes  # the flags read straight from the attributes: this runs once per batch of a dump
    base = b.base_offset
    return (
        f"baseOffset: {base} lastOffset: {base + b.last_offset_delta} count: {b.records_count} "
        f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
        f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
        f"isTransactional: {_BOOL[(a >> 4) & 1]} isControl: {_BOOL[(a >> 5) & 1]} "
        f"deleteHorizonMs: {f'OptionalLong[{b.base_timestamp}]' if a & 0x40 else 'OptionalLong.empty'} "
        f"position: {b.position} {'LogAppendTime' if a & 0x08 else 'CreateTime'}: {b.max_timestamp} size: {len(b.raw)} "
        f"magic: {b.magic} compresscodec: {codec} crc: {b.crc} isvalid: {_BOOL[b.is_valid]}"
    )


_BOOL = ("false", "true")


def record_line(item: DumpRecord, options: DumpOptions) -> str:
    r = item.record
    b = item.batch
    parts: list[str] = []
    if not options.skip_record_metadata:
        parts.append(
            f"| offset: {r.offset} {b.timestamp_type.label}: {r.timestamp} "
            f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)}"
        )
        if b.magic >= 2:
            parts.append(f" sequence: {r.sequence} headerKeys: [{','.join(h.key for h in r.headers)}]")
        else:
            parts.append(f" isValid: {_bool(r.valid)} crc: {r.crc}")
        if item.control_type is not None:
            parts.append(" " + (item.payload_text or ""))
    if item.control_type is None and options.print_data:
        data: list[str] = []
        if item.key_text is not None:
            data.append(f"key: {item.key_text}")
        if item.payload_text is not None:
            data.append(f"payload: {item.payload_text}")
        if data:
            if options.skip_record_metadata:
                parts.append("| " + " ".join(data))
            else:
                parts.append(" " + " ".join(data))
    return "".join(parts)


def _text_of(mode: BytesEncoding):
    if mode is BytesEncoding.AUTO:
        return lambda data: data.decode("utf-8", "replace")
    return lambda data: encode_bytes(data, mode)


def records_lines(item: DumpRecords, options: DumpOptions, enc: Encodings | None = None) -> list[str]:
    """Plain records of one batch; key and payload through kafka-dump-log's default StringDecoder
    (UTF-8, malformed bytes replaced), or as ``enc`` forces them (hex, base64). With the compiled formatter
    built, the whole batch comes as one string of newline-separated lines."""
    forced = enc is not None and options.print_data and (enc.key is not BytesEncoding.AUTO
                                                          or enc.value is not BytesEncoding.AUTO)
    b = item.batch
    ts_label = b.timestamp_type.label
    print_data = options.print_data
    if not forced and type(item.records) is BatchRecords:  # the whole batch in C
        text = item.records.format_text(ts_label.encode("ascii"), print_data, options.skip_record_metadata)
        if text is not None:
            return [text]
    key_text = _text_of(enc.key if forced else BytesEncoding.AUTO)
    value_text = _text_of(enc.value if forced else BytesEncoding.AUTO)
    lines = []
    for r in item.records:
        key, value = r.key, r.value
        data = ""
        if print_data:
            parts = []
            if key is not None:
                parts.append("key: " + key_text(key))
            if value is not None:
                parts.append("payload: " + value_text(value))
            data = " ".join(parts)
        if options.skip_record_metadata:
            lines.append("| " + data if data else "")
            continue
        meta = (f"| offset: {r.offset} {ts_label}: {r.timestamp} keySize: {-1 if key is None else len(key)} "
                f"valueSize: {-1 if value is None else len(value)}")
        if b.magic >= 2:
            meta += f" sequence: {r.sequence} headerKeys: [{','.join(h.key for h in r.headers)}]"
        else:
            meta += f" isValid: {_bool(r.valid)} crc: {r.crc}"
        lines.append(meta + " " + data if data else meta)
    return lines


def stdout_lines(item, options: DumpOptions, enc: Encodings | None = None) -> list[str]:
    """Lines kafka-dump-log prints on stdout for one item (empty for stderr-only notices); ``enc`` forces
    how printed keys and payloads of plain records appear."""
    if isinstance(item, DumpRecords):
        return records_lines(item, options, enc)
    if isinstance(item, DumpFile):
        return file_lines(item)
    if isinstance(item, DumpBatch):
        return [batch_line(item)]
    if isinstance(item, DumpRecord):
        return [record_line(item, options)]
    if isinstance(item, DumpIndexEntry):
        return [f"offset: {item.offset} position: {item.position}"]
    if isinstance(item, DumpTimeIndexEntry):
        return [f"timestamp: {item.timestamp} offset: {item.offset}"]
    if isinstance(item, DumpTxnIndexEntry):
        e = item.entry
        return [
            f"version: {e.version} producerId: {e.producer_id} firstOffset: {e.first_offset} "
            f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}"
        ]
    if isinstance(item, DumpSnapshotEntry):
        e = item.entry
        txn = None if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        line = (
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional_long(txn)} lastTimestamp: {e.timestamp}"
        )
        if e.last_offset >= 0:
            line += (
                f" firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}"
            )
        return [line]
    if isinstance(item, DumpTextEntry):
        return [item.text]
    if isinstance(item, DumpNotice) and item.level is NoticeLevel.INFO:
        return [item.text]
    return []


def stderr_lines(item) -> list[str]:
    if isinstance(item, DumpNotice) and item.level is not NoticeLevel.INFO:
        return [item.text]
    return []


def selection_line(summary: DumpSummary) -> str:
    """The closing line of a filtered dump (stderr): how many records the filters kept of those read."""
    return (f"Selected {summary.records} of {summary.records_scanned} records read "
            f"({summary.batches} batches printed)")


def summary_lines(summary: DumpSummary) -> list[str]:
    """kafka-dump-log's closing sections (stderr), in its order."""
    lines: list[str] = []
    for path, pairs in summary.index_mismatches.items():
        lines.append(f"Mismatches in :{path}")
        lines.extend(f"  Index offset: {a}, log offset: {b}" for a, b in pairs)
    for path, pairs in summary.timestamp_mismatches.items():
        lines.append(f"Found timestamp mismatch in :{path}")
        lines.extend(f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs)
    for path, pairs in summary.out_of_order_timestamps.items():
        lines.append(f"Found out of order timestamp in :{path}")
        lines.extend(f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs)
    for _path, pairs in summary.shallow_offset_not_found.items():
        lines.append("The following indexed offsets are not found in the log.")
        lines.extend(f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs)
    for path, pairs in summary.non_consecutive.items():
        lines.append(f"Non-consecutive offsets in {path}")
        lines.extend(f"  {a} is followed by {b}" for a, b in pairs)
    return lines
