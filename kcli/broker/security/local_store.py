"""A standalone broker's znodes: JSON documents addressed by ZooKeeper-like paths, kept in one file of the first
log dir, for the metadata a ZooKeeper-mode broker keeps in ZooKeeper (ACLs under ``/kafka-acl``, SCRAM credentials
under ``/config/users``), with the same paths and the same JSON so that the code above it is shared.

The interface is ZooKeeper's, reduced: ``get`` answers the data and a version, ``set`` and ``delete`` take the
version read (-1 = "absent", None = unconditional) and raise BadVersion when it moved, so a read-modify-write
loop is the same against both stores. Every change rewrites the file crash-safely (temp file, fsync, rename,
fsync of the directory): after a crash the file is either the old or the new one. Thread-safe.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

from kcli.errors import BadVersion, KcliError

FILE_NAME = "kctl-metadata-store.json"
ABSENT = -1  # the version of a node that does not exist (what get answers; what set expects to create)


class StoreError(KcliError):
    """The store's file cannot be read or written."""


def check_path(path: str) -> str:
    """``/a/b``: absolute, no empty segment, no trailing slash (ZooKeeper's PathUtils.validatePath, reduced)."""
    if not path.startswith("/") or path != "/" and (path.endswith("/") or "//" in path):
        raise ValueError(f"invalid node path {path!r}")
    return path


class LocalMetadataStore:
    """Nodes in memory, mirrored to ``<directory>/kctl-metadata-store.json`` on every change (memory only when
    ``directory`` is None: tests and benchmarks)."""

    def __init__(self, directory: str | Path | None) -> None:
        self.path = None if directory is None else Path(directory) / FILE_NAME
        self._lock = threading.Lock()
        self._loaded: dict[str, tuple[bytes, int]] | None = None if self.path is not None else {}

    @property
    def _nodes(self) -> dict[str, tuple[bytes, int]]:
        """path -> (data, version), read from the file on first use (a broker that uses no ACL or credential
        never reads it)."""
        if self._loaded is None:
            assert self.path is not None
            self._loaded = self._load(self.path)
        return self._loaded

    def load(self) -> None:
        """Read the file now (a damaged one raises StoreError here rather than at the first request)."""
        with self._lock:
            self._nodes

    # -- reads ----------------------------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes | None, int]:
        """The node's data and version; (None, -1) when it does not exist."""
        with self._lock:
            return self._nodes.get(check_path(path), (None, ABSENT))

    def exists(self, path: str) -> bool:
        with self._lock:
            return check_path(path) in self._nodes

    def children(self, path: str) -> list[str]:
        """The names one level below ``path`` (sorted); parents exist implicitly, unlike ZooKeeper's."""
        prefix = check_path(path).rstrip("/") + "/"
        with self._lock:
            return sorted({p[len(prefix):].split("/", 1)[0] for p in self._nodes if p.startswith(prefix)})

    # -- writes ---------------------------------------------------------------------------------------------------
    def set(self, path: str, data: bytes, expected_version: int | None = None) -> int:
        """Create the node (expected -1) or replace its data (expected its version); None = whatever it is.
        Answers the new version (0 for a created node, as ZooKeeper's); BadVersion when it moved."""
        check_path(path)
        with self._lock:
            _, version = self._nodes.get(path, (None, ABSENT))
            if expected_version is not None and expected_version != version:
                raise BadVersion(f"expected version {expected_version}, found {version}", path=path)
            nodes = dict(self._nodes)
            nodes[path] = (bytes(data), version + 1)
            self._commit(nodes)
            return version + 1

    def delete(self, path: str, expected_version: int | None = None) -> bool:
        """Remove the node (its children are separate nodes and stay); False when it did not exist and no
        version was expected; BadVersion when a given version does not match (or the node is gone)."""
        check_path(path)
        with self._lock:
            _, version = self._nodes.get(path, (None, ABSENT))
            if expected_version is not None and expected_version != version:
                raise BadVersion(f"expected version {expected_version}, found {version}", path=path)
            if version == ABSENT:
                return False
            nodes = dict(self._nodes)
            del nodes[path]
            self._commit(nodes)
            return True

    def close(self) -> None:
        """Nothing is buffered: every change is on disk when its call returns."""

    # -- the file -------------------------------------------------------------------------------------------------
    def _commit(self, nodes: dict[str, tuple[bytes, int]]) -> None:
        """Write the file, then swap the in-memory nodes: a failed write leaves both as they were."""
        if self.path is not None:
            self._write(self.path, nodes)
        self._loaded = nodes

    @staticmethod
    def _encode(data: bytes) -> dict[str, object]:
        try:
            return {"data": data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"data_base64": base64.b64encode(data).decode("ascii")}

    @classmethod
    def _write(cls, path: Path, nodes: dict[str, tuple[bytes, int]]) -> None:
        document = {"version": 1, "nodes": {p: {**cls._encode(d), "version": v} for p, (d, v) in sorted(nodes.items())}}
        temp = path.with_name(path.name + ".tmp")
        try:
            with open(temp, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
            fd = os.open(path.parent, os.O_RDONLY)  # the rename itself survives a crash once the dir is synced
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot write the metadata store: {exc.strerror or exc}", path=str(path)) from exc

    @staticmethod
    def _load(path: Path) -> dict[str, tuple[bytes, int]]:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError(f"cannot read the metadata store: {exc.strerror or exc}", path=str(path)) from exc
        try:
            document = json.loads(text)
            if document.get("version") != 1:
                raise ValueError(f"unknown version {document.get('version')!r}")
            nodes: dict[str, tuple[bytes, int]] = {}
            for node_path, node in document["nodes"].items():
                data = (node["data"].encode("utf-8") if "data" in node
                        else base64.b64decode(node["data_base64"], validate=True))
                nodes[check_path(node_path)] = (data, int(node["version"]))
            return nodes
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"the metadata store is damaged ({exc}); restore it or remove it to start empty",
                             path=str(path)) from exc
