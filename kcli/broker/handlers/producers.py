"""InitProducerId (22): a new producer id for an idempotent producer; a transactional id goes to the transaction
coordinator (kcli.broker.transaction_coordinator), which bumps its epoch on every call."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, ms, response_module
from kcli.broker.handlers.transactions import client_error
from kcli.protocol.acl import AclOperation, ResourceType


async def init_producer_id(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    services = ctx.services
    # A transactional id needs WRITE on it; an idempotent producer IDEMPOTENT_WRITE on the cluster, or (KIP-679,
    # Kafka 2.8+) WRITE on some topic, which is what idempotence is on by default for (its denial not logged:
    # the second check may still allow).
    if req.transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            return build(R, "InitProducerIdResponse", throttle_time=ZERO,
                         error_code=ErrorCode.transactional_id_authorization_failed, producer_id=-1,
                         producer_epoch=-1)
    elif not (authz.cluster(ctx, AclOperation.IDEMPOTENT_WRITE, log_if_denied=False)
              or authz.any_of_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        return build(R, "InitProducerIdResponse", throttle_time=ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        coordinator = services.transactions
        expected_pid, expected_epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
        if coordinator is None:
            error, producer_id, epoch = ErrorCode.coordinator_not_available, -1, -1
        elif (expected_pid == -1) != (expected_epoch == -1):  # v3+ (KIP-360): both or neither
            error, producer_id, epoch = ErrorCode.invalid_request, -1, -1
        else:
            expected = None if expected_pid == -1 else (expected_pid, expected_epoch)
            error, producer_id, epoch = await coordinator.handle_init_producer_id(
                req.transactional_id, ms(req.transaction_timeout), expected)
        return build(R, "InitProducerIdResponse", throttle_time=ZERO,
                     error_code=client_error(error, "InitProducerId", ctx.api_version), producer_id=producer_id,
                     producer_epoch=epoch)
    if services.transactions is not None and not services.clustered:
        await services.transactions.loaded.wait()  # the ids in __transaction_state are taken (standalone)
    producer_id = services.producer_ids.next_id()
    return build(R, "InitProducerIdResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=0)
