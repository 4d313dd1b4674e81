"""`kctl` processes forked from one process that has imported kcli already (tests that start many).

Starting `python -m kcli` costs a few tenths of a CPU second before the command does anything (typer, rich and
kcli's imports). A test that kills `kctl` at every step of a command starts dozens of them; this server imports
kcli once and forks a child per command. The child is a real process running kctl's entry point, with its own
argv, environment, working directory, stdout and stderr: its exit status is the one a fresh process would have,
and a SIGKILL it sends itself (KCLI_TEST_CRASH_AFTER) kills it as it would a fresh process. Tests that are about
the process start itself (tests/cli/test_startup.py) keep starting fresh interpreters.

    with KctlForkServer() as server:
        proc = server.run("recover", str(path), env={...})   # a subprocess.CompletedProcess
    proc = kctl_fork.run("recover", str(path))   # the same, one server for the whole pytest process

Each test module that checks a command through the process also keeps a test or two that starts it fresh.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# The server: reads one JSON request a line on stdin, forks, answers {"pid": ...} then {"returncode": ...} on stdout.
_SERVER = r'''
import atexit, importlib, json, os, signal, sys, threading, time, traceback
from kcli.cli.app import command, main
command()  # the click command tree, built once (tenths of a second per child otherwise)
for name in sys.argv[1:]:  # what the commands import as they run, once for every child
    importlib.import_module(name)

def child(request):
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdin = open(0, closefd=False)  # not the server's reader of requests (nor what it had buffered)
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

for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        child(request)
    print(json.dumps({"pid": pid}), flush=True)
    deadline = time.monotonic() + request["timeout"]
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline and not timed_out:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
        time.sleep(0.005)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}), flush=True)
'''


# kctl's commands import their libraries as they run (kctl's start-up stays light): the server imports them
# once. The error table's modules (kcli.cli.errors) too: every failing command imports them.
PRELOAD = ("kcli.tools.recover", "kcli.tools.compact", "kcli.tools.verify", "kcli.tools.scan", "kcli.tools.dump",
           "kcli.client.client", "kcli.zk.models", "kcli.zk.registry", "kcli.zk.server", "rich.console", "rich.table")


class KctlForkServer:
    def __init__(self, env: dict[str, str] | None = None):
        self._extra = dict(env or {})  # on top of the caller's environment at each run
        self._dir = tempfile.TemporaryDirectory(prefix="kctl-fork-")
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one command at a time: a request, its child's pid, its exit status

    def __enter__(self) -> KctlForkServer:
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER, *PRELOAD], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env={**os.environ, **self._extra})
        return self

    def __exit__(self, *exc) -> None:
        assert self._proc is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()
        self._dir.cleanup()

    def run(self, *args: str, env: dict[str, str | None] | None = None, cwd: str | Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """`kctl *args` in a forked child: its returncode (negative for a signal), stdout and stderr. ``env``
        goes on top of this process's environment (a None value unsets a variable)."""
        assert self._proc is not None, "use KctlForkServer as a context manager"
        out, err = Path(self._dir.name) / "stdout", Path(self._dir.name) / "stderr"
        environment = {k: v for k, v in {**os.environ, **self._extra, **(env or {})}.items() if v is not None}
        request = {"args": list(args), "env": environment, "cwd": str(cwd or os.getcwd()),
                   "stdout": str(out), "stderr": str(err), "timeout": timeout}
        with self._lock:
            child = None
            try:
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
                child = self._answer()["pid"]
                answer = self._answer()
            except BaseException:  # e.g. pytest-timeout interrupting a hung command: nothing half-done is left
                if child is not None:
                    with contextlib.suppress(OSError):
                        os.kill(child, signal.SIGKILL)
                self._proc.kill()
                self._proc.wait()
                raise
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(["kctl", *args], timeout)
        return subprocess.CompletedProcess(["kctl", *args], answer["returncode"],
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))

    def _answer(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the kctl fork server exited ({self._proc.wait()})")
        return json.loads(line)


_shared: KctlForkServer | None = None
_shared_lock = threading.Lock()


def run(*args: str, env: dict[str, str | None] | None = None, cwd: str | Path | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """`kctl *args` in a child of this pytest process's server (started on first use, stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._proc.poll() is not None:  # first use, or a run interrupted
            _shared = KctlForkServer().__enter__()
            atexit.register(_shared.__exit__)
        server = _shared
    return server.run(*args, env=env, cwd=cwd, timeout=timeout)
