"""Checksums: CRC-32C (Castagnoli) for v2 batches and producer snapshots, CRC-32 (IEEE) for legacy messages."""

from __future__ import annotations

import zlib

from crc32c import crc32c as _crc32c


# CRC-32C as Kafka's ``Crc32C`` (hardware-accelerated by the ``crc32c`` package): the C function itself, not a
# Python wrapper around it (a call per batch in verify's and recovery's hot loops).
crc32c = _crc32c


def crc32(data: bytes | memoryview) -> int:
    """CRC-32 as ``java.util.zip.CRC32``, used by magic 0 and 1 messages."""
    return zlib.crc32(data)
