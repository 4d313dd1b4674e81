"""Compression codecs of Kafka record batches: gzip, snappy (xerial framing + raw), lz4 frame, zstd.

Byte-level details: shared/docs/kafka-formats.md section 1.7 (Kafka's ``common/compress/*.java``).

Each codec's library is imported when a payload of that codec is first met (lz4, python-snappy with cramjam
and zstandard cost ~10 ms together): most runs of kctl (a verify, an uncompressed partition) need none.
"""

from __future__ import annotations

import io
import struct
import sys
import threading
import zlib
from enum import IntEnum
from typing import Any

from kcli.errors import CorruptRecordError, UnsupportedCodecError


class Codec(IntEnum):
    """Compression codec id: bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        """Kafka's ``CompressionType.name``: lower-case, as kafka-dump-log prints it."""
        return self.name.lower()

    @classmethod
    def from_id(cls, codec_id: int) -> Codec:
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCodecError(f"Unknown compression type id: {codec_id}") from None

    @classmethod
    def from_label(cls, label: str) -> Codec:
        try:
            return cls[label.upper()]
        except KeyError:
            raise UnsupportedCodecError(f"unknown codec {label!r}; expected one of none, gzip, snappy, lz4, zstd") from None


# xerial snappy-java SnappyOutputStream framing: magic, version, min compatible version, then
# (int32 BE length, raw snappy block)*. Readers fall back to one raw block when the magic is absent.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version (1), min compatible version (1)
XERIAL_BLOCK_LEN = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024  # Java client >= 0.11 default

# Kafka's Lz4BlockOutputStream frame: FLG 0x60 (version 1, independent blocks), BD 0x40 (64 KiB blocks).
LZ4_MAGIC = b"\x04\x22\x4d\x18"
LZ4_FLG_CONTENT_SIZE = 0x08
LZ4_FLG_DICT_ID = 0x01

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32; only ever run on a few-byte LZ4 frame descriptor, so plain Python is enough."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[pos : pos + 4], "little")
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        lane = int.from_bytes(data[pos : pos + 4], "little")
        acc = (_rotl((acc + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


def _lz4_descriptor_end(frame: bytes) -> int:
    """Index of the HC byte: after magic(4) + FLG + BD + optional content size(8) + dict id(4)."""
    if len(frame) < 7 or frame[:4] != LZ4_MAGIC:
        raise CorruptRecordError("lz4 stream does not start with the LZ4 frame magic 04 22 4D 18")
    flg = frame[4]
    end = 6
    if flg & LZ4_FLG_CONTENT_SIZE:
        end += 8
    if flg & LZ4_FLG_DICT_ID:
        end += 4
    if len(frame) <= end:
        raise CorruptRecordError("lz4 frame descriptor truncated")
    return end


def _lz4_with_header_checksum(frame: bytes, *, broken: bool) -> bytes:
    """Rewrite the HC byte: the correct one, or KAFKA-3160's magic-0 one computed over magic+FLG+BD."""
    hc_pos = _lz4_descriptor_end(frame)
    covered = frame[0:hc_pos] if broken else frame[4:hc_pos]
    hc = (xxh32(covered) >> 8) & 0xFF
    if frame[hc_pos] == hc:
        return frame
    return frame[:hc_pos] + bytes((hc,)) + frame[hc_pos + 1 :]


_snappy_raw: Any = None  # decompress one raw snappy block to bytes (loaded on the first snappy payload)


def _snappy_block_decoder() -> Any:
    """cramjam's raw snappy decoder called directly (python-snappy >= 0.7 is a wrapper of it that adds a Python
    call and a type check per block), else python-snappy's ``decompress``."""
    global _snappy_raw
    if _snappy_raw is None:
        try:
            from cramjam.snappy import decompress_raw
        except ImportError:  # pragma: no cover - python-snappy >= 0.7 depends on cramjam
            import snappy

            _snappy_raw = snappy.decompress
        else:
            _snappy_raw = lambda block: bytes(decompress_raw(block))  # noqa: E731
    return _snappy_raw


def _snappy_decompress(data: bytes) -> bytes:
    block = _snappy_raw or _snappy_block_decoder()
    if len(data) < XERIAL_HEADER.size or not data.startswith(XERIAL_MAGIC):
        return block(data)  # librdkafka and others write one raw block
    pos = XERIAL_HEADER.size
    end = len(data)
    if end - pos > 4:
        (n,) = XERIAL_BLOCK_LEN.unpack_from(data, pos)
        if pos + 4 + n == end:  # one chunk (a batch under 32 KiB): decoded from a view, no slice copied
            with memoryview(data) as view:
                return block(view[pos + 4:])
    out = []
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("xerial snappy chunk length truncated", position=pos)
        (n,) = XERIAL_BLOCK_LEN.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError(f"xerial snappy chunk of {n} bytes runs past the payload end", position=pos - 4)
        out.append(block(data[pos : pos + n]))
        pos += n
    return b"".join(out)


def _snappy_compress(data: bytes, *, xerial: bool) -> bytes:
    import snappy

    if not xerial:
        return snappy.compress(data)
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for i in range(0, max(len(data), 1), XERIAL_BLOCK_SIZE):
        block = snappy.compress(data[i : i + XERIAL_BLOCK_SIZE])
        parts.append(XERIAL_BLOCK_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


_zlib: object = None  # the inflate/deflate module: isal's isal_zlib when installed, else zlib (chosen once)


def _gzip_module() -> object:
    """``isal.isal_zlib`` (python-isal, a declared dependency: Intel ISA-L's inflate is ~1.5-3x zlib's, its
    deflate ~5x zlib's level 6), or the standard library's zlib where it is missing: the same streams either way."""
    global _zlib
    if _zlib is None:
        try:
            from isal import isal_zlib as module
        except ImportError:
            module = zlib
        _zlib = module
    return _zlib


def _gunzip(data: bytes) -> bytes:
    """Every gzip member in turn, as Java's GZIPInputStream reads them; zero padding after the last is ignored.
    A decompression object directly: gzip.decompress re-parses headers in Python, which costs ~20 % on small
    batches."""
    decompressobj = (_zlib or _gzip_module()).decompressobj  # type: ignore[attr-defined]
    parts = []
    rest = data
    while True:
        inflater = decompressobj(31)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        rest = inflater.unused_data
        if not rest or not rest.strip(b"\0"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


# java.util.zip.Deflater.DEFAULT_COMPRESSION, what Kafka's GZIPOutputStream writes with (compression.gzip.level
# -1, KIP-390); the log cleaner recompresses at it. Python's gzip default is 9: slower, for a few bytes.
KAFKA_GZIP_LEVEL = 6
# ISA-L's level for KAFKA_GZIP_LEVEL (ISA-L has levels 0-3). Measured on 8-16 KiB payloads (bench/README.md):
# on the bench partition's values level 1 and 3 compress ~5 % smaller than zlib 6, on source text 11 % (level 1)
# and 7 % (level 3) larger; level 3 is the closest to zlib 6's ratio and still ~3.5x its speed.
ISAL_KAFKA_LEVEL = 3


def _gzip_kafka(data: bytes) -> bytes:
    """One gzip member at Kafka's default level: ISA-L level 3 when python-isal is installed, else zlib level 6.
    The header has mtime 0 and no name (ISA-L writes OS 255, zlib 3): what GZIPInputStream reads either way."""
    module = _zlib or _gzip_module()
    if module is zlib:
        return zlib.compress(data, KAFKA_GZIP_LEVEL, 31)
    return module.compress(data, ISAL_KAFKA_LEVEL, 31)  # type: ignore[attr-defined]


_zstd = threading.local()


def _unzstd(data: bytes) -> bytes:
    # zstd-jni streams carry no content size: one-shot decompress() would refuse them. A decompressor is
    # reused per thread (creating one per batch cost ~30 % of small-batch decoding).
    import zstandard  # imported once, on the first zstd payload; a dict lookup after that

    decompressor = getattr(_zstd, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd.decompressor = zstandard.ZstdDecompressor()
    # One frame and nothing after it (what producers write): a decompression object, a quarter cheaper than a
    # stream reader on a small batch. Anything else (several frames, a truncated one): the stream reader.
    inflater = decompressor.decompressobj()
    try:
        out = inflater.decompress(data)
    except zstandard.ZstdError:
        out = None
    if out is not None and inflater.eof and not inflater.unused_data:
        return out
    return decompressor.stream_reader(io.BytesIO(data), read_across_frames=True).read()


_DECODE_ERRORS = (OSError, EOFError, zlib.error, RuntimeError, ValueError)


def _decode_errors() -> tuple[type[BaseException], ...]:
    """What a codec raises on a bad payload: zstandard's and snappy's own errors once they are imported (an
    exception of a library never imported cannot have been raised)."""
    errors = _DECODE_ERRORS
    if _zlib is not None and _zlib is not zlib:
        errors += (_zlib.error,)  # type: ignore[attr-defined]
    if "zstandard" in sys.modules:
        errors += (sys.modules["zstandard"].ZstdError,)
    if "snappy" in sys.modules:
        errors += (sys.modules["snappy"].UncompressError,)
    if "cramjam" in sys.modules:
        errors += (sys.modules["cramjam"].DecompressionError,)
    return errors


def decompress(codec: Codec | int, data: bytes, *, magic: int = 2) -> bytes:
    """Decompress a batch payload (v2 records area, or a legacy wrapper's value)."""
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return _gunzip(data)
        if codec == Codec.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Codec.LZ4:
            frame = bytes(data)
            if magic == 0:
                # KAFKA-3160: magic-0 producers wrote a wrong header checksum; Kafka skips the check.
                frame = _lz4_with_header_checksum(frame, broken=False)
            import lz4.frame

            return lz4.frame.decompress(frame)
        if codec == Codec.ZSTD:
            if magic < 2:
                raise UnsupportedCodecError("zstd is not allowed in magic 0/1 messages")
            return _unzstd(data)
    except (CorruptRecordError, UnsupportedCodecError):
        raise
    except Exception as exc:
        if not isinstance(exc, _decode_errors()):
            raise
        raise CorruptRecordError(f"{Codec.from_id(int(codec)).label} payload does not decompress: {exc}") from None
    raise UnsupportedCodecError(f"Unknown compression type id: {int(codec)}")


def decompress_v2(codec_id: int, data: bytes) -> bytes:
    """``decompress(codec_id, data)`` of a v2 records area with a compressing codec (1-4), dispatched without
    the enum (the cleaner's per-batch path); the same bytes and the same errors."""
    try:
        if codec_id == 1:
            return _gunzip(data)
        if codec_id == 4:
            return _unzstd(data)
        if codec_id == 3:
            import lz4.frame

            return lz4.frame.decompress(data)
        if codec_id == 2:
            return _snappy_decompress(data)
    except _decode_errors():  # evaluated only when one is raised: the codecs already imported
        pass
    return decompress(codec_id, data, magic=2)  # what it raises (or an unknown codec id)


def compress(codec: Codec | int, data: bytes, *, magic: int = 2, snappy_xerial: bool = True,
             gzip_level: int = 9) -> bytes:
    """Compress a payload the way Kafka's Java producer does (xerial snappy, 64 KiB lz4 blocks, streamed zstd)."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        if gzip_level == KAFKA_GZIP_LEVEL:  # a rewrite at Kafka's level (the cleaner, retain_records): ISA-L
            return _gzip_kafka(data)
        import gzip

        return gzip.compress(data, compresslevel=gzip_level, mtime=0)
    if codec == Codec.SNAPPY:
        return _snappy_compress(data, xerial=snappy_xerial)
    if codec == Codec.LZ4:
        import lz4.frame

        frame = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return _lz4_with_header_checksum(frame, broken=True) if magic == 0 else frame
    if codec == Codec.ZSTD:
        if magic < 2:
            raise UnsupportedCodecError("zstd is not allowed in magic 0/1 messages")
        import zstandard

        return zstandard.ZstdCompressor(write_content_size=False).compress(data)
    raise UnsupportedCodecError(f"Unknown compression type id: {int(codec)}")
