"""Imports flow one way: records -> storage -> tools -> cli (shared/docs/style-anchors.md 8.1)."""

from __future__ import annotations

import ast

import pytest

from support import REPO

FORBIDDEN = {
    "kcli.records": ("kcli.storage", "kcli.tools", "kcli.cli", "kcli.protocol", "kcli.broker", "kcli.zk", "kcli.spark",
                     "typer", "rich", "kazoo", "pyspark", "socket", "asyncio"),
    "kcli.storage": ("kcli.tools", "kcli.cli", "kcli.protocol", "kcli.broker", "kcli.zk", "kcli.spark", "typer", "rich",
                     "kazoo", "pyspark", "socket", "asyncio"),
    "kcli.tools": ("kcli.cli", "kcli.broker", "kcli.spark", "kcli.zk", "typer", "rich", "kazoo", "pyspark", "socket",
                   "asyncio"),
    "kcli.spark": ("kcli.cli", "kcli.broker", "kcli.zk", "typer", "rich", "kazoo"),
    "kcli.zk": ("kcli.cli", "kcli.broker", "kcli.spark", "typer", "rich", "pyspark"),
    "kcli.client": ("kcli.cli", "kcli.broker", "kcli.spark", "kcli.zk", "kcli.tools", "typer", "rich", "kazoo",
                    "pyspark"),
}


def _modules():
    for path in sorted((REPO / "kcli").rglob("*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        yield name.removesuffix(".__init__"), path


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
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


def test_nothing_outside_cli_imports_cli():
    for name, path in _modules():
        if name.startswith("kcli.cli") or name == "kcli.__main__":
            continue
        assert not any(i.startswith("kcli.cli") for i in _imports(path)), name
