"""Imports flow one way: records -> storage -> tools -> cli (shared/docs/style-anchors.md 8.1)."""

from __future__ import annotations

import ast
import functools

import pytest

from support import REPO

FORBIDDEN = {
    "kcli.records": ("kcli.storage", "kcli.tools", "kcli.cli", "kcli.protocol", "kcli.broker", "kcli.zk", "kcli.spark",
                     "typer", "rich", "kazoo", "pyspark", "socket", "asyncio"),
    # The sans-io wire layer: Kafka's messages and framing, no sockets, no event loop, nothing above it.
    "kcli.protocol": ("kcli.storage", "kcli.tools", "kcli.cli", "kcli.broker", "kcli.zk", "kcli.spark", "kcli.client",
                      "typer", "rich", "kazoo", "pyspark", "socket", "asyncio", "ssl", "selectors"),
    "kcli.storage": ("kcli.tools", "kcli.cli", "kcli.protocol", "kcli.broker", "kcli.zk", "kcli.spark", "typer", "rich",
                     "kazoo", "pyspark", "socket", "asyncio"),
    "kcli.tools": ("kcli.cli", "kcli.broker", "kcli.spark", "kcli.zk", "typer", "rich", "kazoo", "pyspark", "socket",
                   "asyncio"),
    "kcli.spark": ("kcli.cli", "kcli.broker", "kcli.zk", "typer", "rich", "kazoo"),
    "kcli.zk": ("kcli.cli", "kcli.broker", "kcli.spark", "typer", "rich", "pyspark"),
    "kcli.client": ("kcli.cli", "kcli.broker", "kcli.spark", "kcli.zk", "kcli.tools", "typer", "rich", "kazoo",
                    "pyspark"),
    # Local clusters start brokers and ZooKeeper as processes: no broker internals, no kazoo of their own.
    "kcli.cluster": ("kcli.cli", "kcli.spark", "kcli.tools", "typer", "rich", "kazoo", "pyspark", "asyncio"),
    # The client side of TLS (an ssl.SSLContext from kcli.protocol.security's settings), under both the admin
    # client and the broker's inter-broker connections: stdlib ssl, cryptography and kcli.protocol only.
    "kcli.tls": ("kcli.storage", "kcli.tools", "kcli.cli", "kcli.broker", "kcli.zk", "kcli.spark", "kcli.client",
                 "kcli.cluster", "typer", "rich", "kazoo", "pyspark", "asyncio", "socket"),
    # The launcher of ZooKeeper itself needs no ZooKeeper client: it probes with a four-letter word.
    "kcli.zk.server": ("kazoo",),
    # Process and port helpers of the launchers: stdlib and kcli.errors only.
    "kcli.processes": ("kcli.records", "kcli.storage", "kcli.tools", "kcli.cli", "kcli.protocol", "kcli.broker",
                       "kcli.zk", "kcli.spark", "kcli.client", "kcli.cluster", "typer", "rich", "kazoo", "pyspark",
                       "asyncio"),
}
# Nothing the cluster runner starts or uses may depend on it.
for _layer in ("kcli.records", "kcli.storage", "kcli.tools", "kcli.spark", "kcli.zk", "kcli.client"):
    FORBIDDEN[_layer] += ("kcli.cluster",)
# The broker is Kafka's: it may use ZooKeeper (kcli.zk, as KafkaServer uses KafkaZkClient), never the offline
# tools, the admin client, Spark or the CLI; kcli.zk never imports the broker (see the rule above).
FORBIDDEN["kcli.broker"] = ("kcli.cluster", "kcli.cli", "kcli.tools", "kcli.client", "kcli.spark", "typer", "rich",
                            "pyspark")


def _modules():
    for path in sorted((REPO / "kcli").rglob("*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        yield name.removesuffix(".__init__"), path


@functools.cache
def _import_nodes(path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """Every import statement of a module, parsed once for all the rules (the package has hundreds)."""
    return tuple(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom)))


def _imports(path):
    for node in _import_nodes(path):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("name,path", list(_modules()), ids=lambda x: str(x) if isinstance(x, str) else "")
def test_layer_rules(name, path):
    for layer, banned in FORBIDDEN.items():
        if name == layer or name.startswith(layer + "."):
            for imported in _imports(path):
                assert not any(imported == b or imported.startswith(b + ".") for b in banned), (
                    f"{name} imports {imported}, which its layer may not")


def test_cluster_runner_uses_only_the_broker_config_and_zookeeper_helpers():
    for name, path in _modules():
        if name == "kcli.cluster" or name.startswith("kcli.cluster."):
            for imported in _imports(path):
                if imported.startswith(("kcli.broker", "kcli.zk")):
                    assert imported in ("kcli.broker.config", "kcli.zk.server", "kcli.zk.cleanup",
                                        "kcli.zk.scram_setup"), (
                        f"{name} imports {imported}")


def test_nothing_outside_cli_imports_cli():
    for name, path in _modules():
        if name == "kcli.cli" or name.startswith("kcli.cli.") or name == "kcli.__main__":
            continue
        # (kcli.client and kcli.cluster also start with "kcli.cl": match the package name exactly)
        assert not any(i == "kcli.cli" or i.startswith("kcli.cli.") for i in _imports(path)), name


def _import_graph(prefix: str = "kcli") -> dict[str, set[str]]:
    """kcli module -> the kcli modules it imports, counting every import statement (module level, inside
    functions, under TYPE_CHECKING, relative ones). ``from package import name`` is an edge to the submodule
    ``name`` where there is one (compiled extensions, named by their C source, count as modules), else to the
    package's ``__init__``."""
    all_modules = dict(_modules())
    compiled = {".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "kcli").rglob("*.c")}
    known = set(all_modules) | compiled
    modules = {name: path for name, path in all_modules.items() if name == prefix or name.startswith(prefix + ".")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _import_nodes(path):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _storage_graph() -> dict[str, set[str]]:
    return _import_graph("kcli.storage")


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_in_the_package():
    """No circle anywhere in kcli's import graph, lazy imports inside functions included."""
    graph = _import_graph()
    assert len(graph) > 100, "kcli modules not found"
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_storage_layers_inside_the_package():
    """log -> loader -> recovery: the writer may use the loader and recovery, never the other way round."""
    graph = _storage_graph()
    assert "kcli.storage.log" not in graph["kcli.storage.recovery"]
    assert "kcli.storage.recovery" not in graph["kcli.storage.log"]
    assert "kcli.storage.log" not in graph["kcli.storage.loader"]
    for codec_level in ("kcli.storage.validator", "kcli.storage.producer_state", "kcli.storage.log_config"):
        assert not graph[codec_level] & {"kcli.storage.log", "kcli.storage.loader", "kcli.storage.recovery"}, codec_level
