"""Build the sample log directories shipped in sample-logs/, with kcli's own writer, deterministically.

Every byte depends only on this code (fixed timestamps, ids and seeds), so a test can rebuild them and
compare: the samples stay what the current code writes.
"""

from __future__ import annotations

import random
import shutil
import struct
import uuid
from datetime import datetime, timezone
from pathlib import Path

from kcli.records import Codec, Header, Record, TimestampType, build_legacy_messages
from kcli.records.consumer_offsets import (
    Assignment,
    MemberMetadata,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_group_metadata,
    encode_offset_commit,
    encode_offset_commit_tombstone,
    encode_subscription,
    partition_for_group,
)
from kcli.records.control import ControlRecordType
from kcli.storage.checkpoint import MetaProperties, OffsetCheckpointFile, write_clean_shutdown, write_meta_properties
from kcli.storage.files import (
    CLEAN_SHUTDOWN,
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from kcli.storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
CLUSTER_ID = "kctlSampleCluster00000"
GENERATED_AT = datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)


def _topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kcli-sample/{name}")


def _orders(log_dir: Path, partition: int) -> int:
    """magic 2, every codec, keys, headers, several segments with real index entries."""
    rng = random.Random(1000 + partition)
    config = LogConfig(segment_bytes=24 * 1024, index_interval_bytes=4096)
    with PartitionLog(log_dir / f"orders-{partition}", config=config, topic_id=_topic_id("orders")) as log:
        for i in range(150):
            count = 1 + i % 4
            records = []
            for j in range(count):
                n = i * 4 + j
                value = (f'{{"order":{n},"sku":"SKU-{rng.randrange(1000):04d}","qty":{rng.randrange(1, 9)},'
                         f'"note":"{rng.randbytes(24).hex()}"}}').encode()
                headers = (Header("source", b"web"), Header("trace-id", rng.randbytes(8).hex().encode())) if n % 3 == 0 else ()
                records.append(Record(0, T0 + n * 1000, f"customer-{n % 23}".encode(), value, headers))
            log.append(records, codec=Codec(i % 5), partition_leader_epoch=i // 50)
        return log.log_end_offset


def _payments(log_dir: Path) -> int:
    """Transactions (a committed and an aborted one, interleaved) and an idempotent producer."""
    with PartitionLog(log_dir / "payments-0", config=LogConfig(segment_bytes=4096), topic_id=_topic_id("payments")) as log:
        seq = 0
        for i in range(6):  # idempotent, not transactional
            log.append([Record(0, T0 + i, f"acct-{i}".encode(), f"deposit {i * 10}".encode()) for _ in range(2)],
                       producer_id=4000, producer_epoch=0, base_sequence=seq, partition_leader_epoch=0)
            seq += 2
        for round_ in range(3):
            ts = T0 + 10_000 * (round_ + 1)
            log.append([Record(0, ts, b"txn", f"commit-me {round_}".encode())], producer_id=5000, producer_epoch=round_,
                       base_sequence=0, is_transactional=True, partition_leader_epoch=0, codec=Codec.LZ4)
            log.append([Record(0, ts + 1, b"txn", f"abort-me {round_}".encode()), Record(0, ts + 2, b"txn", b"also")],
                       producer_id=6000, producer_epoch=round_, base_sequence=0, is_transactional=True,
                       partition_leader_epoch=0)
            log.append_marker(ControlRecordType.COMMIT, producer_id=5000, producer_epoch=round_, coordinator_epoch=1,
                              timestamp=ts + 3)
            log.append_marker(ControlRecordType.ABORT, producer_id=6000, producer_epoch=round_, coordinator_epoch=1,
                              timestamp=ts + 4)
        return log.log_end_offset


def _legacy(log_dir: Path, magic: int) -> int:
    """magic 0 (no timestamps) or 1 messages: plain and in compressed wrappers of every legacy codec."""
    with PartitionLog(log_dir / f"legacy-v{magic}-0", topic_id=_topic_id(f"legacy-v{magic}")) as log:
        offset = 0
        for i, codec in enumerate([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.NONE, Codec.GZIP]):
            records = [Record(offset + j, T0 + offset + j, f"k{offset + j}".encode(), f"legacy message {offset + j}".encode())
                       for j in range(3)]
            ts_type = TimestampType.LOG_APPEND_TIME if (magic == 1 and i == 5) else TimestampType.CREATE_TIME
            log.append_raw(build_legacy_messages(records, magic=magic, codec=codec, timestamp_type=ts_type))
            offset += 3
        return log.log_end_offset


def _consumer_offsets(log_dir: Path) -> tuple[int, int]:
    """A consumer group's metadata and offset commits where Kafka puts them (partition by group hash)."""
    group = "my-group"
    partition = partition_for_group(group, 50)  # 12 (kafka-formats.md 7.1)
    subscription = encode_subscription(Subscription(topics=("orders",)))
    members = []
    for m in range(2):
        assignment = encode_assignment(Assignment(assigned_partitions=(TopicPartitions(topic="orders", partitions=(m,)),)))
        members.append(MemberMetadata(member_id=f"consumer-{m}-0000", client_id=f"consumer-{m}", client_host="/127.0.0.1",
                                      session_timeout=45000, rebalance_timeout=300000, subscription=subscription,
                                      assignment=assignment))
    with PartitionLog(log_dir / f"__consumer_offsets-{partition}", topic_id=_topic_id("__consumer_offsets")) as log:
        key, value = encode_group_metadata(group, protocol_type="consumer", generation=1, protocol="range",
                                           leader="consumer-0-0000", current_state_timestamp=T0, members=members)
        log.append([Record(0, T0, key, value)], partition_leader_epoch=0)
        for n in range(1, 6):
            commits = [Record(0, T0 + n * 5000, *encode_offset_commit(group, "orders", p, n * 40 + p, leader_epoch=0,
                                                                      commit_timestamp=T0 + n * 5000))
                       for p in (0, 1)]
            log.append(commits, partition_leader_epoch=0)
        log.append([Record(0, T0 + 40_000, *encode_offset_commit_tombstone(group, "orders", 1))], partition_leader_epoch=0)
        return partition, log.log_end_offset


def build_sample_logs(root: Path) -> dict[str, Path]:
    """Write ``root/kafka-logs`` (a clean, cleanly shut down log dir) and ``root/corrupt-logs``."""
    root.mkdir(parents=True, exist_ok=True)
    clean = root / "kafka-logs"
    corrupt = root / "corrupt-logs"
    for directory in (clean, corrupt):
        if directory.exists():
            shutil.rmtree(directory)
    ends = {("orders", 0): _orders(clean, 0), ("orders", 1): _orders(clean, 1), ("payments", 0): _payments(clean),
            ("legacy-v0", 0): _legacy(clean, 0), ("legacy-v1", 0): _legacy(clean, 1)}
    partition, end = _consumer_offsets(clean)
    ends[("__consumer_offsets", partition)] = end
    write_meta_properties(clean / META_PROPERTIES, MetaProperties(0, 0, CLUSTER_ID), now=GENERATED_AT)
    for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
        OffsetCheckpointFile(clean / name).write_offsets(dict(sorted(ends.items())))
    OffsetCheckpointFile(clean / LOG_START_OFFSET_CHECKPOINT).write_offsets({tp: 0 for tp in sorted(ends)})
    OffsetCheckpointFile(clean / CLEANER_OFFSET_CHECKPOINT).write_offsets({})
    write_clean_shutdown(clean / CLEAN_SHUTDOWN)
    _corrupt_copy(clean / "orders-0", corrupt / "orders-0")
    write_meta_properties(corrupt / META_PROPERTIES, MetaProperties(0, 0, CLUSTER_ID), now=GENERATED_AT)
    return {"clean": clean, "corrupt": corrupt}


def _corrupt_copy(source: Path, target: Path) -> None:
    """orders-0 after a bad day: a flipped bit in a middle batch of the first segment and a torn write at
    the end of the last one (what kctl recover repairs)."""
    from kcli.records import BatchReader

    shutil.copytree(source, target)
    logs = sorted(target.glob("*.log"))
    first = logs[0]
    data = bytearray(first.read_bytes())
    victim = list(BatchReader(bytes(data)))[7]
    data[victim.position + victim.size // 2] ^= 0x04
    first.write_bytes(bytes(data))
    last = logs[-1]
    data = bytearray(last.read_bytes())
    tail = list(BatchReader(bytes(data)))[-1]
    torn = data[: tail.position + tail.size // 2]
    last.write_bytes(bytes(torn) + struct.pack(">q", 0))  # a torn batch, then a stray partial header
