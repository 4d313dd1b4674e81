"""InitProducerId (22)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, ms, response_module


async def init_producer_id(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    services = ctx.services
    if req.transactional_id is not None:
        if ms(req.transaction_timeout) > services.config["transaction.max.timeout.ms"]:
            return build(R, "InitProducerIdResponse", throttle_time=ZERO,
                         error_code=ErrorCode.invalid_transaction_timeout, producer_id=-1, producer_epoch=-1)
        # Transactions need the transaction coordinator (not yet): refuse rather than pretend.
        return build(R, "InitProducerIdResponse", throttle_time=ZERO, error_code=ErrorCode.coordinator_not_available,
                     producer_id=-1, producer_epoch=-1)
    producer_id = services.producer_ids.next_id()
    return build(R, "InitProducerIdResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=0)
