"""The ZooKeeper failures every kcli.zk module raises or describes."""

from __future__ import annotations

from kcli.errors import KcliError


class ZooKeeperConnectionError(KcliError):
    """ZooKeeper did not answer: unreachable, disconnected, or the session expired."""


def describe(exc: BaseException) -> str:
    """A kazoo exception as one line: its class, and its text when it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text and text != "()" else type(exc).__name__
