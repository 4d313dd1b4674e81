"""What each API checks before it touches anything (Kafka's KafkaApis with AuthHelper; kafka-security.md §4.5).

The table ``CHECKS`` is the one statement of the rules: one row per (API, operation, resource type) with the error
a denial gets and how it applies. The handlers call the helpers below with those rows' values, always before they
look at whether the resource exists, so a denial never reveals it (TOPIC_AUTHORIZATION_FAILED whether or not the
topic is there); tests walk the table row by row. Without an authorizer every helper allows everything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kcli.protocol import ApiKey
from kcli.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from kcli.broker.handlers.common import RequestContext

Op = AclOperation
Res = ResourceType
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed


@dataclass(frozen=True, slots=True)
class Check:
    """One row of §4.5: ``api`` needs ``operation`` on ``resource``; a denial answers ``error`` ``scope``
    (``request``: the whole request fails; ``item``: that topic/partition/group/resource only; ``filter``: the
    item is silently left out)."""

    api: ApiKey
    operation: AclOperation
    resource: ResourceType
    error: ErrorCode | None
    scope: str
    note: str = ""


CHECKS: tuple[Check, ...] = (
    Check(ApiKey.PRODUCE, Op.WRITE, Res.TOPIC, TOPIC_DENIED, "item", "acks=0 (any error): the connection closes"),
    Check(ApiKey.PRODUCE, Op.WRITE, Res.TRANSACTIONAL_ID, TXN_DENIED, "request", "transactional batches only"),
    Check(ApiKey.FETCH, Op.READ, Res.TOPIC, TOPIC_DENIED, "item", "consumers (replica_id < 0)"),
    Check(ApiKey.FETCH, Op.CLUSTER_ACTION, Res.CLUSTER, TOPIC_DENIED, "request",
          "followers (replica_id >= 0): every partition"),
    Check(ApiKey.LIST_OFFSETS, Op.DESCRIBE, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.METADATA, Op.DESCRIBE, Res.TOPIC, TOPIC_DENIED, "item", "all-topics requests: filter"),
    Check(ApiKey.METADATA, Op.CREATE, Res.CLUSTER, None, "item", "auto-creation: CLUSTER, else CREATE on the topic"),
    Check(ApiKey.METADATA, Op.CREATE, Res.TOPIC, TOPIC_DENIED, "item", "auto-creation without CREATE on CLUSTER"),
    Check(ApiKey.LEADER_AND_ISR, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.STOP_REPLICA, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.UPDATE_METADATA, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.CONTROLLED_SHUTDOWN, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.OFFSET_COMMIT, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.OFFSET_COMMIT, Op.READ, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.OFFSET_FETCH, Op.DESCRIBE, Res.GROUP, GROUP_DENIED, "request", "per group from v8"),
    Check(ApiKey.OFFSET_FETCH, Op.DESCRIBE, Res.TOPIC, TOPIC_DENIED, "item", "all-partitions requests: filter"),
    Check(ApiKey.FIND_COORDINATOR, Op.DESCRIBE, Res.GROUP, GROUP_DENIED, "item"),
    Check(ApiKey.FIND_COORDINATOR, Op.DESCRIBE, Res.TRANSACTIONAL_ID, TXN_DENIED, "item"),
    Check(ApiKey.JOIN_GROUP, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.HEARTBEAT, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.LEAVE_GROUP, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.SYNC_GROUP, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.DESCRIBE_GROUPS, Op.DESCRIBE, Res.GROUP, GROUP_DENIED, "item", "authorized operations v3+"),
    Check(ApiKey.LIST_GROUPS, Op.DESCRIBE, Res.CLUSTER, None, "filter", "all groups; else by DESCRIBE on GROUP"),
    Check(ApiKey.LIST_GROUPS, Op.DESCRIBE, Res.GROUP, None, "filter"),
    Check(ApiKey.CREATE_TOPICS, Op.CREATE, Res.CLUSTER, None, "item", "else CREATE on the topic"),
    Check(ApiKey.CREATE_TOPICS, Op.CREATE, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.CREATE_TOPICS, Op.DESCRIBE_CONFIGS, Res.TOPIC, TOPIC_DENIED, "item",
          "the configs in the answer: TopicConfigErrorCode"),
    Check(ApiKey.DELETE_TOPICS, Op.DELETE, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.DELETE_TOPICS, Op.DESCRIBE, Res.TOPIC, TOPIC_DENIED, "item", "by topic id: the name is nulled"),
    Check(ApiKey.DELETE_RECORDS, Op.DELETE, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.INIT_PRODUCER_ID, Op.WRITE, Res.TRANSACTIONAL_ID, TXN_DENIED, "request"),
    Check(ApiKey.INIT_PRODUCER_ID, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_DENIED, "request",
          "no transactional id: or WRITE on some TOPIC (KIP-679)"),
    Check(ApiKey.OFFSET_FOR_LEADER_EPOCH, Op.CLUSTER_ACTION, Res.CLUSTER, None, "request",
          "else DESCRIBE on each topic"),
    Check(ApiKey.OFFSET_FOR_LEADER_EPOCH, Op.DESCRIBE, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.ADD_PARTITIONS_TO_TXN, Op.WRITE, Res.TRANSACTIONAL_ID, TXN_DENIED, "request", "v0-v3"),
    Check(ApiKey.ADD_PARTITIONS_TO_TXN, Op.WRITE, Res.TOPIC, TOPIC_DENIED, "item", "v0-v3; internal topics too"),
    Check(ApiKey.ADD_PARTITIONS_TO_TXN, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_DENIED, "request",
          "v4+ (broker to broker)"),
    Check(ApiKey.ADD_OFFSETS_TO_TXN, Op.WRITE, Res.TRANSACTIONAL_ID, TXN_DENIED, "request"),
    Check(ApiKey.ADD_OFFSETS_TO_TXN, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.END_TXN, Op.WRITE, Res.TRANSACTIONAL_ID, TXN_DENIED, "request"),
    Check(ApiKey.WRITE_TXN_MARKERS, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_DENIED, "request",
          "or ALTER on CLUSTER (KIP-664)"),
    Check(ApiKey.TXN_OFFSET_COMMIT, Op.WRITE, Res.TRANSACTIONAL_ID, TXN_DENIED, "request"),
    Check(ApiKey.TXN_OFFSET_COMMIT, Op.READ, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.TXN_OFFSET_COMMIT, Op.READ, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS, Res.CLUSTER, CLUSTER_DENIED, "item",
          "broker and broker-logger resources"),
    Check(ApiKey.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.CLUSTER, CLUSTER_DENIED, "item"),
    Check(ApiKey.ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.INCREMENTAL_ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.CLUSTER, CLUSTER_DENIED, "item"),
    Check(ApiKey.INCREMENTAL_ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.ALTER_REPLICA_LOG_DIRS, Op.ALTER, Res.CLUSTER, CLUSTER_DENIED, "request",
          "every partition of the request"),
    Check(ApiKey.DESCRIBE_LOG_DIRS, Op.DESCRIBE, Res.CLUSTER, CLUSTER_DENIED, "request",
          "no directories; the error code from v3 on"),
    Check(ApiKey.CREATE_PARTITIONS, Op.ALTER, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.DELETE_GROUPS, Op.DELETE, Res.GROUP, GROUP_DENIED, "item"),
    Check(ApiKey.ELECT_LEADERS, Op.ALTER, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.ALTER_PARTITION_REASSIGNMENTS, Op.ALTER, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.LIST_PARTITION_REASSIGNMENTS, Op.DESCRIBE, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.OFFSET_DELETE, Op.DELETE, Res.GROUP, GROUP_DENIED, "request"),
    Check(ApiKey.DESCRIBE_CLIENT_QUOTAS, Op.DESCRIBE_CONFIGS, Res.CLUSTER, CLUSTER_DENIED, "request"),
    Check(ApiKey.ALTER_CLIENT_QUOTAS, Op.ALTER_CONFIGS, Res.CLUSTER, CLUSTER_DENIED, "item", "every entry"),
    Check(ApiKey.OFFSET_DELETE, Op.READ, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.DESCRIBE_CLUSTER, Op.DESCRIBE, Res.CLUSTER, None, "filter", "only the authorized operations"),
    Check(ApiKey.DESCRIBE_PRODUCERS, Op.READ, Res.TOPIC, TOPIC_DENIED, "item"),
    Check(ApiKey.DESCRIBE_TRANSACTIONS, Op.DESCRIBE, Res.TRANSACTIONAL_ID, TXN_DENIED, "item"),
    Check(ApiKey.DESCRIBE_TRANSACTIONS, Op.DESCRIBE, Res.TOPIC, None, "filter", "the transaction's partitions"),
    Check(ApiKey.LIST_TRANSACTIONS, Op.DESCRIBE, Res.TRANSACTIONAL_ID, None, "filter"),
)
# Left to their own handlers (they check ALTER / DESCRIBE on CLUSTER themselves): the ACL APIs (29-31) and the
# SCRAM credential APIs (50/51). Not checked by Kafka: ApiVersions, SaslHandshake, SaslAuthenticate.

# AclEntry.supportedOperations: what an authorized-operations bit field (KIP-430) may contain per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    Res.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                Op.ALTER_CONFIGS),
    Res.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    Res.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                  Op.ALTER, Op.DESCRIBE),
    Res.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    Res.DELEGATION_TOKEN: (Op.DESCRIBE,),
    Res.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def _authorizer(ctx: RequestContext):
    return getattr(ctx.services, "authorizer", None)


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str, *,
            log_if_allowed: bool = True, log_if_denied: bool = True, ref_count: int = 1) -> bool:
    """AuthHelper.authorize on a LITERAL resource (True without an authorizer)."""
    return ctx.authorize(operation, resource_type, name, log_if_allowed=log_if_allowed,
                         log_if_denied=log_if_denied, ref_count=ref_count)


def cluster(ctx: RequestContext, operation: AclOperation, *, log_if_denied: bool = True) -> bool:
    """``operation`` on the one CLUSTER resource, ``kafka-cluster``."""
    return ctx.authorize(operation, Res.CLUSTER, CLUSTER_NAME, log_if_denied=log_if_denied)


def authorized_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[str | None], *, log_if_allowed: bool = True,
                     log_if_denied: bool = True) -> set[str]:
    """AuthHelper.filterByAuthorized: the names allowed, each asked once with how often the request names it
    (the audit log's resourceRefCount)."""
    if _authorizer(ctx) is None:  # the hot path of every produce and fetch without an authorizer
        return {n for n in names if n is not None}
    counts = Counter(n for n in names if n is not None)
    return {name for name, count in counts.items()
            if ctx.authorize(operation, resource_type, name, log_if_allowed=log_if_allowed,
                             log_if_denied=log_if_denied, ref_count=count)}


def any_of_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Authorizer.authorizeByResourceType (KIP-679): may the principal do ``operation`` on SOME resource of the
    type? True without an authorizer."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(ctx.session, operation, resource_type, request=ctx.request_name)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """AuthHelper.authorizedOperations: bit n set for each supported operation code n the principal is allowed
    (Utils.to32BitField); the checks are not logged (Kafka's logIfAllowed = logIfDenied = false)."""
    supported = SUPPORTED_OPERATIONS.get(resource_type, ())
    if _authorizer(ctx) is None:
        return sum(1 << op for op in supported)
    return sum(1 << op for op in supported
               if ctx.authorize(op, resource_type, name, log_if_allowed=False, log_if_denied=False))
