#!/usr/bin/env python3
"""Benchmark kctl verify and kctl dump-log against baselines measured in the same run.

Builds partitions of 100 MiB and >= 1 GiB under bench/data/ (mixed codecs, ~100-byte and ~1 KiB records;
kept between runs), then reports for each:

* ceiling: the same bytes read in 8 MiB windows and CRC-32C'd batch by batch, with no other parsing;
* `kctl verify`: MiB/s and its ratio to the ceiling;
* `kctl dump-log --deep-iteration --json`: records/s, against kafka-python's record reader (the same file,
  every record's offset, timestamp, key, value and headers touched);
* peak RSS of verify and of the dump, each in its own process.

Usage: bench/bench_verify_dump.py [--size-mib 1024] [--small-mib 100] [--skip-kafka-python]
       [--repeat N] [--verify-only]   (N interleaved ceiling/verify runs, medians; --verify-only skips the dumps)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
WINDOW = 8 * 1024 * 1024


# -- data -------------------------------------------------------------------------------------------
def build_partition(directory: Path, size_mib: int) -> Path:
    """One segment of ~size_mib MiB. A pool of distinct batches is built once, then written again and
    again with the base offset rewritten (it is outside the CRC), so building 1 GiB takes seconds."""
    from kcli.records import Codec, Header, Record, build_record_batch
    from kcli.records.layout import read_records_count, stamp_base_offset
    from kcli.storage.log import LogConfig, PartitionLog

    log_file = directory / "00000000000000000000.log"
    marker = directory / ".complete"
    if marker.exists():
        return log_file
    if directory.exists():
        for f in directory.iterdir():
            f.unlink()
    rng = random.Random(size_mib)
    words = [rng.randbytes(6).hex() for _ in range(500)]
    pool = []
    for i in range(400):
        small = i % 2 == 0
        count, size = (40, 100) if small else (12, 1024)
        records = []
        for j in range(count):
            text = " ".join(rng.choice(words) for _ in range(size // 13 + 1)).encode()[:size]
            headers = (Header("trace", rng.randbytes(8)),) if j % 4 == 0 else ()
            records.append(Record(j, 1_700_000_000_000 + i * 100 + j, f"key-{rng.randrange(100000)}".encode(), text, headers))
        pool.append(build_record_batch(records, codec=Codec(i % 5), partition_leader_epoch=0))
    target = size_mib * 1024 * 1024
    with PartitionLog(directory, config=LogConfig(segment_bytes=2**31 - 1)) as log:
        offset = 0
        written = 0
        i = 0
        while written < target:
            raw = bytearray(pool[i % len(pool)])
            stamp_base_offset(raw, 0, offset)
            count = read_records_count(raw)
            log.append_raw(bytes(raw))
            offset += count
            written += len(raw)
            i += 1
    marker.write_text(json.dumps({"bytes": written, "records": offset, "batches": i}))
    return log_file


# -- measurements (each in its own process, so peak RSS is that measurement's) ------------------------
def measure_ceiling(path: str) -> dict:
    from crc32c import crc32c

    from kcli.records.layout import (
        ATTRIBUTES_OFFSET,
        BATCH_LENGTH_FIELD,
        BATCH_LENGTH_OFFSET,
        HEADER_SIZE_UP_TO_MAGIC,
        LOG_OVERHEAD,
    )

    started = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pos = 0
    batches = 0
    unpack = BATCH_LENGTH_FIELD.unpack_from
    length_at, overhead, up_to_magic, crc_from = BATCH_LENGTH_OFFSET, LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, ATTRIBUTES_OFFSET
    while pos < size:
        chunk = os.pread(fd, min(WINDOW, size - pos), pos)
        view = memoryview(chunk)
        local = 0
        end = len(chunk)
        while end - local > up_to_magic:
            (length,) = unpack(chunk, local + length_at)
            if local + overhead + length > end:
                break
            crc32c(view[local + crc_from : local + overhead + length])
            local += overhead + length
            batches += 1
        view.release()
        if local == 0:
            break
        pos += local
    os.close(fd)
    return {"seconds": time.perf_counter() - started, "bytes": size, "batches": batches}


def measure_verify(path: str) -> dict:
    from kcli.tools.verify import verify

    started = time.perf_counter()
    report = verify([path])
    assert report.is_clean(), report.problems[:3]
    return {"seconds": time.perf_counter() - started, "bytes": report.bytes, "records": report.records}


def measure_decode(path: str) -> dict:
    """kcli's record reader as a library: every record of every batch decoded (no output)."""
    from kcli.storage.segment import FileBatchReader

    started = time.perf_counter()
    records = sum(len(batch.records()) for batch in FileBatchReader(path))
    return {"seconds": time.perf_counter() - started, "records": records}


def measure_dump(path: str, *extra: str) -> dict:
    """`kctl dump-log --deep-iteration [--json] FILE > /dev/null` as a user runs it (start-up included)."""
    started = time.perf_counter()
    with open(os.devnull, "w") as sink:
        proc = subprocess.run([sys.executable, "-m", "kcli", "dump-log", "--deep-iteration", *extra, path],
                              stdout=sink, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"seconds": seconds, "child_maxrss_kib": rss_kib}


def measure_kafka_python(path: str) -> dict:
    from kafka.record.memory_records import MemoryRecords

    from kcli.records.layout import entry_size

    started = time.perf_counter()
    records = 0
    checksum = 0
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        chunk = os.pread(fd, min(WINDOW, size - pos), pos)
        mr = MemoryRecords(chunk)
        consumed = 0
        while True:
            batch = mr.next_batch()
            if batch is None:
                break
            consumed += entry_size(chunk, consumed)
            for r in batch:
                records += 1
                checksum += r.offset + r.timestamp + len(r.value or b"") + len(r.key or b"") + len(r.headers)
        if consumed == 0:
            break
        pos += consumed
    os.close(fd)
    return {"seconds": time.perf_counter() - started, "records": records, "checksum": checksum}


def _child(kind: str, path: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def run_one(label: str, log_file: Path, kafka_python: bool, repeat: int = 1, verify_only: bool = False) -> dict:
    meta = json.loads((log_file.parent / ".complete").read_text())
    mib = meta["bytes"] / 2**20
    # ceiling and verify interleaved `repeat` times, each run its own process; medians (and every run) reported
    ceilings, verifies = [], []
    for _ in range(repeat):
        ceilings.append(_child("ceiling", str(log_file)))
        verifies.append(_child("verify", str(log_file)))
    ceiling = {"seconds": statistics.median(c["seconds"] for c in ceilings)}
    verify = {"seconds": statistics.median(v["seconds"] for v in verifies),
              "maxrss_kib": max(v["maxrss_kib"] for v in verifies)}
    runs = {"ceiling_s": [round(c["seconds"], 4) for c in ceilings],
            "verify_s": [round(v["seconds"], 4) for v in verifies],
            "ratios": [round(c["seconds"] / v["seconds"], 3) for c, v in zip(ceilings, verifies)]}
    if verify_only:
        return {"label": label, "mib": round(mib, 1), "records": meta["records"], "batches": meta["batches"],
                "repeat": repeat, "ceiling_mib_s": mib / ceiling["seconds"], "verify_mib_s": mib / verify["seconds"],
                "verify_peak_rss_mib": verify["maxrss_kib"] / 1024,
                "verify_ratio": ceiling["seconds"] / verify["seconds"], "runs": runs}
    decode = _child("decode", str(log_file))
    dump = _child("dump-json", str(log_file))
    text = _child("dump-text", str(log_file))
    result = {
        "label": label,
        "mib": round(mib, 1),
        "records": meta["records"],
        "batches": meta["batches"],
        "ceiling_mib_s": mib / ceiling["seconds"],
        "verify_mib_s": mib / verify["seconds"],
        "verify_peak_rss_mib": verify["maxrss_kib"] / 1024,
        "decode_records_s": meta["records"] / decode["seconds"],
        "dump_records_s": meta["records"] / dump["seconds"],
        "dump_text_records_s": meta["records"] / text["seconds"],
        "dump_peak_rss_mib": dump["child_maxrss_kib"] / 1024,
    }
    result["verify_ratio"] = result["verify_mib_s"] / result["ceiling_mib_s"]
    result.update(repeat=repeat, runs=runs)
    if kafka_python:
        kp = _child("kafka-python", str(log_file))
        assert kp["records"] == meta["records"], (kp["records"], meta["records"])
        result["kafka_python_records_s"] = meta["records"] / kp["seconds"]
        result["dump_vs_kafka_python"] = result["dump_records_s"] / result["kafka_python_records_s"]
        result["decode_vs_kafka_python"] = result["decode_records_s"] / result["kafka_python_records_s"]
        result["dump_text_vs_kafka_python"] = result["dump_text_records_s"] / result["kafka_python_records_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--small-mib", type=int, default=100)
    parser.add_argument("--skip-kafka-python", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="ceiling and verify runs, interleaved, each in its own process; medians reported")
    parser.add_argument("--verify-only", action="store_true", help="only the ceiling and verify (no dumps)")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, path = args.measure
        fn = {"ceiling": measure_ceiling, "verify": measure_verify, "decode": measure_decode,
              "dump-json": lambda p: measure_dump(p, "--json"), "dump-text": measure_dump,
              "kafka-python": measure_kafka_python}[kind]
        result = fn(path)
        result["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(result))
        return
    results = []
    for label, size in (("small", args.small_mib), ("large", args.size_mib)):
        started = time.perf_counter()
        log_file = build_partition(DATA / f"bench-{size}mib-0", size)
        print(f"# {label}: {log_file} ready in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        results.append(run_one(label, log_file, not args.skip_kafka_python, args.repeat, args.verify_only))
    for r in results:
        if args.verify_only:
            print(f"\n== {r['label']}: {r['mib']} MiB, {r['batches']} batches; medians of {r['repeat']}")
            print(f"ceiling (read + CRC-32C per batch)   {r['ceiling_mib_s']:8.0f} MiB/s")
            print(f"kctl verify                          {r['verify_mib_s']:8.0f} MiB/s   ratio {r['verify_ratio']:.2f}"
                  f"   (per run: {r['runs']['ratios']})")
            continue
        print(f"\n== {r['label']}: {r['mib']} MiB, {r['batches']} batches, {r['records']} records")
        print(f"ceiling (read + CRC-32C per batch)   {r['ceiling_mib_s']:8.0f} MiB/s")
        print(f"kctl verify                          {r['verify_mib_s']:8.0f} MiB/s   ratio {r['verify_ratio']:.2f}"
              f"   peak RSS {r['verify_peak_rss_mib']:.0f} MiB")
        print(f"kctl dump-log --deep-iteration --json {r['dump_records_s']:8.0f} records/s"
              f"   peak RSS {r['dump_peak_rss_mib']:.0f} MiB")
        print(f"kctl dump-log --deep-iteration (text) {r['dump_text_records_s']:8.0f} records/s")
        print(f"kcli record reader (library)          {r['decode_records_s']:8.0f} records/s")
        if "kafka_python_records_s" in r:
            print(f"kafka-python record reader            {r['kafka_python_records_s']:8.0f} records/s   ratios: "
                  f"json dump {r['dump_vs_kafka_python']:.2f}x, text dump {r['dump_text_vs_kafka_python']:.2f}x, "
                  f"reader {r['decode_vs_kafka_python']:.2f}x")
    print("\n" + json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
