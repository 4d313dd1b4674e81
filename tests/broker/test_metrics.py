"""The metrics registry and its text exposition in process (kcli.broker.metrics), read back with the parser of
`kctl metrics` (kcli.client.metrics); and an in-process broker's /metrics endpoint: the counters its handlers feed,
the HTTP answers, and nothing counted with the endpoint off."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace

import pytest

from inprocess_broker import run, running_broker
from kcli.broker.metrics import BrokerMetrics, Histogram, MetricsRegistry
from kcli.client.metrics import Sample, parse_exposition
from kcli.errors import InputError
from kcli.protocol import ApiKey


def samples_by_name(text: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for sample in parse_exposition(text):
        out.setdefault(sample.name, []).append(sample)
    return out


def test_exposition_is_prometheus_text_with_types_help_and_escaped_labels():
    registry = MetricsRegistry()
    registry.counter("a_total", "A counter", ("topic",)).labels('we"ird\\\n').inc(3)
    registry.gauge("b", "A gauge").labels().set(2.5)
    registry.summary("c_ms", "A summary", ("request",)).labels("Produce").observe(4.0)
    registry.counter("unused_total", "never touched")
    text = registry.render()
    assert text.endswith("\n")
    assert "# TYPE a_total counter" in text and "# HELP b A gauge" in text and "# TYPE c_ms summary" in text
    assert 'a_total{topic="we\\"ird\\\\\\n"} 3' in text
    assert "unused_total" not in text  # a family without children prints nothing
    parsed = samples_by_name(text)
    assert parsed["a_total"] == [Sample("a_total", {"topic": 'we"ird\\\n'}, 3.0, "counter")]
    assert parsed["b"][0].value == 2.5 and parsed["b"][0].type == "gauge"
    assert {s.labels["quantile"] for s in parsed["c_ms"]} == {"0.50", "0.75", "0.95", "0.98", "0.99", "0.999"}
    assert parsed["c_ms_count"][0].value == 1 and parsed["c_ms_sum"][0].value == 4.0
    assert parsed["c_ms_count"][0].type == "summary"
    with pytest.raises(ValueError):
        registry.gauge("a_total", "not again as another type")


def test_histogram_quantiles_come_from_its_buckets():
    h = Histogram()
    for value in range(1, 1001):
        h.observe(value / 10)  # 0.1 ... 100 ms, uniformly
    assert h.count == 1000 and h.sum == pytest.approx(50050)
    assert h.quantile(0.5) == pytest.approx(50, rel=0.05)
    assert h.quantile(0.99) == pytest.approx(99, rel=0.05)
    assert h.quantile(0.999) <= 100  # never above the largest value seen
    assert Histogram().quantile(0.5) == 0


def test_broker_metrics_names_are_the_jmx_exporters():
    metrics = BrokerMetrics()
    metrics.appended("orders", 1000, 10)
    metrics.appended("orders", 500, 5)
    metrics.produce_failed("orders")
    metrics.fetched("orders", 700, follower=False, failed=False)
    metrics.fetched("orders", 300, follower=True, failed=False)
    metrics.request_done(ApiKey.PRODUCE, 1.0, 1.002)
    metrics.request_done(ApiKey.FETCH, 1.0, 1.5, SimpleNamespace(replica_id=-1))
    metrics.request_done(ApiKey.FETCH, 1.0, 1.5, SimpleNamespace(replica_id=2))
    metrics.request_done(ApiKey.FETCH, 1.0, 1.5, SimpleNamespace(replica_id=2))
    metrics.record_throttle("Produce", 120)
    metrics.bind(served={("PRODUCE", 9): [7, set()], ("API_VERSIONS", 3): [2, set()]})
    parsed = samples_by_name(metrics.render())

    def value(name: str, **labels: str) -> float:
        return next(s.value for s in parsed[name] if s.labels == labels)

    assert value("kafka_server_brokertopicmetrics_bytesin_total", topic="orders") == 1500
    assert value("kafka_server_brokertopicmetrics_bytesin_total") == 1500  # all topics: no label
    assert value("kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 15
    assert value("kafka_server_brokertopicmetrics_failedproducerequests_total", topic="orders") == 1
    assert value("kafka_server_brokertopicmetrics_totalproducerequests_total", topic="orders") == 3
    assert value("kafka_server_brokertopicmetrics_bytesout_total", topic="orders") == 700
    assert value("kafka_server_brokertopicmetrics_replicationbytesout_total") == 300
    assert value("kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 7
    assert value("kafka_network_requestmetrics_requests_total", request="ApiVersions", version="3") == 2
    assert value("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 1
    # Kafka's RequestChannel: a fetch counts as Fetch and as FetchConsumer or FetchFollower
    assert value("kafka_network_requestmetrics_totaltimems_count", request="Fetch") == 3
    assert value("kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") == 1
    assert value("kafka_network_requestmetrics_totaltimems_count", request="FetchFollower") == 2
    assert value("kafka_network_requestmetrics_totaltimems", request="FetchFollower", quantile="0.99") <= 500
    assert value("kafka_network_requestmetrics_throttletimems_sum", request="Produce") == 120
    assert value("kafka_controller_kafkacontroller_activecontrollercount") == 1  # standalone: its own controller
    metrics.topic_deleted("orders")
    assert not any(s.labels.get("topic") == "orders" for s in parse_exposition(metrics.render()))


def test_parse_refuses_what_is_not_metrics():
    with pytest.raises(InputError, match="not a Prometheus sample"):
        parse_exposition("<html><body>hello</body></html>\n")
    assert parse_exposition("# just a comment\n\nx 1 1700000000000\ny{a=\"b\"} +Inf\n")[1].value == float("inf")


async def _http(port: int, request: bytes) -> tuple[str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body


async def _create(broker, topic: str) -> None:
    from broker_support import create_topics_body

    response = await broker.call(ApiKey.CREATE_TOPICS, 7, create_topics_body([topic], 1))
    assert response.topics[0].error_code == 0, response


def _produce_request(topic: str, count: int):
    from kio.schema.produce.v9 import request as m

    from kcli.records import Record, build_record_batch

    batch = build_record_batch([Record(i, 0, None, b"v" * 10) for i in range(count)])
    return m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=batch),)),)), len(batch)


def test_in_process_broker_serves_metrics_its_handlers_count(tmp_path):
    async def go() -> None:
        async with running_broker(tmp_path, **{"metrics.http.listener": "http://127.0.0.1:0"}) as broker:
            port = broker.server.metrics_endpoint.bound[0][1]
            await _create(broker, "counted")
            request, size = _produce_request("counted", 4)
            response = await broker.call(ApiKey.PRODUCE, 9, request)
            assert response.responses[0].partition_responses[0].error_code == 0
            head, body = await _http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert head.startswith("HTTP/1.1 200") and "text/plain; version=0.0.4" in head
            parsed = samples_by_name(body.decode())
            bytes_in = [s for s in parsed["kafka_server_brokertopicmetrics_bytesin_total"]
                        if s.labels == {"topic": "counted"}]
            assert bytes_in[0].value == size
            assert [s.value for s in parsed["kafka_server_brokertopicmetrics_messagesin_total"]
                    if s.labels == {"topic": "counted"}] == [4]
            assert parsed["kafka_server_replicamanager_underreplicatedpartitions"][0].value == 0
            head, body = await _http(port, b"GET /other HTTP/1.1\r\n\r\n")
            assert head.startswith("HTTP/1.1 404")
            head, body = await _http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            assert head.startswith("HTTP/1.1 405")
            head, body = await _http(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert head.startswith("HTTP/1.1 200") and body == b""

    run(go())


def test_metrics_off_counts_nothing(tmp_path):
    async def go() -> None:
        async with running_broker(tmp_path) as broker:
            assert broker.server.services.metrics is None and broker.server.metrics_endpoint is None
            assert broker.server.replica_manager.stats is None and broker.server.socket_server.metrics is None
            await _create(broker, "uncounted")
            request, _ = _produce_request("uncounted", 1)
            response = await broker.call(ApiKey.PRODUCE, 9, request)
            assert response.responses[0].partition_responses[0].error_code == 0

    run(go())


@pytest.mark.parametrize("text", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://h:99999"])
def test_a_bad_metrics_listener_stops_the_config(text):
    from kcli.broker.config import build_config
    from kcli.broker.config_error import ConfigError

    with pytest.raises(ConfigError, match="metrics.http.listener"):
        build_config({"metrics.http.listener": text})
    assert build_config({"metrics.http.listener": "http://[::1]:0"})["metrics.http.listener"] == "http://[::1]:0"
