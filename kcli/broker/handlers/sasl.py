"""SaslHandshake (17) and SaslAuthenticate (36) on a connection that is already authenticated, or on a listener
without SASL: a SASL listener's authenticator (kcli.broker.security.authenticator) answers them before; what reaches
KafkaApis gets ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers (kafka-security.md §2.2)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import RequestContext, build, response_module


async def sasl_handshake(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    return build(R, "SaslHandshakeResponse", error_code=ErrorCode.illegal_sasl_state, mechanisms=())


async def sasl_authenticate(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    return build(R, "SaslAuthenticateResponse", error_code=ErrorCode.illegal_sasl_state,
                 error_message="SaslAuthenticate request received after successful authentication", auth_bytes=b"")
