"""Client quotas in process (KIP-13, KIP-55, KIP-124): Kafka's rate and throttle-time numbers, the precedence of
quota entities, and the quota nodes as kafka-configs writes them (a standalone broker's local store)."""

from __future__ import annotations

import json

import pytest

from kcli.broker.quotas import ClientQuotaManager, Rate, RequestCharge, TimedCoroutine
from kcli.broker.security.local_store import LocalMetadataStore
from kcli.zk import quotas as zq
from kcli.zk import scram as zk_scram

P = zq.PRODUCER_BYTE_RATE


def test_kafka_quota_violation_numbers():
    # ClientQuotaManagerTest.testQuotaViolation: 500 B/s for <default> client ids; 400 B a second for 10 s is
    # fine, then 2300 B half a second later: 6300 B / 10.5 s = 600 B/s -> (600-500)/500 x 10500 ms = 2100 ms.
    quotas = ClientQuotaManager()
    quotas.update(zq.entity(client_id=None), {P: 500})
    now = 1_000_000
    for _ in range(10):
        assert quotas.record(P, "ANONYMOUS", "unknown", 400, now) == 0
        now += 1000
    now += 500
    assert quotas.record(P, "ANONYMOUS", "unknown", 2300, now) == 2100
    # still over the bound until the bursty sample is gone
    now += 2100
    for _ in range(10):
        quotas.record(P, "ANONYMOUS", "unknown", 400, now)
        now += 1000
    assert quotas.record(P, "ANONYMOUS", "unknown", 0, now) == 0


def test_rate_window_is_at_least_samples_minus_one_windows():
    rate = Rate(11, 1000)
    rate.record(1000, 0)
    assert rate.window_size(0) == 10_000  # a fresh sensor measures over 10 s, not over 0 ms
    assert rate.measure(0) == pytest.approx(100.0)
    assert rate.window_size(10_400) == 10_400
    assert rate.measure(11_000) == 0  # the sample expired (11 windows old)


def test_unrecorded_fetch_bytes_come_off_the_rate():
    quotas = ClientQuotaManager()
    quotas.update(zq.entity(client_id="c"), {zq.CONSUMER_BYTE_RATE: 100})
    assert quotas.record(zq.CONSUMER_BYTE_RATE, "ANONYMOUS", "c", 5000, 0) > 0
    quotas.unrecord(zq.CONSUMER_BYTE_RATE, "ANONYMOUS", "c", 5000, 0)
    assert quotas.bucket_rate(zq.CONSUMER_BYTE_RATE, "ANONYMOUS", "c", 0) == 0
    assert quotas.max_value_in_window(zq.CONSUMER_BYTE_RATE, "ANONYMOUS", "c") == 1000  # 10 s worth
    assert quotas.max_value_in_window(zq.CONSUMER_BYTE_RATE, "ANONYMOUS", "other") is None


def test_request_quota_throttle_is_capped_at_one_window():
    quotas = ClientQuotaManager()
    quotas.update(zq.entity(user="u"), {zq.REQUEST_PERCENTAGE: 1.0})  # 1 % of a thread: 10 ms per second
    # 1 s of handler time at once: 100 %-seconds over 10 s = 10 % -> (10 - 1) / 1 x 10 s, capped at 1 s
    assert quotas.record_request_time("u", "any", 1_000_000_000, 0) == 1000
    assert quotas.record_request_time("v", "any", 1_000_000_000, 0) == 0  # no quota for user v


def test_nothing_is_recorded_until_some_quota_exists():
    quotas = ClientQuotaManager()
    assert not quotas.enabled(P)
    assert quotas.record(P, "u", "c", 10**9, 0) == 0
    assert quotas.bucket_rate(P, "u", "c", 0) == 0
    quotas.update(zq.entity(client_id="x"), {zq.CONSUMER_BYTE_RATE: 1})
    assert not quotas.enabled(P) and quotas.enabled(zq.CONSUMER_BYTE_RATE)


LEVELS = [  # KIP-55's order, most specific first
    (zq.entity(user="u", client_id="c"), ("u", "c")),
    (zq.entity(user="u", client_id=None), ("u", "c")),
    (zq.entity(user="u"), ("u", "")),
    (zq.entity(user=None, client_id="c"), ("u", "c")),
    (zq.entity(user=None, client_id=None), ("u", "c")),
    (zq.entity(user=None), ("u", "")),
    (zq.entity(client_id="c"), ("", "c")),
    (zq.entity(client_id=None), ("", "c")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_entity_precedence(level):
    quotas = ClientQuotaManager()
    # every level from this one down holds a quota (its level number x 1000); the first one applies
    for i, (entity, _) in enumerate(LEVELS[level:], start=level):
        quotas.update(entity, {P: 1000 * (i + 1)})
    tags, bound = quotas.cache.resolve(P, "u", "c")
    assert bound == 1000 * (level + 1)
    assert tags == LEVELS[level][1]


def test_precedence_is_per_quota_type():
    quotas = ClientQuotaManager()
    quotas.update(zq.entity(user="u", client_id="c"), {zq.CONSUMER_BYTE_RATE: 1})
    quotas.update(zq.entity(client_id="c"), {P: 7})
    assert quotas.cache.resolve(P, "u", "c") == (("", "c"), 7)
    assert quotas.cache.resolve(zq.CONSUMER_BYTE_RATE, "u", "c") == (("u", "c"), 1)


def test_a_user_quota_is_one_bucket_for_all_its_client_ids_and_defaults_one_each():
    quotas = ClientQuotaManager()
    quotas.update(zq.entity(user="alice"), {P: 100})
    quotas.update(zq.entity(client_id=None), {P: 100})
    quotas.record(P, "alice", "a", 900, 0)
    assert quotas.record(P, "alice", "b", 200, 0) > 0  # shares alice's bucket: 1100 B / 10 s > 100 B/s
    quotas.record(P, "bob", "a", 900, 0)
    assert quotas.record(P, "bob", "b", 900, 0) == 0  # <default> client id: one bucket per client id


def test_timed_coroutine_charges_the_handler_steps():
    import asyncio

    async def handler():
        total = 0
        for i in range(200_000):
            total += i
        await asyncio.sleep(0.05)
        return total

    charge = RequestCharge()
    assert asyncio.run(_await(TimedCoroutine(handler(), charge))) == sum(range(200_000))
    assert 0 < charge.thread_ns < 50_000_000  # the sleep is not charged


async def _await(awaitable):
    return await awaitable


# -- the nodes -----------------------------------------------------------------------------------------------------
def _node(store, path):
    data, _ = store.get(path)
    return None if data is None else json.loads(data)


def test_nodes_are_where_kafka_configs_writes_them_and_keep_scram_keys():
    store = LocalMetadataStore(None)
    store.set("/config/users/alice", b'{"version":1,"config":{"SCRAM-SHA-256":"salt=x"}}', -1)
    zq.alter_entity(store, zq.entity(user="alice"), [(P, 1024.0), (zq.REQUEST_PERCENTAGE, 200.0)])
    assert _node(store, "/config/users/alice") == {"version": 1, "config": {
        "SCRAM-SHA-256": "salt=x", P: "1024", zq.REQUEST_PERCENTAGE: "200.0"}}
    zq.alter_entity(store, zq.entity(user="al ice*", client_id=None), [(zq.CONSUMER_BYTE_RATE, 5.0)])
    assert _node(store, "/config/users/al%20ice%2A/clients/<default>")["config"] == {zq.CONSUMER_BYTE_RATE: "5"}
    zq.alter_entity(store, zq.entity(client_id="app"), [(P, 10.0)])
    assert _node(store, "/config/clients/app")["config"] == {P: "10"}
    assert zq.read_all(store) == {
        zq.entity(user="al ice*", client_id=None): {zq.CONSUMER_BYTE_RATE: 5.0},
        zq.entity(user="alice"): {P: 1024.0, zq.REQUEST_PERCENTAGE: 200.0},
        zq.entity(client_id="app"): {P: 10.0},
    }
    # removing the quotas keeps the credential; a node left empty without children goes
    zq.alter_entity(store, zq.entity(user="alice"), [(P, None), (zq.REQUEST_PERCENTAGE, None)])
    assert _node(store, "/config/users/alice")["config"] == {"SCRAM-SHA-256": "salt=x"}
    zq.alter_entity(store, zq.entity(client_id="app"), [(P, None)])
    assert _node(store, "/config/clients/app") is None
    assert zk_scram.read_user(store, "alice") == {}  # (the fake credential is not a valid one: skipped)


@pytest.mark.parametrize("entity, ops, message", [
    (((zq.USER, "u"),), [("bogus", 1.0)], "Invalid configuration key bogus"),
    (((zq.USER, "u"),), [(P, 1.5)], "Configuration producer_byte_rate must be a LONG value"),
    (((zq.USER, "u"),), [(P, -1.0)], "Configuration producer_byte_rate must be a non-negative value"),
    (((zq.USER, ""),), [(P, 1.0)], "Empty user not supported"),
    (((zq.IP, "1.2.3.4"), (zq.USER, "u")), [(P, 1.0)], "Invalid quota entity combination, IP entity should not "
                                                        "be used with user/client ID entity."),
    ((("group", "g"),), [(P, 1.0)], "Unhandled client quota entity type: group"),
    ((), [(P, 1.0)], "Invalid empty client quota entity"),
    (((zq.IP, "1.2.3.4"),), [(P, 1.0)], "Invalid configuration key producer_byte_rate"),
])
def test_kafka_refusals(entity, ops, message):
    store = LocalMetadataStore(None)
    with pytest.raises(zq.InvalidQuota) as raised:
        zq.alter_entity(store, entity, ops)
    assert raised.value.reason == message
    assert store.children("/config") == []


def test_describe_filters_as_kafka():
    store = LocalMetadataStore(None)
    for e in (zq.entity(user="a"), zq.entity(user="a", client_id="c"), zq.entity(client_id="c"),
              zq.entity(user=None), zq.entity(client_id=None)):
        zq.alter_entity(store, e, [(P, 1.0)])
    every = zq.describe(store, [], False)
    assert len(every) == 5
    assert list(zq.describe(store, [(zq.USER, "a")], True)) == [zq.entity(user="a")]
    assert set(zq.describe(store, [(zq.USER, "a")], False)) == {zq.entity(user="a"), zq.entity(user="a", client_id="c")}
    assert list(zq.describe(store, [(zq.USER, None)], True)) == [zq.entity(user=None)]
    assert set(zq.describe(store, [(zq.CLIENT_ID, ...)], True)) == {zq.entity(client_id="c"), zq.entity(client_id=None)}
    with pytest.raises(zq.InvalidQuota):
        zq.describe(store, [(zq.USER, "a"), (zq.USER, "b")], False)
    with pytest.raises(zq.UnsupportedEntityType):
        zq.describe(store, [("group", "a")], False)
