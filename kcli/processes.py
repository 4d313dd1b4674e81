"""Child processes of kctl's launchers (ZooKeeper, local clusters): loopback ports, starting a server in its
own process group with its output in a log file, and stopping it by SIGTERM, then SIGKILL. Stdlib only.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from kcli.errors import PortInUseError

LOOPBACK = "127.0.0.1"
TAIL_LINES = 20


def free_ports(count: int, *, exclude: frozenset[int] = frozenset()) -> list[int]:
    """``count`` distinct loopback ports nothing listens on now (the kernel's picks, held together while chosen)."""
    chosen: list[int] = []
    while len(chosen) < count:
        held = []
        try:
            for _ in range(count - len(chosen)):
                sock = socket.socket()
                sock.bind((LOOPBACK, 0))
                held.append(sock)
            chosen += [p for p in (s.getsockname()[1] for s in held) if p not in exclude and p not in chosen]
        finally:
            for sock in held:
                sock.close()
    return chosen


def free_port() -> int:
    return free_ports(1)[0]


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True when another socket holds ``host:port``. SO_REUSEADDR, as the servers set it: connections of an
    earlier run lingering in TIME_WAIT do not count, a listener does."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def wait_ports_free(ports: Iterable[int], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until no listener holds any of ``ports`` (a process just stopped: Linux
    clears its command line before it closes its sockets); True when they are free."""
    deadline = time.monotonic() + timeout
    while any(port_in_use(p) for p in ports):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def check_ports_free(ports: Mapping[str, int], *, hint: str = "") -> None:
    """Raise PortInUseError naming every taken port of ``ports`` (what -> port)."""
    taken = [f"{LOOPBACK}:{port} ({what})" for what, port in ports.items() if port_in_use(port)]
    if taken:
        raise PortInUseError(f"port{'s' if len(taken) > 1 else ''} already in use: {', '.join(taken)}"
                             + (f"; {hint}" if hint else ""))


def listening(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def spawn(argv: Sequence[str], *, log_path: Path, cwd: Path, env: Mapping[str, str] | None = None
          ) -> subprocess.Popen:
    """Start a server with stdout and stderr appended to ``log_path``. Its own process group keeps a terminal's
    Ctrl-C away from it: the launcher decides the order things stop in."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(list(argv), cwd=cwd, env=None if env is None else dict(env),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, process_group=0)


def terminate(procs: Sequence[subprocess.Popen], timeout: float) -> list[subprocess.Popen]:
    """SIGTERM to each process still running, a wait of at most ``timeout`` seconds for all of them together,
    then SIGKILL to the stragglers; returns the ones that had to be killed."""
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    killed = []
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed.append(proc)
    return killed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def command_line(pid: int) -> str:
    """The process's arguments joined by spaces; "" when it is gone or unreadable (Linux's /proc)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def exited(pid: int) -> bool:
    """The process is gone, or exited and waiting to be reaped: every one of its threads has ended (so its
    sockets are closed)."""
    return not pid_alive(pid) or _zombie(pid)


def _zombie(pid: int) -> bool:
    """Exited, not yet reaped by its parent: every thread of it in Linux's /proc state Z (or X). Neither an empty
    command line nor the first thread's state: a JVM's first thread may end (a zombie) while its others run on
    and hold its listening sockets."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return all(_state(task / "stat") in ("Z", "X", None) for task in tasks)
    except FileNotFoundError:
        return True
    except OSError:
        return command_line(pid) == ""


def _state(stat: Path) -> str | None:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None  # the thread is gone


def stop_pid(pid: int, timeout: float) -> bool:
    """SIGTERM a process that is not our child, SIGKILL after ``timeout``; True when it had to be killed."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if exited(pid):  # gone, or a zombie waiting for its parent
            return False
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ("" if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@contextmanager
def stop_on_signals(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                    ) -> Iterator[threading.Event]:
    """An event set by any of ``signals`` (Ctrl-C, a service manager's stop, a closed terminal) instead of their
    default actions, for a launcher that must stop its children in order; the old handlers come back after.

    The handler sets the event from a new thread: set() from the handler itself could deadlock on the event's
    lock if the signal arrived while the main thread was inside ``stop.wait()``.
    """
    stop = threading.Event()

    def handler(_signum: int, _frame: object) -> None:
        threading.Thread(target=stop.set, name="kctl-stop", daemon=True).start()

    previous = {}
    for sig in signals:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
