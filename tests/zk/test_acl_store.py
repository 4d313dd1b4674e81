"""kcli.zk.acl_store against the session's real ZooKeeper: the versioned store interface the authorizer shares with
the standalone file, and the change channel (Kafka's ZkNodeChangeNotificationListener for the ACL sequences)."""

from __future__ import annotations

import threading
import time

import pytest

from kcli.errors import BadVersion
from kcli.protocol.acl import PatternType, ResourcePattern, ResourceType
from kcli.zk import acls as layout
from kcli.zk.acl_store import ZkAclChangeChannel, ZkMetadataStore
from kcli.zk.errors import ZooKeeperConnectionError

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def store(zookeeper, root, chroot):
    root.ensure_path(chroot)
    store = ZkMetadataStore(zookeeper.connect + chroot, timeout=10)
    yield store
    store.close()


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_versioned_reads_and_writes(store, root, chroot):
    path = "/kafka-acl/Topic/orders"
    assert store.get(path) == (None, -1)
    assert store.set(path, b"a", -1) == 0  # created with its parents
    assert root.get(chroot + path)[0] == b"a"
    with pytest.raises(BadVersion):
        store.set(path, b"b", -1)  # NODEEXISTS
    assert store.set(path, b"b", 0) == 1
    with pytest.raises(BadVersion):
        store.set(path, b"c", 0)  # BADVERSION
    with pytest.raises(BadVersion):
        store.delete(path, 0)
    assert store.children("/kafka-acl") == ["Topic"]
    assert store.children("/nowhere") == []
    assert store.delete(path, 1) is True
    assert store.delete(path) is False
    with pytest.raises(BadVersion):
        store.set(path, b"d", 3)  # NONODE for an update


def test_change_channel_delivers_new_notifications_and_purges_old_ones(store, root, chroot):
    root.ensure_path(chroot + "/kafka-acl-changes")
    root.create(chroot + "/kafka-acl-changes/acl_changes_", b"TOPIC:before", sequence=True)
    seen: list[ResourcePattern] = []
    lock = threading.Lock()

    def on_change(pattern):
        with lock:
            seen.append(pattern)

    channel = ZkAclChangeChannel(store, expiration_ms=0)
    channel.start(on_change)
    try:
        for path in layout.initial_paths():
            assert root.exists(chroot + path), path
        assert seen == [ResourcePattern(ResourceType.TOPIC, "before")]  # already there: processed at start
        publisher = ZkAclChangeChannel(store)
        publisher.publish(ResourcePattern(ResourceType.GROUP, "g", PatternType.LITERAL))
        publisher.publish(ResourcePattern(ResourceType.TOPIC, "t-", PatternType.PREFIXED))
        root.create(chroot + "/kafka-acl-changes/acl_changes_", b"garbage", sequence=True)  # malformed: skipped
        wait_for(lambda: len(seen) == 3)
        assert seen[1:] == [ResourcePattern(ResourceType.GROUP, "g"),
                            ResourcePattern(ResourceType.TOPIC, "t-", PatternType.PREFIXED)]
        # processed notifications older than the expiration (0 here) are deleted by the listener
        root.create(chroot + "/kafka-acl-changes/acl_changes_", b"TOPIC:last", sequence=True)
        wait_for(lambda: len(seen) == 4)
        channel.process()
        assert root.get_children(chroot + "/kafka-acl-changes") == []
    finally:
        channel.stop()


def test_unreachable_zookeeper_is_a_connection_error():
    store = ZkMetadataStore("127.0.0.1:1", timeout=1)
    with pytest.raises(ZooKeeperConnectionError):
        store.get("/kafka-acl")
