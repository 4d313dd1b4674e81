"""Stale broker registrations: the ephemeral /brokers/ids/<id> and /controller nodes of brokers that died without
closing their ZooKeeper session.

ZooKeeper keeps such nodes until the session times out, and a restarted ZooKeeper restores the sessions it had,
so the nodes come back with it; meanwhile a broker with the same id cannot register (Kafka refuses the same way).
`kctl cluster run` clears them before it starts its brokers, when none of them can be running.
"""

from __future__ import annotations

from kazoo.exceptions import KazooException, NoNodeError

from kcli.zk import paths
from kcli.zk.errors import ZooKeeperConnectionError, short_session


def clear_stale_registrations(connect: str, *, timeout: float = 10.0) -> list[str]:
    """Delete every broker registration and the controller claim under ``connect``'s chroot; returns the paths
    deleted (as seen from ZooKeeper's root). Only for a cluster none of whose brokers is running."""
    where = paths.parse_connect(connect)
    deleted = []
    with short_session(where.servers, timeout) as client:
        try:
            ids = where.absolute(paths.BROKER_IDS)
            try:
                children = client.get_children(ids)
            except NoNodeError:
                children = []
            for path in [f"{ids}/{child}" for child in sorted(children)] + [where.absolute(paths.CONTROLLER)]:
                try:
                    stat = client.exists(path)
                    if stat is not None and stat.ephemeralOwner:
                        client.delete(path)
                        deleted.append(path)
                except NoNodeError:
                    pass  # its session expired meanwhile
        except KazooException as exc:
            raise ZooKeeperConnectionError(f"ZooKeeper at {where.servers}: cannot clear stale registrations "
                                           f"({type(exc).__name__})") from None
    return deleted
