"""Machine-output conventions shared by the tools' JSON: how bytes become JSON values."""

from __future__ import annotations

import base64
from enum import Enum


class BytesEncoding(Enum):
    """How key/value bytes appear in --json output.

    AUTO: null, a JSON string when the bytes are valid UTF-8, else ``{"base64": "..."}``.
    The forced modes always give a plain string (null stays null): the caller chose the reading.
    """

    AUTO = "auto"
    UTF8 = "utf8"
    HEX = "hex"
    BASE64 = "base64"


def encode_bytes(data: bytes | None, mode: BytesEncoding = BytesEncoding.AUTO):
    if data is None:
        return None
    if mode is BytesEncoding.AUTO:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode("ascii")}
    if mode is BytesEncoding.UTF8:
        return data.decode("utf-8", "replace")
    if mode is BytesEncoding.HEX:
        return data.hex()
    return base64.b64encode(data).decode("ascii")
