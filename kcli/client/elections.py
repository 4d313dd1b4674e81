"""Leader elections on request, as kafka-leader-election runs them: ElectLeaders (43) to the controller, for named
partitions or (``partitions`` None) every partition of the cluster (KIP-183 preferred, KIP-460 unclean).

Each partition comes back elected, not needing an election (ELECTION_NOT_NEEDED: its preferred replica leads
already, or an unclean election found a live leader), or failed with Kafka's error code and message. A refusal of
the whole request (CLUSTER_AUTHORIZATION_FAILED) raises KafkaRequestError. Nothing here prints.
"""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, KafkaRequestError, _build, error_name
from kcli.client.topics import cluster_view, controller_call, is_not_controller
from kcli.protocol.api import ApiKey

DEFAULT_TIMEOUT_MS = 30_000


class ElectionType(enum.IntEnum):
    """org.apache.kafka.common.ElectionType."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: int
    error_code: int = 0  # Kafka's error code (0: elected)
    message: str | None = None

    @property
    def error(self) -> str | None:
        """``ELECTION_NOT_NEEDED (84)``; None when elected."""
        return None if self.error_code == 0 else error_name(self.error_code)

    @property
    def elected(self) -> bool:
        return self.error_code == 0

    @property
    def not_needed(self) -> bool:
        return self.error_code == ErrorCode.election_not_needed

    @property
    def failed(self) -> bool:
        return not self.elected and not self.not_needed

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_json(self) -> dict[str, Any]:
        outcome = "elected" if self.elected else "not_needed" if self.not_needed else "failed"
        return {"topic": self.topic, "partition": self.partition, "outcome": outcome, "error": self.error,
                "message": self.message}


def parse_election_json(text: str, source: str = "--path-to-json-file") -> list[tuple[str, int]]:
    """kafka-leader-election's --path-to-json-file: ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise KafkaClientError(f"not JSON: {exc}", path=source) from None
    items = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise KafkaClientError('expected {"partitions": [{"topic": ..., "partition": ...}, ...]}', path=source)
    out: list[tuple[str, int]] = []
    for i, item in enumerate(items):
        topic = item.get("topic") if isinstance(item, dict) else None
        partition = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not topic or isinstance(partition, bool) or not isinstance(partition, int):
            raise KafkaClientError(f"partitions[{i}]: expected a \"topic\" string and a \"partition\" number",
                                   path=source)
        out.append((topic, partition))
    if not out:
        raise KafkaClientError("the partition list is empty", path=source)
    duplicates = sorted({f"{t}-{p}" for t, p in out if out.count((t, p)) > 1})
    if duplicates:
        raise KafkaClientError(f"Replica election data contains duplicate partitions: {', '.join(duplicates)}",
                               path=source)
    return out


def topic_partitions(client: KafkaClient, topic: str) -> list[tuple[str, int]]:
    """Every partition of ``topic`` (Metadata); an unknown topic raises KafkaClientError."""
    view = cluster_view(client, [topic])
    found = view.topics.get(topic)
    if found is None:
        raise KafkaClientError(f"topic {topic} not found", path="MetadataResponse")
    if found.error:
        raise KafkaClientError(found.error)
    return [(topic, p.partition) for p in found.partitions]


def elect_leaders(client: KafkaClient, election_type: ElectionType,
                  partitions: Sequence[tuple[str, int]] | None = None, *,
                  timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[ElectionResult]:
    """ElectLeaders for ``partitions`` (None: every partition; then the partitions needing no election are left
    out of the answer, as Kafka leaves them out). Sorted by topic and partition."""
    wanted: dict[str, list[int]] | None = None
    if partitions is not None:
        wanted = {}
        for topic, partition in partitions:
            wanted.setdefault(topic, []).append(int(partition))

    def build(version: int, m: Any) -> Any:
        if version == 0 and election_type is not ElectionType.PREFERRED:
            raise KafkaClientError("the broker serves only ElectLeaders v0 (preferred elections): no unclean "
                                   "election through it")
        return _build(m, "ElectLeadersRequest", election_type=int(election_type),
                      topic_partitions=None if wanted is None else tuple(
                          _build(m, "TopicPartitions", topic=t, partitions=tuple(ps)) for t, ps in wanted.items()),
                      timeout=datetime.timedelta(milliseconds=timeout_ms))

    def not_controller(body: Any) -> bool:
        return is_not_controller(getattr(body, "error_code", ErrorCode.none)) or any(
            is_not_controller(p.error_code) for r in body.replica_election_results for p in r.partition_result)

    version, body = controller_call(client, ApiKey.ELECT_LEADERS, build, not_controller)
    label = f"ElectLeadersResponse v{version}"
    top = getattr(body, "error_code", ErrorCode.none)
    if top != ErrorCode.none and not body.replica_election_results:
        raise KafkaRequestError("", request=label, field="error_code", error=top)
    results = []
    for r in body.replica_election_results:
        for p in r.partition_result:
            code = ErrorCode(p.error_code)
            if code == ErrorCode.none:
                results.append(ElectionResult(r.topic, int(p.partition_id)))
            else:
                results.append(ElectionResult(r.topic, int(p.partition_id), int(code), p.error_message))
    return sorted(results, key=lambda e: (e.topic, e.partition))
