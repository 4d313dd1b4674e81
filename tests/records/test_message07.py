"""Kafka 0.7 messages, byte for byte as the seed lays them out: magic 0 ``[size][0][crc][payload]``, magic 1
``[size][1][attributes][crc][payload]``, the CRC-32 over the payload only, compressed wrappers of whole sets."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest
from hypothesis import given, strategies as st

from kcli.records import layout
from kcli.records.compression import Codec
from kcli.records.message07 import (
    StopKind,
    build_message_set,
    deep_payloads,
    encode_message,
    read_message,
    scan_message_set,
)


def test_magic_0_message_bytes():
    raw = encode_message(b"hello", magic=0)
    assert raw == struct.pack(">ibI", 1 + 4 + 5, 0, zlib.crc32(b"hello")) + b"hello"


def test_magic_1_message_bytes():
    raw = encode_message(b"hello", magic=1, codec=Codec.GZIP)
    assert raw == struct.pack(">ibbI", 1 + 1 + 4 + 5, 1, 1, zlib.crc32(b"hello")) + b"hello"
    message = read_message(raw)
    assert (message.magic, message.attributes, message.codec, message.payload) == (1, 1, Codec.GZIP, b"hello")


def test_layout_constants_are_0_7s():
    assert layout.KAFKA07_MIN_HEADER_SIZE == 5  # Message.MinHeaderSize: magic + crc
    assert layout.KAFKA07_MESSAGE_HEADER[1].size == 6  # headerSize(1): magic + attributes + crc
    assert layout.KAFKA07_ENTRY_OVERHEAD == 4
    assert layout.KAFKA07_CODEC_MASK == 0x03


def test_offsets_are_byte_positions():
    payloads = [b"a", b"bb", b"ccc"]
    scan = scan_message_set(build_message_set(payloads, magic=1))
    positions = [m.position for m in scan.messages]
    assert positions == [0, 4 + 6 + 1, 4 + 6 + 1 + 4 + 6 + 2]
    assert all(m.next_position == m.position + 4 + m.size for m in scan.messages)
    assert scan.valid_bytes == sum(4 + 6 + len(p) for p in payloads) and scan.stop is None


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY])
def test_a_compressed_wrapper_holds_a_whole_message_set(codec):
    raw = build_message_set([b"x", b"y", b"z"], codec=codec)
    (wrapper,) = scan_message_set(raw).messages
    assert wrapper.codec == codec and wrapper.is_valid
    assert [m.payload for m in wrapper.inner()] == [b"x", b"y", b"z"]
    assert [p for _w, p in deep_payloads([wrapper])] == [b"x", b"y", b"z"]
    if codec is Codec.GZIP:  # the inner set is 0.7 messages, each with its size
        assert gzip.decompress(wrapper.payload) == build_message_set([b"x", b"y", b"z"])


def test_raw_snappy_wrappers_decompress_too():
    """franz-kafka (node snappy) writes one raw snappy block, not snappy-java's stream framing."""
    import snappy

    inner = build_message_set([b"n1", b"n2"])
    raw = encode_message(snappy.compress(inner), magic=1, codec=Codec.SNAPPY)
    assert [m.payload for m in read_message(raw).inner()] == [b"n1", b"n2"]


@pytest.mark.parametrize("mutate, kind", [
    (lambda raw: raw[:-1], StopKind.PARTIAL),
    (lambda raw: struct.pack(">i", 3) + raw[4:], StopKind.BAD_SIZE),
    (lambda raw: raw[:4] + b"\x07" + raw[5:], StopKind.BAD_MAGIC),
    (lambda raw: raw[:5] + b"\x03" + raw[6:], StopKind.BAD_CODEC),
    (lambda raw: raw[:-1] + b"!", StopKind.BAD_CRC),
])
def test_the_reader_stops_and_says_why(mutate, kind):
    good = encode_message(b"first")
    scan = scan_message_set(good + mutate(encode_message(b"second")))
    assert [m.payload for m in scan.messages] == [b"first"]
    assert scan.valid_bytes == len(good)
    assert scan.stop is not None and scan.stop.kind is kind and scan.stop.position == len(good)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        encode_message(b"x", magic=2)
    with pytest.raises(ValueError):
        encode_message(b"x", magic=0, codec=Codec.GZIP)
    with pytest.raises(ValueError):
        encode_message(b"x", codec=Codec.LZ4)



@given(st.lists(st.binary(max_size=64), min_size=1, max_size=20), st.sampled_from([0, 1]),
       st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY]), st.integers(min_value=0, max_value=400))
def test_any_set_reads_back_and_any_cut_stops_at_a_message_boundary(payloads, magic, codec, cut):
    raw = build_message_set(payloads, magic=magic if codec is Codec.NONE else 1, codec=codec)
    scan = scan_message_set(raw)
    assert scan.stop is None and scan.valid_bytes == len(raw)
    assert [p for m in scan.messages for p in (i.payload for i in m.inner())] == payloads
    torn = scan_message_set(raw[: min(cut, len(raw))])
    boundaries = {0, *(m.next_position for m in scan.messages)}
    assert torn.valid_bytes in boundaries and torn.valid_bytes <= min(cut, len(raw))
    assert torn.stop is None or torn.stop.kind is StopKind.PARTIAL
