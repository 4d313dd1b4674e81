"""Every field the broker's handlers and kctl's admin client name when they build a message exists in some
version of that message (kio's schemas, kcli's own declarations, the legacy ones): a misspelt or dead field is
caught here, before a request path meets it (kcli.protocol.build_entity raises at run time too)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from collections import defaultdict
from functools import cache

import kio.schema

import kcli.protocol.schema as own_schemas
from kcli.protocol import legacy
from support import REPO

BUILDERS = ("build", "_build", "build_entity", "build_all")


@cache
def _fields_by_class() -> dict[str, set[str]]:
    fields: dict[str, set[str]] = defaultdict(set)

    def add(classes) -> None:
        for value in vars(classes).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and hasattr(value, "__api_key__"):
                fields[value.__name__].update(f.name for f in dataclasses.fields(value))

    for package in (kio.schema, own_schemas):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith((".request", ".response")):
                add(importlib.import_module(info.name))
    for namespace in legacy._CLASSES.values():
        add(namespace)
    return fields


def _calls():
    for path in sorted([*(REPO / "kcli/broker/handlers").glob("*.py"), *(REPO / "kcli/client").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in BUILDERS and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)):
                yield path.relative_to(REPO), node.lineno, node.args[1].value, [k.arg for k in node.keywords if k.arg]


def test_every_named_field_exists_in_some_version():
    fields = _fields_by_class()
    calls = list(_calls())
    assert len(calls) > 100
    unknown = [(str(path), line, cls, name) for path, line, cls, names in calls for name in names
               if name not in fields.get(cls, ())]
    assert not unknown, unknown


def test_the_check_sees_a_misspelt_field():
    fields = _fields_by_class()
    assert "committed_offset" in fields["OffsetCommitRequestPartition"]
    assert "commited_offset" not in fields["OffsetCommitRequestPartition"]
