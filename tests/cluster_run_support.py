"""`kctl cluster run` as a subprocess for tests/cli/test_cluster_run*.py: its output read as it comes, Ctrl-C, and
the cleanup of whatever a failed test left running."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kcli.processes import command_line
from kcli.zk.server import ZooKeeperNotInstalledError, check_installed


def _installed() -> None:
    try:
        check_installed()
    except ZooKeeperNotInstalledError as exc:
        pytest.skip(f"kctl cluster run needs {exc.describe()}")


def _gone(pid: int) -> bool:
    """Exited, every thread of it (a JVM's first thread may end while the others still hold its sockets)."""
    from kcli.processes import exited

    return exited(pid)


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if not _gone(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class ClusterRun:
    """One `python -m kcli cluster run ...` subprocess; stdout and stderr read as they come."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kcli", "cluster", "run", "--data-dir", str(data_dir), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.stdout: queue.Queue[str | None] = queue.Queue()
        self.stderr_lines: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout.put), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr_lines.append),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()
        self.info: dict | None = None

    @staticmethod
    def _read(stream, put) -> None:
        for line in stream:
            put(line)
        put(None)

    @property
    def stderr(self) -> str:
        return "".join(line for line in self.stderr_lines if line)

    # `kctl cluster run` prints its first line once ZooKeeper and every broker serve: fresh processes that each
    # import kcli, which on a loaded 2-core machine takes tens of seconds; a wait for a condition, not a timing check
    def first_line(self, timeout: float = 180.0) -> str:
        try:
            line = self.stdout.get(timeout=timeout)
        except queue.Empty:
            line = None
        assert line, f"no output from kctl cluster run (exit {self.proc.poll()}):\n{self.stderr}"
        return line

    def json(self, timeout: float = 180.0) -> dict:
        self.info = json.loads(self.first_line(timeout))
        return self.info

    def wait_stderr(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            assert time.monotonic() < deadline, f"{text!r} never appeared on stderr:\n{self.stderr}"
            time.sleep(0.1)

    def wait(self, timeout: float = 60.0) -> int:
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(5)
        return code

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C, as a terminal sends it to the foreground command."""
        self.proc.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def pids(self) -> list[int]:
        assert self.info is not None
        return [self.info["zookeeper_pid"]] + [b["pid"] for b in self.info["brokers"]]

    def cleanup(self) -> None:
        """Whatever a failed test left running: the runner, then anything of its data dir still alive."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.pids() if self.info else []:
            if not _gone(pid) and str(self.data_dir) in command_line(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cluster_run(tmp_path):
    runs: list[ClusterRun] = []

    def start(*args: str, data_dir: Path | None = None, env: dict[str, str] | None = None) -> ClusterRun:
        run = ClusterRun(data_dir or tmp_path / "cluster", *args, env=env)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.cleanup()


def _metadata(port: int):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "socket.timeout.ms": 5000})
    return admin.list_topics(timeout=10)  # (admin stays referenced until the call returns)


def _kctl(*args: str) -> subprocess.CompletedProcess:
    """A one-off kctl command, forked from kctl_fork's server (`kctl cluster run` itself starts fresh)."""
    import kctl_fork

    return kctl_fork.run(*args, timeout=60)
