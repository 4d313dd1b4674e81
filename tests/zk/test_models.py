"""Pure parsers of Kafka's ZooKeeper znodes (kafka-formats.md section 8): real layouts, versions, bad input."""

from __future__ import annotations

import pytest

from kcli.errors import KcliError
from kcli.zk import models
from kcli.zk.models import ZnodeFormatError

P = "/kafka/some/path"


def test_broker_v5():
    data = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","INTERNAL":"SSL"},'
            b'"endpoints":["PLAINTEXT://10.0.0.1:9092","INTERNAL://[::1]:9093"],"jmx_port":9999,"port":9092,'
            b'"host":"10.0.0.1","version":5,"timestamp":"1700000000123","rack":"r1"}')
    broker = models.parse_broker(P, data, 7)
    assert (broker.id, broker.version, broker.host, broker.port, broker.jmx_port) == (7, 5, "10.0.0.1", 9092, 9999)
    assert broker.timestamp == 1700000000123 and broker.rack == "r1"
    assert broker.endpoints == ("PLAINTEXT://10.0.0.1:9092", "INTERNAL://[::1]:9093")
    assert broker.listeners[1] == models.Endpoint("INTERNAL", "::1", 9093, "SSL")
    assert broker.listener_security_protocol_map == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL"}


def test_broker_v1_and_null_host():
    old = models.parse_broker(P, b'{"jmx_port":-1,"timestamp":"1","host":"h","version":1,"port":9092}', 0)
    assert old.endpoints == ("PLAINTEXT://h:9092",) and old.rack is None
    ssl_only = models.parse_broker(P, b'{"version":4,"host":null,"port":-1,"jmx_port":-1,"timestamp":"2",'
                                      b'"endpoints":["SSL://b:9093"],"listener_security_protocol_map":{"SSL":"SSL"}}', 1)
    assert ssl_only.host is None and ssl_only.port == -1 and ssl_only.listeners[0].host == "b"


@pytest.mark.parametrize("data,words", [
    (b'{"version":6,"host":"h","port":1}', "unknown version 6"),
    (b'{"host":"h"}', "version"),
    (b'{"version":5,', "malformed JSON"),
    (b'[1,2]', "JSON object"),
    (b'', "empty"),
    (b'\xff\xfe', "malformed JSON"),
    (b'{"version":5,"endpoints":["nonsense"]}', "LISTENER://host:port"),
])
def test_broker_malformed(data, words):
    with pytest.raises(ZnodeFormatError) as info:
        models.parse_broker(P, data, 1)
    assert P in str(info.value) and words in str(info.value)
    assert isinstance(info.value, KcliError)


def test_topic_versions():
    v1 = models.parse_topic(P, b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}', "t")
    assert v1.partitions == {0: (1, 2), 1: (2, 3)} and list(v1.partitions) == [0, 1]
    assert v1.topic_id is None and v1.adding_replicas == {}
    v3 = models.parse_topic(P, b'{"removing_replicas":{"0":[3]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ",'
                               b'"adding_replicas":{"0":[4]},"partitions":{"0":[1,3,4]},"version":3}', "t")
    assert v3.version == 3 and v3.topic_id == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert v3.adding_replicas == {0: (4,)} and v3.removing_replicas == {0: (3,)}
    for bad in (b'{"version":4,"partitions":{}}', b'{"version":1}', b'{"version":1,"partitions":{"x":[1]}}',
                b'{"version":1,"partitions":{"0":["1"]}}'):
        with pytest.raises(ZnodeFormatError, match=P):
            models.parse_topic(P, bad, "t")


def test_partition_state():
    state = models.parse_partition_state(P, b'{"controller_epoch":4,"leader":1,"version":1,"leader_epoch":2,'
                                            b'"isr":[1,2]}')
    assert state == models.PartitionState(1, 1, 2, 4, (1, 2))
    assert models.parse_partition_state(P, b'{"version":1,"leader":-1,"leader_epoch":3,"controller_epoch":1,'
                                           b'"isr":[],"leader_recovery_state":1}').leader_recovery_state == 1
    with pytest.raises(ZnodeFormatError, match="missing field 'leader'"):
        models.parse_partition_state(P, b'{"version":1,"leader_epoch":2,"controller_epoch":1,"isr":[1]}')
    with pytest.raises(ZnodeFormatError, match="unknown version 2"):
        models.parse_partition_state(P, b'{"version":2,"leader":1,"leader_epoch":2,"controller_epoch":1,"isr":[1]}')


def test_controller_and_epoch_and_cluster_id():
    v1 = models.parse_controller(P, b'{"version":1,"brokerid":2,"timestamp":"1700000000000"}')
    assert v1 == models.Controller(2, 1, 1700000000000, None)
    v2 = models.parse_controller(P, b'{"kraftControllerEpoch":-1,"timestamp":"5","brokerid":3,"version":2}')
    assert (v2.broker_id, v2.version, v2.kraft_controller_epoch) == (3, 2, -1)
    with pytest.raises(ZnodeFormatError, match="unknown version 3"):
        models.parse_controller(P, b'{"version":3,"brokerid":1}')
    assert models.parse_controller_epoch(P, b"7") == 7
    with pytest.raises(ZnodeFormatError, match="controller epoch"):
        models.parse_controller_epoch(P, b"seven")
    cluster = models.parse_cluster_id(P, b'{"id":"AbCdEfGhIjKlMnOpQrStUv","version":"1"}')
    assert cluster == models.ClusterId("AbCdEfGhIjKlMnOpQrStUv", 1)
    with pytest.raises(ZnodeFormatError, match="unknown version 2"):
        models.parse_cluster_id(P, b'{"id":"x","version":"2"}')


def test_config_and_admin():
    entity = models.parse_config(P, b'{"version":1,"config":{"retention.ms":"1000","cleanup.policy":"compact"}}',
                                 "topics", "t")
    assert entity.config == {"cleanup.policy": "compact", "retention.ms": "1000"}
    with pytest.raises(ZnodeFormatError, match="unknown version 2"):
        models.parse_config(P, b'{"version":2,"config":{}}', "topics", "t")
    moves = models.parse_partition_list(P, b'{"version":1,"partitions":[{"topic":"b","partition":1,"replicas":[1,2]},'
                                           b'{"partition":0,"topic":"a","replicas":[3]}]}', with_replicas=True)
    assert moves == (models.PartitionRequest("a", 0, (3,)), models.PartitionRequest("b", 1, (1, 2)))
    election = models.parse_partition_list(P, b'{"version":1,"partitions":[{"topic":"a","partition":0}]}',
                                           with_replicas=False)
    assert election == (models.PartitionRequest("a", 0, None),)


def test_consumers_owners_offsets():
    member = models.parse_consumer(P, b'{"version":1,"subscription":{"orders":2},"pattern":"static",'
                                      b'"timestamp":"1700000000000"}', "g_host-1-abcd")
    assert member.subscription == {"orders": 2} and member.pattern == "static" and member.timestamp == 1700000000000
    assert models.parse_owner(P, b"g_host-1-abcd-0") == "g_host-1-abcd-0"
    assert models.parse_offset(P, b"1234") == 1234 and models.parse_offset(P, b"0\n") == 0
    for bad in (b"abc", b"-5", b"", b"1.5", b"\xff"):
        with pytest.raises(ZnodeFormatError) as info:
            models.parse_offset(P, bad)
        assert P in str(info.value) and "offset" in str(info.value)


def test_decode():
    assert models.decode(b'{"a":1}') == models.Decoded("json", {"a": 1})
    assert models.decode(b"hello world") == models.Decoded("text", "hello world")
    assert models.decode(b"") == models.Decoded("empty", None)
    raw = models.decode(b"\x00\xffab")
    assert raw.kind == "bytes" and raw.hex == "00ff6162" and raw.value == "AP9hYg=="
    assert models.decode(b"a\x01b").kind == "bytes"
