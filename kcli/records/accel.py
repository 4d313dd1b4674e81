"""Optional compiled record decoding: aiokafka's Cython DefaultRecordBatch walks the records of a batch
whose payload kcli has already decompressed (so Kafka's codec quirks stay ours).

Pure-Python decoding remains the reference: it runs when aiokafka is absent, when
``KCLI_NO_EXTENSIONS=1`` is set, and whenever the compiled reader rejects a batch (so errors always
carry kcli's messages and positions). The compiled reader does not check that a batch ends exactly
after its last record, so strict checks (``verify --deep``) use the pure decoder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
from importlib.util import find_spec, module_from_spec, spec_from_file_location
from types import ModuleType
from typing import Any

from kcli.records.layout import ATTRIBUTES_LOW_BYTE, RECORD_BATCH_OVERHEAD
from kcli.records.types import NO_SEQUENCE, Header, Record, increment_sequence

_CODEC_BYTE = ATTRIBUTES_LOW_BYTE  # the codec bits are in the attributes field's low byte
_TIMESTAMP_TYPE_BIT = 0x08  # attributes: LogAppendTime
_CompiledBatch = None
_loaded = False


_PACKAGES = ("aiokafka", "aiokafka.record", "aiokafka.record._crecords")
_COMPILED = ("cutil", "default_records")  # default_records cimports cutil


def _load_compiled() -> Any:
    """aiokafka's compiled DefaultRecordBatch, loaded without running aiokafka's package ``__init__``s: those
    import its whole client (asyncio, its producer and consumer), ~0.1 s of every command that decodes records.
    The two C modules are loaded from their files under their own names while placeholder packages stand in for
    their parents (their module-level imports, aiokafka.errors and aiokafka.codec, are plain modules); the
    placeholders are then dropped, so a later ``import aiokafka`` runs the real package, which finds these
    modules already loaded. Any other layout of the package: the ordinary import."""
    if any(name in sys.modules for name in _PACKAGES):
        from aiokafka.record._crecords import DefaultRecordBatch

        return DefaultRecordBatch
    spec = find_spec("aiokafka")  # finds the package; does not execute it
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = os.path.join(spec.submodule_search_locations[0], "record", "_crecords")
    paths = {}
    for module in _COMPILED:
        paths[module] = next((os.path.join(directory, module + suffix) for suffix in EXTENSION_SUFFIXES
                              if os.path.isfile(os.path.join(directory, module + suffix))), None)
    if None in paths.values():
        from aiokafka.record._crecords import DefaultRecordBatch

        return DefaultRecordBatch
    placeholders = {}
    for name in _PACKAGES:
        package = ModuleType(name)
        package.__path__ = [os.path.join(spec.submodule_search_locations[0], *name.split(".")[1:])]
        placeholders[name] = sys.modules[name] = package
    loaded = []
    try:
        for module, path in paths.items():
            name = f"aiokafka.record._crecords.{module}"
            module_spec = spec_from_file_location(name, path, loader=ExtensionFileLoader(name, path))
            compiled = module_from_spec(module_spec)
            sys.modules[name] = compiled
            loaded.append(name)
            module_spec.loader.exec_module(compiled)
        return compiled.DefaultRecordBatch
    except BaseException:
        for name in loaded:
            sys.modules.pop(name, None)
        raise
    finally:
        for name, package in placeholders.items():
            if sys.modules.get(name) is package:
                del sys.modules[name]
        if not any(isinstance(finder, _BindOnImport) for finder in sys.meta_path):
            sys.meta_path.insert(0, _BindOnImport())


class _BindOnImport:
    """A later real import of aiokafka's packages binds the submodules loaded under the placeholders as their
    attributes, as an ordinary import would have (``import aiokafka`` then ``aiokafka.errors``)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _PACKAGES:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self or not hasattr(finder, "find_spec") else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            prefix = name + "."
            for child, submodule in list(sys.modules.items()):
                if child.startswith(prefix) and "." not in child[len(prefix):]:
                    setattr(module, child[len(prefix):], submodule)
            execute(module)

        spec.loader.exec_module = exec_module
        return spec


def available() -> bool:
    """Loaded on first use, and without aiokafka's client (``_load_compiled``): commands that never decode
    records do not pay for it."""
    global _CompiledBatch, _loaded
    if not _loaded:
        _loaded = True
        if not os.environ.get("KCLI_NO_EXTENSIONS"):
            try:
                compiled = _load_compiled()
            except (ImportError, OSError, AttributeError):  # pragma: no cover - depends on the environment
                compiled = None
            _CompiledBatch = compiled
    return _CompiledBatch is not None


def _uncompressed(header: bytes) -> bytes:
    """The header with the codec bits cleared: the payload handed over is already decompressed."""
    if not header[_CODEC_BYTE] & 0x07:
        return header
    patched = bytearray(header)
    patched[_CODEC_BYTE] &= 0xF8
    return bytes(patched)


def decode_records(header: bytes, payload: bytes, base_offset: int, base_sequence: int) -> list[Record] | None:
    """Records of a v2 batch from its 61-byte header and decompressed payload; None if unavailable or rejected."""
    if not available():
        return None
    try:
        batch = _CompiledBatch(_uncompressed(header) + payload)
        out = []
        append = out.append
        if base_sequence < 0:
            for r in batch:
                hs = r.headers
                append(Record(r.offset, r.timestamp, r.key, r.value,
                              tuple([Header(k, v) for k, v in hs]) if hs else (), NO_SEQUENCE))
        else:
            for r in batch:
                hs = r.headers
                append(Record(r.offset, r.timestamp, r.key, r.value,
                              tuple([Header(k, v) for k, v in hs]) if hs else (),
                              increment_sequence(base_sequence, r.offset - base_offset)))
        return out
    except Exception:  # noqa: BLE001 - any rejection falls back to the pure decoder, which reports it
        return None


def decode_keys(header: bytes, payload: bytes) -> list[tuple[int, bytes | None, bool]] | None:
    """(offset, key, is_tombstone) of every record: what the log cleaner needs, without building Records."""
    if not available():
        return None
    try:
        return [(r.offset, r.key, r.value is None) for r in _CompiledBatch(_uncompressed(header) + payload)]
    except Exception:  # noqa: BLE001 - the caller falls back to the pure decoder, which reports it
        return None


# -- bulk formatting of deep dumps (kcli/records/_dumpfmt.c) ---------------------------------------------
_dumpfmt = None
_dumpfmt_loaded = False


def dump_formatter():
    """The compiled deep-dump formatter (kcli.records._dumpfmt), or None: not built, or KCLI_NO_EXTENSIONS set."""
    global _dumpfmt, _dumpfmt_loaded
    if not _dumpfmt_loaded:
        _dumpfmt_loaded = True
        if not os.environ.get("KCLI_NO_EXTENSIONS"):
            try:
                from kcli.records import _dumpfmt as module
            except ImportError:  # pragma: no cover - the extension is optional (setup.py)
                module = None
            _dumpfmt = module
    return _dumpfmt


class BatchRecords(Sequence):
    """The records of one v2 batch, kept as its decompressed payload: the compiled formatter renders them
    in bulk without a Record object per record; iterating or indexing decodes them (once) the ordinary way.

    ``first_offset``, ``last_offset``, ``consecutive``: what the payload walk found (offset bookkeeping
    needs no Records either)."""

    __slots__ = ("batch", "payload", "first_offset", "last_offset", "consecutive", "_count", "_records")

    def __init__(self, batch, payload: bytes, count: int, first_delta: int, last_delta: int, consecutive: bool):
        self.batch = batch
        self.payload = payload
        self._count = count
        self.first_offset = batch.base_offset + first_delta
        self.last_offset = batch.base_offset + last_delta
        self.consecutive = consecutive
        self._records: list[Record] | None = None

    @classmethod
    def of(cls, batch) -> BatchRecords | None:
        """For a valid-looking v2 data batch when the formatter is built; None otherwise (use batch.records())."""
        fmt = dump_formatter()
        if fmt is None:
            return None
        count = batch.records_count
        if count <= 0:
            return None
        payload = batch.payload()
        found = fmt.scan(payload, count)
        if found is None:
            return None
        return cls(batch, payload, count, *found)

    def records(self) -> list[Record]:
        """The Records, decoded from the payload already decompressed (as ``batch.records()`` decodes them)."""
        if self._records is None:
            b = self.batch
            fast = decode_records(b.raw[:RECORD_BATCH_OVERHEAD], self.payload, b.base_offset, b.base_sequence)
            self._records = fast if fast is not None and len(fast) == self._count else b.records()
        return self._records

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self.records()[index]

    def __iter__(self):
        return iter(self.records())

    def _args(self) -> tuple:
        b = self.batch
        return (self.payload, self._count, b.base_offset, b.base_timestamp, b.max_timestamp,
                bool(b.attributes & _TIMESTAMP_TYPE_BIT), b.base_sequence)

    def format_json(self, prefix: bytes, timestamp_type: bytes, suffix: bytes) -> str | None:
        """kcli.tools.dump_json's record lines (AUTO encodings) joined by newlines, or None (use the Python path)."""
        return _dumpfmt.format_json(*self._args(), prefix, timestamp_type, suffix)

    def format_text(self, timestamp_label: bytes, print_data: bool, skip_record_metadata: bool) -> str | None:
        """kcli.tools.dump_text's record lines joined by newlines, or None (use the Python path)."""
        return _dumpfmt.format_text(*self._args(), timestamp_label, print_data, skip_record_metadata)
