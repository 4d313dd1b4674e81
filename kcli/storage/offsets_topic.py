"""Reading a `__consumer_offsets` partition as the group coordinator does when it loads one: every record a
read_committed consumer sees (aborted TxnOffsetCommits skipped, markers skipped), decoded."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from kcli.errors import KcliError
from kcli.records.consumer_offsets import decode_record
from kcli.storage.cleaner import iter_visible_records


def iter_offsets_topic(partition_dir: str | os.PathLike[str],
                       on_undecodable: Callable[[int, KcliError], None] | None = None) -> Iterator[tuple[int, Any, Any]]:
    """(offset, key, value) of each keyed record; ``on_undecodable(offset, error)`` hears about records of
    versions or types kcli cannot decode, which are skipped (as Kafka skips unknown key versions)."""
    for _batch, record in iter_visible_records(partition_dir):
        if record.key is None:
            continue
        try:
            key, value = decode_record(record.key, record.value)
        except KcliError as exc:
            if on_undecodable is not None:
                on_undecodable(record.offset, exc)
            continue
        yield record.offset, key, value


__all__ = ["iter_offsets_topic"]
