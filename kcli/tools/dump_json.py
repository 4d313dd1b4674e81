"""NDJSON rendering of dump items. Deep dumps of plain records take a templated fast path: the same
objects ``DumpRecord.to_json`` describes, with no intermediate dicts (tests hold the two equal)."""

from __future__ import annotations

import base64
import json

from kcli.tools.dump import DumpRecords, Encodings
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


def _records_lines(item: DumpRecords, enc: Encodings) -> list[str]:
    # The hot loop of `dump-log --deep-iteration --json`: one f-string per record, values escaped by
    # orjson, no per-record function calls for the common AUTO encoding of valid UTF-8.
    batch = item.batch
    key_mode, value_mode = enc.key, enc.value
    auto_key, auto_value = key_mode is BytesEncoding.AUTO, value_mode is BytesEncoding.AUTO
    prefix = ('{"type":"record","file":' + encode_basestring(item.file)
              + ',"topic":' + ("null" if item.topic is None else encode_basestring(item.topic))
              + ',"partition":' + ("null" if item.partition is None else str(item.partition)) + ',"offset":')
    ts_type = ',"timestamp_type":"' + batch.timestamp_type.label + '"'
    suffix = ',"is_control":false,"batch_base_offset":' + str(batch.base_offset)
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


def json_lines(item, enc: Encodings) -> list[str]:
    """The NDJSON lines for one dump item (or the summary)."""
    if isinstance(item, DumpRecords):
        return _records_lines(item, enc)
    obj = item.to_json(enc)
    if isinstance(obj, list):
        return [_dumps(o) for o in obj]
    return [_dumps(obj)]
