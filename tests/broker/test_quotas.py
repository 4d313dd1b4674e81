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


# -- the handlers (DescribeClientQuotas 48, AlterClientQuotas 49) and the request quota, in process ----------------
def _alter_request(entries, validate_only=False):
    from kio.schema.alter_client_quotas.v1 import request as m

    return m.AlterClientQuotasRequest(validate_only=validate_only, entries=tuple(
        m.EntryData(entity=tuple(m.EntityData(entity_type=k, entity_name=n) for k, n in entity),
                    ops=tuple(m.OpData(key=key, value=0.0 if value is None else value, remove=value is None)
                              for key, value in ops))
        for entity, ops in entries))


def _describe_request(components, strict=False):
    from kio.schema.describe_client_quotas.v1 import request as m
    from kio.static.primitive import i8

    return m.DescribeClientQuotasRequest(strict=strict, components=tuple(
        m.ComponentData(entity_type=k, match_type=i8(t), match=n) for k, t, n in components))


def test_client_quota_handlers_and_the_request_quota(tmp_path):
    from kio.schema.errors import ErrorCode

    from inprocess_broker import run, running_broker
    from kcli.broker.quotas import RequestCharge
    from kcli.protocol import ApiKey
    from kcli.protocol.minimal import minimal_request

    async def scenario():
        async with running_broker(tmp_path) as b:
            altered = await b.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, _alter_request([
                ((("client-id", "app"),), [(P, 1024.0), (zq.REQUEST_PERCENTAGE, 0.0001)]),
                ((("user", "alice"), ("client-id", None)), [("bogus", 1.0)]),
                ((("group", "g"),), [(P, 1.0)]),
                ((("user", "bob"),), [(P, 2.5)]),
                ((("user", "carol"),), [(P, -1.0)]),
            ]))
            assert [(e.error_code, e.error_message) for e in altered.entries] == [
                (ErrorCode.none, None),
                (ErrorCode.invalid_request, "Invalid configuration key bogus"),
                (ErrorCode.invalid_request, "Unhandled client quota entity type: group"),
                (ErrorCode.invalid_request, "Configuration producer_byte_rate must be a LONG value"),
                (ErrorCode.invalid_request, "Configuration producer_byte_rate must be a non-negative value")]
            quotas = b.server.services.quotas
            assert quotas.cache.resolve(P, "ANONYMOUS", "app") == (("", "app"), 1024.0)  # applied at once
            checked = await b.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, _alter_request(
                [((("user", "dave"),), [(P, 5.0)])], validate_only=True))
            assert checked.entries[0].error_code == ErrorCode.none
            assert quotas.cache.resolve(P, "dave", "x")[1] is None  # validate_only: nothing written

            described = await b.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, _describe_request([("client-id", 0, "app")],
                                                                                        strict=True))
            assert described.error_code == ErrorCode.none
            assert [(tuple((e.entity_type, e.entity_name) for e in x.entity),
                     {v.key: v.value for v in x.values}) for x in described.entries] == [
                ((("client-id", "app"),), {P: 1024.0, zq.REQUEST_PERCENTAGE: 0.0001})]
            for components, code in (([("user", 2, None), ("user", 2, None)], ErrorCode.invalid_request),
                                     ([("group", 2, None)], ErrorCode.unsupported_version),
                                     ([("ip", 2, None), ("user", 2, None)], ErrorCode.invalid_request),
                                     ([("", 2, None)], ErrorCode.invalid_request)):
                refused = await b.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, _describe_request(components))
                assert refused.error_code == code and refused.entries is None, (components, refused)

            # the request quota: 0.0001 % of a thread is exceeded by any request of client "app"; the response
            # carries the throttle (capped at one window) and the edge is told to mute for as long
            charge = RequestCharge()
            body = minimal_request(ApiKey.METADATA, 12)
            response = await b.apis.handle(ApiKey.METADATA, 12, body, client_id="app", client_host="127.0.0.1",
                                           charge=charge)
            assert 0 < charge.throttle_ms <= 1000
            assert response.throttle_time.total_seconds() * 1000 == charge.throttle_ms
            other = RequestCharge()
            response = await b.apis.handle(ApiKey.METADATA, 12, body, client_id="other", client_host="127.0.0.1",
                                           charge=other)
            assert other.throttle_ms == 0 and response.throttle_time.total_seconds() == 0
        # standalone, the quotas live in the first log dir's store: a restarted broker applies them again
        async with running_broker(tmp_path) as b:
            assert b.server.services.quotas.cache.resolve(P, "ANONYMOUS", "app") == (("", "app"), 1024.0)

    run(scenario())
