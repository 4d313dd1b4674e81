"""The controller election's ZooKeeper transaction (KafkaZkClient.register_controller_and_increment_controller_epoch,
Kafka's registerControllerAndIncrementControllerEpoch) against a real ZooKeeper: candidates on sessions of their
own, as brokers bid."""

from __future__ import annotations

import json
import threading

import pytest
from kazoo.client import KazooClient

from kcli.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def session(zookeeper, root, chroot):
    """KafkaZkClients on sessions of their own under the test's chroot (closed at teardown)."""
    root.ensure_path(chroot)
    clients: list[KazooClient] = []

    def make() -> KafkaZkClient:
        client = KazooClient(hosts=zookeeper.connect + chroot, timeout=10)
        client.start(timeout=10)
        clients.append(client)
        return KafkaZkClient(client, timeout=10)

    yield make
    for client in clients:
        client.stop()
        client.close()


def test_the_first_bid_creates_the_epoch_and_wins(session, root, chroot):
    zk = session()
    epoch, epoch_zk_version = zk.register_controller_and_increment_controller_epoch(3)
    data, stat = root.get(chroot + "/controller_epoch")
    # Kafka creates /controller_epoch with 0, then the transaction sets 1
    assert (epoch, epoch_zk_version) == (1, stat.version) == (1, 1) and data == b"1"
    claim = json.loads(root.get(chroot + "/controller")[0])
    assert (claim["version"], claim["brokerid"]) == (1, 3) and isinstance(claim["timestamp"], str)
    assert zk.get_controller_claim() == (3, True)
    assert root.exists(chroot + "/controller").ephemeralOwner != 0


def test_two_candidates_one_wins_and_the_epoch_moves_once(session, root, chroot):
    root.create(chroot + "/controller_epoch", b"7", makepath=True)
    candidates = [session() for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: dict[int, object] = {}

    def bid(broker_id: int) -> None:
        barrier.wait()
        try:
            outcomes[broker_id] = candidates[broker_id].register_controller_and_increment_controller_epoch(broker_id)
        except ControllerMovedError as exc:
            outcomes[broker_id] = exc

    threads = [threading.Thread(target=bid, args=(b,)) for b in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [b for b, o in outcomes.items() if isinstance(o, tuple)]
    assert len(winners) == 1 and len(outcomes) == 2
    winner = winners[0]
    assert isinstance(outcomes[1 - winner], ControllerMovedError)
    data, stat = root.get(chroot + "/controller_epoch")
    assert data == b"8" and outcomes[winner] == (8, stat.version)
    assert json.loads(root.get(chroot + "/controller")[0])["brokerid"] == winner
    assert candidates[1 - winner].get_controller_claim() == (winner, False)


def test_a_bid_against_a_held_controller_is_refused(session, root, chroot):
    first, second = session(), session()
    first.register_controller_and_increment_controller_epoch(0)
    with pytest.raises(ControllerMovedError, match="broker 0"):
        second.register_controller_and_increment_controller_epoch(1)
    assert root.get(chroot + "/controller_epoch")[0] == b"1"
    # the same session bidding again (it holds /controller already) moves nothing either
    with pytest.raises(ControllerMovedError):
        first.register_controller_and_increment_controller_epoch(0)
    assert root.get(chroot + "/controller_epoch")[0] == b"1"


def test_a_stale_epoch_zk_version_refuses_the_bid(session, root, chroot, monkeypatch):
    """Another controller was elected (and went) between the candidate's read of /controller_epoch and its
    transaction: the conditional set fails, nothing is created."""
    zk = session()
    zk.register_controller_and_increment_controller_epoch(0)
    stale = zk.get_controller_epoch()
    root.delete(chroot + "/controller")
    root.set(chroot + "/controller_epoch", b"2")  # the other controller's term
    late = session()
    monkeypatch.setattr(late, "get_controller_epoch", lambda: stale)
    with pytest.raises(ControllerMovedError):
        late.register_controller_and_increment_controller_epoch(1)
    assert root.exists(chroot + "/controller") is None
    assert root.get(chroot + "/controller_epoch")[0] == b"2"


def test_fenced_writes_fail_after_another_election(session, root, chroot):
    first, second = session(), session()
    _, first_version = first.register_controller_and_increment_controller_epoch(0)
    root.delete(chroot + "/controller")
    assert second.register_controller_and_increment_controller_epoch(1) == (2, first_version + 1)
    with pytest.raises(ControllerMovedError):
        first.delete_controller(first_version)
    assert json.loads(root.get(chroot + "/controller")[0])["brokerid"] == 1
