"""The controller election on the controller's event thread (KafkaController.elect, Kafka's elect / maybeResign and
the Startup, ControllerChange and Reelect events), in process against the session's real ZooKeeper: brokers race
for /controller, the one that wins fails over, the others follow; a deleted /controller is bid for again; a
controller that shut down gives /controller up and never bids again. A controller whose connection dropped and came
back within its session still acts on what it watches (kazoo sets no watch again on a reconnection); one whose
session expired resigns, registers again and bids (Kafka's Expire and RegisterBrokerAndReelect)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from controller_support import Broker, RecordingBroker, wait_for
from kcli.broker.controller import ControllerRunner
from kcli.zk.kafka_zk_client import KafkaZkClient
from kcli.zk.registration import BrokerRegistration

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def registered(zookeeper, chroot):
    """make(broker_id) -> Broker whose registration is in ZooKeeper and whose runner is built, not started."""
    made: list[Broker] = []

    def make(broker_id: int) -> Broker:
        server = RecordingBroker()
        registration = BrokerRegistration(zookeeper.connect + chroot, broker_id,
                                          endpoints=[("PLAINTEXT", "127.0.0.1", server.port)])
        registration.start(None)
        broker = Broker(broker_id, server, registration, ControllerRunner(None, broker_id, registration,
                                                                           socket_timeout=5))
        made.append(broker)
        return broker

    yield make
    for broker in sorted(made, key=lambda b: b.runner.is_active):  # the controller last
        broker.stop()


def holder(root, chroot) -> int | None:
    found = root.exists(f"{chroot}/controller")
    return json.loads(root.get(f"{chroot}/controller")[0])["brokerid"] if found else None


def epoch(root, chroot) -> int:
    return int(root.get(f"{chroot}/controller_epoch")[0])


def start_together(brokers: list[Broker]) -> None:
    barrier = threading.Barrier(len(brokers))

    def start(broker: Broker) -> None:
        barrier.wait()
        broker.runner.start()  # returns once its first election is over

    threads = [threading.Thread(target=start, args=(b,)) for b in brokers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_two_controllers_race_and_one_wins(registered, root, chroot):
    brokers = [registered(0), registered(1)]
    start_together(brokers)
    winner = holder(root, chroot)
    assert winner in (0, 1) and epoch(root, chroot) == 1  # one transaction went through, the epoch moved once
    assert [b.runner.is_active for b in brokers] == [b.id == winner for b in brokers]
    assert [b.runner.controller_id for b in brokers] == [winner, winner]  # the loser recorded the winner
    assert brokers[winner].runner.epoch == 1


def test_a_deleted_controller_node_is_bid_for_again(registered, root, chroot):
    brokers = [registered(0), registered(1)]
    start_together(brokers)
    first = holder(root, chroot)

    root.delete(f"{chroot}/controller")  # as triggerControllerMove does: every broker bids again (Reelect)
    wait_for(lambda: holder(root, chroot) is not None and any(b.runner.is_active for b in brokers),
             what="a controller elected again")
    again = holder(root, chroot)
    assert epoch(root, chroot) == 2
    wait_for(lambda: [b.runner.is_active for b in brokers] == [b.id == again for b in brokers],
             what="one controller")
    wait_for(lambda: all(b.runner.controller_id == again for b in brokers), what="both following it")
    assert brokers[again].runner.epoch == 2
    assert first in (0, 1)


def test_the_other_takes_over_and_a_resigned_one_never_bids_again(registered, root, chroot):
    brokers = {0: registered(0)}
    brokers[0].runner.start()
    assert brokers[0].runner.is_active and holder(root, chroot) == 0
    brokers[1] = registered(1)
    brokers[1].runner.start()
    assert not brokers[1].runner.is_active and brokers[1].runner.controller_id == 0

    brokers[0].runner.shutdown()  # resigns and gives /controller up at once: broker 1 takes over
    wait_for(lambda: brokers[1].runner.is_active, what="broker 1 controlling")
    assert holder(root, chroot) == 1 and epoch(root, chroot) == 2 and brokers[1].runner.epoch == 2
    assert root.exists(f"{chroot}/brokers/ids/0")  # broker 0 is still registered, no longer a candidate

    brokers[1].stop()  # nobody bids: broker 0 resigned
    time.sleep(1.5)
    assert holder(root, chroot) is None and epoch(root, chroot) == 2
    assert not brokers[0].runner.is_active and brokers[0].runner.controller_id is None


def drop_connection(registration: BrokerRegistration) -> None:
    """Drop the broker's ZooKeeper connection as kazoo's own test harness does (KazooTestHarness.lose_connection);
    kazoo reconnects within the same session, having dropped every watch it had set."""
    client = registration.zk_client
    session = client.client_id
    lost, back = threading.Event(), threading.Event()

    def follow(state) -> bool:
        if state == KazooState.SUSPENDED:
            lost.set()
        elif lost.is_set() and state == KazooState.CONNECTED:
            back.set()
            return True  # kazoo removes a listener that returns True
        return False

    client.add_listener(follow)
    client._call(_CONNECTION_DROP, None)
    assert lost.wait(10), "the connection did not drop"
    assert back.wait(30), "no reconnection"
    assert client.client_id == session  # the same session: its ephemeral nodes (/controller among them) stayed


def expire_session(zookeeper, registration: BrokerRegistration) -> None:
    """Expire the broker's session on the server: another client joins it with its id and password, then closes it
    (ZooKeeper's own tests do this); the broker's kazoo client learns it on reconnecting and opens a new session.
    The two connections of one session take it from each other, so the intruder may be thrown out before its close
    went through: it tries again until the broker is in a new session."""
    client = registration.zk_client
    session = client.client_id

    def moved() -> bool:
        now = client.client_id
        return now is not None and now[0] != session[0]

    deadline = time.monotonic() + 60
    while not moved():
        assert time.monotonic() < deadline, "the session did not expire"
        intruder = KazooClient(hosts=zookeeper.connect, client_id=session)  # no chroot: start() reads nothing
        try:
            intruder.start(timeout=15)  # closes itself when it times out
        except Exception:  # thrown out by the broker's reconnection: again
            pass
        else:
            intruder.stop()
            intruder.close()
        settle = time.monotonic() + 10
        while not moved() and time.monotonic() < settle:
            time.sleep(0.05)


def partition_state(root, chroot, topic: str, partition: int = 0) -> dict | None:
    path = f"{chroot}/brokers/topics/{topic}/partitions/{partition}/state"
    return json.loads(root.get(path)[0]) if root.exists(path) else None


def test_a_controller_reconnected_within_its_session_still_watches_topics_and_brokers(registered, root, chroot):
    brokers = [registered(0), registered(1)]
    brokers[0].runner.start()
    brokers[1].runner.start()
    assert brokers[0].runner.is_active and not brokers[1].runner.is_active

    drop_connection(brokers[0].registration)
    # A topic created after the reconnection (any broker's admin writes it): the controller's /brokers/topics watch
    # elects its leader.
    KafkaZkClient.for_registration(brokers[1].registration).create_topic("after-reconnect", {0: [0, 1]})
    wait_for(lambda: partition_state(root, chroot, "after-reconnect") is not None, what="the new topic's leader")
    assert partition_state(root, chroot, "after-reconnect")["leader"] == 0
    # Still the same controller, no election in between.
    assert holder(root, chroot) == 0 and epoch(root, chroot) == 1 and brokers[0].runner.is_active

    brokers[1].stop()  # its /brokers/ids node goes: the /brokers/ids watch has the controller shrink the ISR
    wait_for(lambda: partition_state(root, chroot, "after-reconnect")["isr"] == [0], what="broker 1 out of the ISR")


def test_a_follower_reconnected_within_its_session_still_takes_over(registered, root, chroot):
    brokers = [registered(0), registered(1)]
    brokers[0].runner.start()
    brokers[1].runner.start()
    assert brokers[0].runner.is_active

    drop_connection(brokers[1].registration)
    brokers[0].runner.shutdown()  # gives /controller up: broker 1's /controller watch has it bid
    wait_for(lambda: brokers[1].runner.is_active, what="broker 1 controlling")
    assert holder(root, chroot) == 1 and epoch(root, chroot) == 2


def test_a_controller_whose_session_expired_resigns_registers_again_and_bids(zookeeper, registered, root, chroot):
    brokers = [registered(0), registered(1)]
    brokers[0].runner.start()
    brokers[1].runner.start()
    assert brokers[0].runner.is_active
    first_epoch = brokers[0].registration.broker_epoch

    expire_session(zookeeper, brokers[0].registration)
    # /controller went with the session: both bid (broker 0 once registered again in its new session), one wins.
    wait_for(lambda: brokers[0].registration.broker_epoch != first_epoch, what="broker 0 registered again")
    wait_for(lambda: epoch(root, chroot) == 2 and holder(root, chroot) is not None
             and [b.runner.is_active for b in brokers] == [b.id == holder(root, chroot) for b in brokers],
             what="one controller elected again")
    controller = holder(root, chroot)
    wait_for(lambda: all(b.runner.controller_id == controller for b in brokers), what="both following it")

    KafkaZkClient.for_registration(brokers[1].registration).create_topic("after-expiry", {0: [1, 0]})
    wait_for(lambda: partition_state(root, chroot, "after-expiry") is not None, what="the new topic's leader")
    state = partition_state(root, chroot, "after-expiry")
    assert (state["leader"], state["isr"], state["controller_epoch"]) == (1, [1, 0], 2)
