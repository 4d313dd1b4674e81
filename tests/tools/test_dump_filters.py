"""kctl dump-log for finding records: filters, kcat format strings, --follow, topic/partition, ranges on indexes.

In-process tests on built partitions and the real fixtures; one real `kctl broker run` for the module, written
to by confluent-kafka, read back by kcat (whose -f output --format must reproduce byte for byte) and followed
by a `dump-log --follow` subprocess across segment rolls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_support import BrokerProcess, free_port
from builders import build_partition
from kcli.errors import UsageError
from kcli.records import Header, Record
from kcli.storage.log import LogConfig, PartitionLog
from kcli.tools.dump import DumpOptions, DumpRun, Encodings
from kcli.tools.dump_follow import FollowRun
from kcli.tools.dump_format import RecordFormat, parse_format
from kcli.tools.dump_json import json_lines
from kcli.tools.dump_text import stdout_lines
from kcli.tools.render import BytesEncoding

WT = Path(__file__).resolve().parents[2]


def _json(paths, options: DumpOptions, enc: Encodings = Encodings()) -> tuple[list[dict], DumpRun]:
    run = DumpRun([str(p) for p in paths], options)
    return [json.loads(line) for item in run for line in json_lines(item, enc)], run


def _records(items: list[dict]) -> list[dict]:
    return [i for i in items if i["type"] == "record"]


def _kctl(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, timeout=120, cwd=WT,
                          env={**os.environ, "PYTHONPATH": str(WT), "COLUMNS": "200"}, **kwargs)


@pytest.fixture(scope="module")
def orders(tmp_path_factory) -> Path:
    """orders-3: several segments, all codecs, headers on the first record of each batch, two transactions."""
    return build_partition(tmp_path_factory.mktemp("parts") / "orders-3")


# -- record filters ---------------------------------------------------------------------------------------------

def test_key_filters_select_exactly_the_matching_records(orders):
    everything = _records(_json([orders], DumpOptions(deep_iteration=True))[0])
    items, run = _json([orders], DumpOptions(key=b"key-4"))
    got = _records(items)
    assert got == [r for r in everything if r["key"] == "key-4"] and len(got) > 10
    # a batch line only for batches holding a selected record; the counts say what was read and kept
    assert {i["base_offset"] for i in items if i["type"] == "batch"} == {r["batch_base_offset"] for r in got}
    assert (run.summary.records, run.summary.records_scanned) == (len(got), len(everything))
    regex = _records(_json([orders], DumpOptions(key_regex=r"^key-1[0-3]$"))[0])
    assert regex == [r for r in everything if r["key"] in ("key-10", "key-11", "key-12", "key-13")]


def test_header_grep_and_count(orders):
    everything = _records(_json([orders], DumpOptions(deep_iteration=True))[0])
    traced = _records(_json([orders], DumpOptions(headers=(("trace", None),)))[0])
    assert traced == [r for r in everything if r["headers"]] and len(traced) == 120
    (one,) = _records(_json([orders], DumpOptions(headers=(("trace", b"57"),)))[0])
    assert one["headers"] == [{"key": "trace", "value": "57"}]
    # all filters must hold: key-4 with a trace header
    both = _records(_json([orders], DumpOptions(key=b"key-4", headers=(("trace", None),)))[0])
    assert both == [r for r in traced if r["key"] == "key-4"]
    grep = _records(_json([orders], DumpOptions(grep=r"^txn-v"))[0])
    assert [r["value"] for r in grep] == ["txn-value", "txn-value"]  # the control records never match
    items, run = _json([orders], DumpOptions(key_regex="key-", count=7))
    assert [r["offset"] for r in _records(items)] == [r["offset"] for r in everything[:7]]
    assert run.summary.records == 7 and run.summary.records_scanned < 20 and run.summary.files == 1  # stopped early


def test_filtered_text_prints_matching_records_under_their_batch(orders):
    options = DumpOptions(print_data=True, key=b"key-5", count=3)
    run = DumpRun([str(orders)], options)
    lines = [line for item in run for line in stdout_lines(item, options)]
    assert lines[0].startswith("Dumping ") and lines[1] == "Log starting offset: 0"
    records = [line for line in lines if line.startswith("| offset:")]
    assert len(records) == 3 and all("key: key-5 " in line for line in records)
    assert sum(line.startswith("baseOffset:") for line in lines) == 3  # one record per batch with this key


def test_filters_on_real_fixture_use_the_index_and_count(fixtures_dir):
    part = fixtures_dir / "rjmfernandes__flink-on-prem/data/loyalty_levels-0"
    items, run = _json([part], DumpOptions(start_offset=12000, key_regex="@", count=5))
    got = _records(items)
    assert [r["offset"] for r in got] == list(range(12000, 12005))
    assert {(r["topic"], r["partition"]) for r in got} == {("loyalty_levels", 0)}
    assert [i for i in items if i["type"] == "batch"][0]["position"] > 0  # sought with the .index


def test_bad_filters_are_usage_errors(orders):
    with pytest.raises(UsageError, match="--grep"):
        DumpOptions(grep="(unclosed")
    with pytest.raises(UsageError, match="--key-regex"):
        DumpOptions(key_regex="[")
    with pytest.raises(UsageError, match="--count"):
        DumpOptions(count=0)


# -- topic and partition, offset ranges on indexes --------------------------------------------------------------

def test_records_carry_topic_and_partition(orders, tmp_path):
    got = _records(_json([orders], DumpOptions(deep_iteration=True))[0])
    assert {(r["topic"], r["partition"]) for r in got} == {("orders", 3)}
    loose = tmp_path / "loose"
    loose.mkdir()
    segment = sorted(orders.glob("*.log"))[0]
    (loose / segment.name).write_bytes(segment.read_bytes())
    got = _records(_json([loose / segment.name], DumpOptions(deep_iteration=True))[0])
    assert got and {(r["topic"], r["partition"]) for r in got} == {(None, None)}


def test_offset_range_on_a_partition_dir_prints_the_segment_holding_it(orders):
    logs = sorted(orders.glob("*.log"))
    assert len(logs) >= 3
    bases = [int(p.name.split(".")[0]) for p in logs]
    target = bases[1] + 5  # inside the second segment
    items, _ = _json([orders], DumpOptions(deep_iteration=True, start_offset=target, end_offset=target))
    files = [Path(i["file"]).name for i in items if i["type"] == "file"]
    segment_files = [f for f in files if f.split(".")[0].isdigit() and not f.endswith(".snapshot")]
    assert segment_files and all(int(f.split(".")[0]) == bases[1] for f in segment_files)
    assert [r["offset"] for r in _records(items)] == [target]
    index_entries = [i for i in items if i["type"] == "index_entry"]
    everything = [i for i in _json([orders / f"{bases[1]:020d}.index"], DumpOptions())[0] if i["type"] == "index_entry"]
    assert 1 <= len(index_entries) <= 2 < len(everything)  # the entries that bracket the offset, not all
    below = [e for e in everything if e["offset"] <= target]
    above = [e for e in everything if e["offset"] >= target]
    assert index_entries == [e for e in everything if e in (below[-1:] + above[:1])]


# -- kcat format strings ----------------------------------------------------------------------------------------

def test_format_parsing_follows_kcat():
    assert parse_format(r"%o\t%k\n") == ["o", b"\t", "k", b"\n"]
    assert parse_format(r"100%% \x41\65\\ \q") == [b"100% AA\\ q"]
    for bad, message in (("%o %", "empty formatter"), ("%z", "unsupported formatter %z")):
        with pytest.raises(UsageError, match=message):
            parse_format(bad)


def test_format_renders_nulls_headers_and_encodings(tmp_path):
    from kcli.records import build_record_batch

    part = tmp_path / "pay-7"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(build_record_batch([
        Record(0, 11, None, b"\xff\x00", (Header("a", b"1"), Header("n", None), Header("e", b""))),
        Record(1, 12, b"k", None),
    ]))
    run = DumpRun([str(part)], DumpOptions(deep_iteration=True))
    fmt = RecordFormat("%t/%p/%o|%k|%K|%s|%S|%T|%h|%c\n")
    out = b"".join(fmt.lines(item) or b"" for item in run)
    assert out == b"pay/7/0||-1|\xff\x00|2|11|a=1,n=NULL,e=|none\n" + b"pay/7/1|k|1||-1|12||none\n"
    run = DumpRun([str(part)], DumpOptions(deep_iteration=True))
    fmt = RecordFormat("%k %s %h\n", Encodings(BytesEncoding.HEX, BytesEncoding.BASE64))
    assert b"".join(fmt.lines(item) or b"" for item in run) == b" /wA= a=MQ==,n=NULL,e=\n6b  \n"


def test_format_cli_binary_and_text_encodings(orders):
    proc = _kctl("dump-log", "--format", r"%o %k %S\n", "--key", "key-3", "--count", "2", str(orders))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().splitlines() == ["3 key-3 100", "20 key-3 100"]
    proc = _kctl("dump-log", "--print-data-log", "--value-encoding", "hex", "--key", "key-3", "--count", "1", str(orders))
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("| offset:")]
    payload = line.split(" payload: ")[1]
    assert len(payload) == 200 and bytes.fromhex(payload)
    assert proc.stderr.decode().strip() == "Selected 1 of 6 records read (1 batches printed)"


@pytest.mark.parametrize("args,message", [
    (["--grep", "("], "--grep"),
    (["--format", "%x"], "unsupported formatter"),
    (["--format", "%o", "--json"], "--format and --json"),
    (["--follow"], "not a directory"),
    (["--header", "=v"], "--header"),
], ids=["regex", "format", "format-json", "follow-file", "header"])
def test_usage_errors_exit_2(orders, args, message):
    from typer.testing import CliRunner

    from kcli.cli.app import app

    target = sorted(orders.glob("*.log"))[0] if "--follow" in args else orders
    result = CliRunner().invoke(app, ["dump-log", *args, str(target)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit | None)
    err = result.stderr
    assert err.startswith("kctl: ") and message in err and "Traceback" not in err


def test_cat_is_dump_log_format_with_kcat_options(orders):
    from typer.testing import CliRunner

    from kcli.cli.app import app

    fmt = r"%o %k %h\n"
    cat = CliRunner().invoke(app, ["cat", "-o", "30", "-c", "12", "-f", fmt, str(orders)])
    dump = CliRunner().invoke(app, ["dump-log", "--start-offset", "30", "--count", "12", "--format", fmt, str(orders)])
    assert cat.exit_code == dump.exit_code == 0 and cat.stdout == dump.stdout
    assert [int(line.split()[0]) for line in cat.stdout.splitlines()] == list(range(30, 42))
    records = [json.loads(line) for line in
               CliRunner().invoke(app, ["cat", "--json", "--grep", "^txn", str(orders)]).stdout.splitlines()]
    assert [(r["type"], r["value"], r["topic"], r["partition"]) for r in records] == [("record", "txn-value", "orders", 3)] * 2


# -- --follow, scripted: rolls and retention deletes without a broker ------------------------------------------

class _Stop(Exception):
    pass


def _scripted(steps):
    steps = list(steps)

    def sleep(_seconds):
        if not steps:
            raise _Stop
        steps.pop(0)()

    return sleep


def _follow_offsets(run: FollowRun, items: list) -> list[int]:
    try:
        for item in run:
            items.append(item)
    except _Stop:
        pass
    return [r.offset for item in items for r in getattr(item, "records", ())]


def test_follow_reads_growth_and_rolls_exactly_once(tmp_path):
    part = tmp_path / "live-0"
    log = PartitionLog(part, config=LogConfig(segment_bytes=2000))
    offset = 0

    def append(n):
        nonlocal offset
        for _ in range(n):
            log.append([Record(0, 1000 + offset, b"k", b"v%05d" % offset + b"." * 60)])
            offset += 1
        log.flush_to_os()  # as the broker does after each produce: readers see the batches

    append(3)
    steps = [lambda: None, lambda: append(2), lambda: append(60), lambda: None, lambda: append(1)]
    items: list = []
    try:
        got = _follow_offsets(FollowRun(str(part), DumpOptions(deep_iteration=True), sleep=_scripted(steps)), items)
    finally:
        log.close()
    assert len(list(part.glob("*.log"))) >= 3  # the follow crossed rolls
    assert got == list(range(offset))
    headers = [i for i in items if type(i).__name__ == "DumpFile"]
    assert len(headers) == len(list(part.glob("*.log")))


def test_follow_moves_on_when_retention_deletes_the_segment(tmp_path):
    part = tmp_path / "live-0"
    log = PartitionLog(part, config=LogConfig(segment_bytes=2000))
    offsets = iter(range(10_000))

    def append(n):
        for _ in range(n):
            o = next(offsets)
            log.append([Record(0, 1000 + o, b"k", b"v%05d" % o + b"." * 60)])
        log.flush_to_os()

    def roll_and_delete():
        append(40)  # rolls
        first = sorted(part.glob("*.log"))[0]
        for path in part.glob(first.name.split(".")[0] + ".*"):
            path.unlink()  # retention: the segment being followed disappears

    append(2)
    items: list = []
    try:
        got = _follow_offsets(FollowRun(str(part), DumpOptions(deep_iteration=True),
                                        sleep=_scripted([roll_and_delete, lambda: append(1)])), items)
    finally:
        log.close()
    notices = [i for i in items if getattr(i, "code", "") == "segment_deleted"]
    assert len(notices) == 1
    second = int(sorted(part.glob("*.log"))[0].name.split(".")[0])
    assert got[:2] == [0, 1] and got[2:] == list(range(second, 43))  # what the deleted segment got later is gone


def test_follow_stops_at_count_and_end_offset(tmp_path):
    part = build_partition(tmp_path / "t-0", batches=30, transactions=False)
    never = _scripted([])
    run = FollowRun(str(part), DumpOptions(deep_iteration=True, count=10), sleep=never)
    assert [r.offset for item in run for r in getattr(item, "records", ())] == list(range(10))
    run = FollowRun(str(part), DumpOptions(deep_iteration=True, start_offset=50, end_offset=55), sleep=never)
    assert [r.offset for item in run for r in getattr(item, "records", ())] == list(range(50, 56))


# -- a real broker: kcat's -f output, and --follow across rolls -------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("broker") / "kafka-logs",
                            ["log.segment.bytes=3000", "num.partitions=1"])
    process.start()
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log()


def test_format_matches_kcat_byte_for_byte(broker):
    from confluent_kafka import Producer

    from broker_support import kcat

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    producer.produce("fmt", key=b"k1", value=b"hello", headers=[("h1", b"v1"), ("h2", None), ("h3", b"")])
    producer.produce("fmt", key=None, value=b"\x00\xffbinary\n")
    producer.produce("fmt", key=b"tomb", value=None)
    producer.produce("fmt", key=b"", value=b"", timestamp=1700000000123)
    for i in range(40):
        producer.produce("fmt", key=b"key-%d" % i, value=b"value-%d" % i * 5)
    assert producer.flush(30) == 0
    fmt = r"%t [%p] @%o: key(%K)=%k value(%S)=%s ts=%T headers=%h\n--\t%%\n"
    expected = kcat("-b", broker.bootstrap, "-C", "-t", "fmt", "-o", "beginning", "-e", "-q", "-f", fmt)
    assert expected.returncode == 0, expected.stderr
    proc = _kctl("dump-log", "--format", fmt, str(broker.log_dir / "fmt-0"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected.stdout and expected.stdout.count(b"--\t%\n") == 44
    # kctl cat: kcat -C's default output and -K, from the files
    for kcat_args, cat_args in (([], []), (["-K", "::"], ["-K", "::"]), (["-c", "3"], ["-c", "3"])):
        expected = kcat("-b", broker.bootstrap, "-C", "-t", "fmt", "-o", "beginning", "-e", "-q", *kcat_args)
        proc = _kctl("cat", *cat_args, str(broker.log_dir / "fmt-0"))
        assert proc.returncode == 0 and expected.returncode == 0, proc.stderr + expected.stderr
        assert proc.stdout == expected.stdout and proc.stdout, cat_args


def test_follow_a_live_partition_across_rolls(broker, tmp_path):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce("tail", key=b"k", value=b"v0")
    assert producer.flush(30) == 0
    partition = broker.log_dir / "tail-0"
    out_path = tmp_path / "followed.out"
    err_path = tmp_path / "followed.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        follower = subprocess.Popen(
            [sys.executable, "-m", "kcli", "dump-log", "--follow", "--poll-interval", "0.1", "--format", r"%o %s\n",
             str(partition)], stdout=out, stderr=err, cwd=WT, env={**os.environ, "PYTHONPATH": str(WT)})
        try:
            total = 400
            for i in range(1, total):
                producer.produce("tail", key=b"k", value=b"v%d" % i + b"." * 40)
                if i % 50 == 0:
                    assert producer.flush(30) == 0
                    time.sleep(0.2)
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and out_path.read_bytes().count(b"\n") < total:
                time.sleep(0.2)
        finally:
            follower.send_signal(signal.SIGTERM)
            code = follower.wait(30)
    assert len(list(partition.glob("*.log"))) > 3  # the follower crossed segment rolls
    lines = out_path.read_bytes().decode().splitlines()
    assert lines == [f"{i} v{i}" + ("." * 40 if i else "") for i in range(total)]
    assert code == 0 and "Traceback" not in err_path.read_text(), err_path.read_text()
