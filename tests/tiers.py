"""Test tiers: every test is marked by what it starts, so the in-process tiers run alone and the tiers that start
processes run apart (scripts/test.sh).

- ``broker_process``: one or more `kctl broker run` processes (standalone, or a single ZooKeeper-mode broker);
- ``cluster``: a ZooKeeper-mode cluster of broker processes (implies ``broker_process`` and ``zookeeper``);
- ``zookeeper``: the session's ZooKeeper (a real server), e.g. in-process controllers and registries;
- ``spark``: a SparkSession or a standalone Spark cluster.

Tests get the marks from the fixtures they use (``FIXTURE_TIERS``, through the whole fixture closure) or from a
module's ``pytestmark``. The launchers in the support modules call ``require()`` as they start something, so a test
that starts what its marks do not say fails at once, naming the mark it lacks: the marks cannot drift.
"""

from __future__ import annotations

TIERS = ("broker_process", "cluster", "zookeeper", "spark")
PROCESS_TIERS = " or ".join(TIERS)
SPARK_TIMEOUT_S = 900

# fixture name (tests/conftest.py, tests/broker/conftest.py) -> the tiers a test using it is in
FIXTURE_TIERS: dict[str, tuple[str, ...]] = {
    "zookeeper": ("zookeeper",),
    "s3_store": ("broker_process",),  # tests/conftest.py: a SeaweedFS S3 server (a process, started per session)
    "spark": ("spark",),
    "broker": ("broker_process",),  # tests/broker/conftest.py, and the module fixtures of that name
    "make_broker": ("broker_process",),
    "sweep_broker": ("broker_process",),  # test_api_sweep.py
    "replay_broker": ("broker_process",),  # test_captured_replay.py
    "stopped": ("broker_process",),  # test_groups_offline.py: a broker's log dir, written by a broker
}
# a mark -> the marks it implies
IMPLIES: dict[str, tuple[str, ...]] = {
    "cluster": ("broker_process", "zookeeper"),
    "zk": ("zookeeper",),  # the older name of the zookeeper tier
}

_current = None  # the pytest item being set up or run (None outside pytest, e.g. in bench/)


class TierError(AssertionError):
    pass


def set_current(item) -> None:
    global _current
    _current = item


def module_of(item) -> str:
    """A test's module path (its node id before the first ``::``)."""
    return item.nodeid.split("::")[0]


def current_module() -> str | None:
    """The module path of the test being set up or run (None outside pytest)."""
    return module_of(_current) if _current is not None else None


def tiers_of(item) -> set[str]:
    return {t for t in TIERS if item.get_closest_marker(t) is not None}


def require(tier: str, what: str) -> None:
    """Called by a launcher as it starts ``what``: the running test must be marked ``tier``."""
    item = _current
    if item is None or item.get_closest_marker(tier) is not None:
        return
    raise TierError(f"{item.nodeid} starts {what} but is not marked {tier!r}: add `pytestmark = "
                    f"pytest.mark.{tier}` to its module (or use a fixture of that tier), see tests/tiers.py")


def mark(items, pytest) -> None:
    """Add the marks the fixture closure and the implications give (pytest_collection_modifyitems)."""
    for item in items:
        wanted = {tier for name in item.fixturenames for tier in FIXTURE_TIERS.get(name, ())}
        wanted |= {t for t in TIERS if item.get_closest_marker(t) is not None}
        for alias, implied in IMPLIES.items():
            if alias in wanted or item.get_closest_marker(alias) is not None:
                wanted |= set(implied)
        for tier in sorted(wanted):
            if item.get_closest_marker(tier) is None:
                item.add_marker(getattr(pytest.mark, tier))
        if "spark" in wanted and item.get_closest_marker("timeout") is None:
            # A Spark job that takes ~30 s on a quiet machine took over 300 s (pyproject's timeout) with the load
            # average at 11; pytest-timeout then cut a py4j call in half and every later call of the session's
            # gateway read someone else's answer. A hung test still fails, later.
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))
