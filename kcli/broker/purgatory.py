"""Delayed operations and the purgatory that holds them (Kafka's DelayedOperation and DelayedOperationPurgatory).

An operation that cannot complete at once (a Fetch below min.bytes, later a Produce with acks=all waiting for
the ISR) is watched under the keys that can complete it (topic-partitions); whoever changes a partition calls
`check_and_complete(key)`, and the operation completes when `try_complete` says so or at its deadline. One
event loop runs everything, so no locking is needed: an operation completes exactly once (`_completed`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from contextvars import ContextVar
from typing import Any

# Set by the socket server around a request it may pipeline (kcli.broker.socket_server): done once the request's
# operation waits in a purgatory, so that the connection can read its next request meanwhile.
request_waiting: ContextVar[asyncio.Future | None] = ContextVar("kcli_request_waiting", default=None)


class DelayedOperation(ABC):
    """Subclasses implement `try_complete` (call `force_complete` when done) and `on_complete`
    (compute the result); `on_expiration` runs first when the deadline passes."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = max(0.0, delay_ms)
        self._completed = False
        self._future: asyncio.Future | None = None
        self.result: Any = None

    @abstractmethod
    def try_complete(self) -> bool:
        """Complete (force_complete) if the operation's condition now holds; True when it did."""

    @abstractmethod
    def on_complete(self) -> Any:
        """The operation's result, computed once, when it completes or expires."""

    def on_expiration(self) -> None:
        pass

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        if self._completed:
            return False
        self._completed = True
        self.result = self.on_complete()
        if self._future is not None and not self._future.done():
            self._future.set_result(self.result)
        return True


class DelayedOperationPurgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}

    def watched(self) -> int:
        return sum(len(ops) for ops in self._watchers.values())

    async def try_complete_else_watch(self, operation: DelayedOperation, keys: Iterable[Hashable]) -> Any:
        """Complete now if possible; otherwise watch the keys until completion or the operation's deadline."""
        if operation.try_complete() or operation.is_completed:
            return operation.result
        keys = list(keys)
        if operation.delay_ms <= 0 or not keys:
            operation.on_expiration()
            operation.force_complete()
            return operation.result
        operation._future = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, []).append(operation)
        waiting = request_waiting.get()
        if waiting is not None and not waiting.done():
            waiting.set_result(None)
        try:
            async with asyncio.timeout(operation.delay_ms / 1000):  # not wait_for: it can swallow a cancel (3.11)
                return await asyncio.shield(operation._future)
        except TimeoutError:
            if not operation.is_completed:
                operation.on_expiration()
                operation.force_complete()
            return operation.result
        finally:
            for key in keys:
                ops = self._watchers.get(key)
                if ops is not None:
                    if operation in ops:
                        ops.remove(operation)
                    if not ops:
                        del self._watchers[key]

    def check_and_complete(self, key: Hashable) -> int:
        """Something changed under `key` (an append, a high-watermark move): complete what now can."""
        completed = 0
        for operation in list(self._watchers.get(key, ())):
            if not operation.is_completed and operation.try_complete():
                completed += 1
        return completed

    def cancel_all(self) -> None:
        for ops in self._watchers.values():
            for operation in ops:
                if operation._future is not None and not operation._future.done():
                    operation._future.cancel()
        self._watchers.clear()
