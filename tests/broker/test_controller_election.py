"""The controller election on the controller's event thread (KafkaController.elect, Kafka's elect / maybeResign and
the Startup, ControllerChange and Reelect events), in process against the session's real ZooKeeper: brokers race
for /controller, the one that wins fails over, the others follow; a deleted /controller is bid for again; a
controller that shut down gives /controller up and never bids again."""

from __future__ import annotations

import json
import threading
import time

import pytest

from controller_support import Broker, RecordingBroker, wait_for
from kcli.broker.controller import ControllerRunner
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
