"""Kafka's replica assignment, pure: ``AdminUtils.assignReplicasToBrokers`` and the add-partitions variant.

Ported from Kafka 3.7.0's ``server-common/.../admin/AdminUtils.java`` and ``core/.../zk/AdminZkClient.scala``
(``getBrokerMetadatas``, ``createNewPartitionsAssignment``, ``validateReplicaAssignment``); see
kafka-cluster.md §4. Same inputs, same random draws, same result, so a kctl cluster places replicas where a
Kafka cluster would.

Goals (AdminUtils' Javadoc): spread replicas evenly over the brokers; spread the followers of the partitions a
broker leads over the other brokers; with racks, put a partition's replicas on distinct racks where possible.

Rack-unaware: the leader of partition ``p`` is ``brokers[(p + start) % n]``; follower ``j`` is
``brokers[replica_index(first, shift, j, n)]``, and the shift grows by one every ``n`` partitions. With five
brokers, start 0, shift 0 and RF 3 (the Javadoc table): p0..p4 = [0,1,2] [1,2,3] [2,3,4] [3,4,0] [4,0,1], then
p5..p9 = [0,2,3] [1,3,4] [2,4,0] [3,0,1] [4,1,2].

Rack-aware: the same round robin over the rack-alternated broker list (one broker of each rack in turn), the
shift scaled by the number of racks; a follower candidate is skipped while its rack already holds a replica and
some rack holds none, or while it already holds one and some broker holds none.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kcli.broker.errors import (
    AdminOperationError,
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)


class RandomSource(Protocol):
    """What the assignment draws from (``random`` itself, or a seeded ``random.Random``): Java's
    ``Random.nextInt(n)`` is ``randrange(n)``."""

    def randrange(self, stop: int, /) -> int: ...


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A broker as the assignment sees it (Kafka's ``org.apache.kafka.admin.BrokerMetadata``)."""

    id: int
    rack: str | None = None


class RackAwareMode(enum.Enum):
    """How the ZooKeeper admin path treats racks (``kafka.admin.RackAwareMode``)."""

    ENFORCED = "enforced"  # some but not all brokers with a rack: an error
    SAFE = "safe"  # some but not all brokers with a rack: ignore racks
    DISABLED = "disabled"  # ignore racks


def broker_metadatas(brokers: Iterable[BrokerMetadata],
                     rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED) -> list[BrokerMetadata]:
    """The brokers for an assignment, as ``AdminZkClient.getBrokerMetadatas`` gives them: racks kept, dropped
    (Disabled, or Safe with some brokers rackless) or refused (Enforced with some rackless), sorted by id."""
    brokers = list(brokers)
    with_rack = [b for b in brokers if b.rack is not None]
    if rack_aware_mode is RackAwareMode.ENFORCED and with_rack and len(with_rack) < len(brokers):
        raise AdminOperationError("Not all brokers have rack information. Add --disable-rack-aware in command line"
                                  " to make replica assignment without rack information.")
    if rack_aware_mode is RackAwareMode.DISABLED or (
            rack_aware_mode is RackAwareMode.SAFE and len(with_rack) < len(brokers)):
        brokers = [BrokerMetadata(b.id, None) for b in brokers]
    return sorted(brokers, key=lambda b: b.id)


def replica_index(first_replica_index: int, second_replica_shift: int, index: int, n_brokers: int) -> int:
    """Index of a follower in the broker list: never the leader's index (``AdminUtils.replicaIndex``)."""
    shift = 1 + (second_replica_shift + index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers alternated by rack (``AdminUtils.getRackAlternatedBrokerList``): ids sorted within each rack,
    racks sorted by name, then one broker of each rack in turn, skipping racks already used up.

    ``{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}`` gives ``[0, 3, 1, 5, 4, 2]``.
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [iter(sorted(by_rack[rack])) for rack in sorted(by_rack)]
    result: list[int] = []
    rack_index = 0
    while len(result) < len(broker_racks):
        broker = next(queues[rack_index], None)
        if broker is not None:
            result.append(broker)
        rack_index = (rack_index + 1) % len(queues)
    return result


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerMetadata],
    n_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: RandomSource = random,
) -> dict[int, list[int]]:
    """Partition id -> replica ids, the first the preferred leader (``AdminUtils.assignReplicasToBrokers``).

    ``fixed_start_index`` (``>= 0``) fixes both the first leader's index and the initial follower shift, which are
    otherwise drawn from ``rng`` (start first, then shift, as Kafka draws them). Partition ids start at
    ``max(0, start_partition_id)``. Brokers are taken sorted by id, as ``AdminZkClient.getBrokerMetadatas`` gives
    them (only the rack-unaware order depends on it). Racks are used when every broker has one.

    Raises ``InvalidPartitionsError`` (``n_partitions <= 0``), ``InvalidReplicationFactorError`` (RF <= 0 or above
    the broker count) and ``AdminOperationError`` (some brokers with a rack, some without).
    """
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(f"Replication factor: {replication_factor} larger than available "
                                            f"brokers: {len(brokers)}.")
    ordered = sorted(brokers, key=lambda b: b.id)
    if all(b.rack is None for b in ordered):
        return _assign_rack_unaware(n_partitions, replication_factor, [b.id for b in ordered], fixed_start_index,
                                    start_partition_id, rng)
    if any(b.rack is None for b in ordered):
        raise AdminOperationError("Not all brokers have rack information for replica rack aware assignment.")
    return _assign_rack_aware(n_partitions, replication_factor, {b.id: b.rack for b in ordered}, fixed_start_index,
                              start_partition_id, rng)


def _start_and_shift(fixed_start_index: int, n: int, rng: RandomSource) -> tuple[int, int]:
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    return start, shift


def _assign_rack_unaware(n_partitions: int, replication_factor: int, broker_list: list[int], fixed_start_index: int,
                         start_partition_id: int, rng: RandomSource) -> dict[int, list[int]]:
    n = len(broker_list)
    start_index, next_replica_shift = _start_and_shift(fixed_start_index, n, rng)
    partition = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            next_replica_shift += 1
        first = (partition + start_index) % n
        result[partition] = [broker_list[first]] + [
            broker_list[replica_index(first, next_replica_shift, j, n)] for j in range(replication_factor - 1)]
        partition += 1
    return result


def _assign_rack_aware(n_partitions: int, replication_factor: int, broker_racks: dict[int, str],
                       fixed_start_index: int, start_partition_id: int, rng: RandomSource) -> dict[int, list[int]]:
    num_racks = len(set(broker_racks.values()))
    arranged = rack_alternated_broker_list(broker_racks)
    n = len(arranged)
    start_index, next_replica_shift = _start_and_shift(fixed_start_index, n, rng)
    partition = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            next_replica_shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with_replicas = {broker_racks[leader]}
        brokers_with_replicas = {leader}
        k = 0  # not reset between followers
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[replica_index(first, next_replica_shift * num_racks, k, n)]
                rack = broker_racks[broker]
                k += 1
                # Skip the broker while its rack has a replica and some rack has none, or while it has a replica
                # and some broker has none.
                if ((rack not in racks_with_replicas or len(racks_with_replicas) == num_racks)
                        and (broker not in brokers_with_replicas or len(brokers_with_replicas) == n)):
                    replicas.append(broker)
                    racks_with_replicas.add(rack)
                    brokers_with_replicas.add(broker)
                    break
        result[partition] = replicas
        partition += 1
    return result


def create_new_partitions_assignment(
    topic: str,
    existing_assignment: Mapping[int, Sequence[int]],
    brokers: Sequence[BrokerMetadata],
    num_partitions: int,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
    rng: RandomSource = random,
) -> dict[int, list[int]]:
    """The replicas of the partitions that take ``topic`` to ``num_partitions`` (``AdminZkClient
    .createNewPartitionsAssignment``): ``replica_assignment`` once validated, else computed with RF = partition
    0's, partition ids from the current count on, and the fixed start index of the first broker (sorted by id)
    whose id is ``>=`` partition 0's first replica (0 if none), so new partitions continue the existing layout.

    Raises ``AdminOperationError`` (no partition 0), ``InvalidPartitionsError`` (not an increase),
    ``InvalidReplicaAssignmentError`` / ``BrokerNotAvailableError`` (a bad proposed assignment) and what
    ``assign_replicas_to_brokers`` raises.
    """
    if 0 not in existing_assignment:
        raise AdminOperationError(f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is "
                                  f"missing. Assignment: {dict(existing_assignment)}")
    partition0 = list(existing_assignment[0])
    partitions_to_add = num_partitions - len(existing_assignment)
    if partitions_to_add <= 0:
        raise InvalidPartitionsError(f"The number of partitions for a topic can only be increased. Topic {topic} "
                                     f"currently has {len(existing_assignment)} partitions, {num_partitions} would "
                                     f"not be an increase.")
    ordered = sorted(brokers, key=lambda b: b.id)
    if replica_assignment is not None:
        validate_replica_assignment(replica_assignment, len(partition0), {b.id for b in ordered})
        return {partition: list(replicas) for partition, replicas in replica_assignment.items()}
    start_index = next((i for i, b in enumerate(ordered) if partition0 and b.id >= partition0[0]), 0)
    return assign_replicas_to_brokers(ordered, partitions_to_add, len(partition0), start_index,
                                      len(existing_assignment), rng)


def validate_replica_assignment(replica_assignment: Mapping[int, Sequence[int]], expected_replication_factor: int,
                                available_broker_ids: set[int]) -> None:
    """A proposed assignment for new partitions (``AdminZkClient.validateReplicaAssignment``): no empty or
    duplicated replica lists, only available brokers, every partition with partition 0's replication factor."""
    for partition, replicas in replica_assignment.items():
        if not replicas:
            raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"Duplicate brokers not allowed in replica assignment: "
                                                f"{', '.join(map(str, replicas))} for partition id {partition}.")
        if not set(replicas) <= available_broker_ids:
            raise BrokerNotAvailableError(
                f"Some brokers specified for partition id {partition} are not available. Specified brokers: "
                f"{', '.join(map(str, replicas))}, available brokers: {', '.join(map(str, sorted(available_broker_ids)))}.")
    bad = sorted((p, len(r)) for p, r in replica_assignment.items() if len(r) != expected_replication_factor)
    if bad:
        raise InvalidReplicaAssignmentError(
            f"Inconsistent replication factor between partitions, partition 0 has {expected_replication_factor} "
            f"while partitions [{', '.join(str(p) for p, _ in bad)}] have replication factors "
            f"[{', '.join(str(rf) for _, rf in bad)}], respectively.")


__all__ = [
    "BrokerMetadata",
    "RackAwareMode",
    "RandomSource",
    "assign_replicas_to_brokers",
    "broker_metadatas",
    "create_new_partitions_assignment",
    "rack_alternated_broker_list",
    "replica_index",
    "validate_replica_assignment",
]
