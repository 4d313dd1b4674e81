"""Partition reassignment's pure rules (KIP-455 as Kafka 2.8-3.x's ZooKeeper-mode controller applies them;
kafka-cluster.md 2.7): which reassignment a request asks for, and which target replica lists it refuses.

The flow itself (phases U, A and B of KafkaController.onPartitionReassignment) runs on the controller-event
thread, in the reassignment section of controller.py.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from kcli.broker.controller.context import ReplicaAssignment
from kcli.broker.errors import InvalidReplicaAssignmentError
from kcli.errors import KcliError


class ReassignmentFailedError(KcliError):
    """onPartitionReassignment failed for a partition (Kafka answers UNKNOWN_SERVER_ERROR and logs it)."""

    error_code = "UNKNOWN_SERVER_ERROR"


def validate_replicas(current: ReplicaAssignment, target: Sequence[int],
                      live_broker_ids: Collection[int]) -> InvalidReplicaAssignmentError | None:
    """KafkaController.validateReplicas, for AlterPartitionReassignments only (the ZooKeeper trigger is not
    validated): a non-empty list without duplicates or negative ids, whose new replicas are all live."""
    if not target:
        return InvalidReplicaAssignmentError("Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        return InvalidReplicaAssignmentError(
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}")
    if any(r < 0 for r in target):
        return InvalidReplicaAssignmentError(f"Invalid broker id in replica list: {list(target)}")
    adding = current.reassign_to(target).adding_replicas
    if not set(adding) <= set(live_broker_ids):
        return InvalidReplicaAssignmentError(
            f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, live broker list: "
            f"{sorted(live_broker_ids)}")
    return None


def build_reassignment(current: ReplicaAssignment, target: Sequence[int] | None) -> ReplicaAssignment | None:
    """KafkaController.maybeBuildReassignment: the full assignment to move to. ``target`` None cancels: back to
    the original replicas of an ongoing reassignment, or None (NO_REASSIGNMENT_IN_PROGRESS) if there is none.
    A new target replaces an ongoing one (the latest request wins), counted from its original replicas."""
    if current.is_being_reassigned:
        return current.reassign_to(target if target is not None else current.origin_replicas)
    return current.reassign_to(target) if target is not None else None
