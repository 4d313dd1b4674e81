"""kctl(1)'s one exit-status table on real Kafka data (copies of the shared fixtures' log dirs): permission
denied is 3 [unreadable] in `topics` and `offsets for-time` too, `kctl broker run` exits as kctl-broker(1)
states, and dump-log's JSON notices use verify's problem codes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker_support import free_port
from kcli.cli.app import app
from support import writable_copy
from kcli.storage.segment import FileBatchReader


@pytest.fixture
def zk_log_dir(fixtures_dir, tmp_path) -> Path:
    """A Kafka 2.x (ZooKeeper mode) broker's log dir: broker.id 0, first_topic-0..2, __consumer_offsets-N."""
    return writable_copy(fixtures_dir / "VolodymyrZee__kafka", tmp_path / "kafka-logs")


def _run(*args: str):
    result = CliRunner().invoke(app, list(args), env={"KCTL_BOOTSTRAP_SERVER": None, "COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def _deny_logs(monkeypatch) -> None:
    """Tests run as root, where chmod denies nothing: opening a .log fails as for another user's file."""
    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if str(path).endswith(".log"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize("command", [["topics"], ["offsets", "for-time", "0"], ["offsets", "for-time", "latest"]])
def test_permission_denied_is_unreadable_once(command, zk_log_dir, monkeypatch):
    """Was exit 1 with `[corrupt_batch]`, and for-time printed the line twice."""
    partition = zk_log_dir / "first_topic-1"
    _deny_logs(monkeypatch)
    result = _run(*command, str(partition))
    assert result.exit_code == 3, result.output
    assert "[corrupt_batch]" not in result.stderr
    line = f"{partition / '00000000000000000000.log'}: cannot open: Permission denied [unreadable]"
    assert result.stderr.count(line) == 1, result.stderr
    doc = json.loads(_run(*command, "--json", str(partition)).stdout)
    assert doc["ok"] is False and {p["code"] for p in doc["problems"]} == {"unreadable"}, doc["problems"]


def test_for_time_answers_the_readable_partitions(zk_log_dir, monkeypatch):
    """One unreadable partition is exit 3; the others are still answered, the unreadable one is not."""
    real_open = os.open
    denied = str(zk_log_dir / "first_topic-1")

    def open_(path, flags, *args, **kwargs):
        if str(path).startswith(denied + os.sep) and str(path).endswith(".log"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    result = _run("offsets", "for-time", "earliest", "--json", str(zk_log_dir), "--topic", "first_topic")
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout)
    assert sorted(o["partition"] for o in doc["offsets"]) == [0, 2]


# -- kctl broker run ---------------------------------------------------------------------------------------------
def _broker(*overrides: str, log_level: str | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "kcli", "broker", "run",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", *[a for o in overrides for a in ("--override", o)]]
    if log_level is not None:
        args += ["--log-level", log_level]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_broker_log_level_is_a_usage_error(zk_log_dir):
    """Was "internal error: ValueError: Unknown level: 'CHATTY'", exit 1 (a subprocess: in-process, pytest's
    logging handlers would make the old code start a broker)."""
    proc = _broker(f"log.dirs={zk_log_dir}", log_level="chatty")
    assert proc.returncode == 2, proc.stderr
    assert "internal error" not in proc.stderr and "'chatty' is not one of" in proc.stderr


def test_broker_zookeeper_unreachable_is_3(zk_log_dir):
    """Was exit 1; kctl(1) and kctl-broker(1): a service unreachable is 3."""
    proc = _broker(f"log.dirs={zk_log_dir}", f"zookeeper.connect=127.0.0.1:{free_port()}")
    assert proc.returncode == 3, proc.stderr
    assert "ZooKeeper unreachable" in proc.stderr and "Traceback" not in proc.stderr


def test_broker_log_dir_that_is_a_file_is_3(zk_log_dir):
    """Was "cannot serve: [Errno 17] File exists"; now one line naming the log dir."""
    segment = zk_log_dir / "first_topic-0" / "00000000000000000000.log"
    proc = _broker(f"log.dirs={segment}")
    assert proc.returncode == 3, proc.stderr
    assert f"kctl: {segment}: log dir is not a directory" in proc.stderr, proc.stderr
    assert segment.stat().st_size > 0  # untouched


def test_broker_log_dir_of_another_broker_is_1(zk_log_dir):
    proc = _broker(f"log.dirs={zk_log_dir}", "broker.id=7")
    assert proc.returncode == 1, proc.stderr
    assert "meta.properties says broker.id 0" in proc.stderr


# -- one JSON error vocabulary: dump-log and verify --------------------------------------------------------------
def _damage(partition: Path, tail: str) -> Path:
    """Flip one bit of the second batch's last value byte (its CRC no longer matches, its records still decode)
    and leave a damaged tail."""
    log = partition / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    batches = list(FileBatchReader(log))
    assert len(batches) >= 3
    second = batches[1]
    data[second.position + second.size - 2] ^= 0x01  # the last byte is the record's header count
    if tail == "partial":
        data += data[: batches[0].size - 5]  # a batch header declaring more than remains
    else:
        data += bytes(64)  # a zero-filled tail: batch length 0
    log.write_bytes(bytes(data))
    return log


@pytest.mark.parametrize("tail, tail_code", [("partial", "truncated_batch"), ("zeros", "corrupt_batch_size")])
def test_dump_log_and_verify_share_problem_codes(zk_log_dir, tail, tail_code):
    """dump-log said invalid_batch, truncated_tail and corrupt where verify says crc_mismatch, truncated_batch
    and corrupt_batch_size."""
    log = _damage(zk_log_dir / "first_topic-2", tail)
    dump = _run("dump-log", "--json", "--deep-iteration", str(log))
    assert dump.exit_code == 1, dump.output
    notices = [json.loads(line) for line in dump.stdout.splitlines()]
    dump_codes = {n["code"] for n in notices if n.get("type") == "notice" and n["level"] == "error"}
    verify = _run("verify", "--json", str(log))
    assert verify.exit_code == 1, verify.output
    verify_codes = {p["code"] for p in json.loads(verify.stdout)["problems"]
                    if p["file"] == str(log) and p["severity"] == "error"}
    assert {"crc_mismatch", tail_code} <= verify_codes
    assert dump_codes == {"crc_mismatch", tail_code}, dump_codes


def test_every_row_names_the_module_defining_its_class():
    """The exit-status table looks a class up only once its module is imported (a class never imported cannot
    have raised): each row must name the module that defines the class, not one that re-exports it."""
    import importlib

    from kcli.cli.errors import _TABLE

    for module, name, _code in _TABLE:
        assert getattr(importlib.import_module(module), name).__module__ == module, (module, name)
