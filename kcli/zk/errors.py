"""The ZooKeeper failures every kcli.zk module raises or describes."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry
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


@contextmanager
def short_session(hosts: str, timeout: float) -> Iterator[KazooClient]:
    """A started kazoo client for a few operations (``hosts`` as KazooClient takes them, a chroot included),
    stopped and closed afterwards; no session in ``timeout`` seconds is a ZooKeeperConnectionError."""
    client = KazooClient(hosts=hosts, timeout=timeout)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperConnectionError(f"ZooKeeper at {hosts} opened no session within {timeout:g}s") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def start_retrying_client(hosts: str, where: str, timeout: float, *, max_delay: float,
                          auth: str | None = None) -> KazooClient:
    """A started long-lived kazoo client that reconnects for ever (backoff up to ``max_delay`` seconds): a server
    that accepts the connection but opens no session, or refuses it, is a ZooKeeperConnectionError naming
    ``where`` (the ``host:port[/chroot]`` text)."""
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=max_delay)
    client = KazooClient(hosts=hosts, timeout=timeout, connection_retry=retry,
                         auth_data=[("digest", auth)] if auth else None)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No chroot path exists")
            client.start(timeout=timeout)  # stops and closes the client itself on a timeout
    except KazooTimeoutError:
        raise ZooKeeperConnectionError(f"ZooKeeper at {where} accepted a connection but opened no session within "
                                       f"{timeout:g}s") from None
    except KazooException as exc:
        client.stop()
        client.close()
        raise ZooKeeperConnectionError(f"cannot connect to ZooKeeper at {where}: {describe(exc)}") from None
    return client
