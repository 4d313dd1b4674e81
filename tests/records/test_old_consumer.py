"""The old consumer's group protocol as data (kcli.records.old_consumer): the ids node, topic filters, and the
assignments every member computes (Kafka 0.8.2's RangeAssignor and RoundRobinAssignor, pykafka 2.8's range)."""

from __future__ import annotations

import json

import pytest

from kcli.records import old_consumer as oc


def test_registration_is_kafkas_json():
    data = json.loads(oc.encode_registration({"orders": 2}, oc.STATIC, 1700000000000))
    assert data == {"version": 1, "subscription": {"orders": 2}, "pattern": "static", "timestamp": "1700000000000"}
    with pytest.raises(ValueError):
        oc.encode_registration({"x": 1}, "pykafka", 0)


@pytest.mark.parametrize("pattern,regex,topic,allowed", [
    (oc.WHITE_LIST, "orders.*", "orders-eu", True),
    (oc.WHITE_LIST, "orders", "orders-eu", False),  # the whole name must match (Java's String.matches)
    (oc.WHITE_LIST, "a, b", "b", True),  # "," means "|", spaces dropped
    (oc.WHITE_LIST, "'a.*'", "ab", True),  # quotes around the regex dropped
    (oc.WHITE_LIST, ".*", "__consumer_offsets", False),  # exclude.internal.topics
    (oc.BLACK_LIST, "orders.*", "orders-eu", False),
    (oc.BLACK_LIST, "orders.*", "payments", True),
])
def test_topic_filters(pattern, regex, topic, allowed):
    assert oc.topic_allowed(pattern, regex, topic) is allowed


def test_range_over_members_and_streams():
    members = [oc.Subscription("c2", {"t": 1}), oc.Subscription("c1", {"t": 2})]
    got = oc.assign(oc.RANGE, members, {"t": [0, 1, 2, 3, 4]})
    # RangeAssignor's doc example: 5 partitions over c1-0, c1-1, c2-0 -> 2, 2, 1
    assert got == {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c1-1", ("t", 3): "c1-1", ("t", 4): "c2-0"}


def test_range_with_a_wildcard_member_and_topics_nobody_reads():
    members = [oc.Subscription("a", {"orders": 1}), oc.Subscription("b", {"ord.*": 1}, oc.WHITE_LIST)]
    got = oc.assign(oc.RANGE, members, {"orders": [0, 1], "orderly": [0], "other": [0]})
    assert got == {("orders", 0): "a-0", ("orders", 1): "b-0", ("orderly", 0): "b-0"}


def test_roundrobin_deals_partitions_by_hash_order_over_all_threads():
    members = [oc.Subscription("a", {"t": 1, "u": 1}), oc.Subscription("b", {"t": 1, "u": 1})]
    partitions = {"t": [0, 1, 2], "u": [0, 1]}
    got = oc.assign(oc.ROUNDROBIN, members, partitions)
    order = sorted(((t, p) for t in partitions for p in partitions[t]),
                   key=lambda tp: oc.java_string_hashcode(f"[{tp[0]},{tp[1]}]"))
    assert [got[tp] for tp in order] == ["a-0", "b-0", "a-0", "b-0", "a-0"]


def test_roundrobin_skips_threads_not_subscribed_to_the_topic():
    members = [oc.Subscription("a", {"t": 1}), oc.Subscription("b", {"t": 1, "u": 1})]
    got = oc.assign(oc.ROUNDROBIN, members, {"t": [0, 1], "u": [0, 1]})
    assert {tp for tp, thread in got.items() if thread == "a-0"} <= {("t", 0), ("t", 1)}
    assert got[("u", 0)] == got[("u", 1)] == "b-0"
    assert len(got) == 4


def test_java_hashcode_of_a_topic_partition():
    # ((((91*31 + 116)*31 + 44)*31 + 48)*31 + 93: '[', 't', ',', '0', ']'
    assert oc.java_string_hashcode("[t,0]") == 87540032


def test_every_member_computes_the_same_assignment_in_any_order():
    members = [oc.Subscription(f"g_h-{i}", {"t": 1 + i % 2}) for i in range(4)]
    partitions = {"t": list(range(7))}
    for strategy in oc.STRATEGIES:
        first = oc.assign(strategy, members, partitions)
        assert oc.assign(strategy, list(reversed(members)), partitions) == first
        assert sorted(first) == [("t", p) for p in range(7)]  # every partition owned once


def test_pykafka_layout_names():
    assert oc.pykafka_owners_dir("orders") == "b'orders'"
    assert oc.pykafka_topic_of_owners_dir("b'orders'") == "orders" and oc.pykafka_topic_of_owners_dir("orders") is None
    assert oc.parse_pykafka_owner_name("2-10") == (2, 10) and oc.parse_pykafka_owner_name("10") is None
    assert oc.is_topic_name("orders.eu_1-x") and not oc.is_topic_name("{not json") and not oc.is_topic_name("")


def test_pykafka_range_sorts_by_leader_then_partition_as_text():
    # sort keys "b't'-<leader>-<partition>": b't'-0-1, b't'-1-0, b't'-1-10, b't'-1-2 ("10" before "2")
    leaders = {0: 1, 1: 0, 2: 1, 10: 1}
    got = oc.pykafka_range("t", ["m2", "m1"], leaders)
    assert got == {1: "m1", 0: "m1", 10: "m2", 2: "m2"}
