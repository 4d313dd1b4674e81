"""A real `kctl broker run` subprocess per test module, on a free loopback port with its own log dir."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from broker_support import BrokerProcess, free_port


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("broker") / "kafka-logs", [])
    process.start()
    yield process
    if process.proc is not None:
        code = process.stop()
        assert code == 0, process.log()


@pytest.fixture
def make_broker(tmp_path):
    started: list[BrokerProcess] = []

    def make(*overrides: str, log_dir: Path | None = None, port: int | None = None) -> BrokerProcess:
        process = BrokerProcess(port or free_port(), log_dir or tmp_path / "kafka-logs", list(overrides))
        process.start()
        started.append(process)
        return process

    yield make
    for process in started:
        if process.proc is not None:
            process.stop(signal.SIGKILL)
