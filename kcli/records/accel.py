"""Optional compiled record decoding: aiokafka's Cython DefaultRecordBatch walks the records of a batch
whose payload kcli has already decompressed (so Kafka's codec quirks stay ours).

Pure-Python decoding remains the reference: it runs when aiokafka is absent, when
``KCLI_NO_EXTENSIONS=1`` is set, and whenever the compiled reader rejects a batch (so errors always
carry kcli's messages and positions). The compiled reader does not check that a batch ends exactly
after its last record, so strict checks (``verify --deep``) use the pure decoder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kcli.records.layout import ATTRIBUTES_LOW_BYTE, RECORD_BATCH_OVERHEAD
from kcli.records.types import NO_SEQUENCE, Header, Record, increment_sequence

_CODEC_BYTE = ATTRIBUTES_LOW_BYTE  # the codec bits are in the attributes field's low byte
_TIMESTAMP_TYPE_BIT = 0x08  # attributes: LogAppendTime
_CompiledBatch = None
_loaded = False


def available() -> bool:
    """Import on first use: aiokafka's package import costs ~0.1 s, which commands that never decode
    records should not pay."""
    global _CompiledBatch, _loaded
    if not _loaded:
        _loaded = True
        if not os.environ.get("KCLI_NO_EXTENSIONS"):
            try:
                from aiokafka.record._crecords import DefaultRecordBatch as compiled
            except ImportError:  # pragma: no cover - depends on the environment
                compiled = None
            _CompiledBatch = compiled
    return _CompiledBatch is not None


def _uncompressed(header: bytes) -> bytes:
    """The header with the codec bits cleared: the payload handed over is already decompressed."""
    if not header[_CODEC_BYTE] & 0x07:
        return header
    patched = bytearray(header)
    patched[_CODEC_BYTE] &= 0xF8
    return bytes(patched)


def decode_records(header: bytes, payload: bytes, base_offset: int, base_sequence: int) -> list[Record] | None:
    """Records of a v2 batch from its 61-byte header and decompressed payload; None if unavailable or rejected."""
    if not available():
        return None
    try:
        batch = _CompiledBatch(_uncompressed(header) + payload)
        out = []
        append = out.append
        if base_sequence < 0:
            for r in batch:
                hs = r.headers
                append(Record(r.offset, r.timestamp, r.key, r.value,
                              tuple([Header(k, v) for k, v in hs]) if hs else (), NO_SEQUENCE))
        else:
            for r in batch:
                hs = r.headers
                append(Record(r.offset, r.timestamp, r.key, r.value,
                              tuple([Header(k, v) for k, v in hs]) if hs else (),
                              increment_sequence(base_sequence, r.offset - base_offset)))
        return out
    except Exception:  # noqa: BLE001 - any rejection falls back to the pure decoder, which reports it
        return None


def decode_keys(header: bytes, payload: bytes) -> list[tuple[int, bytes | None, bool]] | None:
    """(offset, key, is_tombstone) of every record: what the log cleaner needs, without building Records."""
    if not available():
        return None
    try:
        return [(r.offset, r.key, r.value is None) for r in _CompiledBatch(_uncompressed(header) + payload)]
    except Exception:  # noqa: BLE001 - the caller falls back to the pure decoder, which reports it
        return None


# -- bulk formatting of deep dumps (kcli/records/_dumpfmt.c) ---------------------------------------------
_dumpfmt = None
_dumpfmt_loaded = False


def dump_formatter():
    """The compiled deep-dump formatter (kcli.records._dumpfmt), or None: not built, or KCLI_NO_EXTENSIONS set."""
    global _dumpfmt, _dumpfmt_loaded
    if not _dumpfmt_loaded:
        _dumpfmt_loaded = True
        if not os.environ.get("KCLI_NO_EXTENSIONS"):
            try:
                from kcli.records import _dumpfmt as module
            except ImportError:  # pragma: no cover - the extension is optional (setup.py)
                module = None
            _dumpfmt = module
    return _dumpfmt


class BatchRecords(Sequence):
    """The records of one v2 batch, kept as its decompressed payload: the compiled formatter renders them
    in bulk without a Record object per record; iterating or indexing decodes them (once) the ordinary way.

    ``first_offset``, ``last_offset``, ``consecutive``: what the payload walk found (offset bookkeeping
    needs no Records either)."""

    __slots__ = ("batch", "payload", "first_offset", "last_offset", "consecutive", "_count", "_records")

    def __init__(self, batch, payload: bytes, count: int, first_delta: int, last_delta: int, consecutive: bool):
        self.batch = batch
        self.payload = payload
        self._count = count
        self.first_offset = batch.base_offset + first_delta
        self.last_offset = batch.base_offset + last_delta
        self.consecutive = consecutive
        self._records: list[Record] | None = None

    @classmethod
    def of(cls, batch) -> BatchRecords | None:
        """For a valid-looking v2 data batch when the formatter is built; None otherwise (use batch.records())."""
        fmt = dump_formatter()
        if fmt is None:
            return None
        count = batch.records_count
        if count <= 0:
            return None
        payload = batch.payload()
        found = fmt.scan(payload, count)
        if found is None:
            return None
        return cls(batch, payload, count, *found)

    def records(self) -> list[Record]:
        """The Records, decoded from the payload already decompressed (as ``batch.records()`` decodes them)."""
        if self._records is None:
            b = self.batch
            fast = decode_records(b.raw[:RECORD_BATCH_OVERHEAD], self.payload, b.base_offset, b.base_sequence)
            self._records = fast if fast is not None and len(fast) == self._count else b.records()
        return self._records

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self.records()[index]

    def __iter__(self):
        return iter(self.records())

    def _args(self) -> tuple:
        b = self.batch
        return (self.payload, self._count, b.base_offset, b.base_timestamp, b.max_timestamp,
                bool(b.attributes & _TIMESTAMP_TYPE_BIT), b.base_sequence)

    def format_json(self, prefix: bytes, timestamp_type: bytes, suffix: bytes) -> str | None:
        """kcli.tools.dump_json's record lines (AUTO encodings) joined by newlines, or None (use the Python path)."""
        return _dumpfmt.format_json(*self._args(), prefix, timestamp_type, suffix)

    def format_text(self, timestamp_label: bytes, print_data: bool, skip_record_metadata: bool) -> str | None:
        """kcli.tools.dump_text's record lines joined by newlines, or None (use the Python path)."""
        return _dumpfmt.format_text(*self._args(), timestamp_label, print_data, skip_record_metadata)
