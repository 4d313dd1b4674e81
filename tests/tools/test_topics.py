"""kctl topics DIR and kctl offsets for-time DIR: the fast rollup checked against kctl scan (which decodes every
record) and the real Kafka log dirs' INDEX.md; offsets for a time against a brute-force walk of every record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builders import T0, build_partition
from kcli.cli.app import app
from kcli.storage.files import LOG_START_OFFSET_CHECKPOINT
from kcli.storage.checkpoint import OffsetCheckpointFile
from kcli.storage.segment import FileBatchReader
from kcli.tools.offsets_time import EARLIEST, LATEST, offsets_for_time
from kcli.tools.scan import scan
from kcli.tools.topics import TOPIC_CONFIGS_FILE, partition_dirs, segment_bases, summarize_topics
from support import REPO

SAMPLES = REPO / "sample-logs" / "kafka-logs"
ZK_MODE = "VolodymyrZee__kafka"  # Kafka 2.x, ZooKeeper mode
KRAFT = "rjmfernandes__flink-on-prem/data"  # Kafka 3.6, KRaft


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})
    assert result.exit_code == code, f"exit {result.exit_code}\n{result.output}"
    return result


def all_records(directory: Path) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of a partition, in log order."""
    out = []
    for base in segment_bases(directory):
        for batch in FileBatchReader(directory / f"{base:020d}.log"):
            out.extend((r.offset, r.timestamp) for r in batch.records())
    return out


def brute_offset_for(records: list[tuple[int, int]], timestamp: int, log_start: int = 0) -> tuple[int, int]:
    return next(((o, t) for o, t in records if o >= log_start and t >= timestamp), (-1, -1))


# -- the rollup ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exact", [False, True], ids=["fast", "exact"])
def test_rollup_matches_scan_on_samples(exact):
    report = summarize_topics([str(SAMPLES)], exact=exact)
    assert report.ok and not report.problems
    stats = {(p.topic, p.partition): p for p in scan([str(SAMPLES)], workers=1).partitions}
    parts = {(p.topic, p.partition): p for t in report.topics for p in t.partitions}
    assert parts.keys() == stats.keys()
    for key, p in parts.items():
        s = stats[key]
        assert p.bytes == s.segment_bytes and p.segments == s.segments, key
        # scan counts data records only; transaction markers (offsets, timestamps) may follow them
        records = all_records(Path(p.directory))
        assert p.log_end_offset == records[-1][0] + 1 >= s.last_offset + 1, key
        assert p.log_start_offset == 0, key
        if s.max_timestamp is not None:
            assert p.max_timestamp == max(t for _, t in records) >= s.max_timestamp, key
        if exact:
            assert p.records == s.records and p.control_records == s.control_records, key
            assert p.codecs == set(s.codecs), key
        else:
            assert p.records is None and p.offsets >= s.records and p.codecs <= set(s.codecs), key
    orders = next(t for t in report.topics if t.topic == "orders")
    assert len(orders.partitions) == 2 and orders.segments == 6 and orders.config is None
    assert orders.records == (746 if exact else None) and orders.offsets == 746
    payments = next(t for t in report.topics if t.topic == "payments")
    assert payments.offsets == 27 and (not exact or payments.records == 21)  # 6 offsets are transaction markers


@pytest.mark.parametrize("log_dir", [ZK_MODE, KRAFT])
def test_rollup_of_real_kafka_log_dirs(fixtures_dir, log_dir):
    path = fixtures_dir / log_dir
    fast = summarize_topics([str(path)])
    exact = summarize_topics([str(path)], exact=True)
    assert fast.ok and exact.ok
    for t_fast, t_exact in zip(fast.topics, exact.topics):
        for a, b in zip(t_fast.partitions, t_exact.partitions):
            records = all_records(Path(a.directory))
            assert a.log_end_offset == b.log_end_offset == (records[-1][0] + 1 if records else 0), a.directory
            assert b.records + b.control_records == len(records), a.directory
            stamps = [t for _, t in records if t >= 0]
            assert a.max_timestamp == b.max_timestamp == (max(stamps) if stamps else None), a.directory
            assert a.first_timestamp == (records[0][1] if records else None)
    by_topic = {t.topic: t for t in exact.topics}
    if log_dir == KRAFT:
        metadata = by_topic["__cluster_metadata"].partitions[0]
        # INDEX.md: 17027 records, offsets 0..17026, one LEADER_CHANGE control batch
        assert (metadata.log_end_offset, metadata.records, metadata.control_records) == (17027, 17026, 1)
        assert by_topic["_confluent-command"].codecs == ["lz4"]
        assert metadata.topic_id is not None
        # topic configs from the KRaft metadata log (latest snapshot + log), as the brokers' metadata image
        assert by_topic["__consumer_offsets"].config == {"cleanup.policy": "compact", "compression.type": "producer",
                                                          "segment.bytes": "104857600"}
        assert by_topic["_schemas"].config == {"cleanup.policy": "compact"} and by_topic["promotions"].config == {}
        assert by_topic["_schemas"].config_source.endswith("__cluster_metadata-0")
        assert by_topic["__cluster_metadata"].config is None  # not a topic of the metadata image
    else:
        assert sorted(by_topic) == ["__consumer_offsets", "first_topic", "new_topic"]
        assert len(by_topic["first_topic"].partitions) == 3 and by_topic["first_topic"].records == 41
        assert by_topic["first_topic"].config is None  # ZooKeeper mode: kept in ZooKeeper


def test_log_start_checkpoint_configs_and_torn_tail(tmp_path):
    logs = tmp_path / "logs"
    build_partition(logs / "t-0", batches=60, transactions=False)
    shutil.copytree(SAMPLES / "orders-0", logs / "orders-0")
    OffsetCheckpointFile(logs / LOG_START_OFFSET_CHECKPOINT).write_offsets({("t", 0): 30})
    (logs / TOPIC_CONFIGS_FILE).write_text(json.dumps({"version": 1, "topics": {"t": {"retention.ms": "1000"}}}))
    last = logs / "t-0" / f"{segment_bases(logs / 't-0')[-1]:020d}.log"
    with open(last, "ab") as f:
        f.write(b"\x00" * 7)  # a torn write after the last batch
    report = summarize_topics([str(logs)])
    assert report.ok  # the torn tail is a warning
    [problem] = report.problems
    assert problem.code == "invalid_bytes_at_end" and problem.file == str(last)  # as verify says
    t = {x.topic: x for x in report.topics}
    assert t["t"].partitions[0].log_start_offset == 30 and t["t"].partitions[0].log_end_offset == 180
    assert t["t"].config == {"retention.ms": "1000"} and t["orders"].config == {}
    assert t["t"].config_source.endswith(TOPIC_CONFIGS_FILE)
    out = run("topics", str(logs)).stdout
    assert "config t: retention.ms=1000" in out and "config orders: no overrides" in out
    found = offsets_for_time([str(logs)], T0, topics=["t"])
    assert [(o.offset, o.seek_offset) for o in found.offsets] == [(30, 30)]  # never below the log start offset


def test_topic_configs_file_name_is_the_brokers():
    from kcli.broker.topic_admin import TOPIC_CONFIGS_FILE as BROKER_FILE

    assert TOPIC_CONFIGS_FILE == BROKER_FILE


def test_topics_cli(fixtures_dir):
    out = run("topics", str(SAMPLES)).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTS", "SEGS", "SIZE", "RECORDS", "TIME", "RANGE", "UTC", "CODECS"]
    row = next(line for line in lines if line.startswith("orders"))
    assert row.split()[:5] == ["orders", "2", "6", "97K", "~746"] and "2023-11-14 22:13..22:23" in row
    assert "config: unknown here (kept in ZooKeeper or KRaft metadata)" in out
    assert all(len(line) <= 100 for line in lines)
    exact = run("topics", "logdir", "--records", "-p", "-t", "payments", str(SAMPLES)).stdout
    assert "payments-0" in exact and " 0..27 " in exact and " 21 " in exact
    doc = json.loads(run("topics", "--json", str(fixtures_dir / ZK_MODE)).stdout)
    assert doc["ok"] and [t["topic"] for t in doc["topics"]] == ["__consumer_offsets", "first_topic", "new_topic"]
    assert doc["topics"][1]["partition_details"][0]["log_end_offset"] == 11
    assert "topic 'nope'" in run("topics", "-t", "nope", str(SAMPLES), code=1).output
    assert "No such file" in run("topics", str(SAMPLES / "missing"), code=3).output


# -- offsets for a time, offline -------------------------------------------------------------------------------
@pytest.mark.parametrize("log_dir", [None, ZK_MODE, KRAFT])
def test_offsets_for_time_matches_every_record(fixtures_dir, log_dir):
    path = SAMPLES if log_dir is None else fixtures_dir / log_dir
    records = {f"{d.name}": all_records(d) for d in partition_dirs([str(path)])}
    stamps = sorted({t for rs in records.values() for _, t in rs if t >= 0})
    probes = [stamps[0] - 1, stamps[0], stamps[-1], stamps[-1] + 1] + stamps[1::max(len(stamps) // 12, 1)]
    for ts in probes + [t + 1 for t in stamps[::max(len(stamps) // 6, 1)]]:
        report = offsets_for_time([str(path)], ts)
        assert report.ok
        for o in report.offsets:
            name = f"{o.topic}-{o.partition}"
            assert (o.offset, o.timestamp) == brute_offset_for(records[name], ts), (name, ts)
            assert o.seek_offset == (o.offset if o.offset >= 0 else o.log_end_offset)
    for special, pick in ((EARLIEST, lambda o: o.log_start_offset), (LATEST, lambda o: o.log_end_offset)):
        for o in offsets_for_time([str(path)], special).offsets:
            assert o.offset == pick(o) and o.timestamp == -1


def test_for_time_cli():
    doc = json.loads(run("offsets", "for-time", "1700000300000", "--json", str(SAMPLES / "orders-0")).stdout)
    assert doc["ok"] and doc["timestamp"] == 1700000300000
    assert doc["offsets"] == [{"topic": "orders", "partition": 0, "offset": 186, "timestamp": 1700000300000,
                               "seek_offset": 186, "log_start_offset": 0, "log_end_offset": 373}]
    text = run("offsets", "for-time", "2023-11-14T22:18:20Z", str(SAMPLES), "--topic", "orders", "--table").stdout
    assert "orders  0          186     2023-11-14T22:18:20.000Z  373      186" in text
    # kafka-get-offsets' lines by default
    assert run("offsets", "for-time", "2023-11-14T22:18:20Z", str(SAMPLES / "orders-0")).stdout == "orders:0:186\n"
    late = run("offsets", "for-time", "-1h", str(SAMPLES / "orders-0"), "--table").stdout  # negative TIME, no `--`
    assert "offset -1: no record" in late and " -1 " in late
    assert run("offsets", "for-time", "-1h", str(SAMPLES / "orders-0")).stdout == "orders:0:-1\n"
    earliest = json.loads(run("offsets", "for-time", "-2", "--json", str(SAMPLES / "payments-0")).stdout)
    assert earliest["offsets"][0]["offset"] == 0 and earliest["timestamp"] == -2
    latest = json.loads(run("offsets", "for-time", "latest", "--json", str(SAMPLES / "payments-0")).stdout)
    assert latest["offsets"][0]["offset"] == 27
    assert "TIME" in run("offsets", "for-time", "yesterday", str(SAMPLES), code=2).output
    assert "give a log dir" in run("offsets", "for-time", "now", code=2).output
    run("offsets", "for-time", "now", str(SAMPLES / "missing"), code=3)


def test_time_spec_parsing():
    from kcli.cli.offsets import parse_time_spec

    now = 1_700_000_000_000
    assert parse_time_spec("earliest", now) == -2 and parse_time_spec("-1", now) == -1
    assert parse_time_spec("now", now) == now and parse_time_spec("-1h", now) == now - 3_600_000
    assert parse_time_spec("now-1d12h", now) == now - 36 * 3_600_000
    assert parse_time_spec("2023-11-14T22:13:20Z", now) == now
    assert parse_time_spec("2023-11-14T23:13:20+01:00", now) == now
    assert parse_time_spec("1700000000000", now) == now
