"""The ZooKeeper failures every kcli.zk module raises or describes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, KazooException, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from kcli.errors import KcliError


class ZooKeeperConnectionError(KcliError):
    """ZooKeeper did not answer: unreachable, disconnected, or the session expired."""


def describe(exc: BaseException) -> str:
    """A kazoo exception as one line: its class, and its text when it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text and text != "()" else type(exc).__name__


@contextmanager
def kazoo_errors(where: str, timeout: float, doing: str) -> Iterator[None]:
    """kazoo's failures inside the block as kcli's, naming ``where`` ("ZooKeeper at host:port") and what was being
    done: no answer in time or a lost connection or session is a ZooKeeperConnectionError (exit 3), a refusal
    (NoNode, BadVersion, NoAuth...) a KcliError. kcli's own errors pass through."""
    try:
        yield
    except KcliError:
        raise
    except KazooTimeoutError:
        raise ZooKeeperConnectionError(f"{where} did not answer within {timeout:g}s while {doing}") from None
    except (ConnectionLoss, ConnectionClosedError, SessionExpiredError) as exc:
        raise ZooKeeperConnectionError(f"lost the connection to {where} while {doing} ({describe(exc)})") from None
    except KazooException as exc:
        raise KcliError(f"{where} refused {doing}: {describe(exc)}") from None
