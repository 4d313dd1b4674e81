"""Client quotas with real clients against a standalone broker process (issue 26; KIP-13, KIP-219): byte-rate
quotas on client ids throttle kafka-python's and confluent-kafka's producers and consumers to the quota (within
20 % over 20 s), the clients see throttle_time_ms, and an unthrottled client on the same broker keeps its rate.
One measurement of all six clients at once keeps the module to about half a minute.

Kafka's rate is a sum over 11 one-second samples divided by at least 10 s: a fresh sensor lets 10 s worth of the
quota through at once, and a client sending ten times its quota then gets a burst each time the burst's sample
expires (every 11-12 s) and little in between. The 20 s measured, from 8 s to 28 s after the start, hold two of
these periods' bursts (at about 12 s and 24 s), not the first one."""

from __future__ import annotations

import time

import pytest

from broker_support import BrokerProcess, free_port
from kcli.client import KafkaClient
from kcli.client.quotas import alter_client_quotas, describe_client_quotas
from quota_support import VALUE, Flow, greedy_consumer, paced_producer, run_flows

pytestmark = [pytest.mark.broker_process, pytest.mark.interop]

QUOTA = 100 * 1024  # bytes/s
WARM_UP, MEASURE = 8.0, 20.0  # see the module docstring
PREFILL = 1500  # records of 4 KiB: more than a throttled consumer can read in the run, and the free one reads all


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("quotas") / "kafka-logs",
                            ["num.partitions=1", "group.initial.rebalance.delay.ms=0"])
    process.start()
    yield process
    assert process.stop() == 0, process.log()
    assert "Traceback" not in process.log(), process.log()


def _prefill(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    # small batches: a fetch returns whole batches, and a consumer quota cannot be met in steps of 1 MB batches
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "prefill", "linger.ms": 5, "batch.size": 65536})
    for _ in range(PREFILL):
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_byte_rate_quotas_hold_producers_and_consumers_to_the_quota(broker):
    client = KafkaClient(broker.bootstrap, client_id="kctl-test")
    try:
        results = alter_client_quotas(client, [
            ((("client-id", "kp-p"),), [("producer_byte_rate", QUOTA)]),
            ((("client-id", "ck-p"),), [("producer_byte_rate", QUOTA)]),
            ((("client-id", "kp-c"),), [("consumer_byte_rate", QUOTA)]),
            ((("client-id", "ck-c"),), [("consumer_byte_rate", QUOTA)]),
        ])
        assert all(r.ok for r in results), results
        described = {e.entity: e.values for e in describe_client_quotas(client, [("client-id", ...)])}
        assert described[(("client-id", "kp-p"),)] == {"producer_byte_rate": QUOTA}
    finally:
        client.close()
    _prefill(broker.bootstrap, "quota-in")
    flows = {name: Flow(name) for name in ("kp-p", "ck-p", "free-p", "kp-c", "ck-c", "free-c")}
    target = 10 * QUOTA  # the producers try ten times their quota
    started = run_flows([
        (paced_producer, "kafka-python", broker.bootstrap, "quota-out", "kp-p", target, flows["kp-p"]),
        (paced_producer, "confluent", broker.bootstrap, "quota-out", "ck-p", target, flows["ck-p"]),
        (paced_producer, "confluent", broker.bootstrap, "quota-free", "free-p", target, flows["free-p"]),
        (greedy_consumer, "kafka-python", broker.bootstrap, "quota-in", "kp-c", flows["kp-c"]),
        (greedy_consumer, "confluent", broker.bootstrap, "quota-in", "ck-c", flows["ck-c"]),
        (greedy_consumer, "confluent", broker.bootstrap, "quota-in", "free-c", flows["free-c"]),
    ], WARM_UP + MEASURE)
    start, end = started + WARM_UP, started + WARM_UP + MEASURE
    rates = {name: flow.rate(start, end) for name, flow in flows.items()}
    free_read = flows["free-c"].total() / max(flows["free-c"].events[-1][0] - started, 0.001) \
        if flows["free-c"].events else 0.0
    rates_shown = {**rates, "free-c": free_read}  # the free consumer read everything before the 20 s began
    report = ", ".join(f"{n} {r / 1024:.1f} KiB/s (throttle max {flows[n].max_throttle_ms:.0f} ms)"
                       for n, r in rates_shown.items())
    print(f"quota {QUOTA / 1024:.0f} KiB/s: {report}")
    for name in ("kp-p", "ck-p", "kp-c", "ck-c"):
        # the quota is the bound (Kafka's guarantee); below it only a starved machine keeps a client from its
        # quota, so the floor only catches throttling far beyond what the quota asks
        assert 0.5 * QUOTA <= rates[name] <= 1.2 * QUOTA, report
        assert flows[name].max_throttle_ms > 0, f"{name} saw no throttle_time_ms: {report}"
        assert not flows[name].errors, flows[name].errors[:3]
    assert rates["free-p"] >= 0.5 * target, report  # the unthrottled producer runs far past the quota
    assert flows["free-p"].max_throttle_ms == 0
    # the unthrottled consumer read everything, long before a quota'd one could have
    assert flows["free-c"].total() == PREFILL * len(VALUE), report
    assert free_read > 5 * QUOTA, report
