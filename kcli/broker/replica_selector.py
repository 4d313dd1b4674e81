"""Replica selectors: which replica a consumer should fetch from (KIP-392, Kafka's ReplicaSelector).

`replica.selector.class` names one of Kafka's: unset (the default) means every consumer fetches from the leader;
``org.apache.kafka.common.replica.RackAwareReplicaSelector`` sends a consumer that gave its rack (``client.rack``,
Fetch v11+ ``RackId``) to an in-sync replica in that rack; ``org.apache.kafka.common.replica.LeaderSelector``
always answers the leader. The leader asks the selector per partition (ReplicaManager.preferred_read_replica);
a choice other than the leader is returned to the consumer as ``PreferredReadReplica``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER = "org.apache.kafka.common.replica.LeaderSelector"


@dataclass(frozen=True)
class ReplicaView:
    """One candidate (Kafka's ReplicaView): its broker, that broker's rack (None when the broker is not alive in
    the metadata cache: Kafka's Node.noNode()), its log end offset and how long ago it was last caught up."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(self, client_rack: str, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView | None:
        """The replica ``client_rack``'s consumer should read from; ``replicas`` includes ``leader``."""


class LeaderSelector:
    def select(self, client_rack: str, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView | None:
        return leader


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: no client rack, or no replica in it → the leader; the leader in it →
    the leader; else the same-rack replica with the highest log end offset, then the least time since it
    was caught up, then the highest broker id (``max`` of ReplicaView.comparator)."""

    def select(self, client_rack: str, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView | None:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack is not None and r.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, r.broker_id))


SELECTORS: dict[str, type] = {RACK_AWARE: RackAwareReplicaSelector, LEADER: LeaderSelector}


def parse_selector_class(text: str) -> str:
    """The `replica.selector.class` config parser: one of the class names kctl implements."""
    name = text.strip()
    if name not in SELECTORS:
        raise ValueError(f"kctl implements only {', '.join(sorted(SELECTORS))}")
    return name


def create_replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """Kafka's ReplicaManager.createReplicaSelector: None when the config is unset (leader only)."""
    if not class_name:
        return None
    return SELECTORS[class_name]()
