"""A standalone Spark cluster on loopback: one Master and N Workers, started with pyspark's own ``bin/spark-class``.

What an operator runs with ``sbin/start-master.sh`` / ``start-worker.sh``, minus the daemon wrappers: each
process is a child of the test run, in its own process group, with its log in ``root/logs``, and is stopped by
its pid (SIGTERM, then SIGKILL; the Worker's group too, which holds the executors it launched). Executors run
the venv's interpreter with this checkout on PYTHONPATH, so they import the same kcli as the driver.

Used by tests/spark/test_standalone.py and bench/bench_scan.py (one worker vs two).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kcli.processes import LOOPBACK, free_ports, spawn, tail, terminate

import tiers

REPO = Path(__file__).resolve().parents[2]


def spark_home() -> Path:
    """pyspark's package directory: a Spark distribution (bin/, jars/) as pip installs it."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env(root: Path, python: str = sys.executable) -> dict[str, str]:
    """The environment of the cluster's processes and of drivers submitting to it."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_LOCAL_DIRS": str(root / "tmp"),
        "SPARK_DAEMON_MEMORY": "256m",
        # the Master and Workers as the test drivers and executors (tests/spark/conf/spark-defaults.conf)
        "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        # this checkout first: the executors' Python workers import kcli from here, as the driver does
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), path) if p),
    })
    return env


class StandaloneCluster:
    """``with StandaloneCluster(root, workers=2) as cluster: ... cluster.master_url``."""

    def __init__(self, root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                 timeout: float = 120.0) -> None:
        self.root = Path(root)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.port, self.webui_port = free_ports(2)
        self.env = cluster_env(self.root)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = self.root / "logs" / f"{name}.out"
        self.logs.append(log)
        proc = spawn([str(spark_home() / "bin" / "spark-class"), *args], log_path=log, cwd=self.root, env=self.env)
        self.procs.append(proc)
        return proc

    def start(self) -> StandaloneCluster:
        tiers.require("spark", "a standalone Spark cluster")
        for sub in ("logs", "work", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                        "--port", str(self.port), "--webui-port", str(self.webui_port))
            self._wait(lambda state: state is not None, "the master to serve")
            for i in range(self.workers):
                self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                            "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0",
                            "--work-dir", str(self.root / "work"), self.master_url)
            self._wait(lambda state: state is not None and state.get("aliveworkers", 0) >= self.workers,
                       f"{self.workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict | None:
        """The master's JSON status page, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.webui_port}/json/", timeout=2) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for proc, log in zip(self.procs, self.logs):
                if proc.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited with {proc.returncode} while waiting for {what}:\n"
                                       f"{tail(log)}")
            if ready(self.state()):
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {self.timeout:.0f}s waiting for {what}:\n"
                           + "\n".join(f"--- {log.name}\n{tail(log)}" for log in self.logs))

    def stop(self) -> None:
        """Workers first (each takes its executors down), then the master; by pid, then by the pid's group."""
        procs, self.procs = self.procs[::-1], []
        terminate(procs, timeout=15)
        for proc in procs:
            try:  # anything left in the group it led (an executor orphaned by a SIGKILL)
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def kctl(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``kctl ARGS`` as its own process (its own Spark driver), with the cluster's environment."""
    return subprocess.run([sys.executable, "-m", "kcli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
