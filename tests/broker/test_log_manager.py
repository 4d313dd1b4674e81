"""LogManager in-process: where new logs go (per-log-dir counts, Kafka's nextLogDirs), logs created from
several threads at once, and Kafka's asynchronous deletion (rename to `-delete`, removal after the delay)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from kcli.broker.log_manager import LogDirError, LogManager, TopicError, delete_dir_name
from kcli.storage.files import DELETE_DIR_SUFFIX, parse_partition_dir_name
from kcli.storage.log import LogConfig


def _manager(root: Path, dirs: int = 2, delay_ms: int = 60_000) -> LogManager:
    manager = LogManager([root / f"d{i}" for i in range(dirs)], broker_id=0,
                         log_config=LogConfig(file_delete_delay_ms=delay_ms))
    manager.startup()
    return manager


def _dirs_of(manager: LogManager, topic: str) -> dict[int, str]:
    return {p.index: p.directory.parent.name for p in manager.topics[topic].partitions}


def _on_disk(manager: LogManager) -> dict[str, list[str]]:
    return {d.name: sorted(p.name for p in d.iterdir() if p.is_dir()) for d in manager.log_dirs}


def test_new_logs_go_to_the_dir_with_fewest_partitions(tmp_path):
    manager = _manager(tmp_path)
    manager.create_topic("a", 3)
    assert _dirs_of(manager, "a") == {0: "d0", 1: "d1", 2: "d0"}
    manager.create_topic("b", 1)
    assert _dirs_of(manager, "b") == {0: "d1"}
    assert manager.partition_counts() == {tmp_path / "d0": 2, tmp_path / "d1": 2}
    manager.delete_topic("a")
    assert manager.partition_counts() == {tmp_path / "d0": 0, tmp_path / "d1": 1}
    manager.add_partitions("b", 3)
    assert _dirs_of(manager, "b") == {0: "d1", 1: "d0", 2: "d0"}
    manager.get_or_create_log("c", 4, uuid.uuid4(), LogConfig())  # a replica the controller assigned here
    assert _dirs_of(manager, "c") == {4: "d1"}
    manager.delete_partition("b", 1)
    assert manager.partition_counts() == {tmp_path / "d0": 1, tmp_path / "d1": 2}
    manager.shutdown()
    # a restart counts what it loads
    again = _manager(tmp_path)
    assert again.partition_counts() == {tmp_path / "d0": 1, tmp_path / "d1": 2}
    again.create_topic("d", 1)
    assert _dirs_of(again, "d") == {0: "d0"}
    again.shutdown()


def test_logs_created_from_many_threads_are_counted_once_each(tmp_path):
    manager = _manager(tmp_path, dirs=3)
    errors: list[BaseException] = []

    def create(i: int) -> None:
        try:
            manager.create_topic(f"t{i}", 7)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    # meanwhile replicas of one topic are asked for twice at once: created once
    wanted = [("r", i) for i in range(20)]
    both = [threading.Thread(target=manager.get_or_create_logs, args=(wanted, {}, lambda _: LogConfig()))
            for _ in range(2)]
    for t in both:
        t.start()
    for t in threads + both:
        t.join()
    assert errors == []
    assert sorted(manager.topics) == sorted([f"t{i}" for i in range(12)] + ["r"])
    assert [p.index for p in manager.topics["r"].partitions] == list(range(20))
    counts = manager.partition_counts()
    assert sum(counts.values()) == 12 * 7 + 20
    assert max(counts.values()) - min(counts.values()) <= 1  # evenly spread
    on_disk = _on_disk(manager)
    assert {d: len(names) for d, names in on_disk.items()} == {d.name: n for d, n in counts.items()}
    with pytest.raises(TopicError, match="already exists"):
        manager.create_topic("t0", 1)
    manager.shutdown()


def test_a_deleted_log_is_renamed_at_once_and_removed_after_the_delay(tmp_path):
    manager = _manager(tmp_path, dirs=1, delay_ms=60_000)
    manager.create_topic("gone", 2)
    manager.create_topic("kept", 1)
    before = len(os.listdir("/proc/self/fd"))
    manager.delete_topic("gone")
    assert len(os.listdir("/proc/self/fd")) == before - 2  # closed (without a flush)
    assert "gone" not in manager.topics
    names = _on_disk(manager)["d0"]
    renamed = [n for n in names if n.endswith(DELETE_DIR_SUFFIX)]
    assert sorted(parse_partition_dir_name(n) for n in renamed) == [("gone", 0), ("gone", 1)]
    assert "gone-0" not in names and "kept-0" in names
    manager.purge_deleted()  # the delay has not passed: kept
    assert sorted(n for n in _on_disk(manager)["d0"] if n.endswith(DELETE_DIR_SUFFIX)) == sorted(renamed)
    manager.create_topic("gone", 1)  # the name is free again
    manager.purge_deleted(force=True)
    assert _on_disk(manager)["d0"] == ["gone-0", "kept-0"]
    manager.shutdown()


def test_a_zero_delay_removes_at_the_next_purge_and_startup_finishes_what_a_crash_left(tmp_path):
    manager = _manager(tmp_path, dirs=1, delay_ms=0)
    manager.create_topic("t", 2)
    manager.delete_partition("t", 0)
    assert [p.index for p in manager.topics["t"].partitions] == [1]
    manager.purge_deleted()
    assert _on_disk(manager)["d0"] == ["t-1"]
    manager.delete_partition("t", 1)
    assert "t" not in manager.topics
    manager.shutdown()  # as if the broker died before the purge: the renamed dir stays ...
    (tmp_path / "d0" / delete_dir_name("t", 1)).mkdir()
    again = _manager(tmp_path, dirs=1)
    assert _on_disk(again)["d0"] == []  # ... and the next start removes it
    again.shutdown()


def test_delete_dir_names_fit_255_bytes(tmp_path):
    topic = "x" * 249
    name = delete_dir_name(topic, 9999)
    assert len(name) == 255 and name.endswith(DELETE_DIR_SUFFIX)
    assert parse_partition_dir_name(name) == (topic[: len(name.split("-9999.")[0])], 9999)
    manager = _manager(tmp_path, dirs=1)
    manager.create_topic(topic, 1)
    manager.delete_topic(topic)  # the rename would fail with a 294-byte name
    assert [len(n) for n in _on_disk(manager)["d0"]] == [255]
    manager.shutdown()


def test_a_failed_creation_leaves_no_topic_and_no_count(tmp_path):
    manager = _manager(tmp_path, dirs=1)
    (tmp_path / "d0" / "t-2").mkdir()  # a leftover where partition 2 would go
    with pytest.raises(LogDirError) as caught:
        manager.create_topic("t", 4)
    assert caught.value.error_code == "KAFKA_STORAGE_ERROR"
    assert "t" not in manager.topics
    assert manager.partition_counts() == {tmp_path / "d0": 0}
    left = _on_disk(manager)["d0"]
    assert "t-2" in left and not any(n in left for n in ("t-0", "t-1", "t-3"))  # the others were deleted again
    manager.shutdown()


def test_leader_epoch_checkpoints_written_after_the_block(tmp_path):
    manager = _manager(tmp_path, dirs=1)
    managed = manager.create_topic("t", 1).partitions[0]
    checkpoint = managed.directory / "leader-epoch-checkpoint"
    with manager.leader_epoch_checkpoints_deferred([managed]) as changed:
        managed.log.leader_epochs.assign(3, 0)
        assert not checkpoint.exists()  # not written on the caller's thread
    assert changed == [managed]
    manager.write_leader_epoch_checkpoints(changed)
    assert checkpoint.read_text().splitlines()[-1] == "3 0"
    managed.log.leader_epochs.assign(4, 0)  # outside the block: written at once, as before
    assert checkpoint.read_text().splitlines()[-1] == "4 0"
    manager.shutdown()


def test_creation_runs_while_another_thread_reads_the_topics(tmp_path):
    """Readers (flush checks, checkpoints) iterate snapshots while worker threads create and delete logs."""
    manager = _manager(tmp_path, dirs=2)
    stop = time.monotonic() + 2
    failures: list[BaseException] = []

    def read() -> None:
        try:
            while time.monotonic() < stop:
                manager.due_flushes()
                manager.write_checkpoints()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(30):
        manager.create_topic(f"t{i}", 3)
        if i % 3 == 0:
            manager.delete_topic(f"t{i}")
    reader.join()
    assert failures == []
    manager.shutdown()
