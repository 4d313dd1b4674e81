"""kctl reassign's replication throttles without a cluster: the move map and the throttled-replica lists
kafka-reassign-partitions computes (ReassignPartitionsUnitTest.testMoveMap, its expected strings), and the lines
the tool prints. The cluster run is tests/cli/test_admin_cluster.py's test_reassign_throttle."""

from __future__ import annotations

import pytest

from kcli.client.client import KafkaClientError
from kcli.client.reassign import (
    ClearedThrottles,
    OngoingReassignment,
    PartitionMove,
    ThrottleResult,
    follower_throttles,
    leader_throttles,
    proposed_move_map,
    reassigning_brokers,
)


def _ongoing(topic: str, partition: int, replicas, adding, removing) -> OngoingReassignment:
    return OngoingReassignment(topic, partition, tuple(replicas), tuple(adding), tuple(removing))


def test_move_map_and_throttles_as_kafkas_unit_test():
    """Ongoing reassignments overwritten (foo-0, foo-2..5), kept (foo-1), and a new one (bar-0)."""
    ongoing = {("foo", 0): _ongoing("foo", 0, [1, 2, 3, 4], [4], [3]),
               ("foo", 1): _ongoing("foo", 1, [4, 5, 6, 7, 8], [7, 8], [4, 5]),
               **{("foo", p): _ongoing("foo", p, [1, 2, 3, 4], [3, 4], [1, 2]) for p in (2, 3, 4, 5)}}
    proposed = {("foo", 0): [1, 2, 5], ("foo", 2): [3, 4], ("foo", 3): [5, 6], ("foo", 4): [3],
                ("foo", 5): [3, 4, 5, 6], ("bar", 0): [1, 2, 3]}
    current = {("foo", 0): [1, 2, 3, 4], ("foo", 1): [4, 5, 6, 7, 8],
               **{("foo", p): [1, 2, 3, 4] for p in (2, 3, 4, 5)}, ("bar", 0): [2, 3, 4], ("baz", 0): [1, 2, 3]}
    moves = proposed_move_map(ongoing, proposed, current)

    def move(sources, destinations) -> PartitionMove:
        return PartitionMove(frozenset(sources), frozenset(destinations))

    assert moves == {"foo": {0: move({1, 2, 3}, {5}), 1: move({4, 5, 6}, {7, 8}), 2: move({1, 2}, {3, 4}),
                             3: move({1, 2}, {5, 6}), 4: move({1, 2}, {3}), 5: move({1, 2}, {3, 4, 5, 6})},
                     "bar": {0: move({2, 3, 4}, {1})}}
    assert leader_throttles(moves) == {"foo": "0:1,0:2,0:3,1:4,1:5,1:6,2:1,2:2,3:1,3:2,4:1,4:2,5:1,5:2",
                                       "bar": "0:2,0:3,0:4"}
    assert follower_throttles(moves) == {"foo": "0:5,1:7,1:8,2:3,2:4,3:5,3:6,4:3,5:3,5:4,5:5,5:6", "bar": "0:1"}
    assert reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_throttle_lists_sort_as_kafkas_tree_set_of_strings():
    moves = proposed_move_map({}, {("t", 10): [3], ("t", 2): [3], ("t", 1): [1, 3]},
                              {("t", 10): [1], ("t", 2): [2], ("t", 1): [1, 2]})
    assert leader_throttles(moves) == {"t": "10:1,1:1,1:2,2:2"}
    assert follower_throttles(moves) == {"t": "10:3,1:3,2:3"}
    # a partition that does not move keeps its replicas' leader throttle and adds no follower one (as Kafka)
    still = proposed_move_map({}, {("s", 0): [1, 2]}, {("s", 0): [2, 1]})
    assert (leader_throttles(still), follower_throttles(still)) == ({"s": "0:1,0:2"}, {"s": ""})


def test_a_partition_without_replicas_cannot_be_moved():
    with pytest.raises(KafkaClientError, match="Trying to reassign a topic partition t-0 with 0 replicas"):
        proposed_move_map({}, {("t", 0): [1]}, {})


def test_the_tools_lines():
    throttle = ThrottleResult(10485760, [0, 1], {"t": {}}, None)
    assert throttle.lines() == [
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is "
        "removed.",
        "The inter-broker throttle limit was set to 10485760 B/s"]
    both = ThrottleResult(None, [], {}, 1000, [2])
    assert both.lines()[1:] == ["The replica-alter-dir throttle limit was set to 1000 B/s"]
    assert ClearedThrottles([0, 1, 2], ["t"]).lines() == ["Clearing broker-level throttles on brokers 0,1,2",
                                                         "Clearing topic-level throttles on topic t"]
    assert ClearedThrottles([1], ["a", "b"]).lines() == ["Clearing broker-level throttles on broker 1",
                                                        "Clearing topic-level throttles on topics a,b"]
