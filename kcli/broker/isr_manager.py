"""How a leader persists its ISR changes in ZooKeeper mode: the ZK-direct path of Kafka before IBP 2.7-IV2
(Kafka's ZkIsrManager and ReplicationUtils.updateLeaderAndIsr; kafka-cluster.md 6.4).

The leader writes the partition's state znode itself, conditional on the partition epoch (the znode version)
it got from the controller's LeaderAndIsr; success makes the new version the partition epoch. A refused write
(INVALID_UPDATE_VERSION: the controller changed the partition meanwhile) is not retried: the next LeaderAndIsr
brings the new state. Changed partitions are announced in batches through one `/isr_change_notification`
node, so that the controller sends UpdateMetadata to every broker: every 2.5 s when nothing changed for 5 s
or the last announcement is a minute old (Kafka's constants).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kcli.broker.partition import Partition
from kcli.zk.registration import ZooKeeperConnectionError

log = logging.getLogger("kcli.broker.isr")

CHECK_INTERVAL_S = 2.5
QUIET_S = 5.0
MAX_DELAY_S = 60.0


class ZkIsrManager:
    def __init__(self, zk: Any, isr_committed: Callable[[Partition, list[int] | None, int | None], None]) -> None:
        self.zk = zk  # kcli.zk.kafka_zk_client.KafkaZkClient
        # ReplicaManager.isr_committed: the outcome of each write (Kafka's AlterPartitionItem callback)
        self.isr_committed = isr_committed
        self._changed: set[tuple[str, int]] = set()
        self._last_change = 0.0
        self._last_propagation = time.monotonic()
        self._task: asyncio.Task | None = None
        self._writes: set[asyncio.Task] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._propagate_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._writes) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def submit(self, partition: Partition, new_isr: list[int]) -> None:
        task = asyncio.get_running_loop().create_task(self._write(partition, new_isr))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, partition: Partition, new_isr: list[int]) -> None:
        epoch_then = partition.leader_epoch
        failure: str | None = None
        try:
            version = await asyncio.to_thread(
                self.zk.update_leader_and_isr, partition.topic, partition.index, partition.local_broker_id,
                partition.leader_epoch, new_isr, partition.controller_epoch, partition.partition_epoch)
        except ZooKeeperConnectionError as exc:
            # Not a refusal: nothing is known of the znode. Kafka's ZooKeeper client retries until it is connected
            # again; here the change goes back to pending-free, so the next fetch or expiration check proposes it
            # again (Partition.handleAlterPartitionError retries unknown errors).
            version, failure = None, f"ZooKeeper unreachable ({exc.reason})"
        except Exception as exc:
            version, failure = None, f"the write failed ({exc})"
        if partition.leader_epoch != epoch_then or not partition.is_leader:
            if failure is not None:
                log.warning("%s-%d: ISR change to %s not written: %s", partition.topic, partition.index, new_isr,
                            failure)
            return  # a LeaderAndIsr came meanwhile: it holds the truth
        if version is None:
            if failure is not None:
                log.warning("%s-%d: ISR change to %s not written: %s; it will be proposed again",
                            partition.topic, partition.index, new_isr, failure)
            else:
                # INVALID_UPDATE_VERSION: the controller changed the partition (ZkIsrManager, not retried).
                log.info("%s-%d: ISR change to %s refused: the state znode is no longer at partition epoch %d (the "
                         "controller changed the partition); waiting for its LeaderAndIsr", partition.topic,
                         partition.index, new_isr, partition.partition_epoch)
            self.isr_committed(partition, None, None)
            return
        self.isr_committed(partition, new_isr, version)
        self._changed.add((partition.topic, partition.index))
        self._last_change = time.monotonic()

    async def _propagate_loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            now = time.monotonic()
            if self._changed and (now - self._last_change > QUIET_S or now - self._last_propagation > MAX_DELAY_S):
                changed, self._changed = sorted(self._changed), set()
                try:
                    await asyncio.to_thread(self.zk.propagate_isr_changes, changed)
                    self._last_propagation = now
                except Exception as exc:
                    log.warning("ISR change notification for %d partition(s) not written: %s", len(changed), exc)
                    self._changed.update(changed)
