"""Run `kctl broker run` with an event-loop stall watcher (bench_bulk_topics.py --watch-stalls).

`python bench/stall_watch.py OUT.jsonl broker run ...` starts the broker as `kctl` would, plus a task that
marks the event loop's progress every 10 ms and a thread that, when the mark is older than 50 ms, records the
event-loop thread's stack (where it is: running a handler, collecting garbage, waiting for the GIL in a socket
write ...) and, once the loop moves again, the stall's length: one JSON line per stall in OUT.jsonl. Nothing
of the broker changes; the watcher thread wakes every 10 ms. Garbage collections over 20 ms (they hold the
GIL) are written there too, with their generation and thread.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import time
import traceback

THRESHOLD_S = 0.05


def _install(out_path: str) -> None:
    import kcli.broker.server as server

    original = server.KafkaServer.start

    async def start(self) -> None:
        await original(self)
        mark = [time.monotonic()]
        loop_thread = threading.get_ident()

        async def beat() -> None:
            while True:
                mark[0] = time.monotonic()
                await asyncio.sleep(0.01)

        self._background.append(asyncio.get_running_loop().create_task(beat()))

        def watch() -> None:
            out = open(out_path, "a", buffering=1)
            stalled_since = None
            stack: list[str] = []
            while True:
                time.sleep(0.01)
                now = time.monotonic()
                if now - mark[0] > THRESHOLD_S:
                    if stalled_since is None:
                        stalled_since = mark[0]
                        frame = sys._current_frames().get(loop_thread)
                        stack = [f"{f.name} ({f.filename.rsplit('/', 2)[-1]}:{f.lineno})"
                                 for f in traceback.extract_stack(frame)][-12:] if frame is not None else []
                elif stalled_since is not None:
                    out.write(json.dumps({"at": time.time() - (now - stalled_since),
                                          "ms": 1000 * (mark[0] - stalled_since), "stack": stack}) + "\n")
                    stalled_since = None

        threading.Thread(target=watch, name="stall-watch", daemon=True).start()
        collections = open(out_path, "a", buffering=1)
        started: dict[int, float] = {}

        def on_gc(phase: str, info: dict) -> None:  # garbage collections over 20 ms: the GIL is held meanwhile
            if phase == "start":
                started[threading.get_ident()] = time.monotonic()
                return
            took = time.monotonic() - started.pop(threading.get_ident(), time.monotonic())
            if took > 0.02:
                collections.write(json.dumps({"at": time.time() - took, "ms": 1000 * took, "gc": info["generation"],
                                              "thread": threading.current_thread().name}) + "\n")

        gc.callbacks.append(on_gc)

    server.KafkaServer.start = start


if __name__ == "__main__":
    _install(sys.argv[1])
    sys.argv = ["kctl"] + sys.argv[2:]
    from kcli.cli.app import main

    main()
