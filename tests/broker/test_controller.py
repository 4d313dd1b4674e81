"""The controller against a real ZooKeeper and brokers that are real sockets.

Each "broker" is a BrokerRegistration plus a ControllerRunner (as kctl's broker will run them) whose registered
endpoint is a small TCP server here: it decodes the inter-broker requests with kcli's codec, records them and
answers NONE. The controller (whichever runner is active) is driven only through ZooKeeper; the tests look at
the znodes it writes and at the requests the brokers received, in order.
"""

from __future__ import annotations

import json
import time

import pytest

from controller_support import Broker, RecordingBroker, live_ids, partitions_of, start_broker, wait_for
from kcli.protocol import ApiKey
from kcli.storage.checkpoint import uuid_to_base64
from kcli.zk.kafka_zk_client import KafkaZkClient
from kcli.zk.models import TopicPartition

pytestmark = pytest.mark.zookeeper

TOPIC_ID = "k-4sq6EMT1Wf8qPTKH7ljQ"
ORDERS = {0: [1, 2], 1: [2, 1], 2: [0, 2]}  # broker 1 leads p0 and follows p1; the controller (0) leads p2


@pytest.fixture
def cluster(zookeeper, chroot):
    brokers: dict[int, Broker] = {}

    def start(broker_id: int) -> Broker:
        brokers[broker_id] = start_broker(zookeeper.connect + chroot, broker_id)
        return brokers[broker_id]

    yield start, brokers
    for broker in sorted(brokers.values(), key=lambda b: b.runner.is_active):  # the controller last: no failovers
        broker.stop()


def state(root, chroot, partition: int, topic: str = "orders"):
    data, stat = root.get(f"{chroot}/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data), stat.version


@pytest.fixture
def three_brokers(cluster):
    """Brokers 0 (the controller), 1 and 2, each known to the controller (UpdateMetadata listing all three)."""
    start, brokers = cluster
    start(0)
    wait_for(lambda: brokers[0].runner.is_active, what="broker 0 controlling")
    start(1)
    start(2)
    for broker in brokers.values():
        wait_for(lambda b=broker: any(live_ids(u) == {0, 1, 2} for u in b.server.requests(ApiKey.UPDATE_METADATA)),
                 what=f"broker {broker.id} learning the live brokers")
    return brokers


def create_orders(brokers, root, chroot) -> None:
    for broker in brokers.values():
        broker.server.clear()
    # Any broker may create topics: here broker 1, over its own session.
    KafkaZkClient.for_registration(brokers[1].registration).create_topic("orders", ORDERS, TOPIC_ID)
    wait_for(lambda: all(root.exists(f"{chroot}/brokers/topics/orders/partitions/{p}/state") for p in ORDERS),
             what="the partition states")
    wait_for(lambda: all(ApiKey.UPDATE_METADATA in b.server.kinds() for b in brokers.values()),
             what="UpdateMetadata for the new partitions")


def test_new_topic_gets_leaders_states_and_requests_in_order(three_brokers, root, chroot):
    brokers = three_brokers
    controller_epoch = brokers[0].runner.epoch
    assert controller_epoch == brokers[0].runner.epoch == 1
    create_orders(brokers, root, chroot)

    # State nodes: leader = first live replica, ISR = the live replicas, leader epoch 0, our controller epoch.
    for partition, replicas in ORDERS.items():
        assert state(root, chroot, partition) == ({"version": 1, "leader": replicas[0], "leader_epoch": 0,
                                                   "controller_epoch": controller_epoch, "isr": replicas}, 0)

    for broker in brokers.values():
        hosted = {p for p, replicas in ORDERS.items() if broker.id in replicas}
        kinds = broker.server.kinds()
        # LeaderAndIsr (isNew) to each replica first, then UpdateMetadata to every broker.
        assert kinds == [ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA], (broker.id, kinds)
        [leader_and_isr] = broker.server.requests(ApiKey.LEADER_AND_ISR)
        assert (leader_and_isr.controller_id, leader_and_isr.controller_epoch) == (0, controller_epoch)
        assert leader_and_isr.broker_epoch == broker.registration.broker_epoch
        assert [uuid_to_base64(t.topic_id) for t in leader_and_isr.topic_states] == [TOPIC_ID]
        states = partitions_of(leader_and_isr)
        assert set(states) == {("orders", p) for p in hosted}
        for (_, p), s in states.items():
            assert (s.leader, s.leader_epoch, list(s.isr), list(s.replicas), s.is_new, s.partition_epoch) == \
                (ORDERS[p][0], 0, ORDERS[p], ORDERS[p], True, 0)
        assert {l.broker_id for l in leader_and_isr.live_leaders} == {ORDERS[p][0] for p in hosted}
        [update] = broker.server.requests(ApiKey.UPDATE_METADATA)
        assert update.broker_epoch == broker.registration.broker_epoch
        assert set(partitions_of(update)) == {("orders", p) for p in ORDERS}
        assert {(b.id, b.rack, tuple((e.listener, e.security_protocol, e.host, e.port) for e in b.endpoints))
                for b in update.live_brokers} == {
            (b.id, f"r{b.id}", (("PLAINTEXT", 0, "127.0.0.1", b.server.port),)) for b in brokers.values()}


def test_dead_broker_loses_leadership_and_isr_membership(three_brokers, root, chroot):
    brokers = three_brokers
    create_orders(brokers, root, chroot)
    for broker in brokers.values():
        broker.server.clear()
    brokers[1].stop()

    wait_for(lambda: state(root, chroot, 0)[0]["leader"] == 2 and state(root, chroot, 1)[0]["isr"] == [2],
             what="leadership moved off broker 1")
    epoch = brokers[0].runner.epoch
    # p0: broker 1 led it; Offline election from the live ISR, leader epoch + 1.
    assert state(root, chroot, 0) == ({"version": 1, "leader": 2, "leader_epoch": 1, "controller_epoch": epoch,
                                       "isr": [2]}, 1)
    # p1: broker 1 followed; it leaves the ISR and the leader epoch goes up although the leader stays.
    assert state(root, chroot, 1) == ({"version": 1, "leader": 2, "leader_epoch": 1, "controller_epoch": epoch,
                                       "isr": [2]}, 1)
    # p2 did not involve broker 1: untouched.
    assert state(root, chroot, 2) == ({"version": 1, "leader": 0, "leader_epoch": 0, "controller_epoch": epoch,
                                       "isr": [0, 2]}, 0)

    def latest_views(broker):
        seen = {}
        for update in broker.server.requests(ApiKey.UPDATE_METADATA):
            for key, s in partitions_of(update).items():
                seen[key] = (s.leader, s.leader_epoch, list(s.isr), list(s.offline_replicas), live_ids(update))
        return seen

    for broker in (brokers[0], brokers[2]):
        wait_for(lambda b=broker: latest_views(b).get(("orders", 1), (None,))[0:3] == (2, 1, [2]),
                 what=f"broker {broker.id} learning p1's new ISR")
        views = latest_views(broker)
        assert views[("orders", 0)] == (2, 1, [2], [1], {0, 2})
        assert views[("orders", 1)] == (2, 1, [2], [1], {0, 2})
    # Broker 2 leads p0 now: it got a LeaderAndIsr saying so.
    lead = [partitions_of(r)[("orders", 0)] for r in brokers[2].server.requests(ApiKey.LEADER_AND_ISR)
            if ("orders", 0) in partitions_of(r)]
    assert lead and (lead[0].leader, lead[0].leader_epoch, list(lead[0].isr), lead[0].is_new) == (2, 1, [2], False)


def test_failover_to_another_broker_reads_the_state_back(three_brokers, root, chroot):
    brokers = three_brokers
    create_orders(brokers, root, chroot)
    before = {p: state(root, chroot, p) for p in ORDERS}
    old_epoch = brokers[0].runner.epoch
    brokers[0].stop()

    wait_for(lambda: brokers[1].runner.is_active or brokers[2].runner.is_active, what="a new controller")
    new = brokers[1] if brokers[1].runner.is_active else brokers[2]
    other = brokers[2] if new is brokers[1] else brokers[1]
    assert new.runner.epoch == old_epoch + 1 == int(root.get(f"{chroot}/controller_epoch")[0])
    assert not other.runner.is_active
    wait_for(lambda: state(root, chroot, 2)[0]["leader"] == 2, what="p2 (led by the old controller) moving")
    # p0 and p1 had nothing on broker 0: read back, not rewritten.
    assert state(root, chroot, 0) == before[0] and state(root, chroot, 1) == before[1]
    # p2, led by broker 0: two interleavings are Kafka's. Broker 0 gone from /brokers/ids when the new controller
    # starts: its replica state machine takes 0 out first (leader -1, ISR [2], epoch 1), then the partition state
    # machine elects 2 (epoch 2), Kafka's failover order. Broker 0 still registered then (a stopping controller
    # hands over first): its later BrokerChange elects 2 from the live ISR in one write (epoch 1), and taking the
    # offline replica out finds nothing left to change. Either way: 2 leads, alone in the ISR, one write a step.
    p2, version = state(root, chroot, 2)
    assert {k: v for k, v in p2.items() if k != "leader_epoch"} == {
        "version": 1, "leader": 2, "controller_epoch": old_epoch + 1, "isr": [2]}
    assert p2["leader_epoch"] in (1, 2) and version == p2["leader_epoch"], (p2, version)
    controller = new.runner.controller
    wait_for(lambda: controller.ctx.partition_leadership_info(TopicPartition("orders", 0)) is not None)
    info = controller.ctx.partition_leadership_info(TopicPartition("orders", 0))
    assert (info.leader_and_isr.leader, info.leader_and_isr.partition_epoch, info.controller_epoch) == (1, 0, old_epoch)

    # The new controller told both survivors: UpdateMetadata (the live set) before any LeaderAndIsr. Broker 0 is in
    # that first live set if it was still registered at the failover (the interleaving above); then a later
    # UpdateMetadata, after its BrokerChange, leaves it out.
    def from_new(broker) -> list:
        return [(k, b) for k, b in zip(broker.server.kinds(), broker.server.requests())
                if b.controller_epoch == old_epoch + 1]

    for broker in (brokers[1], brokers[2]):
        wait_for(lambda b=broker: any(r.controller_epoch == old_epoch + 1
                                      for r in b.server.requests(ApiKey.LEADER_AND_ISR)),
                 what=f"broker {broker.id} hearing from the new controller")
        first_kind, first = from_new(broker)[0]
        assert first_kind == ApiKey.UPDATE_METADATA and {1, 2} <= live_ids(first) <= {0, 1, 2}
        assert not partitions_of(first)
        wait_for(lambda b=broker: any(k == ApiKey.UPDATE_METADATA and live_ids(r) == {1, 2} for k, r in from_new(b)),
                 what=f"broker {broker.id} told that broker 0 is gone")


def test_a_stopping_controller_hands_over_before_its_broker_goes(three_brokers, root, chroot):
    """The controller's shutdown (the first step of a broker's stop) resigns and gives up /controller at once:
    another broker controls the cluster while the stopping one is still registered, closing its logs (issue 23).
    Kafka holds /controller until its ZooKeeper session closes, the last step."""
    brokers = three_brokers
    old_epoch = brokers[0].runner.epoch
    brokers[0].runner.shutdown()

    wait_for(lambda: brokers[1].runner.is_active or brokers[2].runner.is_active, what="a new controller")
    assert root.exists(f"{chroot}/brokers/ids/0")  # broker 0 is still there
    new = brokers[1] if brokers[1].runner.is_active else brokers[2]
    assert new.runner.epoch == old_epoch + 1
    assert json.loads(root.get(f"{chroot}/controller")[0])["brokerid"] == new.id
    assert not brokers[0].runner.is_active and brokers[0].runner.controller_id is None
    # Broker 0 bids no more: when the new controller goes, the third broker takes over.
    new.stop()
    other = brokers[2] if new is brokers[1] else brokers[1]
    wait_for(lambda: other.runner.is_active, what="the third broker controlling")
    assert json.loads(root.get(f"{chroot}/controller")[0])["brokerid"] == other.id
    assert not brokers[0].runner.is_active
    assert other.runner.controller_id == other.id


def test_isr_change_notification_reaches_every_broker(three_brokers, root, chroot):
    brokers = three_brokers
    create_orders(brokers, root, chroot)
    for broker in brokers.values():
        broker.server.clear()
    # Broker 2, leader of p1, shrinks its ISR on the ZK-direct path and notifies.
    leader_zk = KafkaZkClient.for_registration(brokers[2].registration)
    assert leader_zk.update_leader_and_isr("orders", 1, 2, 0, [2], controller_epoch=1, expected_version=0) == 1
    leader_zk.propagate_isr_changes([("orders", 1)])
    for broker in brokers.values():
        wait_for(lambda b=broker: any(list(partitions_of(u).get(("orders", 1), None).isr) == [2]
                                      for u in b.server.requests(ApiKey.UPDATE_METADATA)
                                      if ("orders", 1) in partitions_of(u)), what=f"broker {broker.id} new ISR")
    update = brokers[0].server.requests(ApiKey.UPDATE_METADATA)[-1]
    assert partitions_of(update)[("orders", 1)].zk_version == 1
    wait_for(lambda: root.get_children(chroot + "/isr_change_notification") == [], what="the notification deleted")


def test_added_partitions_and_topic_deletion(three_brokers, root, chroot):
    brokers = three_brokers
    create_orders(brokers, root, chroot)
    zk = KafkaZkClient.for_registration(brokers[2].registration)
    for broker in brokers.values():
        broker.server.clear()
    zk.add_partitions("orders", {**ORDERS, 3: [2, 0]})
    wait_for(lambda: root.exists(f"{chroot}/brokers/topics/orders/partitions/3/state"), what="p3's state")
    assert state(root, chroot, 3)[0]["leader"] == 2
    wait_for(lambda: ApiKey.LEADER_AND_ISR in brokers[0].server.kinds())
    [leader_and_isr] = brokers[0].server.requests(ApiKey.LEADER_AND_ISR)
    assert set(partitions_of(leader_and_isr)) == {("orders", 3)}  # only the new partition
    assert brokers[1].server.requests(ApiKey.LEADER_AND_ISR) == []
    for broker in brokers.values():  # the UpdateMetadata for p3 reaches everyone before the records are cleared
        wait_for(lambda b=broker: any(("orders", 3) in partitions_of(u) for u in b.server.requests(ApiKey.UPDATE_METADATA)))

    for broker in brokers.values():
        broker.server.clear()
    zk.delete_topic("orders")
    # Kafka's order: the topic node, its config, then the deletion marker.
    wait_for(lambda: not root.exists(chroot + "/admin/delete_topics/orders"), what="the topic deleted")
    assert not root.exists(chroot + "/brokers/topics/orders")
    assert not root.exists(chroot + "/config/topics/orders")
    for broker in brokers.values():
        hosted = {p for p, r in {**ORDERS, 3: [2, 0]}.items() if broker.id in r}
        stops = [s for r in broker.server.requests(ApiKey.STOP_REPLICA) for t in r.topic_states
                 for s in t.partition_states]
        assert {s.partition_index for s in stops if s.delete_partition} == hosted
        assert all(s.leader_epoch == -2 for s in stops)
        dropped = [s for u in broker.server.requests(ApiKey.UPDATE_METADATA) for s in partitions_of(u).values()]
        assert dropped and all(s.leader == -2 for s in dropped)
    controller = brokers[0].runner.controller
    wait_for(lambda: "orders" not in controller.ctx.all_topics, what="the controller forgetting the topic")


def test_whole_isr_offline_clean_and_unclean(three_brokers, root, chroot):
    """ISR [1] and broker 1 dies: unclean off leaves leader -1, epoch+1, ISR [1] (its last member); a topic
    with unclean.leader.election.enable=true gets broker 2 as leader with ISR [2]."""
    brokers = three_brokers
    zk = KafkaZkClient.for_registration(brokers[1].registration)
    zk.create_topic("clean", {0: [1, 2]})
    zk.create_topic("unclean", {0: [1, 2]}, configs={"unclean.leader.election.enable": "true"})
    for topic in ("clean", "unclean"):
        wait_for(lambda t=topic: root.exists(f"{chroot}/brokers/topics/{t}/partitions/0/state"))
        # Broker 1, the leader, shrinks the ISR to itself.
        assert zk.update_leader_and_isr(topic, 0, 1, 0, [1], controller_epoch=1, expected_version=0) == 1
    brokers[1].stop()
    wait_for(lambda: state(root, chroot, 0, "clean")[0]["leader"] == -1, what="clean: no leader")
    wait_for(lambda: state(root, chroot, 0, "unclean")[0]["leader"] == 2, what="unclean: broker 2 leads")
    assert state(root, chroot, 0, "clean")[0] == {"version": 1, "leader": -1, "leader_epoch": 1,
                                                  "controller_epoch": 1, "isr": [1]}
    assert state(root, chroot, 0, "unclean")[0] == {"version": 1, "leader": 2, "leader_epoch": 1,
                                                    "controller_epoch": 1, "isr": [2]}


def test_requests_are_resent_until_the_broker_answers(three_brokers, root, chroot):
    """Broker 2's endpoint goes away: the controller keeps reconnecting, and the queued requests arrive in order
    once something listens there again."""
    brokers = three_brokers
    port = brokers[2].server.port
    brokers[2].server.stop()
    KafkaZkClient.for_registration(brokers[1].registration).create_topic("orders", {0: [2, 0]}, TOPIC_ID)
    wait_for(lambda: root.exists(f"{chroot}/brokers/topics/orders/partitions/0/state"))
    time.sleep(0.3)  # a few refused attempts
    brokers[2].server = RecordingBroker(port)
    wait_for(lambda: brokers[2].server.kinds()[:2] == [ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA],
             what="the queued requests delivered")
    [leader_and_isr] = brokers[2].server.requests(ApiKey.LEADER_AND_ISR)
    assert partitions_of(leader_and_isr)[("orders", 0)].leader == 2


def test_controlled_shutdown_moves_leadership_and_stops_followers(three_brokers, root, chroot):
    from kcli.broker.controller import StaleBrokerEpochError

    brokers = three_brokers
    create_orders(brokers, root, chroot)
    for broker in brokers.values():
        broker.server.clear()
    runner = brokers[0].runner
    epoch = brokers[1].registration.broker_epoch
    with pytest.raises(StaleBrokerEpochError):
        runner.controlled_shutdown(1, epoch - 1).result(timeout=20)
    assert runner.controlled_shutdown(1, epoch).result(timeout=20) == set()  # nothing left to lead
    # p0, led by 1: the ControlledShutdown election (leader 2, ISR without 1).
    assert state(root, chroot, 0)[0] == {"version": 1, "leader": 2, "leader_epoch": 1, "controller_epoch": 1,
                                         "isr": [2]}
    # p1, followed by 1: StopReplica(delete=false) to it, then out of the ISR with an epoch bump.
    assert state(root, chroot, 1)[0] == {"version": 1, "leader": 2, "leader_epoch": 1, "controller_epoch": 1,
                                         "isr": [2]}
    wait_for(lambda: brokers[1].server.requests(ApiKey.STOP_REPLICA), what="StopReplica to broker 1")
    stops = partitions_of(brokers[1].server.requests(ApiKey.STOP_REPLICA)[0])
    assert {k: (s.delete_partition, s.leader_epoch) for k, s in stops.items()} == {("orders", 1): (False, 0)}
    # The stopping broker is still told about p0 (it learns it follows now).
    wait_for(lambda: any(("orders", 0) in partitions_of(r) for r in brokers[1].server.requests(ApiKey.LEADER_AND_ISR)))
