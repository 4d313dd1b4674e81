"""An old consumer group member's ZooKeeper side (kcli.zk.consumer_group.ZkGroupMember) on the real ZooKeeper:
the ids node and its watch, owner claims that conflict, offsets as plain text, the layout refusal, and a session
that expires behind a cut connection (the ids node comes back with the new session)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kazoo.client import KazooClient

from cluster_support import wait_for
from kcli.errors import KcliError
from kcli.records import old_consumer as oc
from kcli.zk.consumer_group import GroupLayoutError, ZkGroupMember
from zookeeper_support import TcpProxy

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def zk(zookeeper):
    chroot = f"/cg-{uuid.uuid4().hex[:10]}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    client.create(f"{chroot}/brokers/topics/orders", json.dumps(
        {"version": 1, "partitions": {"0": [0], "1": [0]}}).encode(), makepath=True)
    yield client, chroot
    client.stop()
    client.close()


def test_membership_claims_and_offsets(zookeeper, zk):
    client, chroot = zk
    me = ZkGroupMember(zookeeper.connect + chroot, "g", session_timeout_s=4)
    other = ZkGroupMember(zookeeper.connect + chroot, "g", session_timeout_s=4)
    try:
        data = oc.encode_registration({"orders": 1}, oc.STATIC, 1)
        me.register("g_me", data)
        assert client.get(f"{chroot}/consumers/g/ids/g_me")[0] == data
        assert client.exists(f"{chroot}/consumers/g/ids/g_me").ephemeralOwner != 0
        with pytest.raises(KcliError, match="already registered"):
            other.register("g_me", data)
        assert me.take_rebalance() and not me.take_rebalance()
        snapshot = me.snapshot(oc.Subscription("g_me", {"orders": 1}))
        assert [m.consumer_id for m in snapshot.members] == ["g_me"] and snapshot.partitions == {"orders": [0, 1]}

        other.register("g_other", oc.encode_registration({"orders": 1}, oc.STATIC, 2))
        wait_for(me.take_rebalance, 10, "the ids watch fired")
        me.snapshot(oc.Subscription("g_me", {"orders": 1}))  # sets the watches again
        client.set(f"{chroot}/brokers/topics/orders", json.dumps(
            {"version": 1, "partitions": {"0": [0], "1": [0], "2": [0]}}).encode())
        wait_for(me.take_rebalance, 10, "the topic watch fired (partitions added)")

        assert me.claim("orders", 0, "g_me-0") and me.claim("orders", 0, "g_me-0")  # ours already: fine
        assert not other.claim("orders", 0, "g_other-0")  # still owned: the other retries later
        me.release("orders", 0)
        me.release("orders", 0)  # gone already: fine
        assert other.claim("orders", 0, "g_other-0")
        assert client.get(f"{chroot}/consumers/g/owners/orders/0")[0] == b"g_other-0"

        me.write_offsets({("orders", 0): 42, ("orders", 1): 7})
        me.write_offsets({("orders", 0): 43})
        assert client.get(f"{chroot}/consumers/g/offsets/orders/0")[0] == b"43"
        assert me.read_offsets([("orders", 0), ("orders", 1), ("orders", 2)]) == {("orders", 0): 43,
                                                                                  ("orders", 1): 7}
    finally:
        me.close()
        other.close()
    assert client.get_children(f"{chroot}/consumers/g/ids") == []  # both left
    assert client.get_children(f"{chroot}/consumers/g/owners/orders") == []  # ephemeral owners went with them


def test_refuses_a_pykafka_group(zookeeper, zk):
    client, chroot = zk
    client.create(f"{chroot}/consumers/pk/ids/host:1234", b"orders", makepath=True)
    member = ZkGroupMember(zookeeper.connect + chroot, "pk")
    try:
        with pytest.raises(GroupLayoutError, match="pykafka's registry layout"):
            member.register("pk_me", oc.encode_registration({"orders": 1}, oc.STATIC, 1))
        assert client.get_children(f"{chroot}/consumers/pk/ids") == ["host:1234"]  # nothing written
    finally:
        member.close()


def test_expired_session_registers_again(zookeeper, zk):
    client, chroot = zk
    proxy = TcpProxy(zookeeper.connect)
    proxy.start()
    member = ZkGroupMember(proxy.connect + chroot, "g", session_timeout_s=1.5)
    try:
        member.register("g_me", oc.encode_registration({"orders": 1}, oc.STATIC, 1))
        member.take_rebalance()
        proxy.cut()
        # the server expires the session: the ephemeral ids node goes
        wait_for(lambda: not client.exists(f"{chroot}/consumers/g/ids/g_me"), 30, "the session expired")
        time.sleep(0.5)
        proxy.restore()
        wait_for(member.take_session_loss, 30, "the member noticing its session expired")
        member.reregister()
        assert client.exists(f"{chroot}/consumers/g/ids/g_me") is not None
        assert member.take_rebalance()
    finally:
        member.close()
        proxy.cut()
