"""Long-running `kctl` processes (brokers) forked from one process that has imported kcli already.

A `kctl broker run` spends about 1.7 CPU seconds importing kcli (typer, kio's schemas, the broker's modules) before
it serves; the process tiers start hundreds of brokers. This server imports them once and forks a child per broker.
The child is a real process running kctl's entry point (as tests/kctl_fork.py's children, but not waited on): its
own pid, argv, environment, working directory, stdout and stderr; SIGTERM, SIGKILL, SIGSTOP and SIGCONT reach it
as they reach a fresh process, and its exit status is the one a fresh process would have. ``ForkedProcess`` gives
the part of subprocess.Popen the tests use (pid, poll, wait, send_signal, kill, terminate, returncode).

Tests about the process start itself start brokers fresh (tests/cli/test_startup.py, tests/cli/test_exit_table.py,
tests/broker/test_config.py, and BrokerProcess(fresh=True)); KCLI_TEST_FORK_BROKERS=0 starts every broker fresh.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

# The server: one JSON request a line on stdin -> fork -> {"pid": ...}; each child's end -> {"exit": pid, ...}.
# It waits in select() on stdin and a SIGCHLD wake-up pipe: idle, it uses no CPU. On end of input (the pytest
# process exited) it kills the children left, as their owner would have.
_SERVER = r'''
import atexit, importlib, json, os, select, signal, sys, threading, traceback
from kcli.cli.app import command, main
command()  # the click command tree, built once (tenths of a second per child otherwise)
for name in sys.argv[1:]:  # what a broker imports as it starts, once for every child
    importlib.import_module(name)

wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to pytest's process group: pytest decides, not this server

def child(request):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter: KeyboardInterrupt
    os.close(wake_r)
    os.close(wake_w)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.argv = ["kctl", *request["args"]]
    code = 0
    try:
        main()
    except SystemExit as e:  # as the interpreter turns SystemExit into an exit status
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # as the interpreter ends on an unhandled SIGINT
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # the interpreter's exit: wait for non-daemon threads, atexit, flush
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)

def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

children = set()

def reap():
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        say({"exit": pid, "returncode": os.waitstatus_to_exitcode(status)})

pending = b""
while True:
    try:
        ready, _, _ = select.select([0, wake_r], [], [])
    except InterruptedError:
        continue
    if wake_r in ready:
        try:
            while os.read(wake_r, 512):
                pass
        except BlockingIOError:
            pass
    reap()
    if 0 in ready:
        data = os.read(0, 65536)
        if not data:
            break
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            request = json.loads(line)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                child(request)
            children.add(pid)
            say({"pid": pid})
for pid in children:  # the pytest process is gone: so are its brokers
    try:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
for pid in children:
    os.waitpid(pid, 0)
'''

# The modules `kctl broker run` imports as it starts (standalone and ZooKeeper mode, TLS and SASL).
PRELOAD = ("kcli.cli.broker", "kcli.broker.server", "kcli.broker.assembly", "kcli.broker.config", "kazoo.client",
           "ssl", "asyncio")


class ForkServer:
    def __init__(self) -> None:
        preload = [name for name in PRELOAD if _importable(name)]
        # this file as the server's script: `ps` shows it (and each child it forks) by name
        self._proc = subprocess.Popen([sys.executable, __file__, *preload], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=None, text=True)
        self._lock = threading.Lock()  # one spawn at a time: a request, then its pid
        self._changed = threading.Condition()
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True, name="broker-fork-server")
        self._reader.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "exit" in message:
                    self._exits[message["exit"]] = message["returncode"]
                else:
                    self._pids.append(message["pid"])
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def alive(self) -> bool:
        return self._proc.poll() is None and not self._closed

    def spawn(self, args: list[str], *, stdout: str | Path, stderr: str | Path, env: dict[str, str] | None = None,
              cwd: str | Path | None = None) -> ForkedProcess:
        request = {"args": list(args), "env": dict(os.environ if env is None else env), "cwd": str(cwd or os.getcwd()),
                   "stdout": str(stdout), "stderr": str(stderr)}
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            with self._changed:
                if not self._changed.wait_for(lambda: self._pids or self._closed, timeout=60) or not self._pids:
                    raise RuntimeError(f"the broker fork server did not start a child (exit {self._proc.poll()})")
                pid = self._pids.pop(0)
        return ForkedProcess(self, pid, ["kctl", *args])

    def returncode(self, pid: int, timeout: float | None = 0) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._closed, timeout=timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ForkedProcess:
    """A child of the fork server, as much of subprocess.Popen as the tests use."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been reused
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


def _importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


_shared: ForkServer | None = None
_shared_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get("KCLI_TEST_FORK_BROKERS", "1") != "0"


def spawn(args: list[str], *, stdout: str | Path = os.devnull, stderr: str | Path, env: dict[str, str] | None = None,
          cwd: str | Path | None = None) -> ForkedProcess:
    """`kctl *args` as a child of this pytest process's fork server (started on first use, stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive():
            _shared = ForkServer()
            atexit.register(_shared.close)
        server = _shared
    return server.spawn(args, stdout=stdout, stderr=stderr, env=env, cwd=cwd)


if __name__ == "__main__":  # the server (ForkServer starts it)
    exec(_SERVER)
