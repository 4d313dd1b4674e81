"""Startup recovery of a real `kctl broker run` after SIGKILL: one compact quarantine run per restart, a log line
per repaired file plus a summary, every acknowledged record still there, and `kctl recover --restore` undoing it.
Only what needs it is repaired: the active segments' preallocated indexes a SIGKILL leaves are kept (the broker
trims them), and after a clean stop a crash recovers from each partition's recovery point on."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from kcli.records import Record
from kcli.records.batch import build_record_batch
from kcli.storage.files import MANIFEST_NAME, RUN_MANIFEST_NAME
from kcli.storage.recovery import quarantine_root

PARTITIONS = 50
RECORDS = 60  # per partition, 150-byte values in small batches: the indexes hold real entries


def _disk_bytes(root: Path) -> int:
    """What `du` counts: allocated blocks of every file and directory (sparse holes cost nothing)."""
    return sum(p.stat().st_blocks * 512 for p in [root, *root.rglob("*")])


def _append_stray_index_entry(path: Path) -> None:
    """An offset index entry after the valid ones that points past the end of the log."""
    import struct

    with open(path, "r+b") as index:
        data = index.read(1 << 16)
        slot = next(i for i in range(1, len(data) // 8) if struct.unpack_from(">i", data, i * 8)[0] == 0)
        index.seek(slot * 8)
        index.write(struct.pack(">ii", 1_000_000, 1 << 30))


def _files(log_dir: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(log_dir)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(log_dir.glob("*/*")) if p.is_file()}


def test_kill_9_restart_is_one_compact_logged_restorable_run(make_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = make_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("events", PARTITIONS, 1)])["events"].result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2, "batch.num.messages": 4})
    acked: set[tuple[int, bytes]] = set()

    def delivered(err, msg):
        if err is None:
            acked.add((msg.partition(), msg.value()))

    for i in range(RECORDS):
        for partition in range(PARTITIONS):
            producer.produce("events", value=f"{partition}:{i}:".encode() + os.urandom(72).hex().encode(),
                             partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0 and len(acked) == PARTITIONS * RECORDS
    b.kill()
    # One partition also ends in a torn write: the first half of a batch holding the next four offsets.
    torn_log = b.log_dir / "events-7" / "00000000000000000000.log"
    valid = torn_log.stat().st_size
    batch = build_record_batch([Record(RECORDS + i, 0, None, b"x" * 100) for i in range(4)], base_offset=RECORDS)
    with open(torn_log, "ab") as out:
        out.write(batch[: len(batch) // 2])
    torn = torn_log.stat().st_size - valid
    root = quarantine_root(b.log_dir)
    assert not root.exists()

    # Two more partitions with an index entry past the log end, as a torn index write could leave.
    for n in (3, 4):
        _append_stray_index_entry(b.log_dir / f"events-{n}" / "00000000000000000000.index")
    killed = _files(b.log_dir)  # what the restart will find, and what --restore must bring back

    b2 = make_broker(log_dir=b.log_dir, port=b.port)
    (run,) = root.iterdir()  # ONE run for the restart, not one per partition
    assert (run / RUN_MANIFEST_NAME).is_file()
    manifests = {m.parent.name: json.loads(m.read_text()) for m in run.glob(f"*/{MANIFEST_NAME}")}
    # the other partitions' preallocated indexes agree with their logs: nothing to repair there
    assert set(manifests) == {"events-3", "events-4", "events-7"}
    data = sum(size for name, (size, _) in killed.items() if name.endswith(".log") and name.split("/")[0] in manifests)
    quarantined = _disk_bytes(run)
    print(f"quarantine run: {quarantined} bytes on disk for {data} bytes of data in {len(manifests)} partitions")
    # per partition a directory, its manifest (old index entries inline) and at most one file of cut bytes, plus
    # the run's directory and manifest: blocks, not the 10 MiB preallocations of the rebuilt indexes
    assert quarantined <= (3 * len(manifests) + 2) * 4096, (quarantined, data)

    # The broker's log: one line per repaired file (partition, file, byte range, offsets), then the summary.
    lines = [line for line in b2.log().splitlines() if "startup recovery: " in line]
    for partition, manifest in manifests.items():
        for entry in manifest["actions"]:
            (line,) = [x for x in lines if f"startup recovery: {partition}: {entry['action']} {entry['file']}" in x]
            if entry["existed"]:
                assert f"bytes {entry['position']}..{entry['end']}" in line and "lost" in line, line
                assert str(run / partition) in line, line  # where the old bytes are kept
    (cut,) = [x for x in lines if "startup recovery: events-7: truncate 00000000000000000000.log" in x]
    assert f"bytes {valid}..{valid + torn} ({torn} bytes, offsets {RECORDS}..{RECORDS + 3} lost" in cut, cut
    changed = sum(len(m["actions"]) for m in manifests.values())
    (summary,) = [x for x in lines if "partition(s) recovered" in x]
    assert f"3 partition(s) recovered, {changed} file(s) changed (1 truncated," in summary
    assert f"{torn} bytes cut" in summary
    assert f"quarantine run {run}" in summary and f"kctl recover --restore {run}" in summary

    consumer = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("events", n, 0) for n in range(PARTITIONS)])
    seen: set[tuple[int, bytes]] = set()
    while not acked <= seen:
        msg = consumer.poll(10)
        assert msg is not None, f"{len(acked - seen)} acknowledged records not read back"
        assert msg.error() is None, msg.error()
        seen.add((msg.partition(), msg.value()))
    consumer.close()
    assert b2.stop() == 0

    b3 = make_broker(log_dir=b.log_dir, port=b.port)  # after a clean stop: nothing to repair, no new run
    assert b3.stop() == 0
    assert list(root.iterdir()) == [run]

    proc = subprocess.run([sys.executable, "-m", "kcli", "recover", "--restore", str(run)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    restored = _files(b.log_dir)
    touched = {f"{p}/{e['file']}" for p, m in manifests.items() for e in m["actions"]}
    assert {name: restored.get(name) for name in touched} == {name: killed.get(name) for name in touched}
    assert {n: v for n, v in restored.items() if n.endswith(".log")} == {
        n: v for n, v in killed.items() if n.endswith(".log")}


def test_a_live_replica_keeps_leader_epoch_checkpoint_current(tmp_path):
    """Kafka's LeaderEpochFileCache writes the file at every change: a kill -9 then finds it current (no
    rebuild at the next start); an offline reader's cache never writes."""
    from kcli.broker.log_manager import ManagedLog
    from kcli.records.batch import build_record_batch
    from kcli.records.types import Record
    from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
    from kcli.storage.leader_epoch import LeaderEpochCache
    from kcli.storage.log import PartitionLog

    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    ManagedLog("t", 0, log)
    checkpoint = LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint")
    for offset, epoch in ((0, 3), (1, 3), (2, 5)):
        log.append_raw(build_record_batch([Record(offset, 0, None, b"x")], base_offset=offset,
                                          partition_leader_epoch=epoch))
    assert list(checkpoint.read()) == [EpochEntry(3, 0), EpochEntry(5, 2)]
    log.truncate_to(2)
    assert list(checkpoint.read()) == [EpochEntry(3, 0)]
    offline = LeaderEpochCache.load(directory)
    offline.assign(9, 10)
    assert list(checkpoint.read()) == [EpochEntry(3, 0)]


def test_kill_9_after_a_clean_start_recovers_from_the_recovery_point(make_broker):
    """A clean stop checkpoints every partition's recovery point; the next start reads no segment. A SIGKILL
    after more appends makes the restart validate only the segments from each recovery point on: a torn tail
    above it is still found and cut, every acknowledged record is read back, no other partition is touched."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from kcli.storage.checkpoint import OffsetCheckpointFile

    partitions = 6
    b = make_broker("log.segment.bytes=4096")  # several segments per partition
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("rp", partitions, 1)])["rp"].result(30)
    acked: set[tuple[int, bytes]] = set()

    def delivered(err, msg):
        if err is None:
            acked.add((msg.partition(), msg.value()))

    def produce(rounds: int, tag: str) -> None:
        producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2,
                             "batch.num.messages": 4})
        for i in range(rounds):
            for partition in range(partitions):
                producer.produce("rp", value=f"{tag}:{partition}:{i}:".encode() + b"v" * 150, partition=partition,
                                 on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0

    produce(80, "first")
    assert b.stop() == 0
    points = OffsetCheckpointFile(b.log_dir / "recovery-point-offset-checkpoint").read_offsets()
    assert points == {("rp", n): 80 for n in range(partitions)} | {
        tp: v for tp, v in points.items() if tp[0] != "rp"}
    assert len(list((b.log_dir / "rp-0").glob("*.log"))) > 3

    b = make_broker("log.segment.bytes=4096", log_dir=b.log_dir, port=b.port)
    produce(10, "second")  # above the recovery point, in the active segment (or a new one)
    b.kill()
    torn_dir = b.log_dir / "rp-2"
    torn_log = sorted(torn_dir.glob("*.log"))[-1]
    valid = torn_log.stat().st_size
    with open(torn_log, "ab") as out:
        out.write(build_record_batch([Record(90 + i, 0, None, b"x" * 100) for i in range(4)], base_offset=90)[:70])

    b2 = make_broker("log.segment.bytes=4096", log_dir=b.log_dir, port=b.port)
    lines = [line for line in b2.log().splitlines() if "startup recovery: " in line]
    (cut,) = [x for x in lines if f"startup recovery: rp-2: truncate {torn_log.name}" in x]
    assert f"bytes {valid}..{valid + 70} (70 bytes," in cut, cut
    assert not [x for x in lines if "startup recovery: rp-" in x and "rp-2" not in x], lines
    consumer = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("rp", n, 0) for n in range(partitions)])
    seen: set[tuple[int, bytes]] = set()
    while not acked <= seen:
        msg = consumer.poll(10)
        assert msg is not None, f"{len(acked - seen)} acknowledged records not read back"
        assert msg.error() is None, msg.error()
        seen.add((msg.partition(), msg.value()))
    consumer.close()
    assert b2.stop() == 0
