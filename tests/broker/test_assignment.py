"""Replica assignment: Kafka's AdminUtils examples (Javadoc, AdminRackAwareTest, kafka-cluster.md §4), errors,
add-partitions, and properties over random broker layouts."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kcli.broker.admin_utils import (
    BrokerMetadata,
    RackAwareMode,
    assign_replicas_to_brokers,
    broker_metadatas,
    create_new_partitions_assignment,
    rack_alternated_broker_list,
    replica_index,
)
from kcli.broker.errors import (
    AdminOperationError,
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    error_code_for,
)

# The AdminUtils Javadoc table: five brokers, start index 0, shift 0, RF 3.
JAVADOC = {
    0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
    5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
}
# AdminRackAwareTest's rack map (and the Javadoc's): its rack-alternated list is [0, 3, 1, 5, 4, 2].
SOURCE_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
RACKS_AB = {0: "a", 1: "a", 2: "b", 3: "b"}


def brokers(racks: dict[int, str | None] | list[int]) -> list[BrokerMetadata]:
    if isinstance(racks, list):
        return [BrokerMetadata(b) for b in racks]
    return [BrokerMetadata(b, rack) for b, rack in sorted(racks.items())]


class FixedDraws:
    """An rng that answers ``randrange`` from a list, recording the bounds asked for."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)
        self.asked: list[int] = []

    def randrange(self, stop: int, /) -> int:
        self.asked.append(stop)
        return self.values.pop(0)


# --- the worked examples ---------------------------------------------------------------------------------

def test_javadoc_table_rack_unaware():
    assert assign_replicas_to_brokers(brokers([0, 1, 2, 3, 4]), 10, 3, 0) == JAVADOC
    # AdminRackAwareTest.testReplicaAssignment passes start partition -1 explicitly: the same table.
    assert assign_replicas_to_brokers(brokers([0, 1, 2, 3, 4]), 10, 3, 0, -1) == JAVADOC


def test_brokers_are_taken_sorted_by_id():
    assert assign_replicas_to_brokers(brokers([3, 1, 4, 0, 2]), 10, 3, 0) == JAVADOC
    assert assign_replicas_to_brokers(brokers([30, 10, 40, 0, 20]), 5, 2, 0) == {
        0: [0, 10], 1: [10, 20], 2: [20, 30], 3: [30, 40], 4: [40, 0]}


def test_start_partition_id_continues_the_table():
    assert assign_replicas_to_brokers(brokers([0, 1, 2, 3, 4]), 5, 3, 0, 5) == {p: JAVADOC[p] for p in range(5, 10)}
    assert assign_replicas_to_brokers(brokers([0, 1, 2, 3, 4]), 3, 3, 0, 3) == {p: JAVADOC[p] for p in range(3, 6)}


def test_replica_index_never_picks_the_leader():
    for n in range(2, 8):
        for first in range(n):
            for shift in range(3 * n):
                for j in range(n - 1):
                    assert replica_index(first, shift, j, n) != first
    assert replica_index(0, 0, 0, 5) == 1 and replica_index(0, 1, 0, 5) == 2 and replica_index(3, 0, 1, 5) == 0


def test_rack_alternated_lists():
    assert rack_alternated_broker_list(RACKS_AB) == [0, 2, 1, 3]
    assert rack_alternated_broker_list(SOURCE_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_broker_list({k: v for k, v in SOURCE_RACKS.items() if k != 5}) == [0, 3, 1, 4, 2]
    # The Javadoc of getRackAlternatedBrokerList, and uneven racks (empty racks are skipped).
    assert rack_alternated_broker_list({0: "rack1", 1: "rack1", 2: "rack1", 3: "rack2", 4: "rack2", 5: "rack2",
                                        6: "rack3", 7: "rack3", 8: "rack3"}) == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert rack_alternated_broker_list({0: "x", 1: "x", 2: "x", 3: "y"}) == [0, 3, 1, 2]


def test_rack_aware_worked_example_rf2():
    assert assign_replicas_to_brokers(brokers(RACKS_AB), 6, 2, 0) == {
        0: [0, 2], 1: [2, 1], 2: [1, 3], 3: [3, 0], 4: [0, 3], 5: [2, 0]}


def test_rack_aware_worked_example_rf3():
    assert assign_replicas_to_brokers(brokers(RACKS_AB), 6, 3, 0) == {
        0: [0, 2, 1], 1: [2, 1, 3], 2: [1, 3, 0], 3: [3, 0, 2], 4: [0, 3, 2], 5: [2, 0, 1]}


def test_admin_rack_aware_test_six_brokers_seven_partitions():
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers (fixed start 0, start id 0).
    assert assign_replicas_to_brokers(brokers(SOURCE_RACKS), 7, 3, 0, 0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}


def test_random_start_and_shift_are_drawn_in_kafkas_order():
    # Java draws the start index, then the shift, each with nextInt(number of brokers).
    rng = FixedDraws(2, 3)
    assert assign_replicas_to_brokers(brokers([0, 1, 2, 3, 4]), 2, 3, rng=rng) == {0: [2, 1, 3], 1: [3, 2, 4]}
    assert rng.asked == [5, 5]
    rng = FixedDraws(1, 0)
    assert assign_replicas_to_brokers(brokers(RACKS_AB), 1, 2, rng=rng) == {0: [2, 1]}
    assert rng.asked == [4, 4]
    # A fixed start index draws nothing.
    assert assign_replicas_to_brokers(brokers([0, 1, 2]), 3, 2, 1, rng=FixedDraws()) == {
        0: [1, 0], 1: [2, 1], 2: [0, 2]}


# --- errors ----------------------------------------------------------------------------------------------

def test_errors_are_typed_with_wire_codes():
    five = brokers([0, 1, 2, 3, 4])
    with pytest.raises(InvalidPartitionsError, match="Number of partitions must be larger than 0"):
        assign_replicas_to_brokers(five, 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        assign_replicas_to_brokers(five, 10, 0)
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 6 larger than available brokers: 5"):
        assign_replicas_to_brokers(five, 10, 6)
    with pytest.raises(AdminOperationError, match="Not all brokers have rack information") as info:
        assign_replicas_to_brokers([BrokerMetadata(0, "a"), BrokerMetadata(1, None)], 1, 1)
    assert error_code_for(info.value) is ErrorCode.unknown_server_error  # not an ApiException in Kafka
    assert error_code_for(InvalidPartitionsError("x")) is ErrorCode.invalid_partitions
    assert error_code_for(InvalidReplicationFactorError("x")) is ErrorCode.invalid_replication_factor
    assert error_code_for(BrokerNotAvailableError("x")) is ErrorCode.broker_not_available


def test_broker_metadatas_rack_aware_modes():
    mixed = [BrokerMetadata(2, "a"), BrokerMetadata(0, None), BrokerMetadata(1, "b")]
    with pytest.raises(AdminOperationError, match="--disable-rack-aware"):
        broker_metadatas(mixed)
    assert broker_metadatas(mixed, RackAwareMode.SAFE) == brokers([0, 1, 2])
    assert broker_metadatas(mixed, RackAwareMode.DISABLED) == brokers([0, 1, 2])
    racked = [BrokerMetadata(1, "b"), BrokerMetadata(0, "a")]
    assert broker_metadatas(racked) == broker_metadatas(racked, RackAwareMode.SAFE) == brokers({0: "a", 1: "b"})
    assert broker_metadatas(racked, RackAwareMode.DISABLED) == brokers([0, 1])


# --- add partitions (AdminZkClient.createNewPartitionsAssignment) ----------------------------------------

def test_new_partitions_continue_the_existing_layout():
    existing = {p: JAVADOC[p] for p in range(5)}
    assert create_new_partitions_assignment("t", existing, brokers([0, 1, 2, 3, 4]), 10) == {
        p: JAVADOC[p] for p in range(5, 10)}


def test_new_partitions_start_at_the_first_broker_at_or_above_partition_0s_leader():
    # Brokers 1..5, partition 0 on [3, 4, 5]: start index 2 (broker 3), shift 2, RF 3, ids from 1.
    assert create_new_partitions_assignment("t", {0: [3, 4, 5]}, brokers([5, 4, 3, 2, 1]), 3) == {
        1: [4, 2, 3], 2: [5, 3, 4]}
    # No broker at or above it (partition 0 on a removed broker 9): start index 0.
    assert create_new_partitions_assignment("t", {0: [9]}, brokers([0, 1, 2]), 4) == {1: [1], 2: [2], 3: [0]}
    # Rack-aware: the index is taken in the id-sorted list but used in the rack-alternated one, as Kafka does.
    assert create_new_partitions_assignment("t", {0: [1, 2]}, brokers(RACKS_AB), 3) == \
        assign_replicas_to_brokers(brokers(RACKS_AB), 2, 2, 1, 1)


def test_new_partitions_errors_and_proposed_assignments():
    three = brokers([0, 1, 2])
    with pytest.raises(AdminOperationError, match="partition id 0 is missing"):
        create_new_partitions_assignment("t", {1: [0]}, three, 3)
    with pytest.raises(InvalidPartitionsError, match="can only be increased"):
        create_new_partitions_assignment("t", {0: [0], 1: [1]}, three, 2)
    existing = {0: [0, 1]}
    assert create_new_partitions_assignment("t", existing, three, 3, {1: [2, 0], 2: [1, 2]}) == {
        1: [2, 0], 2: [1, 2]}
    with pytest.raises(InvalidReplicaAssignmentError, match="replication factor of 0 for partition id 1"):
        create_new_partitions_assignment("t", existing, three, 2, {1: []})
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate brokers"):
        create_new_partitions_assignment("t", existing, three, 2, {1: [1, 1]})
    with pytest.raises(BrokerNotAvailableError, match="available brokers: 0, 1, 2"):
        create_new_partitions_assignment("t", existing, three, 2, {1: [1, 7]})
    with pytest.raises(InvalidReplicaAssignmentError,
                       match=r"partition 0 has 2 while partitions \[1, 2\] have replication factors \[1, 3\]"):
        create_new_partitions_assignment("t", existing, three, 3, {1: [1], 2: [0, 1, 2]})


# --- AdminRackAwareTest's distribution checks ------------------------------------------------------------

def check_distribution(assignment, racks, n_partitions, rf, *, rack_aware=True, leaders=True, replicas=True):
    """RackAwareTest.checkReplicaDistribution."""
    for replica_list in assignment.values():
        assert len(set(replica_list)) == len(replica_list)
    if rack_aware:
        assert [len({racks[b] for b in r}) for r in assignment.values()] == [rf] * n_partitions
    if leaders:
        counts = Counter(r[0] for r in assignment.values())
        assert sorted(counts.values()) == [n_partitions // len(racks)] * len(racks)
    if replicas:
        counts = Counter(b for r in assignment.values() for b in r)
        assert sorted(counts.values()) == [n_partitions * rf // len(racks)] * len(racks)


EVEN = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


@pytest.mark.parametrize("seed", range(20))
def test_admin_rack_aware_test_distributions(seed):
    rng = random.Random(seed)
    check_distribution(assign_replicas_to_brokers(brokers(EVEN), 6, 3, 2, 0), EVEN, 6, 3)
    check_distribution(assign_replicas_to_brokers(brokers(EVEN), 6, 3, rng=rng), EVEN, 6, 3)
    check_distribution(assign_replicas_to_brokers(brokers(EVEN), 13, 3, 0, 0), EVEN, 13, 3,
                       leaders=False, replicas=False)
    uneven = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    check_distribution(assign_replicas_to_brokers(brokers(uneven), 12, 3, rng=rng), uneven, 12, 3, replicas=False)
    check_distribution(assign_replicas_to_brokers(brokers(EVEN), 12, 2, rng=rng), EVEN, 12, 2)
    expansion = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    assignment = assign_replicas_to_brokers(brokers(expansion), 12, 2, -1, 12, rng=rng)
    assert sorted(assignment) == list(range(12, 24))
    check_distribution(assignment, expansion, 12, 2)
    check_distribution(assign_replicas_to_brokers(brokers(EVEN), 6, 2, rng=rng), EVEN, 6, 2)
    three = {0: "rack1", 1: "rack2", 4: "rack3"}
    check_distribution(assign_replicas_to_brokers(brokers(three), 3, 2, rng=rng), three, 3, 2)
    large = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1",
             6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"}
    check_distribution(assign_replicas_to_brokers(brokers(large), 96, 3, rng=rng), large, 96, 3)
    skewed = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    for rf, spanned in ((5, 3), (2, 2)):  # testMoreReplicasThanRacks, testLessReplicasThanRacks
        assignment = assign_replicas_to_brokers(brokers(skewed), 6, rf, rng=rng)
        assert all(len(r) == rf and len({skewed[b] for b in r}) == spanned for r in assignment.values())
    single = dict.fromkeys(range(6), "rack1")  # testSingleRack
    assignment = assign_replicas_to_brokers(brokers(single), 6, 3, rng=rng)
    assert all(len(r) == 3 for r in assignment.values())
    assert Counter(r[0] for r in assignment.values()) == dict.fromkeys(range(6), 1)
    skip = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}  # testSkipBrokerWithReplicaAlreadyAssigned
    check_distribution(assign_replicas_to_brokers(brokers(skip), 6, 4, 2, -1), skip, 6, 4,
                       rack_aware=False, leaders=False, replicas=False)


# --- properties over random layouts ----------------------------------------------------------------------

@st.composite
def layouts(draw):
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=12, unique=True))
    racked = draw(st.booleans())
    racks = {b: (draw(st.sampled_from("abcd")) if racked else None) for b in ids}
    rf = draw(st.integers(1, len(ids)))
    n_partitions = draw(st.integers(1, 60))
    fixed = draw(st.sampled_from([-1]) | st.integers(0, len(ids) - 1))
    start = draw(st.sampled_from([-1]) | st.integers(0, 40))
    return racks, rf, n_partitions, fixed, start, draw(st.integers(0, 2**32))


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_assignment_properties(layout):
    racks, rf, n_partitions, fixed, start, seed = layout
    assignment = assign_replicas_to_brokers(brokers(racks), n_partitions, rf, fixed, start, random.Random(seed))
    first = max(0, start)
    assert list(assignment) == list(range(first, first + n_partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(racks)
    # Leaders go round robin over the broker list: spread evenly, within one.
    leaders = Counter({b: 0 for b in racks}) + Counter(r[0] for r in assignment.values())
    counts = [leaders[b] for b in racks]
    assert max(counts) - min(counts) <= 1
    if racks[next(iter(racks))] is not None:
        n_racks = len(set(racks.values()))
        assert all(len({racks[b] for b in r}) == min(rf, n_racks) for r in assignment.values())
    # The same draws give the same assignment.
    assert assign_replicas_to_brokers(brokers(racks), n_partitions, rf, fixed, start, random.Random(seed)) == assignment


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10), st.integers(1, 4), st.data())
def test_full_rounds_spread_replicas_evenly_without_racks(n_brokers, rounds, data):
    # Within a round of n partitions (ids aligned on n) the shift is constant, so each follower slot is a
    # rotation of the broker list: every broker holds exactly rounds * RF replicas.
    rf = data.draw(st.integers(1, n_brokers))
    fixed = data.draw(st.integers(-1, n_brokers - 1))
    start = n_brokers * data.draw(st.integers(0, 3))
    assignment = assign_replicas_to_brokers(brokers(list(range(n_brokers))), rounds * n_brokers, rf, fixed, start,
                                            random.Random(data.draw(st.integers(0, 1000))))
    assert Counter(b for r in assignment.values() for b in r) == dict.fromkeys(range(n_brokers), rounds * rf)
