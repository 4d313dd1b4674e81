"""kcli.zk.server: the ZooKeeper launcher's refusals (the session's `zookeeper` fixture exercises its start)."""

from __future__ import annotations

import socket

import pytest

from kcli.errors import PortInUseError, UsageError
from kcli.processes import free_port
from kcli.zk.server import ZooKeeperNotInstalledError, ZooKeeperServer, check_installed, find_java, serving


def test_missing_package_names_the_apt_command(tmp_path):
    try:
        find_java()
    except ZooKeeperNotInstalledError:
        pytest.skip("no Java here")
    server = ZooKeeperServer(tmp_path, jar=tmp_path / "zookeeper.jar")
    with pytest.raises(ZooKeeperNotInstalledError) as caught:
        server.launch()
    assert "apt-get install -y zookeeper" in str(caught.value) and caught.value.fix.endswith("zookeeper")
    assert server.proc is None and not (tmp_path / "zoo.cfg").exists()


def test_missing_java_names_the_apt_command(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install -y default-jre-headless"):
        check_installed()


def test_a_taken_port_is_a_usage_error(tmp_path):
    try:
        check_installed()
    except ZooKeeperNotInstalledError as exc:
        pytest.skip(exc.describe())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ZooKeeperServer(tmp_path, taken.getsockname()[1])
        with pytest.raises(PortInUseError) as caught:
            server.launch()
    assert isinstance(caught.value, UsageError) and server.proc is None


def test_srvr_probe(zookeeper):
    assert serving(zookeeper.port)
    assert not serving(free_port())
