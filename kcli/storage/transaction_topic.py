"""Reading a `__transaction_state` partition as the transaction coordinator does when it loads one (Kafka's
TransactionStateManager.loadTransactionMetadata): every record up to the log end, the last value of each
transactional id winning, a tombstone removing it."""

from __future__ import annotations

import os
from collections.abc import Callable

from kcli.errors import KcliError
from kcli.records.transaction_log import TransactionLogValue, decode_record
from kcli.storage.offsets_topic import iter_partition_batches


def load_transaction_topic(partition_dir: str | os.PathLike[str],
                           on_undecodable: Callable[[int, KcliError], None] | None = None
                           ) -> dict[str, TransactionLogValue]:
    """transactional id -> its latest TransactionLogValue. Records kcli cannot decode are skipped and reported."""
    found: dict[str, TransactionLogValue] = {}
    for batch in iter_partition_batches(partition_dir):
        if getattr(batch, "is_control", False):
            continue
        for record in batch.records():
            try:
                key, value = decode_record(record.key, record.value)
            except KcliError as exc:
                if on_undecodable is not None:
                    on_undecodable(record.offset, exc)
                continue
            if value is None:
                found.pop(key.transactional_id, None)
            else:
                found[key.transactional_id] = value
    return found


__all__ = ["load_transaction_topic"]
