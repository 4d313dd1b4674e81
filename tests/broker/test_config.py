"""server.properties parsing: Kafka's keys, defaults, overrides and clear refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker_support import free_port
from kcli.broker.config import ConfigError, load_config


def test_defaults():
    config = load_config()
    assert config.broker_id == 0 and [(l.host, l.port) for l in config.listeners] == [("127.0.0.1", 9092)]
    assert config["num.partitions"] == 1 and config["auto.create.topics.enable"] is True
    assert config.retention_ms == 168 * 3600 * 1000 and config["message.max.bytes"] == 1048588


def test_file_then_overrides(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("# comment\nbroker.id=3\nlisteners=PLAINTEXT://0.0.0.0:19092\nlog.dirs=/a,/b\n"
                     "log.retention.hours=1\nnum.network.threads=3\nsome.unknown=1\n")
    config = load_config(props, ["broker.id=7", "log.retention.ms=5000"])
    assert config.broker_id == 7 and config.retention_ms == 5000
    assert [str(p) for p in config.log_dirs] == ["/a", "/b"]
    assert [(l.host, l.port) for l in config.advertised_listeners] == [("127.0.0.1", 19092)]
    assert config.unknown == ["some.unknown"]


@pytest.mark.parametrize("override,message", [
    ("num.partitions=0", "num.partitions"),
    ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
    ("listeners=9092", "listeners"),
    ("log.segment.bytes=abc", "log.segment.bytes"),
    ("log.cleanup.policy=shred", "log.cleanup.policy"),
    ("nokeyvalue", "key=value"),
])
def test_bad_values_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.properties")


# -- settings this broker cannot serve stop the start (issue 23.7, issue 25) -----------------------------------
@pytest.mark.parametrize("overrides,message", [
    # every protocol is served, but never with less security than it says: TLS needs a keystore ...
    (["listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"], "listener SSL \\(SSL\\) needs a keystore"),
    # ... SASL a mechanism kctl serves (Kafka's default is GSSAPI) ...
    (["listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094"],
     "listener SASL_PLAINTEXT .*GSSAPI \\(Kerberos"),
    # ... and PLAIN its users, from the listener's JAAS config (the unprefixed sasl.jaas.config is ignored)
    (["listeners=PLAINTEXT://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093", "sasl.enabled.mechanisms=PLAIN",
      "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
      'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_a="a";'],
     "listener EXTERNAL \\(SASL_PLAINTEXT\\) enables PLAIN but has no users"),
    (["listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094", "sasl.enabled.mechanisms=PLAIN,DIGEST-MD5"],
     "listener SASL_PLAINTEXT .*DIGEST-MD5 is not served"),
    (["listeners=INTERNAL://127.0.0.1:9093"], "No security protocol defined for listener INTERNAL"),
    (["listener.security.protocol.map=PLAINTEXT:TLS"], "listener.security.protocol.map"),
    (["advertised.listeners=SSL://broker:9093"], "advertised.listeners listener names must be .* Found SSL"),
    # the inter-broker listener must be advertised; the two keys that name it exclude each other
    (["listeners=SSL://127.0.0.1:9093"], "security.inter.broker.protocol=PLAINTEXT: no advertised listener"),
    (["inter.broker.listener.name=INTERNAL"], "inter.broker.listener.name must be a listener name defined in "
                                              "advertised.listeners"),
    (["inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=PLAINTEXT"],
     "Only one of inter.broker.listener.name and security.inter.broker.protocol"),
    (["listeners=PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"], "PLAINTEXT is given twice"),
    (["listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092"], "9092 is given twice"),
    (["remote.log.storage.system.enable=true"], "needs rsm.config.url"),  # tiered storage needs its remote store
])
def test_unservable_listeners_and_tiered_storage_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_listener_names_map_to_plaintext_through_the_protocol_map():
    config = load_config(None, ["listeners=INTERNAL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                                "listener.security.protocol.map=INTERNAL:PLAINTEXT,plaintext:PLAINTEXT"])
    assert [(l.name, config.security_protocol(l)) for l in config.listeners] == [
        ("INTERNAL", "PLAINTEXT"), ("PLAINTEXT", "PLAINTEXT")]


def test_an_ssl_listener_without_keystore_is_a_startup_error_naming_it(tmp_path):
    """kctl-broker(1): bad configuration exits 2, before anything is bound or written; the message names the
    listener."""
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "kcli", "broker", "run",
                           "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{port}",
                           "--override", f"log.dirs={tmp_path / 'logs'}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "listener SSL (SSL) needs a keystore" in " ".join(proc.stderr.split())
    assert not (tmp_path / "logs").exists()
