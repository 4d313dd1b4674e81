"""Checksums: CRC-32C (Castagnoli) for v2 batches and producer snapshots, CRC-32 (IEEE) for legacy messages."""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Callable
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
from importlib.util import find_spec, module_from_spec, spec_from_file_location

_EXTENSION = "crc32c._crc32c"  # the crc32c package's C module, where its crc32c function lives


def _load_crc32c() -> Callable[..., int]:
    """The ``crc32c`` package's C function, loaded without running the package's ``__init__``: that imports
    ``importlib.metadata`` (for ``__version__``) and ``argparse`` (for its command line), 40-60 ms of every kctl
    process that reads records, more than the rest of the record layer. The C module is registered under its
    own name, so a later ``import crc32c`` uses it as it would have. Any other layout of the package (older
    releases were a single extension module): the ordinary import."""
    module = sys.modules.get(_EXTENSION)
    if module is None and "crc32c" not in sys.modules:
        try:
            package = find_spec("crc32c")  # finds the package; does not execute it
            for directory in (package.submodule_search_locations or []) if package else []:
                for suffix in EXTENSION_SUFFIXES:
                    path = os.path.join(directory, "_crc32c" + suffix)
                    if os.path.isfile(path):
                        spec = spec_from_file_location(_EXTENSION, path, loader=ExtensionFileLoader(_EXTENSION, path))
                        if spec is not None and spec.loader is not None:
                            loaded = module_from_spec(spec)
                            spec.loader.exec_module(loaded)
                            sys.modules[_EXTENSION] = module = loaded
                        break
                if module is not None:
                    break
        except (ImportError, OSError):
            module = None
    function = getattr(module, "crc32c", None)
    if function is None:
        from crc32c import crc32c as function
    return function


# CRC-32C as Kafka's ``Crc32C`` (hardware-accelerated by the ``crc32c`` package): the C function itself, not a
# Python wrapper around it (a call per batch in verify's and recovery's hot loops).
crc32c = _load_crc32c()


def crc32(data: bytes | memoryview) -> int:
    """CRC-32 as ``java.util.zip.CRC32``, used by magic 0 and 1 messages."""
    return zlib.crc32(data)
