"""NDJSON rendering of dump items. Deep dumps of plain records and v2 batch headers take templated fast
paths (whole batches of records in C when kcli.records._dumpfmt is built): the same objects
``DumpRecord.to_json`` and ``batch_json`` describe, with no intermediate dicts (tests hold them equal)."""

from __future__ import annotations

import base64
import json

from kcli.records.accel import BatchRecords
from kcli.records.batch import RecordBatch
from kcli.tools.dump import DumpBatch, DumpRecords, Encodings, _codec_label
from kcli.tools.render import BytesEncoding, encode_bytes

try:  # orjson escapes strings with SIMD: ~10x json's encoder on record values (bench/)
    from orjson import dumps as _orjson_dumps

    _str_dumps = _orjson_dumps

    def encode_basestring(text: str) -> str:
        return _orjson_dumps(text).decode("utf-8")

    def _dumps(obj) -> str:
        return _orjson_dumps(obj).decode("utf-8")

except ImportError:  # pragma: no cover - orjson is a dependency; this keeps kcli usable without it
    from json.encoder import encode_basestring

    def _str_dumps(text: str) -> bytes:
        return encode_basestring(text).encode("utf-8")

    _dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _bytes_json(data: bytes | None, mode: BytesEncoding) -> str:
    if data is None:
        return "null"
    if mode is BytesEncoding.AUTO:
        try:
            return encode_basestring(data.decode("utf-8"))
        except UnicodeDecodeError:
            return '{"base64":"' + base64.b64encode(data).decode("ascii") + '"}'
    return encode_basestring(encode_bytes(data, mode))


def _header_key(key: str) -> str:
    # keys were decoded with surrogateescape; JSON output must be valid UTF-8
    try:
        return encode_basestring(key.encode("utf-8").decode("utf-8"))
    except UnicodeEncodeError:
        return encode_basestring(key.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))


def _headers_json(headers, value_mode: BytesEncoding) -> str:
    parts = []
    for h in headers:
        parts.append('{"key":' + _header_key(h.key) + ',"value":' + _bytes_json(h.value, value_mode) + "}")
    return "[" + ",".join(parts) + "]"


_affix_cache: dict[tuple, tuple[str, bytes]] = {}


def _record_prefix(item: DumpRecords) -> tuple[str, bytes]:
    """Up to ``"offset":`` of every record line of a file (cached per file), as text and as UTF-8 for the
    compiled formatter (b"" when the file name does not encode: the Python path then)."""
    key = (item.file, item.topic, item.partition)
    found = _affix_cache.get(key)
    if found is None:
        prefix = ('{"type":"record","file":' + encode_basestring(item.file)
                  + ',"topic":' + ("null" if item.topic is None else encode_basestring(item.topic))
                  + ',"partition":' + ("null" if item.partition is None else str(item.partition)) + ',"offset":')
        try:
            raw = prefix.encode("utf-8")
        except UnicodeEncodeError:  # a file name with undecodable bytes: as the Python path has it
            raw = b""
        if len(_affix_cache) >= 256:
            _affix_cache.clear()
        found = _affix_cache[key] = (prefix, raw)
    return found


def _record_affixes(item: DumpRecords) -> tuple[str, str, str]:
    """What every record line of a batch shares: up to ``"offset":``, the timestamp type, and the batch's tail."""
    batch = item.batch
    ts_type = ',"timestamp_type":"' + batch.timestamp_type.label + '"'
    suffix = ',"is_control":false,"batch_base_offset":' + str(batch.base_offset)
    return _record_prefix(item)[0], ts_type, suffix


_TS_TYPE_JSON = (b',"timestamp_type":"CreateTime"', b',"timestamp_type":"LogAppendTime"')


def _bulk_json(item: DumpRecords, enc: Encodings) -> str | None:
    """The record lines of a whole batch from the compiled formatter, joined by newlines; None when it
    does not apply (not built, forced encodings, records already decoded) or hands the batch back."""
    records = item.records
    if type(records) is not BatchRecords or enc.key is not BytesEncoding.AUTO or enc.value is not BytesEncoding.AUTO:
        return None
    prefix = _record_prefix(item)[1]
    if not prefix:
        return None
    batch = item.batch
    return records.format_json(prefix, _TS_TYPE_JSON[(batch.attributes >> 3) & 1],
                               b',"is_control":false,"batch_base_offset":%d' % batch.base_offset)


_BOOL = ("false", "true")


def _batch_json_text(item: DumpBatch) -> str:
    """``batch_json`` of a v2 batch as orjson writes it, without the dict (tests hold the two equal)."""
    b = item.batch
    file = _record_prefix_file(item.file)
    a = b.attributes
    base = b.base_offset
    dh = "null" if not a & 0x40 else str(b.base_timestamp)
    return (f'{{"type":"batch","file":{file},"base_offset":{base},"last_offset":{base + b.last_offset_delta},'
            f'"count":{b.records_count},"position":{b.position},"size":{len(b.raw)},"magic":{b.magic},'
            f'"codec":"{_codec_label(b)}","crc":{b.crc},"is_valid":{_BOOL[b.is_valid]},'
            f'"is_transactional":{_BOOL[(a >> 4) & 1]},"is_control":{_BOOL[(a >> 5) & 1]},'
            f'"producer_id":{b.producer_id},"producer_epoch":{b.producer_epoch},"base_sequence":{b.base_sequence},'
            f'"last_sequence":{b.last_sequence},"partition_leader_epoch":{b.partition_leader_epoch},'
            f'"timestamp_type":"{"LogAppendTime" if a & 0x08 else "CreateTime"}","max_timestamp":{b.max_timestamp},'
            f'"delete_horizon_ms":{dh}}}')


_file_cache: dict[str, str] = {}


def _record_prefix_file(name: str) -> str:
    """A file name as a JSON string (cached: every batch line of a file repeats it)."""
    found = _file_cache.get(name)
    if found is None:
        if len(_file_cache) >= 256:
            _file_cache.clear()
        found = _file_cache[name] = encode_basestring(name)
    return found


def _records_lines(item: DumpRecords, enc: Encodings) -> list[str]:
    # The hot loop of `dump-log --deep-iteration --json` without the compiled formatter: one f-string per
    # record, values escaped by orjson, no per-record function calls for the common AUTO encoding of valid UTF-8.
    batch = item.batch
    key_mode, value_mode = enc.key, enc.value
    auto_key, auto_value = key_mode is BytesEncoding.AUTO, value_mode is BytesEncoding.AUTO
    prefix, ts_type, suffix = _record_affixes(item)
    legacy = batch.magic < 2
    dumps = _str_dumps
    lines = []
    append = lines.append
    for r in item.records:
        key, value = r.key, r.value
        if key is None:
            k, ks = "null", -1
        else:
            ks = len(key)
            if auto_key:
                try:
                    k = dumps(key.decode("utf-8")).decode("utf-8")
                except UnicodeDecodeError:
                    k = _bytes_json(key, key_mode)
            else:
                k = _bytes_json(key, key_mode)
        if value is None:
            v, vs = "null", -1
        else:
            vs = len(value)
            if auto_value:
                try:
                    v = dumps(value.decode("utf-8")).decode("utf-8")
                except UnicodeDecodeError:
                    v = _bytes_json(value, value_mode)
            else:
                v = _bytes_json(value, value_mode)
        headers = _headers_json(r.headers, value_mode) if r.headers else "[]"
        if legacy:
            tail = ',"crc":' + str(r.crc) + (',"is_valid":true}' if r.valid else ',"is_valid":false}')
        else:
            tail = ',"sequence":' + str(r.sequence) + "}"
        append(f'{prefix}{r.offset},"timestamp":{r.timestamp}{ts_type},"key_size":{ks},"value_size":{vs},'
               f'"key":{k},"value":{v},"headers":{headers}{suffix}{tail}')
    return lines


def json_text(item, enc: Encodings) -> str:
    """The NDJSON for one dump item, every line newline-terminated ("" for none): what `dump-log --json`
    writes. A batch of plain records comes from the compiled formatter in one piece when it is built."""
    cls = type(item)
    if cls is DumpRecords:
        text = _bulk_json(item, enc)
        if text is not None:
            return text + "\n"
    elif cls is DumpBatch and type(item.batch) is RecordBatch:
        return _batch_json_text(item) + "\n"
    lines = json_lines(item, enc)
    return "\n".join(lines) + "\n" if lines else ""


def json_lines(item, enc: Encodings) -> list[str]:
    """The NDJSON lines for one dump item (or the summary)."""
    if isinstance(item, DumpRecords):
        text = _bulk_json(item, enc)
        if text is not None:
            return text.split("\n")  # JSON strings escape newlines: one line per record
        return _records_lines(item, enc)
    obj = item.to_json(enc)
    if isinstance(obj, list):
        return [_dumps(o) for o in obj]
    return [_dumps(obj)]
