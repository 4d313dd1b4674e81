"""`kctl configs --entity-type users|clients|ips` as kafka-configs does it (issue 27): its usage errors before
anything is contacted, and against an in-process broker its output lines, the describe -> alter -> describe round
trip of quotas and SCRAM credentials, and runbooks' kafka-configs command lines as they are written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

import inprocess_broker
from inprocess_broker import running_broker
from kcli.cli.app import app

ENV = {"COLUMNS": "200", "KCTL_BOOTSTRAP_SERVER": None, "KCTL_ZOOKEEPER": None}


def run(*args: str) -> Any:
    result = CliRunner().invoke(app, ["configs", *args], env=ENV)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result


USER = ["--entity-type", "users", "--entity-name", "alice"]


@pytest.mark.parametrize("args, message", [
    ([*USER, "--add-config", "producer_bytes=1"],
     "Only quota and SCRAM credential configs can be added for 'users'. Unexpected config names: producer_bytes"),
    ([*USER, "--delete-config", "nope"], "can be deleted for 'users'. Unexpected config names: nope"),
    (["--entity-type", "clients", "--entity-name", "app", "--add-config", "SCRAM-SHA-256=[password=x]"],
     "Only quota configs can be added for 'clients'. Unexpected config names: SCRAM-SHA-256"),
    ([*USER, "--entity-type", "clients", "--entity-name", "app", "--add-config", "SCRAM-SHA-512=[password=x]"],
     "Unexpected config names: SCRAM-SHA-512"),
    ([*USER, "--add-config", "SCRAM-SHA-256=[iterations=8192]"], "SCRAM-SHA-256: the password is missing"),
    ([*USER, "--add-config", "SCRAM-SHA-256=[iterations=lots,password=x]"],
     "SCRAM-SHA-256: invalid credential property"),
    ([*USER, "--add-config", "SCRAM-SHA-256=[password=]"], "SCRAM-SHA-256: the password is empty"),
    ([*USER, "--add-config", "SCRAM-SHA-512=[iterations=100,password=x]"],
     "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-512"),
    ([*USER, "--add-config", "SCRAM-SHA-256=[password=x],producer_byte_rate=1"],
     "Cannot alter both quota and SCRAM credential configs simultaneously for 'users'."),
    (["--entity-type", "users", "--entity-default", "--add-config", "SCRAM-SHA-256=[password=x]"],
     "not allowed with User SCRAM Credentials"),
    ([*USER, "--add-config", "producer_byte_rate=lots"], "'lots' is not a number"),
    ([*USER, "--add-config", "producer_byte_rate=1", "--delete-config", "producer_byte_rate"],
     "producer_byte_rate: both added and deleted"),
    (["--entity-type", "users", "--entity-name", "alice"], "--add-config or --delete-config"),
    (["--entity-type", "users"], "one --entity-name or --entity-default"),
    (["--entity-type", "users", "--add-config", "producer_byte_rate=1"], "one --entity-name or --entity-default"),
    (["--entity-type", "ips", "--entity-name", "1.2.3.4", "--add-config", "producer_byte_rate=1"],
     "Only connection quota configs can be added for 'ips'. Unexpected config names: producer_byte_rate"),
    (["--entity-type", "ips", "--entity-name", "not-an-ip", "--add-config", "connection_creation_rate=1"],
     "must be a valid IP"),
    (["--entity-type", "ips", "--entity-name", "1.2.3.4", "--entity-type", "users", "--entity-name", "a",
      "--add-config", "connection_creation_rate=1"], "Only 'users' and 'clients' entity types"),
    (["--entity-type", "users", "--user", "alice", "--add-config", "producer_byte_rate=1"],
     "should not be used in conjunction with specific entity flags"),
    (["--entity-type", "users", "--entity-name", "a", "--entity-type", "topics", "--entity-name", "t",
      "--add-config", "producer_byte_rate=1"], "Only 'users' and 'clients' entity types may be specified together"),
    (["--entity-type", "topics", "--entity-name", "t", "--entity-type", "brokers", "--add-config", "a=1"],
     "Only 'users' and 'clients' entity types may be specified together"),
])
def test_alter_usage_errors_name_the_key(args, message):
    result = run("-b", "127.0.0.1:1", "--alter", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_password_is_never_echoed_in_an_error():
    result = run("-b", "127.0.0.1:1", "--alter", *USER, "--add-config", "SCRAM-SHA-256=[iterations=x,password=hunter2]")
    assert result.exit_code == 2 and "hunter2" not in result.output


def test_describe_usage_errors():
    result = run("-b", "127.0.0.1:1", "--describe", *USER, "--add-config", "producer_byte_rate=1")
    assert result.exit_code == 2 and "go with --alter" in result.output
    result = run("-b", "127.0.0.1:1", "--describe", *USER, "--all")
    assert result.exit_code == 2 and "--all is for topics and brokers" in result.output
    result = run("-z", "127.0.0.1:1", "--describe", "--entity-type", "topics")
    assert result.exit_code == 2 and "--zookeeper is for users, clients and ips" in result.output


# -- against a broker ---------------------------------------------------------------------------------------------
def _with_broker(tmp_path: Any, steps: Any) -> None:
    """Run ``steps(bootstrap)`` (the CLI, in a thread: the broker serves on this event loop)."""
    async def main() -> None:
        async with running_broker(tmp_path / "logs", **{"offsets.topic.num.partitions": "1"}) as b:
            host, port = b.server.bound[0]
            await asyncio.to_thread(steps, f"{host}:{port}")
    inprocess_broker.run(main())


def _ok(*args: str) -> list[str]:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_quotas_round_trip_as_kafka_configs_prints_them(tmp_path):
    def steps(b: str) -> None:
        assert _ok("-b", b, "--describe", *USER) == []
        assert _ok("-b", b, "--alter", *USER, "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048") == [
            "Completed updating config for user alice."]
        assert _ok("-b", b, "--describe", *USER) == [
            "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"]
        pair = [*USER, "--entity-type", "clients", "--entity-name", "app"]
        assert _ok("-b", b, "--alter", *pair, "--add-config", "request_percentage=50") == [
            "Completed updating config for user alice."]
        assert _ok("-b", b, "--alter", "--entity-type", "clients", "--entity-default", "--add-config",
                   "producer_byte_rate=10000000") == ["Completed updating default config for clients in the cluster."]
        assert _ok("-b", b, "--describe", *pair) == [
            "Quota configs for user-principal 'alice', client-id 'app' are request_percentage=50.0"]
        assert _ok("-b", b, "--describe", "--entity-type", "clients") == [
            "Quota configs for the default client-id are producer_byte_rate=1.0E7"]
        assert _ok("-b", b, "--describe", "--client-defaults") == [
            "Quota configs for the default client-id are producer_byte_rate=1.0E7"]
        (line,) = _ok("-b", b, "--describe", *USER, "--json")
        assert json.loads(line) == {
            "entities": [{"entity": {"user": "alice"},
                          "configs": {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0}}],
            "scram_credentials": []}
        assert _ok("-b", b, "--alter", *USER, "--delete-config", "producer_byte_rate") == [
            "Completed updating config for user alice."]
        assert _ok("-b", b, "--describe", *USER) == [
            "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0"]
        refused = run("-b", b, "--alter", *USER, "--delete-config", "producer_byte_rate")
        assert refused.exit_code == 1 and "Invalid config(s): producer_byte_rate" in refused.output
        assert _ok("-b", b, "--alter", "--entity-type", "ips", "--entity-name", "1.2.3.4", "--add-config",
                   "connection_creation_rate=10") == ["Completed updating config for ip 1.2.3.4."]
        assert _ok("-b", b, "--describe", "--entity-type", "ips") == [
            "Quota configs for ip '1.2.3.4' are connection_creation_rate=10.0"]
    _with_broker(tmp_path, steps)


def test_scram_round_trip_as_kafka_configs_prints_it(tmp_path):
    def steps(b: str) -> None:
        assert _ok("-b", b, "--alter", *USER, "--add-config",
                   "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]"
                   ) == ["Completed updating config for user alice."]
        assert _ok("-b", b, "--describe", *USER) == [
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
            "SCRAM-SHA-512=iterations=4096"]
        (line,) = _ok("-b", b, "--describe", "--entity-type", "users", "--json")
        assert json.loads(line)["scram_credentials"] == [{"user": "alice", "error": None, "credentials": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 8192}, {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}]
        assert _ok("-b", b, "--alter", *USER, "--delete-config", "SCRAM-SHA-512") == [
            "Completed updating config for user alice."]
        assert _ok("-b", b, "--describe", "--entity-type", "users") == [
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"]
        # the credentials and the quotas share the user's entity; the client filter leaves SCRAM out
        _ok("-b", b, "--alter", *USER, "--add-config", "producer_byte_rate=1024")
        assert _ok("-b", b, "--describe", *USER) == [
            "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0",
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"]
        assert _ok("-b", b, "--describe", "--entity-type", "users", "--entity-default") == []
        gone = run("-b", b, "--alter", *USER, "--delete-config", "SCRAM-SHA-512")
        assert gone.exit_code == 1
    _with_broker(tmp_path, steps)


def test_runbooks_kafka_configs_lines_run_as_written(tmp_path):
    """The command lines of issue 27, word for word after `kctl configs`."""
    def steps(b: str) -> None:
        lines = [
            ["--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "producer_byte_rate=1024,consumer_byte_rate=2048"],
            ["--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
             "clients", "--entity-name", "app", "--add-config", "request_percentage=50"],
            ["--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-default", "--add-config",
             "producer_byte_rate=4096"],
            ["--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice",
             "--delete-config", "producer_byte_rate"],
            ["--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]"],
            ["--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice",
             "--delete-config", "SCRAM-SHA-512"],
            ["--bootstrap-server", b, "--describe", "--entity-type", "users", "--entity-name", "alice"],
            ["--bootstrap-server", b, "--describe", "--entity-type", "clients"],
            ["--bootstrap-server", b, "--describe", "--entity-type", "users"],
            ["--bootstrap-server", b, "--alter", "--entity-type", "ips", "--entity-name", "1.2.3.4", "--add-config",
             "connection_creation_rate=10"],
        ]
        for args in lines:
            _ok(*args)
        assert _ok("--bootstrap-server", b, "--describe", "--entity-type", "users") == [
            "Quota configs for the default user-principal are producer_byte_rate=4096.0",
            "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0",
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"]
    _with_broker(tmp_path, steps)


def test_offline_in_zookeeper_round_trip(monkeypatch):
    """-z: the nodes written as kafka-configs --zookeeper writes them (here a standalone broker's store with the
    same paths, in place of ZooKeeper)."""
    from kcli.broker.security.local_store import LocalMetadataStore
    from kcli.zk import scram as zk_scram

    class Store(LocalMetadataStore):
        def close(self) -> None:  # one store for every command of the test
            pass

    store = Store(None)
    monkeypatch.setattr(zk_scram, "ZkScramStore", lambda *a, **k: store)
    z = ["-z", "zk1:2181"]
    assert _ok(*z, "--alter", *USER, "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]") == [
        "Completed updating config for user alice."]
    assert _ok(*z, "--alter", "--user", "alice", "--client", "app", "--add-config", "consumer_byte_rate=2048") == [
        "Completed updating config for client app."]
    assert _ok(*z, "--alter", *USER, "--add-config", "producer_byte_rate=1024") == [
        "Completed updating config for user alice."]
    assert _ok(*z, "--describe", "--entity-type", "users", "--entity-name", "alice") == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0",
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"]
    assert _ok(*z, "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients") == [
        "Quota configs for user-principal 'alice', client-id 'app' are consumer_byte_rate=2048.0"]
    config = json.loads(store.get("/config/users/alice")[0])["config"]
    assert config["producer_byte_rate"] == "1024" and config["SCRAM-SHA-256"].startswith("salt=")
