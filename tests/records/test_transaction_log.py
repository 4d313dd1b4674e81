"""__transaction_state codecs: hand-built v0/v1 bytes, tagged fields, round trips, damage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import CorruptRecordError
from kcli.records import transaction_log as tl

# producerId 1000, epoch 2, timeout 60000, Ongoing, partitions [t: 0, 1], lastUpdate, start
V0 = bytes.fromhex(
    "0000 00000000000003e8 0002 0000ea60 01 "
    "00000001 0001 74 00000002 00000000 00000001"
    "0000018bcfe56800 0000018bcfe56418"
)
# Same as v1 (flexible): compact lengths, per-struct tag sections, and tagged fields
# previousProducerId (tag 0) = 999 and clientTransactionVersion (tag 2) = 2.
V1 = bytes.fromhex(
    "0001 00000000000003e8 0002 0000ea60 01 "
    "02 0274 03 00000000 00000001 00"
    "0000018bcfe56800 0000018bcfe56418 "
    "02 00 08 00000000000003e7 02 02 0002"
)


def expected_value(version: int) -> tl.TransactionLogValue:
    return tl.TransactionLogValue(
        version=version,
        producer_id=1000,
        producer_epoch=2,
        transaction_timeout_ms=60000,
        transaction_status=tl.TransactionState.ONGOING,
        transaction_partitions=(tl.TxnPartitions(topic="t", partition_ids=(0, 1)),),
        transaction_last_update_timestamp_ms=1700000000000,
        transaction_start_timestamp_ms=1699999999000,
        previous_producer_id=999 if version else -1,
        client_transaction_version=2 if version else 0,
    )


def test_key_bytes() -> None:
    assert tl.encode_key("my-txn") == b"\x00\x00\x00\x06my-txn"
    assert tl.decode_key(b"\x00\x00\x00\x06my-txn") == tl.TransactionLogKey(transactional_id="my-txn")


@pytest.mark.parametrize(("version", "raw"), [(0, V0), (1, V1)])
def test_value_bytes(version: int, raw: bytes) -> None:
    value = expected_value(version)
    assert tl.decode_value(raw) == value
    assert tl.encode_value(value) == raw
    assert value.state is tl.TransactionState.ONGOING


def test_encode_transaction_and_tombstone() -> None:
    key, value = tl.encode_transaction("my-txn", expected_value(1))
    assert (key, value) == (b"\x00\x00\x00\x06my-txn", V1)
    assert tl.encode_transaction_tombstone("my-txn") == (key, None)
    assert tl.decode_record(key, None) == (tl.TransactionLogKey(transactional_id="my-txn"), None)


def test_empty_transaction_has_null_partitions() -> None:
    value = tl.TransactionLogValue(
        producer_id=5,
        producer_epoch=0,
        transaction_timeout_ms=1,
        transaction_status=tl.TransactionState.EMPTY,
        transaction_partitions=None,
        transaction_last_update_timestamp_ms=2,
        transaction_start_timestamp_ms=-1,
    )
    raw = tl.encode_value(value)
    assert raw is not None and raw[17:21] == b"\xff\xff\xff\xff"  # int32 -1 = null array at v0
    assert tl.decode_value(raw) == value


def test_v1_defaults_are_not_written_as_tags() -> None:
    value = expected_value(1)
    plain = tl.TransactionLogValue(
        **{
            **{f: getattr(value, f) for f in value.__dataclass_fields__},
            "previous_producer_id": -1,
            "client_transaction_version": 0,
        }
    )
    raw = tl.encode_value(plain)
    assert raw is not None and raw.endswith(b"\x00")  # empty tagged-field section
    assert tl.decode_value(raw) == plain


def test_v0_cannot_carry_tagged_fields() -> None:
    value = expected_value(0)
    with pytest.raises(ValueError, match="non-default previousProducerId at version 0"):
        tl.encode_value(
            tl.TransactionLogValue(
                **{**{f: getattr(value, f) for f in value.__dataclass_fields__}, "previous_producer_id": 7}
            )
        )


def test_unknown_state_id() -> None:
    value = tl.TransactionLogValue(
        producer_id=1,
        producer_epoch=0,
        transaction_timeout_ms=1,
        transaction_status=42,
        transaction_partitions=(),
        transaction_last_update_timestamp_ms=0,
        transaction_start_timestamp_ms=0,
    )
    assert value.state is None


def test_damage() -> None:
    with pytest.raises(tl.UnknownRecordTypeError) as unknown:
        tl.decode_key(b"\x00\x01\x00\x00")
    assert unknown.value.record_type == 1
    with pytest.raises(CorruptRecordError, match="Could not read version from key's buffer"):
        tl.decode_key(b"")
    with pytest.raises(CorruptRecordError, match=r"missing|no key"):
        tl.decode_record(None, V0)
    for raw in (V0, V1):
        for cut in range(2, len(raw)):
            with pytest.raises(CorruptRecordError) as exc:
                tl.decode_value(raw[:cut])
            assert exc.value.position is not None and exc.value.position <= cut
    with pytest.raises(CorruptRecordError, match=r"Tag 2 is not valid|truncated"):
        # a tagged field whose declared size is larger than the value
        tl.decode_value(V1[:-4] + b"\x02\x09\x00\x02")


names = st.text(max_size=16)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def values(draw: st.DrawFn) -> tl.TransactionLogValue:
    version = draw(st.integers(0, 1))
    flexible = version >= 1
    parts = draw(
        st.none()
        | st.lists(
            st.builds(tl.TxnPartitions, topic=names, partition_ids=st.lists(int32, max_size=4).map(tuple)), max_size=3
        )
    )
    return tl.TransactionLogValue(
        version=version,
        producer_id=draw(int64),
        producer_epoch=draw(int16),
        transaction_timeout_ms=draw(int32),
        transaction_status=draw(st.integers(-128, 127)),
        transaction_partitions=None if parts is None else tuple(parts),
        transaction_last_update_timestamp_ms=draw(int64),
        transaction_start_timestamp_ms=draw(int64),
        previous_producer_id=draw(int64) if flexible else -1,
        next_producer_id=draw(int64) if flexible else -1,
        client_transaction_version=draw(int16) if flexible else 0,
    )


@given(transactional_id=names, value=st.none() | values())
def test_round_trip(transactional_id: str, value: tl.TransactionLogValue | None) -> None:
    key = tl.encode_key(transactional_id)
    assert tl.decode_record(key, tl.encode_value(value)) == (
        tl.TransactionLogKey(transactional_id=transactional_id),
        value,
    )
