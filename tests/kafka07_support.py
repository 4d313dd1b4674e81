"""Helpers for the legacy Kafka 0.7 listener's tests: a blocking 0.7 client over frames built from the seed's layout
(kcli.protocol.legacy07), and the listener run in-process on its own event loop."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from pathlib import Path

from kcli.broker.kafka07 import Kafka07Server, Kafka07Settings
from kcli.protocol.legacy07 import Request07, Response07, decode_response, encode_request
from kcli.storage.log07 import Log07Config, LogManager07Config


class Client07:
    """One connection to a 0.7 listener, used as 0.7's SimpleConsumer and SyncProducer use theirs."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client07:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, request: Request07) -> None:
        self.sock.sendall(encode_request(request))

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def _read_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def request(self, request: Request07) -> Response07:
        self.send(request)
        head = self._read_exactly(4)
        (size,) = struct.unpack(">i", head)
        return decode_response(request, head + self._read_exactly(size))

    def closed_by_broker(self) -> bool:
        """True once the broker has closed the connection (the 0.7 answer to a produce it refuses)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def settings(log_dir: Path, port: int = 0, *, num_partitions: int = 2, segment_bytes: int = 1 << 30,
             flush_interval: int = 1, topic_partitions: dict[str, int] | None = None,
             zookeeper: str | None = None, zookeeper_timeout_s: float = 6.0) -> Kafka07Settings:
    return Kafka07Settings(
        host="127.0.0.1", port=port, advertised_host="127.0.0.1", broker_id=0, log_dir=log_dir,
        manager=LogManager07Config(num_partitions=num_partitions, topic_partitions=dict(topic_partitions or {}),
                                   log=Log07Config(segment_bytes=segment_bytes, flush_interval_messages=flush_interval,
                                                   flush_interval_ms=100)),
        flush_scheduler_ms=100, cleanup_interval_ms=600_000, max_request_bytes=1 << 20,
        zookeeper_connect=zookeeper, zookeeper_timeout_s=zookeeper_timeout_s)


class InProcessListener07:
    """A Kafka07Server on a loop of its own in a thread: started and stopped synchronously by the test."""

    def __init__(self, settings_: Kafka07Settings) -> None:
        self.settings = settings_
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kafka07-test-loop", daemon=True)
        self.thread.start()
        self.server = Kafka07Server(settings_)
        try:
            self._call(self.server.start())
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    @property
    def port(self) -> int:
        assert self.server.bound is not None
        return self.server.bound[1]

    def client(self) -> Client07:
        return Client07(self.port)

    def stop(self) -> None:
        try:
            self._call(self.server.stop())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


# -- the 0.7-era npm clients ---------------------------------------------------------------------------------
# franz-kafka 0.7.5 depends on "*" of each package: pinned to releases it works with (snappy 6.3.5 is the last with
# the callback API it calls; it builds from source in seconds). zkjs and snappy are its optional dependencies.
NPM_CLIENTS_07 = {
    "kafka": "0.2.3", "franz-kafka": "0.7.5", "int53": "0.2.4", "async": "0.2.10", "readable-stream": "1.0.34",
    "buffer-crc32": "0.2.13", "zkjs": "3.4.1", "snappy": "6.3.5",
}
_UNREACHABLE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH", "network")


class NpmUnavailable(Exception):
    """npm or the npm registry cannot be reached: the tests that need the clients skip, saying why."""


def install_npm_clients07() -> Path:
    """node_modules with the two 0.7 clients, installed once per machine into a scratch dir of the system temp dir
    keyed by the pinned versions; later sessions reuse it."""
    import hashlib
    import json
    import os
    import shutil
    import subprocess
    import tempfile

    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise NpmUnavailable(f"{tool} is not on PATH")
    package = {"name": "kctl-kafka07-clients", "version": "0.0.0", "private": True,
               "dependencies": NPM_CLIENTS_07, "overrides": {k: v for k, v in NPM_CLIENTS_07.items()
                                                             if k not in ("kafka", "franz-kafka")}}
    text = json.dumps(package, indent=1, sort_keys=True)
    target = Path(tempfile.gettempdir()) / f"kctl-npm07-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    done = target / "node_modules" / ".kctl-complete"
    if done.exists():
        return target / "node_modules"
    scratch = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    (scratch / "package.json").write_text(text)
    try:
        run = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=scratch,
                             capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        shutil.rmtree(scratch, ignore_errors=True)
        raise NpmUnavailable("npm install of the 0.7 clients took over 280 s (registry unreachable?)") from None
    if run.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        output = run.stdout + run.stderr
        if any(word in output for word in _UNREACHABLE):
            raise NpmUnavailable(f"the npm registry is unreachable: {output.strip().splitlines()[-1:]}")
        raise RuntimeError(f"npm install of the 0.7 clients failed:\n{output}")
    (scratch / "node_modules" / ".kctl-complete").touch()
    try:
        os.rename(scratch, target)
    except OSError:  # another session installed it meanwhile
        shutil.rmtree(scratch, ignore_errors=True)
    return target / "node_modules"


CLIENT_SCRIPTS = Path(__file__).resolve().parent / "kafka07_clients"


def run_node(node_modules: Path, script: str, *args: object, timeout: float = 90.0) -> dict:
    """Run one of tests/kafka07_clients/*.js; its JSON line on stdout."""
    import json
    import os
    import subprocess

    run = subprocess.run(["node", str(CLIENT_SCRIPTS / script), *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "NODE_PATH": str(node_modules)},
                         stdin=subprocess.DEVNULL)
    if run.returncode != 0:
        raise AssertionError(f"node {script} {' '.join(map(str, args))} exited {run.returncode}:\n"
                             f"{run.stdout}\n{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])
