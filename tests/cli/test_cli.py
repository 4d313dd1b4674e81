"""The kctl command as users run it: a real subprocess, exit codes, JSON, man pages in sync."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import typer

import kctl_fork
from kcli.cli.app import app
from support import REPO

SAMPLES = REPO / "sample-logs"


def kctl(*args: str, check: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, env=env, timeout=300)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def _commands() -> dict:
    group = typer.main.get_command(app)
    return dict(group.commands)


def test_version():
    from kcli import __version__

    assert kctl("--version", check=0).stdout.strip() == f"kctl {__version__}"


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_command_has_help_and_a_man_page(command):
    # forked from a process that imported kcli once (tests/kctl_fork.py); test_startup.py starts --help fresh
    proc = kctl_fork.run(command, "--help", env={"COLUMNS": "200"})
    assert proc.returncode == 0 and proc.stdout, proc.stderr
    page = REPO / "man" / f"kctl-{command}.1"
    assert page.is_file(), f"man page missing for {command}"
    text = page.read_text().replace("\\-", "-")
    for param in _commands()[command].params:
        if getattr(param, "hidden", False):
            continue
        for opt in param.opts:
            if opt.startswith("--"):
                assert opt in text, f"{opt} of kctl {command} is not documented in {page.name}"
    assert f"kctl {command}" in (REPO / "man" / "kctl.1").read_text().replace("\\-", "-") or command in (
        REPO / "man" / "kctl.1").read_text()


@pytest.mark.parametrize("page", sorted((REPO / "man").glob("*.1")), ids=lambda p: p.name)
def test_man_pages_render(page):
    if not shutil.which("man") or not shutil.which("groff"):
        pytest.skip("man/groff not installed")
    rendered = subprocess.run(["man", "-P", "cat", "-l", str(page)], capture_output=True, text=True,
                              env={**os.environ, "MANWIDTH": "100"}, timeout=60)
    assert rendered.returncode == 0 and "NAME" in rendered.stdout and "EXIT STATUS" in rendered.stdout
    warnings = subprocess.run(["groff", "-man", "-ww", "-z", str(page)], capture_output=True, text=True, timeout=60)
    assert warnings.stderr == ""


def test_dump_log_text_on_samples():
    proc = kctl("dump-log", "--deep-iteration", str(SAMPLES / "kafka-logs"), check=0)
    assert proc.stdout.count("Dumping ") > 30
    assert "endTxnMarker: ABORT coordinatorEpoch: 1" in proc.stdout
    assert "magic: 0 compresscodec: snappy" in proc.stdout and "magic: 2 compresscodec: zstd" in proc.stdout


def test_dump_log_files_option_and_positional():
    seg = SAMPLES / "kafka-logs/orders-0/00000000000000000000"
    proc = kctl("dump-log", "--files", f"{seg}.log,{seg}.index", check=0)
    assert proc.stdout.count("Dumping ") == 2 and "offset: " in proc.stdout


def test_dump_log_json_stream():
    proc = kctl("dump-log", "--json", "--deep-iteration", str(SAMPLES / "kafka-logs/payments-0"), check=0)
    items = [json.loads(line) for line in proc.stdout.splitlines()]
    assert items[-1]["type"] == "summary" and items[-1]["errors"] == 0
    markers = [i for i in items if i["type"] == "record" and i["is_control"]]
    assert {m["control_type"] for m in markers} == {"COMMIT", "ABORT"}
    assert any(i["type"] == "txn_index_entry" for i in items)


def test_dump_log_offsets_decoder_on_samples():
    proc = kctl("dump-log", "--offsets-decoder", str(SAMPLES / "kafka-logs/__consumer_offsets-12"), check=0)
    assert '"group":"my-group"' in proc.stdout and "payload: <DELETE>" in proc.stdout


def test_dump_log_exit_codes(tmp_path):
    assert kctl("dump-log", str(SAMPLES / "corrupt-logs"), check=1).stderr
    missing = kctl("dump-log", str(tmp_path / "nope"), check=3)
    assert "No such file or directory" in missing.stderr
    assert kctl("dump-log", check=2).stderr
    kctl("dump-log", "--no-such-option", str(SAMPLES), check=2)


def test_dump_log_head_closes_quietly():
    proc = subprocess.run(f"{sys.executable} -m kcli dump-log --deep-iteration {SAMPLES / 'kafka-logs'} | head -3",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert len(proc.stdout.splitlines()) == 3 and "Traceback" not in proc.stderr


def test_verify_exit_codes_and_json(tmp_path):
    kctl("verify", str(SAMPLES / "kafka-logs"), check=0)
    proc = kctl("verify", "--json", str(SAMPLES / "corrupt-logs"), check=1)
    report = json.loads(proc.stdout)
    assert not report["ok"] and report["errors"] >= 2
    crc = next(p for p in report["problems"] if p["code"] == "crc_mismatch")
    assert set(crc) >= {"file", "position", "base_offset", "reason"} and crc["position"] > 0
    assert crc["file"].endswith("00000000000000000000.log")
    assert kctl("verify", "-q", str(SAMPLES / "corrupt-logs"), check=1).stdout == ""
    kctl("verify", str(tmp_path / "missing"), check=3)
    kctl("verify", check=2)


def test_verify_text_lines_name_file_and_position():
    proc = kctl("verify", str(SAMPLES / "corrupt-logs"), check=1)
    assert re.search(r"^error: \S+00000000000000000000\.log:\d+ \(offset \d+\): Record is corrupt", proc.stderr, re.M)
    assert proc.stdout.startswith("PROBLEMS FOUND")


def test_sample_logs_are_what_the_generator_writes(tmp_path):
    from kcli.tools.samples import build_sample_logs

    build_sample_logs(tmp_path)
    ours = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(SAMPLES) for p in SAMPLES.rglob("*") if p.is_file() and p.parent != SAMPLES)
    assert ours == committed
    for rel in ours:
        assert (tmp_path / rel).read_bytes() == (SAMPLES / rel).read_bytes(), rel
