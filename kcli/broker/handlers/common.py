"""What every handler shares: the request context and building a response of the request's own version."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import error_code_for, error_message_for
from kcli.broker.security import PLAINTEXT_SESSION, Session
from kcli.protocol import build_entity, response_types
from kcli.protocol.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from kcli.broker.services import BrokerServices

ZERO = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)
# authorized_operations (KIP-430): Int.MIN_VALUE when the client did not ask; when it did, the bit set of the
# operations the caller is allowed (kcli.broker.handlers.authz.authorized_operations).
NOT_REQUESTED = -2147483648


@dataclasses.dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asked and with what: the services, the decoded request's header fields, the peer's host and the
    connection's authenticated session."""

    services: BrokerServices
    api_version: int
    client_id: str
    client_host: str
    correlation_id: int = 0
    session: Session = PLAINTEXT_SESSION
    request_name: str = ""  # the API's name, for the authorizer's audit log ("Produce")
    charge: Any = None  # kcli.broker.quotas.RequestCharge: the request's size, CPU time and throttle (quotas)

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  log_if_allowed: bool = True, log_if_denied: bool = True, ref_count: int = 1) -> bool:
        """Kafka's AuthHelper.authorize: True without an authorizer, else the authorizer's decision for this
        session (checked before existence, so that a denial does not reveal whether the resource exists)."""
        authorizer = getattr(self.services, "authorizer", None)
        if authorizer is None:
            return True
        session = self.session if self.session.client_address else dataclasses.replace(
            self.session, client_address=self.client_host)  # host ACLs match the peer's address
        return authorizer.authorize(session, operation, resource_type, name, request=self.request_name,
                                    log_if_allowed=log_if_allowed, log_if_denied=log_if_denied,
                                    ref_count=ref_count)


class CloseConnection(Exception):
    """Raised by a handler whose request gets no answer and must cost the connection instead: Kafka's
    closeConnection, e.g. an acks=0 produce that failed (the producer reads no response, so a closed connection
    is how it learns; it then refreshes its metadata). The socket edge closes the connection without a reply."""


def response_module(request: Any) -> Any:
    """The response classes of the request's own version, by name (kio's module, or kcli.protocol.legacy's)."""
    return response_types(request)


# ``module.class_name`` with the values that version has; a value for a field of other versions is left out, a
# name no version of the response has raises (kcli.protocol.build_entity): handlers fill one set of values for all
# versions, and a misspelt one must not vanish.
build = build_entity


def build_all(module: Any, class_name: str, items: Any) -> tuple[Any, ...]:
    """A tuple of ``class_name`` built from each dict in ``items``; empty when this version has no such
    nested structure (the field it fills is absent at this version, and ``build`` drops it)."""
    if not hasattr(module, class_name):
        return ()
    return tuple(build(module, class_name, **values) for values in items)


def attempt(call: Callable[[], Any]) -> tuple[Any, ErrorCode, str | None]:
    """(value, ErrorCode.none, None) from ``call()``, or (None, code, message) for the exception it raised,
    mapped by the broker's one table (kcli.broker.errors): the per-topic, per-partition try of every handler."""
    try:
        return call(), ErrorCode.none, None
    except Exception as exc:
        return None, error_code_for(exc), error_message_for(exc)


def has_class(module: Any, class_name: str) -> bool:
    return hasattr(module, class_name)


def ms(value: Any) -> int:
    """kio gives durations as timedelta: milliseconds as Kafka's int fields hold them."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)
