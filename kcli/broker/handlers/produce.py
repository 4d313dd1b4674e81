"""Produce (key 0)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers import authz
from kcli.broker.handlers.common import (
    ZERO,
    CloseConnection,
    RequestContext,
    build,
    build_all,
    ms,
    response_module,
)
from kcli.broker.quotas import PRODUCER_BYTE_RATE
from kcli.broker.replica_manager import PartitionAppend
from kcli.protocol.acl import AclOperation, ResourceType

_ATTRIBUTES_LOW = 22  # v2 batch header: base offset 8, length 4, leader epoch 4, magic 1, crc 4, attributes int16
_TRANSACTIONAL = 0x10


def _transactional(records: bytes) -> bool:
    """RequestUtils.hasTransactionalRecords looks at each partition's first batch."""
    return len(records) > _ATTRIBUTES_LOW and records[16] == 2 and bool(records[_ATTRIBUTES_LOW] & _TRANSACTIONAL)


async def produce(ctx: RequestContext, req: Any) -> Any | None:
    R = response_module(req)
    entries = {(topic.name, pd.index): bytes(pd.records or b"") for topic in req.topic_data
               for pd in topic.partition_data}
    denied: dict[tuple[str, int], PartitionAppend] = {}
    transactional_id = getattr(req, "transactional_id", None)
    if any(_transactional(r) for r in entries.values()) and (
            transactional_id is None
            or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)):
        denied = {tp: PartitionAppend(ErrorCode.transactional_id_authorization_failed) for tp in entries}
    else:
        # authorization before existence: an unauthorized topic never reaches the replica manager
        writable = authz.authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                                          (t.name for t in req.topic_data))
        denied = {tp: PartitionAppend(ErrorCode.topic_authorization_failed) for tp in entries
                  if tp[0] not in writable}
    for tp in denied:
        del entries[tp]
    results = dict(denied)
    if entries:
        results.update(await ctx.services.replica_manager.append_and_wait(req.acks, ms(req.timeout), entries))
    throttle = _quota_throttle(ctx, req.acks)
    if req.acks == 0:
        # acks=0: the producer reads no response, so none is sent; an error closes the connection instead, so that
        # the producer notices and refreshes its metadata (Kafka's handleProduceRequest)
        failed = [f"{t}-{p}: {r.error.name.upper()}" for (t, p), r in results.items() if r.error != ErrorCode.none]
        if failed:
            raise CloseConnection(f"acks=0 produce failed ({', '.join(failed)})")
        return None
    topics = []
    for topic in req.topic_data:
        parts = []
        for pd in topic.partition_data:
            r = results[(topic.name, pd.index)]
            parts.append(build(
                R, "PartitionProduceResponse", index=pd.index, error_code=r.error, base_offset=r.base_offset,
                log_append_time=None if r.log_append_time < 0 else
                datetime.datetime.fromtimestamp(r.log_append_time / 1000, tz=datetime.timezone.utc),
                log_start_offset=r.log_start_offset, error_message=r.message,
                record_errors=build_all(R, "BatchIndexAndErrorMessage", (
                    dict(batch_index=i, batch_index_error_message=m) for i, m in r.record_errors))))
        topics.append(build(R, "TopicProduceResponse", name=topic.name, partition_responses=tuple(parts)))
    return build(R, "ProduceResponse", responses=tuple(topics),
                 throttle_time=datetime.timedelta(milliseconds=throttle) if throttle else ZERO)


def _quota_throttle(ctx: RequestContext, acks: int) -> int:
    """Kafka's handleProduceRequest: the request's bytes into the produce quota and its handler time into the
    request quota (not for acks=0); the larger throttle is the response's and the connection's (KIP-219)."""
    charge = ctx.charge
    quotas = getattr(ctx.services, "quotas", None) if charge is not None else None
    if quotas is None or charge is None:
        return 0
    user = ctx.session.principal.name
    bandwidth = quotas.record(PRODUCER_BYTE_RATE, user, ctx.client_id, charge.request_size)
    request = quotas.record_request_time(user, ctx.client_id, charge.thread_ns) if acks != 0 else 0
    charge.request_quota_recorded = True
    charge.throttle(max(bandwidth, request))
    return charge.throttle_ms
