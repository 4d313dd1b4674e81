"""Run a `kctl` command (usually `broker run`) with a sampling profiler of every thread (no py-spy here).

`python bench/sample_profile.py OUT.txt broker run ...` runs kctl as it would run, plus a thread that every
``KCLI_SAMPLE_MS`` (default 2) ms takes every other thread's Python stack (sys._current_frames). At exit
(SIGTERM or SIGINT included) OUT.txt gets the collapsed stacks (`thread;outer;...;inner count`, the input of
flamegraph.pl and speedscope) and OUT.txt.top the innermost frames per thread, most sampled first, with the
thread's share of samples spent waiting (selectors, locks, queues: idle, not work). With
``KCLI_SAMPLE_PAUSED=1`` it starts paused: SIGUSR1 starts sampling, SIGUSR2 pauses it (a benchmark's phase).

The sampler needs the GIL to look, so a thread holding it in C code for long is seen when it lets go: treat
the figures as where time goes, not as exact shares. With ``KCLI_SAMPLE_YAPPI=1`` (and yappi installed) it
profiles CPU time of every thread with yappi instead, between the same signals, into OUT.txt.yappi (functions
by own time, then by total time).
"""

from __future__ import annotations

import atexit
import collections
import os
import signal
import sys
import threading
import time

IDLE = ("select", "poll", "wait", "acquire", "_worker", "get", "sleep", "accept", "recv_into", "read")


def _install(out_path: str) -> None:
    interval = float(os.environ.get("KCLI_SAMPLE_MS", "2")) / 1000
    stacks: collections.Counter[str] = collections.Counter()
    stop = threading.Event()
    recording = threading.Event()
    if os.environ.get("KCLI_SAMPLE_PAUSED") != "1":
        recording.set()
    signal.signal(signal.SIGUSR1, lambda *_: recording.set())
    signal.signal(signal.SIGUSR2, lambda *_: recording.clear())
    if os.environ.get("KCLI_SAMPLE_YAPPI") == "1":
        _install_yappi(out_path, recording)
        return

    def sample() -> None:
        me = threading.get_ident()
        names: dict[int, str] = {}
        while not stop.wait(interval):
            if not recording.is_set():
                continue
            names.update((t.ident, t.name) for t in threading.enumerate() if t.ident is not None)
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                parts = []
                while frame is not None:
                    code = frame.f_code
                    parts.append(f"{code.co_name} ({code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno})")
                    frame = frame.f_back
                stacks[";".join([names.get(ident, str(ident))] + parts[::-1])] += 1

    def write() -> None:
        stop.set()
        with open(out_path, "w") as out:
            for stack, count in stacks.most_common():
                out.write(f"{stack} {count}\n")
        per_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for stack, count in stacks.items():
            thread, *frames = stack.split(";")
            per_thread[thread.split("_")[0]][frames[-1] if frames else "?"] += count
        with open(out_path + ".top", "w") as out:
            for thread, counter in sorted(per_thread.items(), key=lambda kv: -sum(kv[1].values())):
                total = sum(counter.values())
                idle = sum(c for f, c in counter.items() if f.split(" ")[0] in IDLE)
                out.write(f"== {thread}: {total} samples, {100 * idle / total:.0f} % waiting\n")
                for frame, count in counter.most_common(25):
                    out.write(f"  {100 * count / total:5.1f} %  {frame}\n")

    atexit.register(write)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sys.exit(0))
    threading.Thread(target=sample, name="sampler", daemon=True).start()
    time.sleep(0)


def _install_yappi(out_path: str, recording: threading.Event) -> None:
    import io

    import yappi

    yappi.set_clock_type("cpu")

    def on(*_: object) -> None:
        yappi.start(builtins=True, profile_threads=True)

    def off(*_: object) -> None:
        yappi.stop()

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    if recording.is_set():
        on()

    def write() -> None:
        yappi.stop()
        stats = yappi.get_func_stats()
        with open(out_path + ".yappi", "w") as out:
            for key in ("tsub", "ttot"):
                buffer = io.StringIO()
                stats.sort(key).print_all(out=buffer, columns={0: ("name", 90), 1: ("ncall", 10), 2: ("tsub", 8),
                                                               3: ("ttot", 8), 4: ("tavg", 8)})
                out.write(f"== by {key}\n" + "\n".join(buffer.getvalue().splitlines()[:60]) + "\n")
            buffer = io.StringIO()
            yappi.get_thread_stats().print_all(out=buffer)
            out.write("== threads\n" + buffer.getvalue())

    atexit.register(write)


if __name__ == "__main__":
    _install(sys.argv[1])
    sys.argv = ["kctl"] + sys.argv[2:]
    from kcli.cli.app import main

    main()
