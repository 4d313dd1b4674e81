#!/usr/bin/env python3
"""CPU per ranged GET from S3 (SeaweedFS's gateway on loopback): s3fs's cat_file against the remote storage
manager's presigned-URL path (kcli.storage.remote.PresignedRanges), the same ranges of the same object.

The figure is this process's CPU (every thread: s3fs runs its requests on fsspec's event-loop thread) per GET,
the median of `--repeat` blocks of `--gets` GETs each, per range size; a GET per MiB and a fixed part per
request follow from the two sizes.

Usage: bench/bench_s3_get.py [--gets 50] [--repeat 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

MB = 1 << 20
SIZES = (64 << 10, 4 << 20)


def cpu_per_get(read, gets: int, repeat: int) -> float:
    """Median over ``repeat`` blocks of the process CPU per call of ``read``, in ms."""
    read()  # a connection and, on the presigned path, the object's URL
    blocks = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(gets):
            read()
        blocks.append((time.process_time() - started) / gets * 1000)
    return statistics.median(blocks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gets", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from seaweedfs_support import SeaweedFS

    from kcli.storage.remote import FsspecRemoteStorageManager

    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="kctl-s3-get-bench-") as tmp:
        weed = SeaweedFS(Path(tmp) / "seaweedfs")
        weed.start()
        try:
            bucket = weed.new_bucket()
            rsm = FsspecRemoteStorageManager(f"s3://{bucket}/bench", **weed.storage_options())
            assert rsm.presigned is not None
            key = f"{bucket}/bench/object.log"
            payload = bytes(range(256)) * (8 * MB // 256)
            rsm.fs.pipe_file(key, payload)
            display = rsm.fs.unstrip_protocol(key)
            for size in SIZES:
                def s3fs_read(size=size):
                    assert len(rsm.fs.cat_file(key, start=MB, end=MB + size)) == size

                def presigned_read(size=size):
                    assert len(rsm.presigned.get(key, MB, MB + size, display)) == size

                report[size] = {"s3fs_ms": cpu_per_get(s3fs_read, args.gets, args.repeat),
                                "presigned_ms": cpu_per_get(presigned_read, args.gets, args.repeat)}
        finally:
            weed.stop()
    small, large = (report[s] for s in SIZES)
    print(f"CPU per ranged GET (median of {args.repeat} x {args.gets}), ms:")
    print("| range | s3fs cat_file | presigned GET (urllib3) |")
    print("| --- | ---: | ---: |")
    for size in SIZES:
        print(f"| {size // 1024} KiB | {report[size]['s3fs_ms']:.2f} | {report[size]['presigned_ms']:.2f} |")
    span = (SIZES[1] - SIZES[0]) / MB
    for name in ("s3fs_ms", "presigned_ms"):
        per_mib = (large[name] - small[name]) / span
        print(f"{name[:-3]}: ~{small[name] - per_mib * SIZES[0] / MB:.2f} ms per request + {per_mib:.2f} ms per MiB")
    if args.json:
        args.json.write_text(json.dumps({str(k): v for k, v in report.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
