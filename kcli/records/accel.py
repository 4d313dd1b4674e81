"""Optional compiled record decoding: aiokafka's Cython DefaultRecordBatch walks the records of a batch
whose payload kcli has already decompressed (so Kafka's codec quirks stay ours).

Pure-Python decoding remains the reference: it runs when aiokafka is absent, when
``KCLI_NO_EXTENSIONS=1`` is set, and whenever the compiled reader rejects a batch (so errors always
carry kcli's messages and positions). The compiled reader does not check that a batch ends exactly
after its last record, so strict checks (``verify --deep``) use the pure decoder.
"""

from __future__ import annotations

import os

from kcli.records.layout import ATTRIBUTES_LOW_BYTE
from kcli.records.types import NO_SEQUENCE, Header, Record, increment_sequence

_CODEC_BYTE = ATTRIBUTES_LOW_BYTE  # the codec bits are in the attributes field's low byte
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
