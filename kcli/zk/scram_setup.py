"""SCRAM users written to ZooKeeper before any broker runs (`kctl cluster run --security`: the brokers' own
inter-broker user and an admin), exactly as ``kafka-configs --zookeeper ... --alter --add-config
'SCRAM-SHA-512=[password=...]' --entity-type users`` writes them (kcli.zk.scram)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from kcli.protocol.sasl.scram import ScramCredential
from kcli.zk import paths
from kcli.zk.kafka_zk_client import KafkaZkClient
from kcli.zk.registration import ZooKeeperConnectionError
from kcli.zk.scram import ZkNodes, alter_user


def add_scram_users(connect: str, passwords: Mapping[str, str], *, mechanisms: Iterable[str] = ("SCRAM-SHA-512",),
                    iterations: int = 4096, timeout: float = 10.0) -> None:
    """Give each user a credential per mechanism under ``connect`` (``host:port[/chroot]``), creating the chroot;
    each write is followed by its /config/changes notification, so running brokers pick it up too."""
    where = paths.parse_connect(connect)
    client = KazooClient(hosts=where.servers, timeout=timeout)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperConnectionError(f"ZooKeeper at {where.servers} opened no session within {timeout:g}s") from None
    chrooted = None
    try:
        if where.chroot:
            client.ensure_path(where.chroot)
            chrooted = KazooClient(hosts=f"{where.servers}{where.chroot}", timeout=timeout)
            chrooted.start(timeout=timeout)
        store = ZkNodes(KafkaZkClient(chrooted or client, timeout=timeout, where=f"ZooKeeper at {connect}"))
        for user, password in passwords.items():
            alter_user(store, user, upsert={m: ScramCredential.from_password(m, password, iterations)
                                            for m in mechanisms})
    except (KazooException, KazooTimeoutError) as exc:
        raise ZooKeeperConnectionError(f"ZooKeeper at {connect}: cannot write SCRAM credentials "
                                       f"({type(exc).__name__})") from None
    finally:
        for c in (chrooted, client):
            if c is not None:
                c.stop()
                c.close()
