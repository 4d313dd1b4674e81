"""AclAuthorizer in process: each rule of the decision (kafka-security.md 4.2), authorize_by_resource_type,
the filters of DescribeAcls/DeleteAcls, the store's JSON and the audit log (cases after Kafka's AclAuthorizerTest)."""

from __future__ import annotations

import json
import logging

import pytest

from kcli.broker.security import KafkaPrincipal, Session
from kcli.broker.security.authorizer import (AclAuthorizer, AclBinding, AclBindingFilter, InvalidAclError,
                                             parse_super_users)
from kcli.broker.security.local_store import LocalMetadataStore
from kcli.protocol.acl import (AccessControlEntry, AccessControlEntryFilter, AclOperation as Op,
                               AclPermissionType as Perm, PatternType as PT, ResourcePattern,
                               ResourcePatternFilter, ResourceType as RT)
from kcli.zk import acls as layout

ALICE = Session(KafkaPrincipal("User", "alice"), client_address="192.168.0.1")
BOB = Session(KafkaPrincipal("User", "bob"), client_address="192.168.0.2")
ADMIN = Session(KafkaPrincipal("User", "admin"), client_address="10.0.0.1")


def acl(principal="User:alice", op=Op.READ, perm=Perm.ALLOW, host="*"):
    return AccessControlEntry(principal, host, op, perm)


def binding(rtype=RT.TOPIC, name="orders", pattern=PT.LITERAL, **entry):
    return AclBinding(ResourcePattern(rtype, name, pattern), acl(**entry))


@pytest.fixture
def store():
    return LocalMetadataStore(None)


def make(store, *bindings, **options):
    authorizer = AclAuthorizer(store, **options)
    authorizer.start()
    assert authorizer.create_acls(list(bindings)) == [None] * len(bindings)
    return authorizer


# -- 4.2, rule by rule ------------------------------------------------------------------------------------------------
def test_rule1_super_users_are_allowed_without_acls(store):
    authorizer = make(store, binding(perm=Perm.DENY, principal="User:admin", op=Op.ALL),
                      super_users=parse_super_users("User:admin; User:CN=broker,OU=test,O=kctl,C=US"))
    assert authorizer.authorize(ADMIN, Op.WRITE, RT.TOPIC, "orders")  # even over a DENY
    broker = Session(KafkaPrincipal("User", "CN=broker,OU=test,O=kctl,C=US"))
    assert authorizer.authorize(broker, Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    assert not authorizer.authorize(ALICE, Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")


def test_rule2_collects_literal_wildcard_and_prefixed_patterns(store):
    authorizer = make(store, binding(name="orders", op=Op.READ), binding(name="*", op=Op.WRITE),
                      binding(name="ord", pattern=PT.PREFIXED, op=Op.DELETE),
                      binding(name="ordersX", pattern=PT.PREFIXED, op=Op.ALTER))  # longer than the name
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Op.DELETE, RT.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Op.ALTER, RT.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "ord")  # literal "orders" does not apply
    assert authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "anything")  # the literal wildcard does
    assert not authorizer.authorize(ALICE, Op.WRITE, RT.GROUP, "orders")  # another resource type
    assert not authorizer.authorize(ALICE, Op.DELETE, RT.TOPIC, "or")  # a prefix of the prefix


def test_rule3_no_acl_at_all_follows_allow_everyone(store):
    closed = make(store)
    assert not closed.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    open_ = make(LocalMetadataStore(None), allow_everyone_if_no_acl_found=True)
    assert open_.authorize(ALICE, Op.READ, RT.TOPIC, "orders")


def test_rule3_one_acl_for_someone_else_makes_the_resource_deny_by_default(store):
    authorizer = make(store, binding(principal="User:bob", op=Op.READ), allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize(BOB, Op.READ, RT.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert not authorizer.authorize(BOB, Op.WRITE, RT.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "other")  # no ACL there


def test_rule4_deny_wins_over_allow(store):
    authorizer = make(store, binding(op=Op.READ), binding(op=Op.READ, perm=Perm.DENY, host="192.168.0.1"))
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert authorizer.authorize(Session(ALICE.principal, client_address="192.168.0.9"), Op.READ, RT.TOPIC, "orders")


def test_rule4_deny_all_and_deny_on_a_wildcard_or_prefix(store):
    authorizer = make(store, binding(op=Op.ALL), binding(name="*", op=Op.ALL, perm=Perm.DENY,
                                                         principal="User:bob"),
                      binding(name="ord", pattern=PT.PREFIXED, op=Op.ALL, perm=Perm.DENY, principal="User:*",
                              host="192.168.0.1"),
                      binding(principal="User:bob", op=Op.READ))
    assert not authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")  # the prefixed deny from her host
    assert not authorizer.authorize(BOB, Op.READ, RT.TOPIC, "orders")  # bob's deny on every topic
    assert authorizer.authorize(Session(ALICE.principal, client_address="1.1.1.1"), Op.WRITE, RT.TOPIC, "orders")


def test_rule4_deny_is_not_implied(store):
    """A DENY READ does not deny DESCRIBE (implication is for ALLOW only)."""
    authorizer = make(store, binding(op=Op.ALL), binding(op=Op.READ, perm=Perm.DENY))
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_rule5_describe_is_implied_by_read_write_delete_alter(store, granted):
    authorizer = make(store, binding(op=granted))
    assert authorizer.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "orders")


def test_rule5_describe_configs_is_implied_by_alter_configs_only(store):
    authorizer = make(store, binding(op=Op.ALTER_CONFIGS))
    assert authorizer.authorize(ALICE, Op.DESCRIBE_CONFIGS, RT.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Op.ALTER_CONFIGS, RT.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    reader = make(LocalMetadataStore(None), binding(op=Op.READ))
    assert not reader.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")  # no other implication
    assert not reader.authorize(ALICE, Op.DESCRIBE_CONFIGS, RT.TOPIC, "orders")


def test_rule5_all_allows_every_operation(store):
    authorizer = make(store, binding(op=Op.ALL))
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
               Op.ALTER_CONFIGS):
        assert authorizer.authorize(ALICE, op, RT.TOPIC, "orders")


def test_rule5_wildcard_principal_and_host(store):
    authorizer = make(store, binding(principal="User:*", op=Op.READ), binding(host="192.168.0.2",
                                                                              principal="User:bob", op=Op.WRITE))
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert authorizer.authorize(BOB, Op.WRITE, RT.TOPIC, "orders")
    assert not authorizer.authorize(Session(BOB.principal, client_address="192.168.0.3"), Op.WRITE, RT.TOPIC,
                                    "orders")
    # a principal of another type is not User:*'s
    assert not authorizer.authorize(Session(KafkaPrincipal("Group", "alice")), Op.WRITE, RT.TOPIC, "orders")


def test_rule6_otherwise_denied(store):
    authorizer = make(store, binding(principal="User:bob", op=Op.READ))
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")


def test_prefixed_lookup_probes_only_the_lengths_in_use(store):
    authorizer = make(store, *(binding(name=f"team{i:04d}-", pattern=PT.PREFIXED) for i in range(300)))
    assert authorizer._prefix_lengths[int(RT.TOPIC)] == (9,)
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "team0042-orders")
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "team0300-orders")
    authorizer.delete_acls([AclBindingFilter(ResourcePatternFilter(RT.TOPIC, None, PT.PREFIXED))])
    assert authorizer._prefix_lengths[int(RT.TOPIC)] == ()
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "team0042-orders")


# -- authorize_by_resource_type (KIP-679) -------------------------------------------------------------------------
def test_by_resource_type(store):
    authorizer = make(store)
    assert not authorizer.authorize_by_resource_type(ALICE, Op.WRITE, RT.TOPIC)
    authorizer.create_acls([binding(name="orders", op=Op.WRITE)])
    assert authorizer.authorize_by_resource_type(ALICE, Op.WRITE, RT.TOPIC)
    assert not authorizer.authorize_by_resource_type(BOB, Op.WRITE, RT.TOPIC)
    authorizer.create_acls([binding(name="ord", pattern=PT.PREFIXED, op=Op.WRITE, perm=Perm.DENY)])
    assert not authorizer.authorize_by_resource_type(ALICE, Op.WRITE, RT.TOPIC)  # the allow is dominated
    authorizer.create_acls([binding(name="audit-", pattern=PT.PREFIXED, op=Op.ALL)])
    assert authorizer.authorize_by_resource_type(ALICE, Op.WRITE, RT.TOPIC)
    authorizer.create_acls([binding(name="*", op=Op.WRITE, perm=Perm.DENY)])
    assert not authorizer.authorize_by_resource_type(ALICE, Op.WRITE, RT.TOPIC)  # a literal * deny


def test_by_resource_type_allow_everyone_and_super_users(store):
    open_ = make(store, allow_everyone_if_no_acl_found=True, super_users={"User:admin"})
    assert open_.authorize_by_resource_type(ALICE, Op.IDEMPOTENT_WRITE, RT.CLUSTER)
    open_.create_acls([binding(name="*", op=Op.ALL, perm=Perm.DENY, principal="User:*")])
    assert not open_.authorize_by_resource_type(ALICE, Op.WRITE, RT.TOPIC)
    assert open_.authorize_by_resource_type(ADMIN, Op.WRITE, RT.TOPIC)


# -- filters (DescribeAcls / DeleteAcls) ------------------------------------------------------------------------------
PATTERNS = [ResourcePattern(RT.TOPIC, "orders", PT.LITERAL), ResourcePattern(RT.TOPIC, "*", PT.LITERAL),
            ResourcePattern(RT.TOPIC, "ord", PT.PREFIXED), ResourcePattern(RT.TOPIC, "orders", PT.PREFIXED),
            ResourcePattern(RT.TOPIC, "other", PT.LITERAL), ResourcePattern(RT.GROUP, "orders", PT.LITERAL)]


@pytest.mark.parametrize("f,expected", [
    (ResourcePatternFilter(RT.ANY, None, PT.ANY), [0, 1, 2, 3, 4, 5]),
    (ResourcePatternFilter(RT.TOPIC, "orders", PT.ANY), [0, 3]),
    (ResourcePatternFilter(RT.TOPIC, "orders", PT.MATCH), [0, 1, 2, 3]),
    (ResourcePatternFilter(RT.TOPIC, "orders", PT.LITERAL), [0]),
    (ResourcePatternFilter(RT.TOPIC, "orders", PT.PREFIXED), [3]),
    (ResourcePatternFilter(RT.TOPIC, None, PT.PREFIXED), [2, 3]),
    (ResourcePatternFilter(RT.ANY, "orders", PT.LITERAL), [0, 5]),
    (ResourcePatternFilter(RT.TOPIC, "*", PT.LITERAL), [1]),
])
def test_resource_pattern_filter(f, expected):
    assert [i for i, p in enumerate(PATTERNS) if f.matches(p)] == expected


def test_entry_filter():
    entry = acl(principal="User:alice", host="1.2.3.4", op=Op.READ, perm=Perm.ALLOW)
    assert AccessControlEntryFilter().matches(entry)
    assert AccessControlEntryFilter("User:alice", "1.2.3.4", Op.READ, Perm.ALLOW).matches(entry)
    assert not AccessControlEntryFilter("User:*").matches(entry)  # a filter matches the wildcard literally
    assert not AccessControlEntryFilter(operation=Op.ALL).matches(entry)
    assert not AccessControlEntryFilter(permission_type=Perm.DENY).matches(entry)


def test_describe_and_delete_with_filters(store):
    authorizer = make(store, binding(op=Op.READ), binding(op=Op.WRITE), binding(name="ord", pattern=PT.PREFIXED),
                      binding(rtype=RT.GROUP, name="g1"), binding(name="*", principal="User:bob"))
    assert len(authorizer.acls()) == 5
    matched = authorizer.acls(AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "orders", PT.MATCH)))
    assert {(b.pattern.name, b.entry.operation) for b in matched} == {
        ("orders", Op.READ), ("orders", Op.WRITE), ("ord", Op.READ), ("*", Op.READ)}
    results = authorizer.delete_acls([
        AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "orders", PT.LITERAL),
                         AccessControlEntryFilter(operation=Op.WRITE)),
        AclBindingFilter(ResourcePatternFilter(RT.ANY, None, PT.ANY), AccessControlEntryFilter("User:bob")),
        AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "nothing", PT.LITERAL)),
    ])
    assert [[(b.pattern.name, b.entry.operation, e) for b, e in r] for r in results] == [
        [("orders", Op.WRITE, None)], [("*", Op.READ, None)], []]
    assert store.get("/kafka-acl/Topic/*") == (None, -1)  # an emptied node is deleted
    assert len(authorizer.acls()) == 3


def test_a_binding_matched_by_two_filters_is_reported_once_under_the_first(store):
    authorizer = make(store, binding(op=Op.READ))
    results = authorizer.delete_acls([AclBindingFilter(), AclBindingFilter()])
    assert [len(r) for r in results] == [1, 0]


@pytest.mark.parametrize("bad", [
    binding(name=""), binding(name="a/b"), binding(rtype=RT.CLUSTER, name="my-cluster"),
    binding(rtype=RT.ANY), binding(pattern=PT.MATCH), binding(op=Op.ANY), binding(perm=Perm.ANY),
    binding(principal="alice"),
])
def test_invalid_bindings_are_refused_one_by_one(store, bad):
    authorizer = make(store)
    results = authorizer.create_acls([binding(), bad])
    assert results[0] is None and isinstance(results[1], InvalidAclError)
    assert len(authorizer.acls()) == 1


# -- storage ----------------------------------------------------------------------------------------------------------
def test_nodes_hold_kafkas_json_at_kafkas_paths(store):
    make(store, binding(op=Op.READ), binding(name="ord-", pattern=PT.PREFIXED, op=Op.IDEMPOTENT_WRITE,
                                               perm=Perm.DENY, host="10.0.0.1"),
         binding(rtype=RT.TRANSACTIONAL_ID, name="tx", op=Op.DESCRIBE))
    data, version = store.get("/kafka-acl/Topic/orders")
    assert data == b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",' \
                   b'"host":"*"}]}' and version == 0
    data, _ = store.get("/kafka-acl-extended/prefixed/Topic/ord-")
    assert json.loads(data)["acls"] == [{"principal": "User:alice", "permissionType": "Deny",
                                         "operation": "IdempotentWrite", "host": "10.0.0.1"}]
    assert store.get("/kafka-acl/TransactionalId/tx")[0] is not None


def test_acls_written_by_kafka_are_loaded(store):
    """Nodes as Kafka's kafka-acls writes them (upper-case names parse too) are seen by a starting authorizer."""
    store.set("/kafka-acl/Topic/orders", b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                                         b'"operation":"Write","host":"*"}]}')
    store.set("/kafka-acl-extended/prefixed/Group/app-", json.dumps({"version": 1, "acls": [
        {"host": "*", "operation": "READ", "principal": "User:alice", "permissionType": "ALLOW"}]}).encode())
    store.set("/kafka-acl/Topic/broken", b"{not json")
    authorizer = make(store)
    assert authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Op.READ, RT.GROUP, "app-1")
    assert len(authorizer.acls()) == 2


def test_a_concurrent_writer_is_retried_not_overwritten(store):
    """Another writer (a second broker, kafka-acls) changed the node after this authorizer cached it."""
    authorizer = make(store, binding(op=Op.READ), retry_backoff_ms=0)
    data, version = store.get("/kafka-acl/Topic/orders")
    other = json.loads(data)
    other["acls"].append({"principal": "User:bob", "permissionType": "Allow", "operation": "Read", "host": "*"})
    store.set("/kafka-acl/Topic/orders", json.dumps(other).encode(), version)
    assert authorizer.create_acls([binding(op=Op.WRITE)]) == [None]
    principals = {(a["principal"], a["operation"]) for a in json.loads(store.get("/kafka-acl/Topic/orders")[0])["acls"]}
    assert principals == {("User:alice", "Read"), ("User:bob", "Read"), ("User:alice", "Write")}
    assert authorizer.authorize(BOB, Op.READ, RT.TOPIC, "orders")


def test_changes_are_published_and_processed(store):
    class Channel:
        def __init__(self):
            self.published, self.callback = [], None

        def start(self, on_change):
            self.callback = on_change

        def publish(self, pattern):
            self.published.append(pattern)

        def stop(self):
            pass

    channel = Channel()
    authorizer = make(store, binding(op=Op.READ), changes=channel)
    authorizer.create_acls([binding(op=Op.READ)])  # no change: no notification
    assert channel.published == [ResourcePattern(RT.TOPIC, "orders", PT.LITERAL)]
    second = AclAuthorizer(store, changes=Channel())
    second.start()
    authorizer.create_acls([binding(name="ord", pattern=PT.PREFIXED, op=Op.WRITE)])
    assert not second.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")
    second.process_change(channel.published[-1])
    assert second.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")


def test_change_notification_formats():
    assert layout.encode_change(ResourcePattern(RT.TOPIC, "orders", PT.LITERAL)) == ("/kafka-acl-changes",
                                                                                      b"TOPIC:orders")
    root, data = layout.encode_change(ResourcePattern(RT.TRANSACTIONAL_ID, "tx-", PT.PREFIXED))
    assert root == "/kafka-acl-extended-changes"
    assert json.loads(data) == {"version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "tx-",
                                "patternType": "PREFIXED"}
    assert layout.decode_change(root, data) == ResourcePattern(RT.TRANSACTIONAL_ID, "tx-", PT.PREFIXED)
    assert layout.decode_change("/kafka-acl-changes", b"Topic:a:b") == ResourcePattern(RT.TOPIC, "a:b")


# -- the audit log ----------------------------------------------------------------------------------------------------
def test_audit_lines_and_levels(store, caplog):
    authorizer = make(store, binding(op=Op.READ))
    caplog.set_level(1, logger="kafka.authorizer.logger")
    authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders", request="Produce")
    authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders", request="Fetch", ref_count=2)
    authorizer.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "other", request="Metadata", log_if_denied=False)
    authorizer.authorize_by_resource_type(ALICE, Op.IDEMPOTENT_WRITE, RT.CLUSTER, request="InitProducerId")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert lines == [
        (logging.INFO, "Principal = User:alice is Denied Operation = Write from host = 192.168.0.1 on resource = "
                       "Topic:LITERAL:orders for request = Produce with resourceRefCount = 1"),
        (logging.DEBUG, "Principal = User:alice is Allowed Operation = Read from host = 192.168.0.1 on resource = "
                        "Topic:LITERAL:orders for request = Fetch with resourceRefCount = 2"),
        (5, "Principal = User:alice is Denied Operation = Describe from host = 192.168.0.1 on resource = "
            "Topic:LITERAL:other for request = Metadata with resourceRefCount = 1"),
        (logging.INFO, "Principal = User:alice is Denied Operation = IdempotentWrite from host = 192.168.0.1 on "
                       "resource = Cluster:UNKNOWN:NONE for request = InitProducerId with resourceRefCount = 0"),
    ]


def test_standalone_acls_survive_a_restart(tmp_path):
    make(LocalMetadataStore(tmp_path), binding(op=Op.READ))
    again = make(LocalMetadataStore(tmp_path))
    assert again.authorize(ALICE, Op.READ, RT.TOPIC, "orders")


# -- more cases after Kafka's AclAuthorizerTest ------------------------------------------------------------------------
def test_single_character_prefix_and_literal(store):
    """testSingleCharacterResourceAcls: a one-character prefix matches, a one-character literal only itself."""
    authorizer = make(store, binding(name="f", pattern=PT.PREFIXED, op=Op.READ), binding(name="x", op=Op.WRITE))
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "foo")
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "f")
    assert authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "x")
    assert not authorizer.authorize(ALICE, Op.WRITE, RT.TOPIC, "xy")


def test_wildcard_principal_deny_overrides_a_specific_allow(store):
    """testDenyTakesPrecedence with the wildcard principal on a prefixed pattern."""
    authorizer = make(store, binding(name="orders", op=Op.READ),
                      binding(name="o", pattern=PT.PREFIXED, principal="User:*", op=Op.READ, perm=Perm.DENY))
    assert not authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert not authorizer.authorize(BOB, Op.READ, RT.TOPIC, "other")


def test_all_hosts_wildcard_with_specific_deny_host(store):
    authorizer = make(store, binding(op=Op.READ), binding(op=Op.READ, perm=Perm.DENY, host="192.168.0.2",
                                                          principal="User:*"))
    assert authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert not authorizer.authorize(Session(ALICE.principal, client_address="192.168.0.2"), Op.READ, RT.TOPIC,
                                    "orders")


def test_concurrent_writers_on_one_node_lose_nothing(tmp_path):
    """testHighConcurrencyModificationOfResourceAcls / testDistributedConcurrentModificationOfResourceAcls: two
    authorizers (two brokers) over one store add ACLs to the same resource at once; the version check retries."""
    import threading

    shared = LocalMetadataStore(tmp_path)
    first, second = make(shared, retry_backoff_ms=0), make(shared, retry_backoff_ms=0)

    def add(authorizer, base):
        for i in range(15):
            assert authorizer.create_acls([binding(principal=f"User:u{base + i}")]) == [None]

    threads = [threading.Thread(target=add, args=(first, 0)), threading.Thread(target=add, args=(second, 100))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data, _ = shared.get("/kafka-acl/Topic/orders")
    assert len(json.loads(data)["acls"]) == 30
    fresh = make(LocalMetadataStore(tmp_path))
    assert len(fresh.acls()) == 30
