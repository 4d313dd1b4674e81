"""Tiered storage's remote half (KIP-405): an fsspec-backed RemoteStorageManager.

Kafka loads a RemoteStorageManager plugin (``remote.log.storage.manager.class.name``) and hands it the broker
settings under ``remote.log.storage.manager.impl.prefix`` (default ``rsm.config.``). kctl's manager is this
one: ``rsm.config.url`` is an fsspec URL (``file:///var/kafka-remote``, ``s3://bucket/prefix``) and every
other ``rsm.config.<name>`` goes to fsspec as a storage option (``endpoint_url``, ``key``, ``secret`` for
s3fs), so any store fsspec reaches works.

Keys are laid out so an operator finds a partition's segments by topic, partition and offset:
``<root>/<topic>-<partition>-<topic id>/<20-digit start offset>-<segment id>.<kind>`` with the kinds of
Kafka's ``RemoteStorageManager.IndexType`` beside the ``.log``: ``.index``, ``.timeindex``, ``.txnindex``,
``.snapshot`` (the producer snapshot at the segment's end) and ``.leader_epoch_checkpoint``. The segment id
makes every upload's keys new, so a copy killed midway never overwrites a finished one; which uploads count
is the metadata's business (COPY_SEGMENT_FINISHED in ``__remote_log_metadata``), not the store's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.records.schema import kafka_uuid_to_string

DEFAULT_RSM_PREFIX = "rsm.config."
KCTL_RSM_CLASS = "kcli.storage.remote.FsspecRemoteStorageManager"
# Kafka's RemoteStorageManager.IndexType, by the suffix kctl gives its object
INDEX_KINDS = ("index", "timeindex", "txnindex", "snapshot", "leader_epoch_checkpoint")
SEGMENT_KINDS = ("log", *INDEX_KINDS)


class RemoteStorageError(KcliError):
    """The remote store refused or lost something (Kafka's RemoteStorageException)."""

    error_code = "KAFKA_STORAGE_ERROR"


class RemoteResourceNotFoundError(RemoteStorageError):
    """An object the metadata names is not in the store (Kafka's RemoteResourceNotFoundException)."""


@dataclass(frozen=True, slots=True)
class RemoteSegmentRef:
    """What locates one remote segment's objects: Kafka's RemoteLogSegmentId plus its start offset."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    start_offset: int

    @property
    def partition_dir(self) -> str:
        return partition_dir_name(self.topic, self.partition, self.topic_id)

    @property
    def stem(self) -> str:
        return f"{self.start_offset:020d}-{kafka_uuid_to_string(self.segment_id)}"


def partition_dir_name(topic: str, partition: int, topic_id: uuid.UUID) -> str:
    return f"{topic}-{partition}-{kafka_uuid_to_string(topic_id)}"


@dataclass(frozen=True)
class RemoteStorageConfig:
    """``rsm.config.url`` and the other ``rsm.config.*`` settings as fsspec storage options."""

    url: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_props(cls, props: Mapping[str, Any], prefix: str = DEFAULT_RSM_PREFIX) -> RemoteStorageConfig:
        settings = {k[len(prefix):]: str(v) for k, v in props.items() if k.startswith(prefix) and v is not None}
        url = settings.pop("url", "")
        if not url:
            raise InputError(f"{prefix}url is not set: the remote store's fsspec URL (file:///var/kafka-remote, "
                             "s3://bucket/prefix)")
        return cls(url, settings)


class FsspecRemoteStorageManager:
    """Kafka's RemoteStorageManager over an fsspec filesystem: copy a segment's files, fetch a byte range of
    one or an index, delete them. Blocking: the broker calls it from worker threads."""

    def __init__(self, url: str, **options: Any) -> None:
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover - fsspec is a dependency
            raise InputError("tiered storage needs fsspec (pip install fsspec)") from exc
        self.url = url
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **_typed(options))
        except (ImportError, ValueError) as exc:  # an unknown protocol, s3fs not installed
            raise InputError(f"remote store {url} cannot be used: {exc}") from exc
        self.root = root.rstrip("/")
        if _is_local(self.fs):
            self.fs.makedirs(self.root, exist_ok=True)

    @classmethod
    def from_config(cls, config: RemoteStorageConfig) -> FsspecRemoteStorageManager:
        return cls(config.url, **config.options)

    # -- keys -------------------------------------------------------------------------------------------
    def key(self, ref: RemoteSegmentRef, kind: str) -> str:
        return f"{self.root}/{ref.partition_dir}/{ref.stem}.{kind}"

    def display_key(self, ref: RemoteSegmentRef, kind: str) -> str:
        """The object's full URL, as an operator would name it."""
        return self.fs.unstrip_protocol(self.key(ref, kind))

    # -- RemoteStorageManager ----------------------------------------------------------------------------
    def copy_log_segment_data(self, ref: RemoteSegmentRef, files: Mapping[str, Path | bytes | None]) -> None:
        """Upload a segment's files (``files`` by kind: a local path, bytes, or None for an empty object). The
        ``.log`` goes last: a store listing shows a complete set only once it is there, though what counts is
        the metadata's COPY_SEGMENT_FINISHED."""
        kinds = [k for k in SEGMENT_KINDS if k != "log"] + ["log"]
        try:
            if _is_local(self.fs):  # object stores have no directories; a local one needs the partition's
                self.fs.makedirs(f"{self.root}/{ref.partition_dir}", exist_ok=True)
            local = _is_local(self.fs)
            for kind in kinds:
                source = files.get(kind)
                target = self.key(ref, kind)
                # an object store's PUT is whole or absent; a file is written under a temporary name and renamed
                written = f"{target}.{uuid.uuid4().hex}.tmp" if local else target
                if isinstance(source, Path):
                    self.fs.put_file(str(source), written)
                else:
                    self.fs.pipe_file(written, bytes(source or b""))
                if local:
                    self.fs.mv(written, target)
        except FileNotFoundError as exc:
            raise RemoteStorageError(f"copying segment {ref.stem} of {ref.topic}-{ref.partition}: a local file "
                                     f"went away: {exc.filename or exc}") from exc
        except OSError as exc:
            raise RemoteStorageError(f"copying segment {ref.stem} of {ref.topic}-{ref.partition} to {self.url} "
                                     f"failed: {exc}") from exc

    def fetch_log_segment(self, ref: RemoteSegmentRef, start: int, end: int | None = None) -> bytes:
        """Bytes [start, end) of the segment's ``.log`` (to its end when ``end`` is None)."""
        return self._cat(ref, "log", start, end)

    def fetch_index(self, ref: RemoteSegmentRef, kind: str) -> bytes:
        return self._cat(ref, kind, None, None)

    def delete_log_segment_data(self, ref: RemoteSegmentRef) -> None:
        """Every object of the segment; those already gone are no error (a retried delete). In a local store,
        also what a copy killed midway left under a temporary name."""
        leftovers = self.fs.glob(f"{self.root}/{ref.partition_dir}/{ref.stem}.*.tmp") if _is_local(self.fs) else []
        for path in leftovers:
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
        for kind in SEGMENT_KINDS:
            try:
                self.fs.rm_file(self.key(ref, kind))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise RemoteStorageError(f"deleting {self.display_key(ref, kind)} failed: {exc}") from exc

    def size(self, ref: RemoteSegmentRef, kind: str = "log") -> int:
        try:
            return int(self.fs.size(self.key(ref, kind)))
        except FileNotFoundError as exc:
            raise RemoteResourceNotFoundError(f"{self.display_key(ref, kind)} is not in the remote store",
                                              path=self.display_key(ref, kind)) from exc

    def list_partition_objects(self, topic: str, partition: int, topic_id: uuid.UUID) -> list[str]:
        """The keys under one partition's directory, sorted (by start offset)."""
        prefix = f"{self.root}/{partition_dir_name(topic, partition, topic_id)}"
        try:
            return sorted(self.fs.ls(prefix, detail=False))
        except FileNotFoundError:
            return []

    def _cat(self, ref: RemoteSegmentRef, kind: str, start: int | None, end: int | None) -> bytes:
        key = self.key(ref, kind)
        try:
            return bytes(self.fs.cat_file(key, start=start, end=end))
        except FileNotFoundError as exc:
            raise RemoteResourceNotFoundError(f"{self.fs.unstrip_protocol(key)} is not in the remote store",
                                              path=self.fs.unstrip_protocol(key)) from exc
        except OSError as exc:
            raise RemoteStorageError(f"reading {self.fs.unstrip_protocol(key)} failed: {exc}",
                                     path=self.fs.unstrip_protocol(key)) from exc


def fsspec_filesystem(url: str, options: Mapping[str, Any]) -> tuple[Any, str]:
    """(filesystem, path) of an fsspec URL with storage options given as text (the tools' --storage-option)."""
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url, **_typed(options))
    except (ImportError, ValueError) as exc:
        raise InputError(f"{url} cannot be opened: {exc}", path=url) from exc
    return fs, path.rstrip("/")


def _is_local(fs: Any) -> bool:
    protocol = getattr(fs, "protocol", ())
    return "file" in (protocol if isinstance(protocol, tuple) else (protocol,))


def _typed(options: Mapping[str, Any]) -> dict[str, Any]:
    """Properties are text; fsspec's options are typed: "true"/"false" become booleans, the rest stays."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        text = str(value)
        out[key] = {"true": True, "false": False}.get(text.lower(), text)
    if "endpoint_url" in out:  # s3fs takes the endpoint through client_kwargs too; both work
        out.setdefault("client_kwargs", {})
    return out


def remote_storage_manager(props: Mapping[str, Any]) -> FsspecRemoteStorageManager:
    """The broker's RemoteStorageManager from its properties: ``remote.log.storage.manager.class.name`` (kctl's
    fsspec manager unless set; no other class is loadable) with the settings under
    ``remote.log.storage.manager.impl.prefix``."""
    class_name = str(props.get("remote.log.storage.manager.class.name") or KCTL_RSM_CLASS)
    if class_name not in (KCTL_RSM_CLASS, "FsspecRemoteStorageManager"):
        raise InputError(f"remote.log.storage.manager.class.name={class_name}: kctl broker has one "
                         f"RemoteStorageManager, {KCTL_RSM_CLASS}")
    prefix = str(props.get("remote.log.storage.manager.impl.prefix") or DEFAULT_RSM_PREFIX)
    return FsspecRemoteStorageManager.from_config(RemoteStorageConfig.from_props(props, prefix))
