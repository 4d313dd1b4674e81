"""`kctl quotas` usage errors (exit 2, one line on stderr, nothing on stdout) before anything is contacted, and
the offline path on a standalone broker's store layout is covered by tests/broker/test_quotas*.py."""

from __future__ import annotations

import pytest

import kctl_fork

B = ["-b", "127.0.0.1:1"]  # never reached: every case fails before connecting


@pytest.mark.parametrize("args, message", [
    (["alter", "--add-config", "producer_byte_rate=1"], "name the entity"),
    (["alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "producer_byte_rate=1"],
     "quotas are kept for users and clients"),
    (["alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
     "one --entity-name or --entity-default per --entity-type"),
    (["alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "u", "--entity-default",
      "--add-config", "producer_byte_rate=1"], "ambiguous"),
    (["alter", "--user", "u"], "nothing to change"),
    (["alter", "--user", "u", "--add-config", "producer_byte_rate"], "is not key=value"),
    (["alter", "--user", "u", "--add-config", "producer_byte_rate=lots"], "is not a number"),
    (["alter", "--user", "u", "--user-defaults", "--add-config", "producer_byte_rate=1"], "not both"),
    (["alter", "--user", "", "--add-config", "producer_byte_rate=1"], "is empty"),
    (["describe", "--entity-type", "groups"], "quotas are kept for users and clients"),
])
def test_usage_errors_exit_2(args, message):
    proc = kctl_fork.run("quotas", *B, *args, env={"KCTL_ZOOKEEPER": None})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert message in proc.stderr and proc.stdout == ""
    assert "Traceback" not in proc.stderr


def test_no_target_is_a_usage_error():
    proc = kctl_fork.run("quotas", "describe", env={"KCTL_ZOOKEEPER": None, "KCTL_BOOTSTRAP_SERVER": None})
    assert proc.returncode == 2 and "no Kafka given" in proc.stderr


def test_an_unreachable_broker_exits_3():
    proc = kctl_fork.run("quotas", *B, "describe", "--timeout", "2", env={"KCTL_ZOOKEEPER": None})
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
