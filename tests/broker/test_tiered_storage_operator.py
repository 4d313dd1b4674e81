"""Tiered storage (KIP-405) for the operator: the remote sizes ``kctl log-dirs describe --remote-sizes`` and
``kctl topics describe --remote-sizes`` read from ``__remote_log_metadata``, and the broker's RemoteLogSizeBytes
and RemoteLogMetadataCount metrics, against an in-process broker with a ``file://`` remote store."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from broker_support import free_port
from inprocess_broker import run, running_broker
from typer.testing import CliRunner

from kcli.broker.metrics import BrokerMetrics
from kcli.broker.remote_log_manager import (
    RemoteSegment,
    segment_metadata_record,
    segment_update_record,
)
from kcli.cli.app import app
from kcli.records import Record
from kcli.records.batch import build_record_batch
from kcli.records.remote_log_metadata import (
    RemoteLogSegmentState,
    decode_remote_log_metadata,
)
from kcli.storage.remote import RemoteSegmentRef

S = RemoteLogSegmentState
SEGMENT = 4096


def tiered_overrides(store, **extra: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "rsm.config.url": store.as_uri(),
            "remote.log.manager.task.interval.ms": "50", "log.retention.check.interval.ms": "50",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3", **extra}


async def produce(server, topic: str, batches: int, per_batch: int = 4) -> None:
    for b in range(batches):
        records = [Record(i, int(time.time() * 1000), f"k{b * per_batch + i}".encode(), b"v" * 200)
                   for i in range(per_batch)]
        result = server.replica_manager.append_records(1, {(topic, 0): build_record_batch(records)})
        assert int(result[(topic, 0)].error) == 0


async def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_sizes_replay_copies_and_deletions():
    from kcli.client.remote_log import remote_sizes_from_records

    topic_id = uuid.uuid4()

    def segment(start: int, size: int) -> RemoteSegment:
        ref = RemoteSegmentRef("t", topic_id, 0, uuid.uuid4(), start)
        return RemoteSegment(ref, start + 9, 0, size, [(0, start)], S.COPY_SEGMENT_STARTED, 1, 0)

    a, b, c = segment(0, 100), segment(10, 200), segment(20, 400)
    values = [segment_metadata_record(s) for s in (a, b, c)]
    values += [segment_update_record(s.ref, S.COPY_SEGMENT_FINISHED, 1, 1) for s in (a, b)]  # c: copy unfinished
    values += [segment_update_record(a.ref, S.DELETE_SEGMENT_STARTED, 1, 2),
               segment_update_record(a.ref, S.DELETE_SEGMENT_FINISHED, 1, 3)]
    sizes = remote_sizes_from_records(decode_remote_log_metadata(v) for v in values)
    found = sizes.get("t", 0)
    assert (found.segments, found.size, found.start_offset, found.end_offset) == (1, 200, 10, 19)
    assert sizes.topic_size("t") == 200


def test_remote_sizes_in_log_dirs_topics_describe_and_metrics(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"

    def cli(*args: str) -> dict:
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    async def body():
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://{bootstrap}",
                                  **tiered_overrides(tmp_path / "remote")) as broker:
            server = broker.server
            server.admin.create_topic("tiered", 1, 1, configs={
                "remote.storage.enable": "true", "segment.bytes": str(SEGMENT),
                "local.retention.bytes": str(2 * SEGMENT), "file.delete.delay.ms": "0"})
            server.admin.create_topic("plain", 1, 1)
            await produce(server, "tiered", 60)
            partition = server.replica_manager.get_partition("tiered", 0)
            await wait_for(lambda: partition.log.local_log_start_offset > 0, what="local segments deleted")
            remote = server.remote_log_manager
            await wait_for(lambda: remote.sizes("tiered", 0)[0] > 0, what="copies finished")
            # the copier may still be running: wait until the copies settle
            count, size = remote.sizes("tiered", 0)
            while True:
                await asyncio.sleep(0.5)
                if remote.sizes("tiered", 0) == (count, size):
                    break
                count, size = remote.sizes("tiered", 0)

            # the broker's metrics (Kafka 3.7 RemoteStorageMetrics names, as the JMX exporter names them)
            metrics = BrokerMetrics()
            metrics.bind(replica_manager=server.replica_manager, remote_log_manager=remote)
            text = metrics.render()
            assert f'kafka_server_brokertopicmetrics_remotelogsizebytes{{topic="tiered"}} {size}' in text
            assert f'kafka_server_brokertopicmetrics_remotelogmetadatacount{{topic="tiered"}} {count}' in text
            assert 'topic="plain"' not in text.split("remotelogsizebytes", 1)[1].split("# HELP", 1)[0]
            # the meters and lags: every copy counted once, none failed, nothing left to copy once settled
            assert f'kafka_server_brokertopicmetrics_remotecopybytes_total{{topic="tiered"}} {size}' in text
            assert f'kafka_server_brokertopicmetrics_remotecopyrequests_total{{topic="tiered"}} {count}' in text
            assert 'kafka_server_brokertopicmetrics_remotecopyerrors_total{topic="tiered"} 0' in text
            assert 'kafka_server_brokertopicmetrics_remotecopylagsegments{topic="tiered"} 0' in text
            assert 'kafka_server_brokertopicmetrics_remotefetchrequests_total 0' in text
            found = await remote.read_async("tiered", 0, 0, 1 << 20, partition.log.local_log_start_offset)
            text = metrics.render()
            assert 'kafka_server_brokertopicmetrics_remotefetchrequests_total{topic="tiered"} 1' in text
            assert f'kafka_server_brokertopicmetrics_remotefetchbytes_total{{topic="tiered"}} {len(found)}' in text
            assert len(found) > 0

            def scenario():
                doc = cli("log-dirs", "describe", "-b", bootstrap, "--topic-list", "tiered,plain", "--remote-sizes",
                          "--json")
                [only] = doc["brokers"][0]["logDirs"]
                parts = {p["partition"]: p for p in only["partitions"]}
                assert parts["tiered-0"]["remoteSize"] >= size > 0
                assert parts["tiered-0"]["remoteSegments"] >= count
                assert parts["tiered-0"]["localLogStartOffset"] > 0
                assert parts["plain-0"]["remoteSize"] == 0 and "localLogStartOffset" not in parts["plain-0"]
                plain_doc = cli("log-dirs", "describe", "-b", bootstrap, "--topic-list", "tiered", "--json")
                assert "remoteSize" not in plain_doc["brokers"][0]["logDirs"][0]["partitions"][0]
                table = CliRunner().invoke(app, ["log-dirs", "describe", "-b", bootstrap, "--remote-sizes",
                                                 "--topic-list", "tiered"])
                assert table.exit_code == 0 and "\tremote " in table.output and "local log start" in table.output

                topics = cli("topics", "describe", "-b", bootstrap, "tiered", "plain", "--remote-sizes", "--json")
                by_name = {t["topic"]: t for t in topics["topics"]}
                assert by_name["tiered"]["remote_storage"] is True and by_name["plain"]["remote_storage"] is False
                assert by_name["tiered"]["remote_size"] >= size
                assert by_name["tiered"]["partitions"][0]["remote_size"] == by_name["tiered"]["remote_size"]
                assert by_name["plain"]["remote_size"] == 0
                lines = CliRunner().invoke(app, ["topics", "describe", "-b", bootstrap, "tiered", "--remote-sizes"])
                assert "RemoteStorage: true\tRemoteSize: " in lines.output and "\tRemoteSize: " in lines.output
                bare = CliRunner().invoke(app, ["topics", "describe", "-b", bootstrap, "tiered"])
                assert "RemoteStorage" not in bare.output

            await asyncio.to_thread(scenario)

    run(body(), timeout=90)


def test_remote_sizes_on_a_cluster_without_tiered_storage(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"

    async def body():
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://{bootstrap}") as broker:
            broker.server.admin.create_topic("plain", 1, 1)

            def scenario():
                result = CliRunner().invoke(app, ["log-dirs", "describe", "-b", bootstrap, "--topic-list", "plain",
                                                  "--remote-sizes", "--json"])
                assert result.exit_code == 0, result.output
                [p] = json.loads(result.output)["brokers"][0]["logDirs"][0]["partitions"]
                assert "remoteSize" not in p and "localLogStartOffset" not in p
                result = CliRunner().invoke(app, ["topics", "describe", "-b", bootstrap, "plain", "--remote-sizes",
                                                  "--json"])
                assert result.exit_code == 0, result.output
                [t] = json.loads(result.output)["topics"]
                assert t["remote_storage"] is False and t["remote_size"] == 0

            await asyncio.to_thread(scenario)

    run(body(), timeout=60)
