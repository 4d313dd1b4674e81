"""server.properties parsing: Kafka's keys, defaults, overrides and clear refusals."""

from __future__ import annotations

import pytest

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
