#!/usr/bin/env python3
"""Benchmark kctl verify and kctl dump-log against baselines measured in the same run.

Builds, under bench/data/ (kept between runs): partitions of 100 MiB and >= 1 GiB (mixed codecs, ~100-byte and
~1 KiB records), and a ~128 MiB lz4 segment written by Kafka's own client code (kafka-python's
DefaultRecordBatchBuilder: batches of 100 records, keys like b"customer-N", 200-byte ASCII values, a header on
every tenth record). For each it reports:

* ceiling: the same bytes read in 8 MiB windows and CRC-32C'd batch by batch, with no other parsing;
* `kctl verify`: MiB/s and its ratio to the ceiling;
* deep dumps, `kctl dump-log --deep-iteration --json`, `--deep-iteration` (kafka-dump-log text) and
  `--print-data-log`: records/s in wall and in CPU time (the machine may be shared: CPU time is the steadier
  figure), compiled (kcli.records._dumpfmt and aiokafka's reader) and pure (KCLI_NO_EXTENSIONS=1), each as a
  ratio to kafka-python's record reader over the same file (every record's offset, timestamp, key, value and
  headers touched), wall to wall and CPU to CPU;
* peak RSS of verify and of each dump, each in its own process (flat in file size: compare the files);
* kctl's start-up (the same dump of an empty segment), included in every dump figure; the CPU-startup ratio
  leaves it out (it weighs on the 100 MiB file).

Usage: bench/bench_verify_dump.py [--size-mib 1024] [--small-mib 100] [--lz4-mib 128] [--skip-kafka-python]
                                  [--skip-pure] [--only small,large,lz4]
                                  [--repeat N] [--verify-only]   (N interleaved ceiling/verify runs, medians;
                                                                  --verify-only skips the dumps)
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


def build_lz4_segment(directory: Path, size_mib: int) -> Path:
    """A segment as Kafka's Java client writes it, built with kafka-python's DefaultRecordBatchBuilder
    (the same record layout and lz4 framing): batches of 100 records of ~200 bytes."""
    import struct

    from crc32c import crc32c
    from kafka.record.default_records import DefaultRecordBatchBuilder

    log_file = directory / "00000000000000000000.log"
    marker = directory / ".complete"
    if marker.exists():
        return log_file
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"orders", b"customer", b"payment", b"status", b"shipped"]
    target = size_mib * 1024 * 1024
    offset = written = batches = 0
    with open(log_file, "wb") as out:
        while written < target:
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=3, is_transactional=False, producer_id=-1,
                                                producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
            ts = 1_700_000_000_000 + offset
            for i in range(100):
                key = b"customer-%d" % rng.randrange(100000)
                value = b" ".join(rng.choice(words) for _ in range(30))[:200].ljust(200, b".")
                builder.append(i, timestamp=ts + i, key=key, value=value, headers=[("h", b"v")] if i % 10 == 0 else [])
            raw = bytearray(builder.build())
            struct.pack_into(">q", raw, 0, offset)  # the base offset lies outside the CRC; the leader epoch
            struct.pack_into(">i", raw, 12, 0)  # inside it: set both as a broker would, then re-stamp the CRC
            struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
            out.write(raw)
            written += len(raw)
            offset += 100
            batches += 1
    marker.write_text(json.dumps({"bytes": written, "records": offset, "batches": batches}))
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


def measure_dump(path: str, *extra: str, pure: bool = False) -> dict:
    """`kctl dump-log --deep-iteration [...] FILE > /dev/null` as a user runs it (start-up included);
    ``pure``: with KCLI_NO_EXTENSIONS=1 (no compiled formatter, no aiokafka reader)."""
    env = {**os.environ, "KCLI_NO_EXTENSIONS": "1" if pure else ""}
    started = time.perf_counter()
    with open(os.devnull, "w") as sink:
        proc = subprocess.run([sys.executable, "-m", "kcli", "dump-log", "--deep-iteration", *extra, path],
                              stdout=sink, stderr=subprocess.PIPE, text=True, env=env)
    seconds = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "child_maxrss_kib": usage.ru_maxrss}


def measure_kafka_python(path: str) -> dict:
    from kafka.record.memory_records import MemoryRecords

    from kcli.records.layout import entry_size

    started = time.perf_counter()
    cpu_started = time.process_time()
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
    return {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu_started,
            "records": records, "checksum": checksum}


def _child(kind: str, path: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr}")
    return json.loads(out.stdout)


# (label, kind, dump-log flags) of the deep dumps measured
DUMPS = (("--json", "dump-json", ("--json",)), ("text", "dump-text", ()), ("--print-data-log", "dump-print", ("--print-data-log",)))
MEASURES = {"ceiling": measure_ceiling, "verify": measure_verify, "decode": measure_decode,
            "kafka-python": measure_kafka_python, "startup": lambda _path: measure_startup()}
for _label, _kind, _flags in DUMPS:
    MEASURES[_kind] = lambda p, f=_flags: measure_dump(p, *f)
    MEASURES[_kind + "-pure"] = lambda p, f=_flags: measure_dump(p, *f, pure=True)


def measure_startup() -> dict:
    """kctl's start-up and exit, which every dump above includes: the same command over an empty segment."""
    empty = DATA / "empty-0" / "00000000000000000000.log"
    empty.parent.mkdir(parents=True, exist_ok=True)
    empty.write_bytes(b"")
    return measure_dump(str(empty), "--json")


def run_one(label: str, log_file: Path, kafka_python: bool, pure: bool, startup: dict | None, repeat: int = 1,
            verify_only: bool = False) -> dict:
    meta = json.loads((log_file.parent / ".complete").read_text())
    mib = meta["bytes"] / 2**20
    n = meta["records"]
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
        return {"label": label, "file": str(log_file), "mib": round(mib, 1), "records": n,
                "batches": meta["batches"], "repeat": repeat, "ceiling_mib_s": mib / ceiling["seconds"],
                "verify_mib_s": mib / verify["seconds"], "verify_peak_rss_mib": verify["maxrss_kib"] / 1024,
                "verify_ratio": ceiling["seconds"] / verify["seconds"], "runs": runs}
    decode = _child("decode", str(log_file))
    result = {
        "label": label,
        "file": str(log_file),
        "mib": round(mib, 1),
        "records": n,
        "batches": meta["batches"],
        "ceiling_mib_s": mib / ceiling["seconds"],
        "verify_mib_s": mib / verify["seconds"],
        "verify_peak_rss_mib": verify["maxrss_kib"] / 1024,
        "decode_records_s": n / decode["seconds"],
        "dumps": {},
    }
    result["verify_ratio"] = result["verify_mib_s"] / result["ceiling_mib_s"]
    result.update(repeat=repeat, runs=runs)
    kp = None
    if kafka_python:
        kp = _child("kafka-python", str(log_file))
        assert kp["records"] == n, (kp["records"], n)
        result["kafka_python_records_s"] = n / kp["seconds"]
        result["kafka_python_cpu_records_s"] = n / kp["cpu_seconds"]
        result["decode_vs_kafka_python"] = result["decode_records_s"] / result["kafka_python_records_s"]
    for dump_label, kind, _flags in DUMPS:
        for variant in ("compiled", "pure") if pure else ("compiled",):
            m = _child(kind if variant == "compiled" else kind + "-pure", str(log_file))
            row = {"records_s": n / m["seconds"], "cpu_records_s": n / m["cpu_seconds"],
                   "peak_rss_mib": m["child_maxrss_kib"] / 1024,
                   "cpu_records_s_after_startup": n / max(m["cpu_seconds"] - startup["cpu_seconds"], 1e-9)}
            if kp is not None:
                row["vs_kafka_python"] = row["records_s"] / result["kafka_python_records_s"]
                row["cpu_vs_kafka_python"] = row["cpu_records_s"] / result["kafka_python_cpu_records_s"]
                row["cpu_after_startup_vs_kafka_python"] = (row["cpu_records_s_after_startup"]
                                                            / result["kafka_python_cpu_records_s"])
            result["dumps"][f"{dump_label} {variant}"] = row
    return result


def report(r: dict) -> None:
    print(f"\n== {r['label']}: {r['mib']} MiB, {r['batches']} batches, {r['records']} records  ({r['file']})")
    print(f"ceiling (read + CRC-32C per batch)   {r['ceiling_mib_s']:10.0f} MiB/s")
    print(f"kctl verify                          {r['verify_mib_s']:10.0f} MiB/s   ratio {r['verify_ratio']:.2f}"
          f"   peak RSS {r['verify_peak_rss_mib']:.0f} MiB")
    print(f"kcli record reader (library)         {r['decode_records_s']:10.0f} records/s")
    if "kafka_python_records_s" in r:
        print(f"kafka-python record reader           {r['kafka_python_records_s']:10.0f} records/s wall, "
              f"{r['kafka_python_cpu_records_s']:.0f} records/s CPU   (kcli reader {r['decode_vs_kafka_python']:.2f}x)")
    print("kctl dump-log --deep-iteration ...  records/s: wall      CPU   x kafka-python: wall   CPU  CPU-startup"
          "  peak RSS")
    for name, row in r["dumps"].items():
        ratios = (f"{row['vs_kafka_python']:8.2f}x {row['cpu_vs_kafka_python']:6.2f}x "
                  f"{row['cpu_after_startup_vs_kafka_python']:8.2f}x" if "vs_kafka_python" in row else " " * 27)
        print(f"  {name:<30} {row['records_s']:10.0f} {row['cpu_records_s']:10.0f}        {ratios}   "
              f"{row['peak_rss_mib']:5.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--small-mib", type=int, default=100)
    parser.add_argument("--lz4-mib", type=int, default=128)
    parser.add_argument("--skip-kafka-python", action="store_true")
    parser.add_argument("--skip-pure", action="store_true", help="do not measure the pure-Python dump path")
    parser.add_argument("--only", default="small,large,lz4", help="which files: small, large, lz4 (comma-separated)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="ceiling and verify runs, interleaved, each in its own process; medians reported")
    parser.add_argument("--verify-only", action="store_true", help="only the ceiling and verify (no dumps)")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, path = args.measure
        result = MEASURES[kind](path)
        result["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(result))
        return
    wanted = set(args.only.split(","))
    results = []
    startup = _child("startup", "-")
    print(f"# kctl start-up (dump-log --json of an empty segment): {startup['seconds']:.2f}s wall, "
          f"{startup['cpu_seconds']:.2f}s CPU; the CPU-startup ratios leave it out", file=sys.stderr)
    for label, size in (("small", args.small_mib), ("large", args.size_mib), ("lz4", args.lz4_mib)):
        if label not in wanted:
            continue
        started = time.perf_counter()
        if label == "lz4":
            log_file = build_lz4_segment(DATA / f"lz4-{size}mib-0", size)
        else:
            log_file = build_partition(DATA / f"bench-{size}mib-0", size)
        print(f"# {label}: {log_file} ready in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        results.append(run_one(label, log_file, not args.skip_kafka_python, not args.skip_pure,
                               None if args.verify_only else startup, args.repeat, args.verify_only))
        if args.verify_only:
            v = results[-1]
            print(f"\n== {v['label']}: {v['mib']} MiB, {v['batches']} batches; medians of {v['repeat']}")
            print(f"ceiling (read + CRC-32C per batch)   {v['ceiling_mib_s']:8.0f} MiB/s")
            print(f"kctl verify                          {v['verify_mib_s']:8.0f} MiB/s   ratio {v['verify_ratio']:.2f}"
                  f"   (per run: {v['runs']['ratios']})")
        else:
            report(results[-1])
    print("\n" + json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
