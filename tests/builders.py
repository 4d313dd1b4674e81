"""Build small partitions with kcli's own writer for tests (real fixtures come from ../shared)."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

from kcli.records import Codec, Header, Record
from kcli.records.control import ControlRecordType
from kcli.storage.log import LogConfig, PartitionLog

T0 = 1700000000000


def build_partition(directory: Path, *, batches: int = 120, records_per_batch: int = 3, segment_bytes: int = 16384,
                    value_size: int = 100, transactions: bool = True) -> Path:
    """A partition with several segments, all codecs, headers, and (optionally) an aborted and a committed txn."""
    with PartitionLog(directory, config=LogConfig(segment_bytes=segment_bytes), topic_id=uuid.UUID(int=42)) as log:
        rng = random.Random(7)
        for i in range(batches):
            records = [
                Record(0, T0 + i * 10 + j, f"key-{(i * records_per_batch + j) % 17}".encode(), rng.randbytes(value_size),
                       (Header("trace", f"{i}".encode()),) if j == 0 else ())
                for j in range(records_per_batch)
            ]
            log.append(records, codec=Codec(i % 5), partition_leader_epoch=i // 20)
        if transactions:
            for pid, kind in ((1000, ControlRecordType.ABORT), (1001, ControlRecordType.COMMIT)):
                log.append([Record(0, T0 + 9000, b"txn-key", b"txn-value")], producer_id=pid, producer_epoch=0,
                           base_sequence=0, is_transactional=True, partition_leader_epoch=2)
                log.append_marker(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=5, timestamp=T0 + 9001,
                                  partition_leader_epoch=2)
    return directory
