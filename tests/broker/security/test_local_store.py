"""The standalone broker's znode-like store: versions as ZooKeeper's, one crash-safe file, thread-safe."""

from __future__ import annotations

import json
import threading

import pytest

from kcli.broker.security.local_store import FILE_NAME, LocalMetadataStore, StoreError
from kcli.errors import BadVersion


def test_absent_node_reads_none_and_version_minus_one(tmp_path):
    store = LocalMetadataStore(tmp_path)
    assert store.get("/kafka-acl/Topic/orders") == (None, -1)
    assert store.children("/kafka-acl") == []
    assert not (tmp_path / FILE_NAME).exists()  # nothing written until something changes


def test_create_then_update_with_the_version_read(tmp_path):
    store = LocalMetadataStore(tmp_path)
    assert store.set("/kafka-acl/Topic/orders", b'{"version":1}', -1) == 0
    assert store.get("/kafka-acl/Topic/orders") == (b'{"version":1}', 0)
    assert store.set("/kafka-acl/Topic/orders", b'{"version":1,"acls":[]}', 0) == 1
    assert store.get("/kafka-acl/Topic/orders") == (b'{"version":1,"acls":[]}', 1)


def test_a_moved_version_is_bad_version(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.set("/config/users/alice", b"{}", -1)
    with pytest.raises(BadVersion):
        store.set("/config/users/alice", b"{}", -1)  # create, but it exists (ZooKeeper's NODEEXISTS)
    with pytest.raises(BadVersion):
        store.set("/config/users/alice", b"{}", 3)
    with pytest.raises(BadVersion):
        store.delete("/config/users/alice", 7)
    with pytest.raises(BadVersion):
        store.set("/config/users/bob", b"{}", 0)  # an update of a node that is gone
    assert store.get("/config/users/alice") == (b"{}", 0)


def test_unconditional_writes_and_deletes(tmp_path):
    store = LocalMetadataStore(tmp_path)
    assert store.set("/a", b"1") == 0
    assert store.set("/a", b"2") == 1
    assert store.delete("/a") is True
    assert store.delete("/a") is False
    assert store.get("/a") == (None, -1)
    store.set("/a", b"3", -1)
    assert store.delete("/a", 0) is True


def test_children_are_one_level_and_sorted(tmp_path):
    store = LocalMetadataStore(tmp_path)
    for path in ("/kafka-acl/Topic/orders", "/kafka-acl/Topic/audit", "/kafka-acl/Group/g1",
                 "/kafka-acl-extended/prefixed/Topic/ord"):
        store.set(path, b"{}")
    assert store.children("/kafka-acl") == ["Group", "Topic"]
    assert store.children("/kafka-acl/Topic") == ["audit", "orders"]
    assert store.children("/") == ["kafka-acl", "kafka-acl-extended"]
    assert store.children("/kafka-acl/Cluster") == []


def test_survives_a_restart_and_binary_data(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.set("/config/users/alice", '{"config":{"SCRAM-SHA-256":"salt=é"}}'.encode())
    store.set("/bin", b"\xff\x00\x01")
    store.set("/bin", b"\xfe")
    again = LocalMetadataStore(tmp_path)
    assert again.get("/config/users/alice") == ('{"config":{"SCRAM-SHA-256":"salt=é"}}'.encode(), 0)
    assert again.get("/bin") == (b"\xfe", 1)
    document = json.loads((tmp_path / FILE_NAME).read_text())
    assert document["version"] == 1 and "/config/users/alice" in document["nodes"]
    assert not list(tmp_path.glob("*.tmp"))


def test_a_stale_temp_file_from_a_crash_is_ignored(tmp_path):
    LocalMetadataStore(tmp_path).set("/a", b"old")
    (tmp_path / (FILE_NAME + ".tmp")).write_text('{"version": 1, "nodes": {"/a": {"da')  # torn write
    assert LocalMetadataStore(tmp_path).get("/a") == (b"old", 0)


def test_a_damaged_file_is_a_clear_error(tmp_path):
    (tmp_path / FILE_NAME).write_text("{not json")
    store = LocalMetadataStore(tmp_path)  # read on first use
    with pytest.raises(StoreError, match="damaged"):
        store.load()
    with pytest.raises(StoreError, match="damaged"):
        store.get("/a")


def test_a_failed_write_changes_nothing(tmp_path):
    directory = tmp_path / "gone"
    directory.mkdir()
    store = LocalMetadataStore(directory)
    store.set("/a", b"1")
    directory.joinpath(FILE_NAME).unlink()
    directory.rmdir()
    with pytest.raises(StoreError):
        store.set("/a", b"2")
    assert store.get("/a") == (b"1", 0)


def test_bad_paths_are_refused(tmp_path):
    store = LocalMetadataStore(None)
    for path in ("relative", "/trailing/", "/double//slash"):
        with pytest.raises(ValueError):
            store.set(path, b"")


def test_concurrent_read_modify_write_loses_no_update(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.set("/counter", b"0")

    def bump(times: int) -> None:
        for _ in range(times):
            while True:
                data, version = store.get("/counter")
                try:
                    store.set("/counter", str(int(data) + 1).encode(), version)
                    break
                except BadVersion:
                    continue

    threads = [threading.Thread(target=bump, args=(25,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get("/counter") == (b"100", 100)
    assert LocalMetadataStore(tmp_path).get("/counter") == (b"100", 100)
