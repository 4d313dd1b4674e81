"""The value parsers of server.properties keys (each raises ValueError with what it expected), apart from
kcli.broker.config so that the config tables of other listeners (kcli.broker.kafka07_config) share them without
importing the config module back."""

from __future__ import annotations

from collections.abc import Callable

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def bool_value(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def int_value(low: int, high: int = LONG_MAX) -> Callable[[str], int]:
    """A parser of integers in [low, high]."""
    def parse(text: str) -> int:
        value = int(text.strip())
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def str_value(text: str) -> str:
    return text.strip()
