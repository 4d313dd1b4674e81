"""One in-process broker harness for the handler and coordinator tests: a KafkaServer started in this process on
a free port (its listeners open, nothing else started), with its request handlers called as the socket edge calls
them. Modules subclass ``InProcessBroker`` for their own request helpers and pass it to ``running_broker``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

from broker_support import free_port
from kcli.broker.config import build_config
from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.server import KafkaServer
from kcli.protocol import ApiKey


class InProcessBroker:
    """A started KafkaServer and its request handlers (KafkaApis)."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.apis = KafkaApis(server.services)

    async def call(self, key: ApiKey, version: int, request: Any, client_id: str = "test") -> Any:
        return await self.apis.handle(key, version, request, client_id=client_id, client_host="127.0.0.1")


B = TypeVar("B", bound=InProcessBroker)


@contextlib.asynccontextmanager
async def running_broker(log_dirs: str | Path, broker: type[B] = InProcessBroker, *,  # type: ignore[assignment]
                         transactions_loaded: bool = False, **overrides: str) -> AsyncIterator[B]:
    """A broker on ``log_dirs`` (comma-separated for several) with ``overrides``, stopped on exit. Waits until
    ``__consumer_offsets`` is replayed (and ``__transaction_state`` with ``transactions_loaded``), which the
    broker does in the background after it starts serving."""
    config = build_config({"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "log.dirs": str(log_dirs),
                           "group.initial.rebalance.delay.ms": "0", **overrides})
    server = KafkaServer(config)
    await server.start()
    try:
        if transactions_loaded:
            await asyncio.wait_for(server.transactions.loaded.wait(), 10)
        while server.groups.loading:
            await asyncio.sleep(0.01)
        yield broker(server)
    finally:
        await server.stop()


def run(coro: Any, timeout: float = 60) -> Any:
    """Run one test's coroutine on a new event loop, failing it after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
