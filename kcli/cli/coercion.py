"""Option and argument values converted without pydantic, for the values whose conversion is plain.

typer (0.29) converts every value a command receives, defaults included, through a pydantic TypeAdapter built
on first use: importing pydantic and building the adapters costs 0.1-0.3 s, more than the rest of a small
``kctl verify``. Each parameter instead gets a converter that answers the plain cases itself: an int or float given as such or as plain ASCII digits (within the option's
min/max), a str, a Path from a str, a choice of an Enum or Literal, and lists of those. Anything else, and every
value it would refuse, goes to typer's own converter, which then gives exactly typer's result or message:
the shortcut only decides what typer would decide the same way (tests/cli/test_coercion.py compares the two).

``install()`` puts the shortcut in front of typer's converter; with a typer that does not convert through
pydantic (no ``get_runtime_param`` on its parameters) it changes nothing.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

_UNDECIDED = object()  # the shortcut does not know: typer's converter decides
_INT = re.compile(r"[+-]?[0-9]+\Z")  # ASCII only: int() also takes other scripts' digits, pydantic does not
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


def _in_range(number: Any, info: Any) -> Any:
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return _UNDECIDED  # typer words the refusal
    return number


def _leaf(annotation: Any, info: Any) -> Any:
    """A converter value -> result (or _UNDECIDED) for one plain annotation; None if it is not plain."""
    if getattr(info, "parser", None) is not None or getattr(info, "clamp", False):
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum) or get_origin(annotation) is Literal:
        from typer._param_types import coerce_cli_choice

        choices = tuple(annotation) if isinstance(annotation, type) else get_args(annotation)
        case_sensitive = info.case_sensitive

        def choice(value: Any, ctx: Any, param: Any) -> Any:
            try:
                return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
            except Exception:  # noqa: BLE001 - typer words the refusal
                return _UNDECIDED

        return choice
    if annotation is int:
        def integer(value: Any, ctx: Any, param: Any) -> Any:
            if type(value) is int:
                return _in_range(value, info)
            if type(value) is str and len(value) <= 30 and _INT.match(value):
                return _in_range(int(value), info)
            return _UNDECIDED

        return integer
    if annotation is float:
        def floating(value: Any, ctx: Any, param: Any) -> Any:
            if type(value) is float or type(value) is int:
                return _in_range(float(value), info)
            if type(value) is str and len(value) <= 60 and _FLOAT.match(value):
                return _in_range(float(value), info)
            return _UNDECIDED

        return floating
    if annotation is str:
        return lambda value, ctx, param: value if type(value) is str else _UNDECIDED
    if annotation is Path and getattr(info, "path_type", None) is None:
        from typer._param_types import coerce_cli_path

        def path(value: Any, ctx: Any, param: Any) -> Any:
            if type(value) is str and value:
                value = Path(value)  # what pydantic's Path makes of a non-empty str
            elif not isinstance(value, Path):
                return _UNDECIDED
            try:  # typer's own checks (exists, file_okay, ...): a Path is not given to pydantic again
                return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)
            except Exception:  # noqa: BLE001 - typer words the refusal
                return _UNDECIDED

        return path
    return None


class _Shortcut:
    """A parameter's converter (typer's RuntimeParam contract: ``coerce(value, param, ctx)``)."""

    def __init__(self, leaf: Any, is_list: bool) -> None:
        self.leaf = leaf
        self.is_list = is_list

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        result = _UNDECIDED
        if self.is_list:
            if multi and isinstance(value, (list, tuple)):
                items = [self.leaf(item, ctx, param) for item in value]
                if all(item is not _UNDECIDED for item in items):
                    result = items
        elif not multi:
            result = self.leaf(value, ctx, param)
        if result is _UNDECIDED:
            from typer._coercion import build_runtime_param

            param._runtime_param = typer_converter = build_runtime_param(param.type_descriptor)
            return typer_converter.coerce(value, param=param, ctx=ctx)
        return result


def _shortcut(param: Any) -> _Shortcut | None:
    """The parameter's shortcut: its plain values, and None, without typer's converter."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(descriptor, "file_annotation", None) is not None:
        return None
    annotation, info = descriptor.annotation, descriptor.parameter_info
    is_list = get_origin(annotation) is list
    if is_list:
        (annotation,) = get_args(annotation) or (None,)
    leaf = _leaf(annotation, info)
    if leaf is None:  # no shortcut for the value itself, but still for None (most options' default)
        leaf = _undecided
    return _Shortcut(leaf, is_list)


def _undecided(value: Any, ctx: Any, param: Any) -> Any:
    return _UNDECIDED


def install() -> None:
    """Make typer's parameters try the shortcut before building their pydantic converter (idempotent).

    Every parameter of the process: the commands' own, and those typer and click add when a command runs
    (--help, --install-completion), which no walk over the built commands would reach in time."""
    try:
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - another typer: its own conversion stays
        return
    typer_builds = getattr(_TyperParameter, "get_runtime_param", None)
    if typer_builds is None or getattr(typer_builds, "kcli_shortcut", False):
        return

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is None:
            self._runtime_param = _shortcut(self)
        if self._runtime_param is None:
            return typer_builds(self)
        return self._runtime_param

    get_runtime_param.kcli_shortcut = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param
