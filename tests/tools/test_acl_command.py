"""kcli.tools.acls: kafka-acls' options to bindings and filters, as Kafka's AclCommand expands them."""

from __future__ import annotations

import pytest

from kcli.errors import UsageError
from kcli.protocol.acl import (AclOperation as Op, AclPermissionType as Perm, PatternType as PT,
                               ResourceType as RT)
from kcli.tools.acls import AclCommandOptions, bindings_to_add, filters_to_list, filters_to_remove, pattern_text


def triples(bindings):
    return {(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type, b.entry.principal, b.entry.host,
             b.entry.operation, b.entry.permission_type) for b in bindings}


def test_principals_hosts_and_operations_multiply():
    opts = AclCommandOptions(topics=["a", "b"], allow_principals=["User:x", "User:y"], allow_hosts=["1.1.1.1"],
                             deny_principals=["User:z"], operations=["Read", "WRITE"])
    got = triples(bindings_to_add(opts))
    assert len(got) == 2 * (2 * 1 * 2 + 1 * 1 * 2)
    assert (RT.TOPIC, "a", PT.LITERAL, "User:z", "*", Op.WRITE, Perm.DENY) in got  # deny hosts default to *
    assert (RT.TOPIC, "b", PT.LITERAL, "User:y", "1.1.1.1", Op.READ, Perm.ALLOW) in got


def test_operation_defaults_to_all_and_pattern_type_to_literal():
    got = triples(bindings_to_add(AclCommandOptions(cluster=True, allow_principals=["User:admin"])))
    assert got == {(RT.CLUSTER, "kafka-cluster", PT.LITERAL, "User:admin", "*", Op.ALL, Perm.ALLOW)}


def test_producer_and_consumer_expansions():
    producer = triples(bindings_to_add(AclCommandOptions(
        topics=["t-"], transactional_ids=["tx"], pattern_type="prefixed", allow_principals=["User:p"],
        producer=True, idempotent=True)))
    assert {(r, n, pt, o) for r, n, pt, _, _, o, _ in producer} == {
        (RT.TOPIC, "t-", PT.PREFIXED, Op.WRITE), (RT.TOPIC, "t-", PT.PREFIXED, Op.DESCRIBE),
        (RT.TOPIC, "t-", PT.PREFIXED, Op.CREATE), (RT.TRANSACTIONAL_ID, "tx", PT.PREFIXED, Op.WRITE),
        (RT.TRANSACTIONAL_ID, "tx", PT.PREFIXED, Op.DESCRIBE),
        (RT.CLUSTER, "kafka-cluster", PT.LITERAL, Op.IDEMPOTENT_WRITE)}
    consumer = triples(bindings_to_add(AclCommandOptions(topics=["t"], groups=["g"], allow_principals=["User:c"],
                                                         consumer=True)))
    assert {(r, n, o) for r, n, _, _, _, o, _ in consumer} == {
        (RT.TOPIC, "t", Op.READ), (RT.TOPIC, "t", Op.DESCRIBE), (RT.GROUP, "g", Op.READ)}


@pytest.mark.parametrize("opts", [
    AclCommandOptions(topics=["t"]),  # no principal
    AclCommandOptions(allow_principals=["User:a"]),  # no resource
    AclCommandOptions(topics=["t"], allow_principals=["alice"]),  # not TYPE:NAME
    AclCommandOptions(groups=["g"], allow_principals=["User:a"], operations=["Write"]),  # not a group operation
    AclCommandOptions(topics=["t"], allow_principals=["User:a"], operations=["Fly"]),
    AclCommandOptions(topics=["t"], allow_principals=["User:a"], pattern_type="match"),  # not for --add
    AclCommandOptions(topics=["t"], allow_principals=["User:a"], consumer=True),  # --consumer needs --group
    AclCommandOptions(topics=["t"], allow_principals=["User:a"], idempotent=True),  # without --producer
    AclCommandOptions(topics=["t"], allow_principals=["User:a"], producer=True, operations=["Read"]),
    AclCommandOptions(topics=[""], allow_principals=["User:a"]),
])
def test_add_refusals(opts):
    with pytest.raises(UsageError):
        bindings_to_add(opts)


def test_remove_without_principals_removes_everything_on_the_resources():
    filters = filters_to_remove(AclCommandOptions(topics=["t"], cluster=True, pattern_type="any"))
    assert [(f.pattern.resource_type, f.pattern.name, f.pattern.pattern_type, f.entry.principal)
            for f in filters] == [(RT.TOPIC, "t", PT.ANY, None), (RT.CLUSTER, "kafka-cluster", PT.ANY, None)]
    exact = filters_to_remove(AclCommandOptions(topics=["t"], deny_principals=["User:d"], operations=["Read"]))
    assert [(f.entry.principal, f.entry.host, f.entry.operation, f.entry.permission_type) for f in exact] == [
        ("User:d", "*", Op.READ, Perm.DENY)]
    with pytest.raises(UsageError):
        filters_to_remove(AclCommandOptions())


def test_list_filters():
    (everything,) = filters_to_list(AclCommandOptions())
    assert everything.pattern.resource_type == RT.ANY and everything.pattern.name is None
    filters = filters_to_list(AclCommandOptions(topics=["t"], pattern_type="match", principals=["User:a"]))
    assert [(f.pattern.pattern_type, f.entry.principal) for f in filters] == [(PT.MATCH, "User:a")]
    assert pattern_text(filters[0].pattern) == "ResourcePatternFilter(resourceType=TOPIC, name=t, patternType=MATCH)"
