"""kcat's ``-f`` format strings for dumped records, rendered to bytes (kcat writes keys and values raw).

Tokens (kcat's): ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%K`` key size, ``%s`` value,
``%S`` value size, ``%R`` value size as a big-endian int32, ``%T`` timestamp (ms), ``%h`` headers
(``name=value`` joined by ``,``; a null header value prints ``NULL``), ``%%``. kctl adds ``%c``, the batch's
compression codec (kcat has no ``%c``). Escapes in the text between tokens, as kcat converts them: ``\\n``
``\\r`` ``\\t``, ``\\xHH`` (hex), ``\\NNN`` (decimal; ``\\0NN`` octal), and ``\\`` before any other character
gives that character (``\\\\`` a backslash). Null keys and values print nothing, sizes -1 (kcat without -Z).
An unknown topic (a file outside a ``<topic>-<partition>`` directory) prints nothing, an unknown partition -1.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

from kcli.errors import UsageError
from kcli.records import Batch, Record
from kcli.tools.dump import DumpRecord, DumpRecords, Encodings, _codec_label
from kcli.tools.render import BytesEncoding

_TOKENS = frozenset("tpokKsSRThc")
_HEX = frozenset("0123456789abcdefABCDEF")


def _unescape(text: str) -> bytes:
    """kcat's conversion of ``\\`` sequences in the literal parts of a format string."""
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        c = text[i + 1]
        i += 2
        if c in "ntr":
            out.append({"n": 10, "t": 9, "r": 13}[c])
        elif c == "x":
            j = i
            while j < n and j < i + 2 and text[j] in _HEX:
                j += 1
            out.append(int(text[i:j], 16) & 0xFF if j > i else 0)
            i = j
        elif c.isascii() and c.isdigit():
            j = i - 1
            while j < n and j < i + 2 and text[j].isascii() and text[j].isdigit():
                j += 1
            digits = text[i - 1:j]
            try:
                value = int(digits, 8) if digits.startswith("0") and len(digits) > 1 else int(digits)
            except ValueError:  # 08, 09: not octal
                value = int(digits)
            out.append(value & 0xFF)
            i = j
        else:
            out += c.encode("utf-8", "surrogateescape")
    return bytes(out)


def parse_format(fmt: str) -> list[bytes | str]:
    """Literal bytes and token letters; a usage error names a bad token (kcat: "Unsupported formatter")."""
    parts: list[bytes | str] = []
    literal = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%":
            literal.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise UsageError(f"--format {fmt!r}: empty formatter: a '%' ends the format (write %% for a '%')")
        token = fmt[i + 1]
        i += 2
        if token == "%":
            literal.append("%")
            continue
        if token not in _TOKENS:
            raise UsageError(f"--format {fmt!r}: unsupported formatter %{token} (known: "
                             + " ".join("%" + t for t in sorted(_TOKENS)) + " %%)")
        if literal:
            parts.append(_unescape("".join(literal)))
            literal = []
        parts.append(token)
    if literal:
        parts.append(_unescape("".join(literal)))
    return parts


def _bytes_renderer(mode: BytesEncoding) -> Callable[[bytes], bytes]:
    if mode is BytesEncoding.AUTO:
        return lambda data: data  # raw, as kcat writes them
    if mode is BytesEncoding.UTF8:
        return lambda data: data.decode("utf-8", "replace").encode("utf-8")
    if mode is BytesEncoding.HEX:
        return lambda data: data.hex().encode("ascii")
    return base64.b64encode


class RecordFormat:
    """A compiled format string: ``lines(item)`` gives the bytes for a dump item's records."""

    def __init__(self, fmt: str, encodings: Encodings = Encodings()):
        self.parts = parse_format(fmt)
        self.key_bytes = _bytes_renderer(encodings.key)
        self.value_bytes = _bytes_renderer(encodings.value)

    def render(self, topic: str | None, partition: int | None, batch: Batch, record: Record) -> bytes:
        out: list[bytes] = []
        append = out.append
        for part in self.parts:
            if type(part) is bytes:
                append(part)
            elif part == "o":
                append(str(record.offset).encode())
            elif part == "k":
                if record.key:
                    append(self.key_bytes(record.key))
            elif part == "s":
                if record.value:
                    append(self.value_bytes(record.value))
            elif part == "K":
                append(b"-1" if record.key is None else str(len(record.key)).encode())
            elif part == "S":
                append(b"-1" if record.value is None else str(len(record.value)).encode())
            elif part == "R":
                append(struct.pack(">i", -1 if record.value is None else len(record.value)))
            elif part == "T":
                append(str(record.timestamp).encode())
            elif part == "t":
                if topic is not None:
                    append(topic.encode("utf-8", "surrogateescape"))
            elif part == "p":
                append(b"-1" if partition is None else str(partition).encode())
            elif part == "h":
                append(b",".join(self._header(h.key, h.value) for h in record.headers))
            elif part == "c":
                append(_codec_label(batch).encode())
        return b"".join(out)

    def _header(self, name: str, value: bytes | None) -> bytes:
        head = name.encode("utf-8", "surrogateescape") + b"="
        if value is None:
            return head + b"NULL"
        return head + self.value_bytes(value) if value else head

    def lines(self, item) -> bytes | None:
        """The rendered records of a DumpRecords or DumpRecord item; None for any other item."""
        if isinstance(item, DumpRecords):
            render = self.render
            return b"".join(render(item.topic, item.partition, item.batch, r) for r in item.records)
        if isinstance(item, DumpRecord):
            return self.render(item.topic, item.partition, item.batch, item.record)
        return None
