"""-b/-z before or after the subcommand of every command group alike, an option on the command line beating the
environment, an exported KCTL_BOOTSTRAP_SERVER that never breaks an offline or ZooKeeper-only invocation, and
kafka-consumer-groups' spellings: parsing only (nothing listens on the addresses used; refusing them is quick)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker_support import free_port
from kcli.cli.app import app
from support import REPO

SAMPLES = REPO / "sample-logs" / "kafka-logs"
CLEAN_ENV = {"KCTL_BOOTSTRAP_SERVER": None, "KCTL_ZOOKEEPER": None, "KCTL_ZOOKEEPER_AUTH": None, "COLUMNS": "200"}


def kctl(*args: str, env: dict | None = None):
    result = CliRunner().invoke(app, list(args), env={**CLEAN_ENV, **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def nobody() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.mark.parametrize("line", [
    "groups -b {b} list", "groups list -b {b}", "groups --bootstrap-server={b} list", "groups -b{b} list",
    "groups --timeout 2 -b {b} describe g", "topics -b {b} list", "topics list -b {b}",
    "transactions -b {b} list", "transactions list -b {b}", "transactions -b {b} --timeout 2 find-hanging",
    "offsets -b {b} for-time now orders", "offsets -z {z} -b {b} migrate", "offsets migrate -z {z} -b {b}",
], ids=lambda line: line.replace(" {b}", "").replace(" {z}", ""))
def test_bootstrap_server_before_or_after_the_subcommand(line):
    """Every group takes -b where kafka-topics/kafka-transactions runbooks put it; the subcommand is reached (it
    tries the broker: 3, unreachable) instead of a usage error (2, "No such option: -b")."""
    b = nobody()
    result = kctl(*line.format(b=b, z=nobody()).split())
    assert result.exit_code == 3, result.output
    assert f"cannot connect to the Kafka broker at {b}" in result.stderr


@pytest.mark.parametrize("line", ["zk -z {z} brokers", "zk brokers -z {z}", "zk --zookeeper={z} --timeout 1 topics",
                                  "zk -z {z} --auth u:p consumers", "offsets -z {z} export",
                                  "offsets --timeout 1 export -z {z}"],
                         ids=lambda line: line.replace(" {z}", ""))
def test_zookeeper_before_or_after_the_subcommand(line):
    z = nobody()
    result = kctl(*line.format(z=z).split(), "--timeout", "1")
    assert result.exit_code == 3, result.output
    assert f"ZooKeeper unreachable at {z}" in result.stderr


def test_an_option_before_the_subcommand_beats_the_environment_and_the_later_one_wins():
    given, exported, later = nobody(), nobody(), nobody()
    result = kctl("groups", "-b", given, "list", env={"KCTL_BOOTSTRAP_SERVER": exported})
    assert result.exit_code == 3 and given in result.stderr and exported not in result.stderr
    result = kctl("transactions", "-b", given, "list", "-b", later)
    assert result.exit_code == 3 and later in result.stderr and given not in result.stderr
    z, exported_z = nobody(), nobody()
    result = kctl("zk", "-z", z, "brokers", "--timeout", "1", env={"KCTL_ZOOKEEPER": exported_z})
    assert result.exit_code == 3 and z in result.stderr and exported_z not in result.stderr
    # still a usage error where the subcommand has no such option, or names no subcommand
    assert "No such option: -b" in kctl("zk", "brokers", "-b", given).output
    assert "brokers takes no -b" in kctl("zk", "-b", given, "brokers").output
    assert "for-time takes no -z" in kctl("offsets", "-z", given, "for-time", "now", "orders").output
    assert "No such command" in kctl("topics", "-b", given, "lst").output


def test_exported_bootstrap_server_never_breaks_zookeeper_only_or_offline_commands(tmp_path):
    env = {"KCTL_BOOTSTRAP_SERVER": nobody()}
    # zk consumers without a GROUP: a ZooKeeper-only listing, not "--bootstrap-server needs a GROUP"
    z = nobody()
    result = kctl("zk", "consumers", "-z", z, "--timeout", "1", env=env)
    assert result.exit_code == 3 and f"ZooKeeper unreachable at {z}" in result.stderr, result.output
    # --log-dir: offline as without the variable, not "give --bootstrap-server or --log-dir, not both"
    empty = tmp_path / "logs"
    empty.mkdir()
    for line in (["groups", "list"], ["groups", "describe", "g"], ["groups", "export", "g"],
                 ["offsets", "export", "--from", "kafka"]):
        result, alone = kctl(*line, "--log-dir", str(empty), env=env), kctl(*line, "--log-dir", str(empty))
        assert "not both" not in result.stderr and alone.exit_code != 2, (line, result.output)
        assert (result.exit_code, result.output) == (alone.exit_code, alone.output), line
    result = kctl("offsets", "migrate", "-z", z, "--log-dir", str(empty), "--offsets-partitions", "1", "--timeout", "1",
                  env=env)
    assert result.exit_code == 3 and f"ZooKeeper unreachable at {z}" in result.stderr, result.output
    # ... a given -b still conflicts with --log-dir
    assert "not both" in kctl("groups", "list", "-b", nobody(), "--log-dir", str(empty)).stderr
    # for-time on a log dir stays offline (the same answer as without the variable)
    offline = kctl("offsets", "for-time", "-2", "--json", str(SAMPLES / "payments-0"))
    assert offline.exit_code == 0, offline.output
    with_env = kctl("offsets", "for-time", "-2", "--json", str(SAMPLES / "payments-0"), env=env)
    assert with_env.exit_code == 0 and json.loads(with_env.stdout) == json.loads(offline.stdout), with_env.output
    # ... and with topics (no path) it is what the variable is for: online
    online = kctl("offsets", "for-time", "-2", "payments", env=env)
    assert online.exit_code == 3 and env["KCTL_BOOTSTRAP_SERVER"] in online.stderr, online.output


@pytest.mark.parametrize("line", [
    "groups -b {b} reset-offsets --group G --topic T --to-earliest --dry-run",
    "groups describe --group G -b {b}",
    "groups --bootstrap-server {b} --describe --group G --members",
    "groups --bootstrap-server {b} --group G --reset-offsets --topic T:0,1 --to-offset 5 --dry-run",
    "groups --bootstrap-server {b} --reset-offsets --all-groups --all-topics --shift-by -2 --export",
    "groups --bootstrap-server {b} --list", "groups --bootstrap-server {b} --delete --group G",
    "groups --bootstrap-server {b} --delete-offsets --group G --topic T",
    "groups -b {b} --describe --all-groups --state", "groups -b {b} export --group G --group H",
], ids=lambda line: line.replace(" {b}", ""))
def test_kafka_consumer_groups_spellings_parse(line):
    """Runbook lines copied from kafka-consumer-groups.sh reach the subcommand (3: no broker there)."""
    b = nobody()
    result = kctl(*line.format(b=b).split())
    assert result.exit_code == 3, result.output
    assert f"cannot connect to the Kafka broker at {b}" in result.stderr


def test_kafka_consumer_groups_spellings_usage_errors():
    b = nobody()
    both = kctl("groups", "reset-offsets", "--group", "G", "--topic", "T", "--to-earliest", "--dry-run", "--execute",
                "-b", b)
    assert both.exit_code == 2 and "--dry-run or --execute" in both.stderr
    assert kctl("groups", "-b", b, "--describe", "--list").exit_code == 2
    assert "--export" in kctl("groups", "reset-offsets", "-g", "G", "-t", "T", "--to-earliest", "--export",
                              "--json", "-b", b).stderr
    assert "one group" in kctl("groups", "delete-offsets", "G", "--group", "H", "-t", "T", "-b", b).stderr
    assert "name the group" in kctl("groups", "delete", "-b", b).stderr
