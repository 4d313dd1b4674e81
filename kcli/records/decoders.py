"""kafka-dump-log's record decoders, as pure functions of a record's key, value and offset.

A *decoder* maps ``(key, value, offset)`` to ``(key_text, payload_text)``; the dump prints
`` key: <key_text>`` when it is not None and `` payload: <payload_text>`` when it is not None.  The
texts are those of the newest Kafka (3.8+ JSON coordinator decoders, KAFKA-16470; the Java port of
DumpLogSegments, KAFKA-14579): JSON is compact and printed as Jackson prints it.  Decoding problems
become Kafka's ``Unknown record type ...`` / ``Error at ...`` texts, except a missing coordinator key,
which (as in Kafka) aborts: CorruptRecordError.

The ``decode_*`` functions give the same decodes as JSON-able dicts for ``kctl --json``; they raise
CorruptRecordError (UnknownRecordTypeError for unknown types) instead of returning error texts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kcli.errors import CorruptRecordError
from kcli.records import cluster_metadata, consumer_offsets, remote_log_metadata, transaction_log
from kcli.records.control import ControlRecordType, parse_end_txn_marker
from kcli.records.schema import CoordinatorRecord, CoordinatorSerde, MessageSchema, UnknownRecordTypeError, json_text

__all__ = [
    "DECODERS",
    "DELETE_MARKER",
    "Decoder",
    "cluster_metadata_decoder",
    "decode_cluster_metadata_record",
    "decode_control_value",
    "decode_offsets_record",
    "decode_remote_log_metadata_record",
    "decode_transaction_log_record",
    "offsets_decoder",
    "remote_log_metadata_decoder",
    "render_control_record",
    "string_decoder",
    "transaction_log_decoder",
]

Decoder = Callable[[bytes | None, bytes | None, int], tuple[str | None, str | None]]

DELETE_MARKER = "<DELETE>"  # printed for a coordinator tombstone (null value)

_TRANSACTION_LOG_TYPE_NAMES = {0: "TRANSACTION_LOG"}

# Text kafka-dump-log prints before the JSON of each KRaft control record (KAFKA-19069 for LeaderChange).
_CONTROL_PREFIXES = {
    ControlRecordType.LEADER_CHANGE: "LeaderChange: ",
    ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeader ",
    ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooter ",
    ControlRecordType.KRAFT_VERSION: "KRaftVersion ",
    ControlRecordType.KRAFT_VOTERS: "KRaftVoters ",
}


def _missing_key(offset: int | None) -> CorruptRecordError:
    where = "" if offset is None else f" at offset {offset}"
    return CorruptRecordError(
        f"Failed to decode message{where} using the specified decoder (message had a missing key)"
    )


# ---------------------------------------------------------------------------------------------
# JSON trees


def _embedded_json(schema: MessageSchema, raw: bytes) -> dict[str, Any] | None:
    """An int16-version-prefixed consumer protocol struct as JSON, or None when it does not parse
    (Kafka then keeps the base64 bytes)."""
    if len(raw) < 2:
        return None
    version = int.from_bytes(raw[:2], "big", signed=True)
    try:
        values, _ = schema.decode(raw[2:], version)
    except CorruptRecordError:
        return None
    return schema.to_json(values, version)


def _group_metadata_json(data: dict[str, Any], version: int) -> dict[str, Any]:
    """GroupMetadataValue JSON with each member's subscription/assignment expanded when the group
    uses the consumer protocol, as DumpLogSegments.prepareGroupMetadataValue does."""
    tree = consumer_offsets.GROUP_METADATA_VALUE_SCHEMA.to_json(data, version)
    if tree.get("protocolType") != consumer_offsets.CONSUMER_PROTOCOL_TYPE:
        return tree
    for member_json, member in zip(tree.get("members") or [], data["members"], strict=True):
        for name, schema in (
            ("subscription", consumer_offsets.SUBSCRIPTION_SCHEMA),
            ("assignment", consumer_offsets.ASSIGNMENT_SCHEMA),
        ):
            if name in member_json:
                expanded = _embedded_json(schema, member[name])
                if expanded is not None:
                    member_json[name] = expanded
    return tree


def _value_json(serde: CoordinatorSerde, rec: CoordinatorRecord) -> dict[str, Any] | None:
    if rec.value is None or rec.value_version is None:
        return None
    if serde is consumer_offsets.SERDE and rec.record_type == 2:
        return _group_metadata_json(rec.value, rec.value_version)
    return serde.values[rec.record_type].to_json(rec.value, rec.value_version)


def _key_json(serde: CoordinatorSerde, rec: CoordinatorRecord) -> dict[str, Any]:
    return serde.keys[rec.record_type].to_json(rec.key, rec.record_type)


# ---------------------------------------------------------------------------------------------
# Text decoders


def string_decoder(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """The default ``StringDecoder``: UTF-8 with malformed bytes replaced by U+FFFD."""
    return (
        None if key is None else key.decode("utf-8", "replace"),
        None if value is None else value.decode("utf-8", "replace"),
    )


def _coordinator_decoder(
    serde: CoordinatorSerde, key: bytes | None, value: bytes | None, offset: int
) -> tuple[str | None, str | None]:
    if key is None:
        raise _missing_key(offset)
    try:
        rec = serde.decode(key, value)
        key_text = json_text({"type": str(rec.record_type), "data": _key_json(serde, rec)})
        value_json = _value_json(serde, rec)
    except UnknownRecordTypeError as exc:
        return f"Unknown record type {exc.record_type} at offset {offset}, skipping.", None
    except CorruptRecordError as exc:
        return f"Error at offset {offset}, skipping. {exc.reason}", None
    if value_json is None:
        return key_text, DELETE_MARKER
    # "type" and "version" are JSON strings in Kafka's output (TextNode), not numbers.
    return key_text, json_text({"version": str(rec.value_version), "data": value_json})


def offsets_decoder(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """``--offsets-decoder`` (``__consumer_offsets``)."""
    return _coordinator_decoder(consumer_offsets.SERDE, key, value, offset)


def transaction_log_decoder(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """``--transaction-log-decoder`` (``__transaction_state``), the Java port's JSON envelope."""
    return _coordinator_decoder(transaction_log.SERDE, key, value, offset)


def cluster_metadata_decoder(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """``--cluster-metadata-decoder``: never a key; the payload is the record JSON or an error text
    (``Error at <offset>``, without the word "offset", as Kafka prints it)."""
    if value is None:
        # Kafka dereferences the null value; the NullPointerException has no message.
        return None, f"Error at {offset}, skipping. null"
    try:
        rec = cluster_metadata.decode_metadata_record(value)
    except CorruptRecordError as exc:
        return None, f"Error at {offset}, skipping. {exc.reason}"
    return None, json_text(rec.to_json())


def remote_log_metadata_decoder(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """``--remote-log-metadata-decoder`` (``__remote_log_metadata``, KIP-405): never a key; the payload is the
    metadata object's text as kafka-dump-log prints it (``RemoteLogSegmentMetadata{...}``) or an error text."""
    try:
        rec = remote_log_metadata.decode_remote_log_metadata(value)
    except CorruptRecordError as exc:
        return None, f"Error at offset {offset}, skipping. {exc.reason}"
    return None, rec.text()


DECODERS: dict[str, Decoder] = {
    "string": string_decoder,
    "offsets": offsets_decoder,
    "transaction-log": transaction_log_decoder,
    "cluster-metadata": cluster_metadata_decoder,
    "remote-log-metadata": remote_log_metadata_decoder,
}


def render_control_record(control_type: int, value: bytes | None) -> str:
    """The text kafka-dump-log prints (after one space) behind a control record's metadata, e.g.
    ``endTxnMarker: COMMIT coordinatorEpoch: 3`` or ``SnapshotHeader {"version":0,...}``.

    Raises CorruptRecordError when the value does not parse: Kafka aborts the dump there.
    """
    try:
        ctype = ControlRecordType(control_type)
    except ValueError:
        ctype = ControlRecordType.UNKNOWN
    if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        marker = parse_end_txn_marker(ctype, value)
        return f"endTxnMarker: {ctype.name} coordinatorEpoch: {marker.coordinator_epoch}"
    prefix = _CONTROL_PREFIXES.get(ctype)
    if prefix is None:
        return f"controlType: {ctype.name}({control_type})"
    rec = cluster_metadata.decode_control_record(int(ctype), value)
    return prefix + json_text(rec.to_json())


# ---------------------------------------------------------------------------------------------
# Dicts for --json


def _coordinator_dict(
    serde: CoordinatorSerde, names: dict[int, str], key: bytes | None, value: bytes | None
) -> dict[str, Any]:
    if key is None:
        raise _missing_key(None)
    rec = serde.decode(key, value)
    return {
        "record_type": rec.record_type,
        "record_type_name": names.get(rec.record_type),
        "key": _key_json(serde, rec),
        "value_version": rec.value_version,
        "value": _value_json(serde, rec),
    }


def decode_offsets_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """``{"record_type", "record_type_name", "key", "value_version", "value"}``; value None = tombstone.
    Inner objects are Kafka's JSON (camelCase, bytes as base64, consumer protocol expanded)."""
    return _coordinator_dict(consumer_offsets.SERDE, consumer_offsets.RECORD_TYPE_NAMES, key, value)


def decode_transaction_log_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    out = _coordinator_dict(transaction_log.SERDE, _TRANSACTION_LOG_TYPE_NAMES, key, value)
    status = None if out["value"] is None else out["value"].get("transactionStatus")
    if status is not None:
        try:
            out["state"] = transaction_log.TransactionState(status).name
        except ValueError:
            out["state"] = None
    return out


def decode_cluster_metadata_record(value: bytes | None) -> dict[str, Any]:
    """``{"record_type", "record_type_name", "version", "key": None, "value"}``."""
    rec = cluster_metadata.decode_metadata_record(value)
    return {
        "record_type": rec.type_id,
        "record_type_name": rec.type_name,
        "version": rec.version,
        "key": None,
        "value": rec.to_json()["data"],
    }


def decode_remote_log_metadata_record(value: bytes | None) -> dict[str, Any]:
    """``{"record_type", "record_type_name", "version", "key": None, "value"}`` of a __remote_log_metadata record."""
    rec = remote_log_metadata.decode_remote_log_metadata(value)
    return {"record_type": rec.type_id, "record_type_name": rec.type_name, "version": rec.version, "key": None,
            "value": rec.to_json()["data"]}


def decode_control_value(control_type: int, value: bytes | None) -> dict[str, Any]:
    """A control record as ``{"control_type", "control_type_name", "version", "value"}``."""
    try:
        ctype = ControlRecordType(control_type)
    except ValueError:
        ctype = ControlRecordType.UNKNOWN
    out: dict[str, Any] = {
        "control_type": control_type,
        "control_type_name": ctype.name,
        "version": None,
        "value": None,
    }
    if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        marker = parse_end_txn_marker(ctype, value)
        out["version"] = marker.version
        out["value"] = {"coordinatorEpoch": marker.coordinator_epoch}
    elif ctype in _CONTROL_PREFIXES:
        rec = cluster_metadata.decode_control_record(int(ctype), value)
        out["version"] = rec.version
        out["value"] = rec.to_json()
    return out
