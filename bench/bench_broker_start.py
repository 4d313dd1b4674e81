#!/usr/bin/env python3
"""Benchmark `kctl broker run` start-up over a big log dir: a clean start, and recovery after kill -9.

Builds (once, kept under bench/data/) a log dir of --partitions partitions with --segments segments each
(default 1,000 x 10 = 10,000 segments) through the broker's own storage code (kcli.broker.log_manager
LogManager with a small segment.bytes, then a clean shutdown: checkpoints and .kafka_cleanshutdown as a
broker leaves them), then measures, each --repeat times (medians reported):

* clean start: process start until the broker logs " serving " and answers a Metadata request (v0, every
  topic); segments/s = segments loaded per second of that (Kafka loads about 2,500 segments/s);
* kill -9 restart: the broker is started clean, killed with SIGKILL once serving, and started again: the
  unclean start recovers the segments above each partition's recovery point (recovery-point-offset-checkpoint),
  as Kafka's LogLoader does;
* full recovery: the same, with recovery-point-offset-checkpoint removed before the restart (a broker that
  crashed before its first checkpoint): every segment of every partition validated. Its MiB/s is set
  against `kctl verify` over the same log dir (also a process, start-up included, as a user runs it);
  ratio = verify seconds / recovery seconds (the goal is >= 0.5).

Usage: bench/bench_broker_start.py [--partitions 1000] [--segments 10] [--segment-kib 64] [--repeat 3]
       [--profile DIR]   (py-spy each measured broker start into DIR; the figures are then not headline ones)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
SOURCE = REPO  # the kcli tree the measured brokers and verify run from (--source)
TOPIC = "start"


# -- data -------------------------------------------------------------------------------------------
def build_log_dir(partitions: int, segments: int, segment_kib: int) -> Path:
    """The log dir a broker leaves after a clean stop. Every partition gets the same batches (offsets as
    written, one pool of distinct batches reused), so building 10,000 segments takes seconds."""
    from kcli.broker.log_manager import LogManager
    from kcli.records import Codec, Record, build_record_batch
    from kcli.records.layout import read_records_count, stamp_base_offset
    from kcli.storage.log_config import LogConfig

    root = DATA / f"broker-start-{partitions}p-{segments}s-{segment_kib}k"
    log_dir = root / "logs"
    marker = root / ".complete"
    if marker.exists():
        return log_dir
    shutil.rmtree(root, ignore_errors=True)
    log_dir.mkdir(parents=True)
    segment_bytes = segment_kib * 1024
    rng = random.Random(7)
    words = [rng.randbytes(5).hex() for _ in range(300)]
    pool = []
    for i in range(64):  # ~16 KiB batches, mixed codecs; a segment holds segment_bytes / 16 KiB of them
        records = [Record(j, 1_700_000_000_000 + i * 100 + j, f"key-{rng.randrange(10000)}".encode(),
                          " ".join(rng.choice(words) for _ in range(90)).encode()[:1000]) for j in range(16)]
        pool.append(build_record_batch(records, codec=Codec((0, 0, 1, 3)[i % 4]), partition_leader_epoch=0))
    manager = LogManager([log_dir], broker_id=0, log_config=LogConfig(segment_bytes=segment_bytes))
    manager.startup()
    manager.create_topic(TOPIC, partitions)
    # The same byte stream for every partition: partition 0 is filled until it has `segments` segments, the
    # last one half full; the others get the same batches. fsync is skipped while building (one sync at the end).
    real_fsync, os.fsync = os.fsync, lambda fd: None
    try:
        first, *others = manager.topics[TOPIC].partitions
        stream = []
        offset = i = 0
        while len(first.log.segments) < segments or first.log.segment.size < segment_bytes // 2:
            raw = bytearray(pool[i % len(pool)])
            stamp_base_offset(raw, 0, offset)
            stream.append(bytes(raw))
            first.log.append_raw(stream[-1])
            offset += read_records_count(raw)
            i += 1
        if len(first.log.segments) > segments:
            raise SystemExit(f"--segment-kib {segment_kib} is too small for the 16 KiB batches")
        for p in others:
            for raw in stream:
                p.log.append_raw(raw)
            p.log.flush_to_os()
        manager.shutdown()
    finally:
        os.fsync = real_fsync
    os.sync()
    total = sum(f.stat().st_size for f in log_dir.glob("*/*.log"))
    count = len(list(log_dir.glob("*/*.log")))
    marker.write_text(json.dumps({"partitions": partitions, "segments": count, "log_bytes": total,
                                  "records_per_partition": offset}))
    return log_dir


def log_dir_facts(log_dir: Path) -> dict:
    return json.loads((log_dir.parent / ".complete").read_text())


# -- a broker process ----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def metadata_v0(port: int, timeout: float = 10.0) -> int:
    """One Metadata v0 request for every topic; returns the response size (the broker answered)."""
    client = b"bench"
    body = struct.pack(">hhih", 3, 0, 7, len(client)) + client + struct.pack(">i", 0)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        head = _recv(sock, 4)
        (size,) = struct.unpack(">i", head)
        data = _recv(sock, size)
    (correlation,) = struct.unpack_from(">i", data)
    assert correlation == 7, correlation
    return size


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        out += chunk
    return bytes(out)


class Broker:
    def __init__(self, log_dir: Path, profile: Path | None = None) -> None:
        self.log_dir = log_dir
        self.port = free_port()
        self.log_path = log_dir.parent / f"broker-{self.port}.log"
        self.profile = profile
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600.0) -> float:
        """Seconds from process start until it logged " serving " and answered a Metadata request."""
        args = [sys.executable, "-m", "kcli", "broker", "run",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.log_dir}"]
        if self.profile is not None:
            args = [str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "200", "--format", "raw", "--output", str(self.profile),
                    "--", *args]
        env = {**os.environ, "PYTHONPATH": str(SOURCE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        started = time.perf_counter()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"), env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            if " serving " in self.log():
                try:
                    metadata_v0(self.port)
                except OSError:
                    time.sleep(0.01)
                    continue
                return time.perf_counter() - started
            time.sleep(0.01)
        raise RuntimeError(f"broker did not serve within {timeout}s:\n{self.log()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        target = self.proc.pid
        if self.profile is not None:  # py-spy's child is the broker; signal it, py-spy writes its profile
            kids = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
            target = int(kids[0]) if kids else target
        os.kill(target, sig)
        code = self.proc.wait(900)
        self.proc = None
        return code

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


def recovery_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "startup recovery: " in line]


def kctl_verify(log_dir: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(SOURCE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kcli", "verify", "--json", str(log_dir)], capture_output=True,
                          text=True, env=env)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"kctl verify exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds


# -- runs ---------------------------------------------------------------------------------------------
def clean_start(log_dir: Path, profile: Path | None) -> dict:
    broker = Broker(log_dir, profile)
    seconds = broker.start()
    text = broker.log()
    assert broker.stop() == 0
    return {"seconds": seconds, "recovered": len(recovery_lines(text))}


def killed_restart(log_dir: Path, profile: Path | None, *, drop_recovery_point: bool) -> dict:
    first = Broker(log_dir)
    first.start()
    first.stop(signal.SIGKILL)
    if drop_recovery_point:
        (log_dir / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
    broker = Broker(log_dir, profile)
    seconds = broker.start()
    text = broker.log()
    assert broker.stop() == 0
    lines = recovery_lines(text)
    summary = next((line for line in lines if "partition(s) recovered" in line), "")
    return {"seconds": seconds, "recovery_lines": len(lines), "summary": summary.split("startup recovery: ")[-1]}


def cleanup(log_dir: Path) -> None:
    """Quarantine runs and broker logs the measurements left (the log dir itself stays)."""
    for path in log_dir.parent.iterdir():
        if path.name.startswith("broker-") and path.suffix == ".log":
            path.unlink()
        elif path.is_dir() and path != log_dir and path.name != "profiles":
            shutil.rmtree(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--segments", type=int, default=10, help="segments per partition")
    ap.add_argument("--segment-kib", type=int, default=64, help="segment.bytes of the built log, KiB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-full-recovery", action="store_true")
    ap.add_argument("--profile", type=Path, help="py-spy raw profiles of each measured start into this directory")
    ap.add_argument("--source", type=Path, default=REPO,
                    help="kcli source tree the measured brokers and kctl verify run from (a baseline checkout)")
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    args = ap.parse_args()
    global SOURCE
    SOURCE = args.source.resolve()
    sys.path.insert(0, str(REPO))
    started = time.perf_counter()
    log_dir = build_log_dir(args.partitions, args.segments, args.segment_kib)
    facts = log_dir_facts(log_dir)
    print(f"# log dir {log_dir}: {facts['partitions']} partitions, {facts['segments']} segments, "
          f"{facts['log_bytes'] / 2**20:.0f} MiB (ready in {time.perf_counter() - started:.1f}s)", flush=True)
    if not (log_dir / ".kafka_cleanshutdown").exists():  # an interrupted run left it unclean: start, stop cleanly
        clean_start(log_dir, None)
    cleanup(log_dir)
    loadavg_start = os.getloadavg()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    def prof(name: str, i: int) -> Path | None:
        return args.profile / f"{name}-{i}.txt" if args.profile else None

    runs: dict[str, list] = {"clean": [], "killed": [], "full": [], "verify": []}
    for i in range(args.repeat):
        runs["clean"].append(clean_start(log_dir, prof("clean", i)))
        print(f"  clean start {runs['clean'][-1]['seconds']:.2f}s", flush=True)
        runs["killed"].append(killed_restart(log_dir, prof("killed", i), drop_recovery_point=False))
        print(f"  kill -9 restart {runs['killed'][-1]['seconds']:.2f}s: {runs['killed'][-1]['summary']}", flush=True)
        if not args.skip_full_recovery:
            runs["verify"].append(kctl_verify(log_dir))
            print(f"  kctl verify {runs['verify'][-1]:.2f}s", flush=True)
            runs["full"].append(killed_restart(log_dir, prof("full", i), drop_recovery_point=True))
            print(f"  full recovery {runs['full'][-1]['seconds']:.2f}s: {runs['full'][-1]['summary']}", flush=True)
        cleanup(log_dir)
    mib = facts["log_bytes"] / 2**20
    clean = statistics.median(r["seconds"] for r in runs["clean"])
    killed = statistics.median(r["seconds"] for r in runs["killed"])
    report = {
        "machine": {"cpus": os.cpu_count(), "loadavg_start": loadavg_start},
        "source": str(SOURCE),
        "log_dir": facts,
        "repeat": args.repeat,
        "clean_start_s": clean,
        "clean_segments_per_s": facts["segments"] / clean,
        "killed_restart_s": killed,
        "runs": runs,
    }
    print(f"\n{facts['partitions']} partitions, {facts['segments']} segments, {mib:.0f} MiB; medians of "
          f"{args.repeat}")
    print(f"clean start (to serving + Metadata)   {clean:8.2f} s   {facts['segments'] / clean:8.0f} segments/s "
          f"(goal < 5 s; Kafka ~2,500 segments/s)")
    print(f"kill -9 restart (from recovery point) {killed:8.2f} s")
    if runs["full"]:
        full = statistics.median(r["seconds"] for r in runs["full"])
        verify = statistics.median(runs["verify"])
        report.update(full_recovery_s=full, verify_s=verify, full_recovery_mib_s=mib / full,
                      verify_mib_s=mib / verify, recovery_vs_verify=verify / full)
        print(f"full recovery (no recovery point)     {full:8.2f} s   {mib / full:8.0f} MiB/s")
        print(f"kctl verify, same log dir             {verify:8.2f} s   {mib / verify:8.0f} MiB/s")
        print(f"recovery / verify speed               {verify / full:8.2f}x   (goal >= 0.5)")
    report["machine"]["loadavg_end"] = os.getloadavg()
    blob = json.dumps(report, indent=1, default=str)
    if args.json:
        args.json.write_text(blob)
    print("\nJSON:\n" + blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
