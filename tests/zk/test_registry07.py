"""The 0.7 registry against a real ZooKeeper: Kafka 0.7's znodes in a chroot of their own, written again after
the session expires; a node of this broker's previous life is replaced, another broker's is a conflict."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient

from kcli.errors import KcliError
from kcli.zk.registry07 import Registry07, parse_broker_info, split_chroot

pytestmark = pytest.mark.zookeeper


def _wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def registries():
    started: list[Registry07] = []
    yield started
    for registry in started:
        registry.close()


def _start(registries, connect: str, port: int = 9093, broker_id: int = 3) -> Registry07:
    registry = Registry07(connect, broker_id, "127.0.0.1", port, timeout=4.0)
    registry.start()
    registries.append(registry)
    return registry


def test_split_chroot():
    assert split_chroot("h:1,h:2/a/b") == ("h:1,h:2", "/a/b")
    assert split_chroot("h:1") == ("h:1", "")
    assert split_chroot("h:1/") == ("h:1", "")


def test_registers_in_its_chroot_and_again_after_a_session_expires(registries, zookeeper, root, chroot):
    registry = _start(registries, zookeeper.connect + chroot)
    registry.register_topic("events", 4)
    creator, host, port = parse_broker_info(root.get(f"{chroot}/brokers/ids/3")[0].decode())
    assert (host, port) == ("127.0.0.1", 9093) and creator == registry.creator
    assert root.get(f"{chroot}/brokers/topics/events/3")[0] == b"4"
    assert root.exists(f"{chroot}/brokers/ids/3").ephemeralOwner == registry.client.client_id[0]
    assert not root.exists("/brokers/ids/3")
    old_session = registry.client.client_id
    twin = KazooClient(hosts=zookeeper.connect, client_id=old_session, timeout=4)  # closing it expires the session
    twin.start(timeout=10)
    twin.stop()
    twin.close()

    def registered_again() -> bool:
        stats = [root.exists(f"{chroot}/brokers/ids/3"), root.exists(f"{chroot}/brokers/topics/events/3")]
        return all(s is not None and s.ephemeralOwner != old_session[0] for s in stats)

    _wait_for(registered_again)


def test_a_previous_life_is_replaced_and_another_broker_is_a_conflict(registries, zookeeper, root, chroot):
    first = _start(registries, zookeeper.connect + chroot)
    # a kill -9: the old session lives on until it times out; the new process registers over it
    second = _start(registries, zookeeper.connect + chroot)
    assert root.get(f"{chroot}/brokers/ids/3")[0].decode().startswith(second.creator + ":")
    assert root.exists(f"{chroot}/brokers/ids/3").ephemeralOwner == second.client.client_id[0]
    with pytest.raises(KcliError, match="registered by another broker"):
        _start(registries, zookeeper.connect + chroot, port=9999)
    first.close()
