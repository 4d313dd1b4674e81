"""--command-config FILE and -X key=value on every online command (parsing and settings only: nothing listens on
the addresses used). A bad setting is a usage error (2) before any connection; settings read but not used are
warned about on stderr; the options go before or after the subcommand alike."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from broker_support import free_port
from kcli.cli.app import app

CLEAN_ENV = {"KCTL_BOOTSTRAP_SERVER": None, "KCTL_ZOOKEEPER": None, "KCTL_ZOOKEEPER_AUTH": None, "COLUMNS": "200"}


def kctl(*args: str):
    result = CliRunner().invoke(app, list(args), env=CLEAN_ENV)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def nobody() -> str:
    return f"127.0.0.1:{free_port()}"

ONLINE = ["groups list", "groups describe g", "topics list", "topics describe t", "transactions list",
          "offsets for-time now orders", "users list", "acls --list"]


@pytest.mark.parametrize("line", ONLINE)
def test_every_online_command_takes_the_options(line, tmp_path):
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=PLAINTEXT\nfavourite.colour=blue\n")
    b = nobody()
    result = kctl(*line.split(), "-b", b, "--command-config", str(config), "-X", "client.id=x")
    assert result.exit_code == 3, result.output  # the settings were read; the broker is not there
    assert "warning: favourite.colour: not a security setting; ignored" in result.stderr
    assert f"cannot connect to the Kafka broker at {b}" in result.stderr


@pytest.mark.parametrize("line", ONLINE)
def test_a_bad_setting_is_a_usage_error(line):
    result = kctl(*line.split(), "-b", nobody(), "-X", "security.protocol=SASL_SSL")
    assert result.exit_code == 2, result.output
    assert "security.protocol=SASL_SSL needs sasl.mechanism" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ["topics", "-X", "security.protocol=SSL", "-X", "ssl.ca.location=/nonexistent/ca.crt", "list"],
    ["topics", "list", "-X", "security.protocol=SSL", "--command-config", "/nonexistent/client.properties"],
    ["groups", "--command-config=/nonexistent/client.properties", "list"],
    ["groups", "-Xsecurity.protocol=bogus", "list"],
])
def test_before_or_after_the_subcommand(args):
    result = kctl(*args, "-b", nobody())
    assert result.exit_code == 2, result.output
    assert "/nonexistent" in result.stderr or "security.protocol='bogus'" in result.stderr


def test_x_needs_key_value():
    result = kctl("topics", "list", "-b", nobody(), "-X", "security.protocol")
    assert result.exit_code == 2
    assert "-X expects key=value" in result.stderr


def test_help_shows_the_options():
    result = kctl("groups", "describe", "--help")
    assert "--command-config" in result.output and "-X" in result.output
