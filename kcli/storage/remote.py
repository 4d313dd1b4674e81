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

On S3 (s3fs), byte ranges are read with plain GETs on presigned URLs (one signature per object, not per request),
and the broker's uploads can run in a copier process of their own (``copier_processes``).
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcli.errors import InputError, KcliError
from kcli.records.schema import kafka_uuid_to_string

if TYPE_CHECKING:  # multiprocessing only where a copier starts: the offline tools import this module
    from concurrent.futures import ProcessPoolExecutor

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
        self.config = RemoteStorageConfig(url, dict(options))  # what a copier process rebuilds the manager from
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **_typed(options))
        except (ImportError, ValueError) as exc:  # an unknown protocol, s3fs not installed
            raise InputError(f"remote store {url} cannot be used: {exc}") from exc
        self.root = root.rstrip("/")
        self.local = _is_local(self.fs)
        if self.local:
            self.fs.makedirs(self.root, exist_ok=True)
        self._presigned_usable = _presigned_usable(self.fs)

    @classmethod
    def from_config(cls, config: RemoteStorageConfig) -> FsspecRemoteStorageManager:
        return cls(config.url, **config.options)

    @functools.cached_property
    def presigned(self) -> PresignedRanges | None:
        """The S3 read path, made on first read (a copier process never reads: no botocore client there)."""
        return PresignedRanges(self.fs) if self._presigned_usable else None

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
            local = self.local
            if local:  # object stores have no directories; a local one needs the partition's
                self.fs.makedirs(f"{self.root}/{ref.partition_dir}", exist_ok=True)
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
        leftovers = self.fs.glob(f"{self.root}/{ref.partition_dir}/{ref.stem}.*.tmp") if self.local else []
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
        if self.presigned is not None and (start or 0) >= 0 and (end is None or end >= 0):  # else: from the end
            return self.presigned.get(key, start, end, self.fs.unstrip_protocol(key))
        try:
            return bytes(self.fs.cat_file(key, start=start, end=end))
        except FileNotFoundError as exc:
            raise RemoteResourceNotFoundError(f"{self.fs.unstrip_protocol(key)} is not in the remote store",
                                              path=self.fs.unstrip_protocol(key)) from exc
        except OSError as exc:
            raise RemoteStorageError(f"reading {self.fs.unstrip_protocol(key)} failed: {exc}",
                                     path=self.fs.unstrip_protocol(key)) from exc


class PresignedRanges:
    """Byte ranges of S3 objects by plain GETs on presigned URLs through urllib3: botocore signs once per object
    (kept until shortly before the signature expires), where s3fs and aiobotocore spend ~4.4 ms of CPU on every
    request (bench/README.md, bench_tiered.py). Thread-safe: the broker's readers share it."""

    EXPIRES_S = 3600
    RESIGN_BEFORE_S = 300  # a URL this close to its expiry is signed anew: a GET must not start on one about to lapse
    URLS = 4096  # signed URLs kept: one per object read (a partition's segments, their indexes)

    def __init__(self, fs: Any) -> None:
        import urllib3

        self.fs = fs
        self.client = _botocore_client(fs)
        self.expires_s = self.EXPIRES_S
        self.resigned = 0  # signatures the store refused (403) and signed anew
        self._urls: OrderedDict[str, tuple[str, float]] = OrderedDict()  # key -> (URL, when to sign anew)
        self._lock = threading.Lock()
        self._errors = (urllib3.exceptions.HTTPError,)
        verify = fs.client_kwargs.get("verify")
        if verify is False:
            tls: dict[str, Any] = {"cert_reqs": "CERT_NONE"}
        else:
            from botocore.httpsession import get_cert_path

            tls = {"cert_reqs": "CERT_REQUIRED", "ca_certs": verify if isinstance(verify, str) else get_cert_path(True)}
        # connection errors and 5xx retried as s3fs does; a GET is idempotent
        retries = urllib3.Retry(total=3, redirect=0, backoff_factor=0.1, status_forcelist=(500, 502, 503, 504),
                                raise_on_status=False)
        self.http = urllib3.PoolManager(maxsize=16, retries=retries, timeout=urllib3.Timeout(connect=10, read=60),
                                        **tls)

    def url(self, key: str, *, fresh: bool = False) -> str:
        """A presigned GET URL of ``key`` (bucket/path), the one kept unless ``fresh`` or close to expiry."""
        now = time.monotonic()
        with self._lock:
            cached = self._urls.get(key)
            if cached is not None and not fresh and now < cached[1]:
                self._urls.move_to_end(key)
                return cached[0]
        bucket, _, path = key.partition("/")
        url = self.client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": path},
                                                 ExpiresIn=self.expires_s)
        with self._lock:
            self._urls[key] = (url, now + self.expires_s - min(self.RESIGN_BEFORE_S, self.expires_s / 2))
            self._urls.move_to_end(key)
            while len(self._urls) > self.URLS:
                self._urls.popitem(last=False)
        return url

    def get(self, key: str, start: int | None, end: int | None, display: str) -> bytes:
        """Bytes [start, end) of the object (to its end when ``end`` is None), as fsspec's cat_file: empty past
        the end. RemoteResourceNotFoundError on 404 (NoSuchKey, NoSuchBucket), RemoteStorageError otherwise, both
        naming the object's URL."""
        headers = {}
        if start or end is not None:
            if end is not None and end <= (start or 0):
                return b""
            headers["Range"] = f"bytes={start or 0}-{'' if end is None else end - 1}"
        for attempt in range(2):
            try:
                url = self.url(key, fresh=attempt > 0)
            except Exception as exc:  # botocore's own (no credentials, a bad region) are no OSError
                raise RemoteStorageError(f"signing a GET of {display} failed: {exc}", path=display) from exc
            try:
                response = self.http.request("GET", url, headers=headers, preload_content=True, decode_content=False)
            except self._errors as exc:
                raise RemoteStorageError(f"reading {display} failed: {exc}", path=display) from exc
            status = response.status
            if status == 206:
                return response.data
            if status == 200:  # the whole object: no range asked, or a store that ignores Range
                return response.data[start or 0:end] if headers else response.data
            if status == 416:  # the range starts past the end
                return b""
            if status == 403 and attempt == 0:  # an expired signature (or a clock step): signed anew, once
                with self._lock:
                    self.resigned += 1
                continue
            code = _s3_error_code(response.data)
            if status == 404:
                raise RemoteResourceNotFoundError(f"{display} is not in the remote store ({code or 'HTTP 404'})",
                                                  path=display)
            raise RemoteStorageError(f"reading {display} failed: HTTP {status}{f' {code}' if code else ''}",
                                     path=display)
        raise AssertionError("unreachable")  # pragma: no cover


def _s3_error_code(body: bytes) -> str:
    """The <Code> of an S3 error document (NoSuchKey, AccessDenied, ...), empty when there is none."""
    found = re.search(rb"<Code>([^<]{1,64})</Code>", body[:4096])
    return found.group(1).decode(errors="replace") if found else ""


def _presigned_usable(fs: Any) -> bool:
    """s3fs with its endpoint or region set, reached directly, with nothing a GET must carry besides its URL.
    Without an endpoint or region, s3fs finds each bucket's region itself (a URL signed for another region is
    refused); a proxy from the environment (botocore would use it), a session of the caller's, requester-pays or
    extra request parameters (SSE-C keys) keep s3fs's path too."""
    protocol = getattr(fs, "protocol", ())
    if "s3" not in (protocol if isinstance(protocol, tuple) else (protocol,)) or not hasattr(fs, "client_kwargs"):
        return False
    own_session = getattr(fs, "session", None) is None or getattr(fs, "_session_is_owned", False)
    if not own_session or getattr(fs, "req_kw", None) or getattr(fs, "s3_additional_kwargs", None):
        return False
    import urllib.parse
    import urllib.request

    endpoint = fs.endpoint_url or fs.client_kwargs.get("endpoint_url")
    if not endpoint and not (fs.client_kwargs.get("region_name") or fs.config_kwargs.get("region_name")
                             or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        return False
    if not urllib.request.getproxies():
        return True
    host = urllib.parse.urlsplit(endpoint).hostname if endpoint else None
    return bool(host) and bool(urllib.request.proxy_bypass(host))


def _botocore_client(fs: Any) -> Any:
    """A plain (blocking) botocore S3 client with s3fs's settings (S3FileSystem.set_session), to sign URLs: no
    round trip through fsspec's event loop per signature."""
    import botocore.session
    from botocore import UNSIGNED
    from botocore.config import Config

    client_kwargs = dict(fs.client_kwargs)
    init = {k: v for k, v in {"aws_access_key_id": fs.key, "aws_secret_access_key": fs.secret,
                              "aws_session_token": fs.token, "endpoint_url": fs.endpoint_url}.items()
            if v is not None and v != client_kwargs.get(k)}
    if "use_ssl" not in client_kwargs:
        init["use_ssl"] = fs.use_ssl
    config = dict(fs.config_kwargs)
    # botocore presigns with SigV2 unless told otherwise, which the newer AWS regions refuse
    config.setdefault("signature_version", "s3v4")
    if fs.anon:
        for name in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token"):
            init.pop(name, None)
            client_kwargs.pop(name, None)
        config["signature_version"] = UNSIGNED
    session = botocore.session.Session(**{k: v for k, v in fs.kwargs.items() if k == "profile"})
    return session.create_client("s3", config=Config(**config), **init, **client_kwargs)


# -- the copier process ------------------------------------------------------------------------------------
# Uploads hold the GIL for botocore's signing and request handling: in a process of their own they leave the
# broker's threads alone (issue 28: the producer's p99 while segments upload).
_COPIER: FsspecRemoteStorageManager | None = None
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def copier_processes(config: RemoteStorageConfig, workers: int) -> ProcessPoolExecutor:
    """A pool of copier processes for ``copy_in_process``, started on first use. Spawned, not forked: the
    broker has threads and an event loop. Each dies with the broker (PR_SET_PDEATHSIG: the thread that starts
    it, the broker's event loop, lives as long as the broker). As with any spawned process, a script (not
    `kctl`, not `python -m kcli`) running a broker must guard its start with ``if __name__ == "__main__"``:
    a spawned process imports the parent's main script."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_copier_start, initargs=(config, os.getpid()))


def stop_copier_processes(pool: ProcessPoolExecutor) -> None:
    """Shut the pool down without waiting for an upload: its processes are killed (a copy cut short is one the
    metadata never finished, deleted by the next leader)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # 3.11 has no terminate_workers()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):  # already gone, or closed
            pass


def _copier_start(config: RemoteStorageConfig, broker: int) -> None:
    global _COPIER
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != broker:  # the broker died before the prctl: no signal would come
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the broker's to handle
    _COPIER = FsspecRemoteStorageManager.from_config(config)


def copier_ready() -> int:
    """Nothing, in a copier process: submitted to start one before the first copy needs it (its pid back)."""
    return os.getpid()


def copy_in_process(ref: RemoteSegmentRef, files: Mapping[str, Path | bytes | None]) -> None:
    """``copy_log_segment_data`` in a copier process. Any other error comes back as a RemoteStorageError with
    its text (a third-party exception may not survive the pickling)."""
    assert _COPIER is not None, "copy_in_process runs in a copier process"
    try:
        _COPIER.copy_log_segment_data(ref, files)
    except RemoteStorageError:
        raise
    except Exception as exc:
        raise RemoteStorageError(f"copying segment {ref.stem} of {ref.topic}-{ref.partition} to {_COPIER.url} "
                                 f"failed: {type(exc).__name__}: {exc}") from None


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
