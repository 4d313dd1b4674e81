"""Who is asking (the session a listener's authenticator established) and the authorizer interface.

Every handler reads authorization facts from ``RequestContext.session`` and asks ``RequestContext.authorize``;
with no authorizer configured every check passes (Kafka's KafkaApis with ``authorizer = None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kcli.protocol.acl import AclOperation, ResourceType


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``User:alice``; PLAINTEXT connections are ``User:ANONYMOUS`` (Kafka's DefaultKafkaPrincipalBuilder)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"principal {text!r} is not TYPE:NAME (e.g. User:alice)")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class Session:
    """Fixed once the connection is authenticated (re-authentication may replace it with the same principal)."""

    principal: KafkaPrincipal = ANONYMOUS
    client_address: str = ""
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None


PLAINTEXT_SESSION = Session()


class Authorizer(Protocol):
    """Kafka's Authorizer, as handlers use it (kcli.broker.security.authorizer.AclAuthorizer implements it)."""

    def authorize(self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  request: str = "", log_if_allowed: bool = True, log_if_denied: bool = True,
                  ref_count: int = 1) -> bool: ...

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType, *, request: str = "") -> bool: ...
