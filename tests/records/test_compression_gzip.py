"""gzip through ISA-L (python-isal) and through the standard library's zlib: the same reader semantics (every
member in turn, zero padding after the last ignored, truncation and garbage refused), and recompression at
Kafka's level that zlib (what GZIPInputStream is built on) reads back."""

from __future__ import annotations

import gzip
import zlib

import pytest

from kcli.errors import CorruptRecordError
from kcli.records import compression
from kcli.records.compression import KAFKA_GZIP_LEVEL, Codec, compress, decompress, decompress_v2

DATA = b"".join(b"key-%06d value %d " % (i, i * 7919 % 1000) for i in range(2000))


@pytest.fixture(params=["isal", "zlib"])
def module(request, monkeypatch):
    """The inflate/deflate module the codec uses: ISA-L's isal_zlib, or zlib (python-isal missing)."""
    if request.param == "zlib":
        monkeypatch.setattr(compression, "_zlib", zlib)
    else:
        isal_zlib = pytest.importorskip("isal.isal_zlib")
        monkeypatch.setattr(compression, "_zlib", isal_zlib)
    return request.param


def test_members_and_padding(module):
    one, two = gzip.compress(DATA[:5000], mtime=0), zlib.compress(DATA[5000:], 1, 31)
    assert decompress(Codec.GZIP, one) == DATA[:5000]
    assert decompress_v2(1, one + two) == DATA
    assert decompress_v2(1, one + two + b"\0" * 7) == DATA
    assert decompress(Codec.GZIP, one + one, magic=1) == DATA[:5000] * 2


@pytest.mark.parametrize("bad", [lambda p: p[:-5], lambda p: p + b"junk!", lambda p: b"\x1f\x8b" + p[2:9] + b"\xff" * 20])
def test_bad_payloads_refused(module, bad):
    payload = bad(gzip.compress(DATA, mtime=0))
    with pytest.raises(CorruptRecordError, match="gzip payload does not decompress"):
        decompress_v2(1, payload)


def test_recompression_at_kafka_level(module):
    out = compress(Codec.GZIP, DATA, gzip_level=KAFKA_GZIP_LEVEL)
    assert out[:4] == b"\x1f\x8b\x08\x00"  # one member: no name, extra field or comment
    assert zlib.decompress(out, 31) == DATA == gzip.decompress(out)
    # Comparable to zlib level 6 (Java's Deflater.DEFAULT_COMPRESSION): 18 % larger on these repetitive records.
    assert len(out) <= 1.25 * len(zlib.compress(DATA, 6, 31))
    # Other levels (a producer's level 9) stay the standard library's gzip, byte for byte.
    assert compress(Codec.GZIP, DATA) == gzip.compress(DATA, compresslevel=9, mtime=0)
