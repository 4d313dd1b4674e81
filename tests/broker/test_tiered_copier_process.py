"""Uploads to an object store run in a copier process (issue 28: off the broker's GIL), against a real S3 gateway
(SeaweedFS on loopback). A copy lands whole; a store error comes back with its message; a copier process killed
mid-copy fails that copy cleanly and the next copy, in a new process, succeeds; close() does not wait for an
upload."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import time
import uuid

import pytest

from kcli.broker.config import build_config
from kcli.broker.remote_log_manager import RemoteLogManager
from kcli.storage.remote import FsspecRemoteStorageManager, RemoteSegmentRef, RemoteStorageError

pytestmark = pytest.mark.broker_process  # the session's SeaweedFS, and the copier processes


@pytest.fixture
def rlm(s3_store):
    bucket = s3_store.new_bucket()
    rsm = FsspecRemoteStorageManager(f"s3://{bucket}/tiered", **s3_store.storage_options())
    manager = RemoteLogManager(build_config({}), rsm, replica_manager=None, admin=None, broker_id=1)
    yield manager
    manager.close()


def new_ref() -> RemoteSegmentRef:
    return RemoteSegmentRef("t", uuid.UUID(int=7), 0, uuid.uuid4(), 0)


def copier_pids(manager: RemoteLogManager) -> list[int]:
    return list(manager.copier_processes._processes)


def wait_for_reader(fifo: str, timeout: float = 60) -> int:
    """The FIFO's write end, once a copier has opened it to read (the upload is under way)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_a_copy_runs_in_a_copier_process(rlm, tmp_path):
    assert rlm.copier_processes is not None  # an object store: processes, not the thread pool
    log_file = tmp_path / "00000000000000000000.log"
    log_file.write_bytes(b"x" * 10_000)
    ref = new_ref()
    asyncio.run(rlm.copy_segment_data(ref, {"log": log_file, "index": b"\x01" * 8, "timeindex": None}))
    [pid] = copier_pids(rlm)
    assert pid != os.getpid()
    rsm = rlm.rsm
    assert rsm.fetch_log_segment(ref, 0) == b"x" * 10_000
    assert rsm.fetch_index(ref, "index") == b"\x01" * 8
    assert rsm.fetch_index(ref, "timeindex") == b""


def test_a_store_error_comes_back_with_its_message(rlm, tmp_path):
    missing = tmp_path / "gone.log"
    with pytest.raises(RemoteStorageError, match="a local file went away.*gone.log"):
        asyncio.run(rlm.copy_segment_data(new_ref(), {"log": missing}))
    asyncio.run(rlm.copy_segment_data(new_ref(), {"log": b"ok"}))  # the same process goes on


def test_a_copier_killed_mid_copy_fails_the_copy_and_the_retry_succeeds(rlm, tmp_path):
    fifo = str(tmp_path / "stalled.index")
    os.mkfifo(fifo)  # the copier blocks reading it: an upload in progress, as long as the test wants

    async def scenario() -> None:
        copy = asyncio.ensure_future(rlm.copy_segment_data(new_ref(), {"log": b"x" * 100, "index": tmp_path / "stalled.index"}))
        writer = await asyncio.to_thread(wait_for_reader, fifo)
        try:
            [pid] = copier_pids(rlm)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(RemoteStorageError, match="copier process died"):
                await asyncio.wait_for(copy, 60)
        finally:
            os.close(writer)
        # the next copy gets a new copier process and lands
        ref = new_ref()
        await rlm.copy_segment_data(ref, {"log": b"retried", "index": b""})
        assert rlm.rsm.fetch_log_segment(ref, 0) == b"retried"
        assert pid not in copier_pids(rlm)

    asyncio.run(scenario())


def test_close_does_not_wait_for_an_upload(rlm, tmp_path):
    fifo = str(tmp_path / "stalled.log")
    os.mkfifo(fifo)

    async def scenario() -> int:
        copy = asyncio.ensure_future(rlm.copy_segment_data(new_ref(), {"log": tmp_path / "stalled.log"}))
        writer = await asyncio.to_thread(wait_for_reader, fifo)
        try:
            [pid] = copier_pids(rlm)
            rlm.close()  # returns at once; the copier is killed, the copy fails
            with pytest.raises(Exception):
                await asyncio.wait_for(copy, 60)
        finally:
            os.close(writer)
        return pid

    pid = asyncio.run(scenario())
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_copier_dies_with_its_broker(s3_store, tmp_path):
    """PR_SET_PDEATHSIG: a kill -9 of the broker leaves no copier uploading on its own."""
    import subprocess
    import sys

    bucket = s3_store.new_bucket()
    fifo = str(tmp_path / "stalled.index")
    os.mkfifo(fifo)
    script = (
        "import sys, uuid\n"
        "from pathlib import Path\n"
        "from kcli.storage.remote import RemoteSegmentRef, RemoteStorageConfig, copier_processes, copy_in_process\n"
        f"pool = copier_processes(RemoteStorageConfig('s3://{bucket}/tiered', {s3_store.storage_options()!r}), 1)\n"
        "ref = RemoteSegmentRef('t', uuid.UUID(int=7), 0, uuid.uuid4(), 0)\n"
        f"future = pool.submit(copy_in_process, ref, {{'index': Path({fifo!r})}})\n"
        "print(*pool._processes, flush=True)\n"
        "future.result()\n")
    broker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        copier = int(broker.stdout.readline())
        writer = wait_for_reader(fifo)  # the copier is in the upload
        try:
            os.kill(broker.pid, signal.SIGKILL)
            broker.wait(30)
            deadline = time.monotonic() + 30
            while _alive(copier) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _alive(copier)
        finally:
            os.close(writer)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
