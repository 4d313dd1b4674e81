"""KafkaApis: the one dispatch table from API key to handler (Kafka's KafkaApis.handle).

ApiVersions is answered by the protocol layer's table; every other advertised API has exactly one handler
here, and a test checks that the table and the advertised versions agree.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Awaitable, Callable
from typing import Any

from kcli.broker.handlers import (
    acls,
    configs,
    elect_leaders,
    fetch,
    groups,
    inter_broker,
    leader_epochs,
    list_offsets,
    log_dirs,
    metadata,
    produce,
    producers,
    quotas,
    reassignments,
    sasl,
    scram,
    topics,
    transactions,
)
from kcli.broker.handlers.common import RequestContext
from kcli.broker.quotas import REQUEST_PERCENTAGE, TimedCoroutine
from kcli.broker.security import PLAINTEXT_SESSION, Session
from kcli.protocol import ApiKey

Handler = Callable[[RequestContext, Any], Awaitable[Any]]

# Kafka's ApiKeys.clusterAction: exempt from the request quota (sendResponseExemptThrottle)
CLUSTER_ACTIONS = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                             ApiKey.CONTROLLED_SHUTDOWN, ApiKey.WRITE_TXN_MARKERS})

HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: produce.produce,
    ApiKey.FETCH: fetch.fetch,
    ApiKey.LIST_OFFSETS: list_offsets.list_offsets,
    ApiKey.METADATA: metadata.metadata,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.CREATE_TOPICS: topics.create_topics,
    ApiKey.DELETE_TOPICS: topics.delete_topics,
    ApiKey.DELETE_RECORDS: topics.delete_records,
    ApiKey.INIT_PRODUCER_ID: producers.init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: leader_epochs.offset_for_leader_epoch,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.add_offsets_to_txn,
    ApiKey.END_TXN: transactions.end_txn,
    ApiKey.WRITE_TXN_MARKERS: transactions.write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: transactions.txn_offset_commit,
    ApiKey.SASL_HANDSHAKE: sasl.sasl_handshake,  # after authentication (or without SASL): ILLEGAL_SASL_STATE
    ApiKey.SASL_AUTHENTICATE: sasl.sasl_authenticate,
    ApiKey.DESCRIBE_ACLS: acls.describe_acls,
    ApiKey.CREATE_ACLS: acls.create_acls,
    ApiKey.DELETE_ACLS: acls.delete_acls,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: log_dirs.alter_replica_log_dirs,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
    ApiKey.CREATE_PARTITIONS: topics.create_partitions,
    ApiKey.DELETE_GROUPS: groups.delete_groups,
    ApiKey.ELECT_LEADERS: elect_leaders.elect_leaders,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignments.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignments.list_partition_reassignments,
    ApiKey.OFFSET_DELETE: groups.offset_delete,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: quotas.alter_client_quotas,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram.describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram.alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLUSTER: metadata.describe_cluster,
    ApiKey.DESCRIBE_PRODUCERS: transactions.describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
    # the controller's requests (served, not advertised: kcli.protocol.api.INTER_BROKER_APIS)
    ApiKey.LEADER_AND_ISR: inter_broker.leader_and_isr,
    ApiKey.STOP_REPLICA: inter_broker.stop_replica,
    ApiKey.UPDATE_METADATA: inter_broker.update_metadata,
    ApiKey.CONTROLLED_SHUTDOWN: inter_broker.controlled_shutdown,
}


class KafkaApis:
    def __init__(self, services: Any) -> None:
        self.services = services

    async def handle(self, api_key: ApiKey, api_version: int, body: Any, *, client_id: str, client_host: str,
                     correlation_id: int = 0, session: Session = PLAINTEXT_SESSION, request_name: str = "",
                     charge: Any = None) -> Any:
        """The response body for one request (None: no response, as for acks=0). Unknown keys raise
        LookupError: the socket edge treats that as a protocol error of that connection only. ``charge``
        (kcli.broker.quotas.RequestCharge) collects the request's quota throttle for the edge to mute on."""
        handler = HANDLERS.get(api_key)
        if handler is None:
            raise LookupError(f"no handler for api key {int(api_key)}")
        context = RequestContext(self.services, api_version, client_id, client_host, correlation_id, session,
                                 request_name or api_key.name.title().replace("_", ""), charge)
        quotas = getattr(self.services, "quotas", None)
        if charge is None or quotas is None or not quotas.enabled(REQUEST_PERCENTAGE):
            return await handler(context, body)
        # request_percentage (KIP-124): the handler's time on the loop; Produce and Fetch record it themselves
        response = await TimedCoroutine(handler(context, body), charge)
        if api_key in CLUSTER_ACTIONS or charge.request_quota_recorded or getattr(body, "replica_id", -1) >= 0:
            return response  # inter-broker: the controller's requests, markers, a follower's requests
        throttle = quotas.record_request_time(session.principal.name, client_id, charge.thread_ns)
        if throttle > 0:
            charge.throttle(throttle)
            response = with_throttle_time(response, charge.throttle_ms)
        return response


def with_throttle_time(response: Any, throttle_ms: int) -> Any:
    """The response with throttle_time_ms set (a response without the field is left as it is)."""
    if response is None or not dataclasses.is_dataclass(response) or not any(
            f.name == "throttle_time" for f in dataclasses.fields(response)):
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
