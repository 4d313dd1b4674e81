"""The remote part of a tiered topic (KIP-405) for the ``kafka-log`` source: with ``remoteStorage`` (an fsspec
URL, the broker's ``rsm.config.url``) and ``remoteStorage.<key>`` options (fsspec storage options, the broker's
other ``rsm.config.*``), each partition directory read also gets the segments of its directory in the remote
store, kcli.storage.remote's layout ``<topic>-<partition>-<topicId>/<20-digit start offset>-<segmentId>.log``.

Planning lists the store (no object is read); an executor fetches one ``.log`` object into a temporary file and
reads it as a local segment. Offsets the local log still holds are read from the local segments only: a remote
segment starting at or after the partition's first local offset is left out, and one running into it is cut
there. Without the metadata topic, what counts as a finished copy is the store's listing: the ``.log`` object is
uploaded last, so a segment with one is complete; a second upload of the same start offset (a copy retried by a
new leader) is read once, the first by segment id.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kcli.errors import KcliError
from kcli.records.schema import kafka_uuid_to_string
from kcli.spark.plan import Bounds, PartitionDir, SegmentSplit
from kcli.storage.checkpoint import read_partition_metadata
from kcli.storage.remote import fsspec_filesystem

REMOTE_OPTION = "remotestorage"  # lower-cased, as ReadOptions.parse matches them
REMOTE_OPTION_PREFIX = "remotestorage."
_LOG_OBJECT = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.log$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)-([A-Za-z0-9_-]{22})$")


def remote_options(options: Mapping[str, str]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """(the store's URL, its storage options) from the source's lower-cased options."""
    url = options.get(REMOTE_OPTION) or None
    settings = tuple(sorted((k[len(REMOTE_OPTION_PREFIX):], v) for k, v in options.items()
                            if k.startswith(REMOTE_OPTION_PREFIX)))
    return url, settings


def remote_segments(url: str, settings: Iterable[tuple[str, str]], topic: str, partition: int,
                    local_dir: str | None) -> list[tuple[int, str]]:
    """(start offset, object URL) of each remote ``.log`` of one partition, sorted, one per start offset. The
    partition's topic id comes from the local ``partition.metadata``; without one, the store's directory of that
    topic-partition when there is exactly one."""
    fs, root = fsspec_filesystem(url, dict(settings))
    topic_id = None
    if local_dir is not None:
        try:
            topic_id = kafka_uuid_to_string(read_partition_metadata(Path(local_dir) / "partition.metadata").topic_id)
        except (KcliError, OSError):
            topic_id = None
    if topic_id is not None:
        names = [f"{topic}-{partition}-{topic_id}"]
    else:
        try:
            listed = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
        except FileNotFoundError:
            listed = []
        names = [n for n in listed if (m := _PARTITION_DIR.match(n)) and m.group(1) == topic
                 and int(m.group(2)) == partition]
        if len(names) > 1:
            raise KcliError(f"{url}: several remote directories for {topic}-{partition} ({', '.join(sorted(names))})"
                            " and no partition.metadata naming the topic id", path=url)
    found: dict[int, str] = {}
    for name in names:
        try:
            keys = sorted(fs.ls(f"{root}/{name}", detail=False))
        except FileNotFoundError:
            continue
        for key in keys:
            match = _LOG_OBJECT.match(key.rsplit("/", 1)[-1])
            if match is not None:
                found.setdefault(int(match.group(1)), fs.unstrip_protocol(key))
    return sorted(found.items())


def plan_remote(dirs: Iterable[PartitionDir], bounds: Bounds, url: str,
                settings: tuple[tuple[str, str], ...]) -> list[SegmentSplit]:
    """One split per remote segment of each chosen partition directory below its first local offset (the
    bounds' topics, partitions and offsets prune as for local segments)."""
    if bounds.empty:
        return []
    out: list[SegmentSplit] = []
    for pdir in dirs:
        if pdir.partition is None or not (bounds.topics is None or pdir.topic in bounds.topics):
            continue
        if not (bounds.partition.unbounded or bounds.partition.contains(pdir.partition)):
            continue
        local_start = pdir.bases[0] if pdir.bases else None
        segments = remote_segments(url, settings, pdir.topic, pdir.partition, pdir.path)
        starts = [start for start, _ in segments]
        low, high = bounds.offset.low, bounds.offset.high
        for i, (start, key) in enumerate(segments):
            if local_start is not None and start >= local_start:
                break  # the local segments hold these offsets
            next_start = starts[i + 1] if i + 1 < len(starts) else None
            if local_start is not None and (next_start is None or next_start > local_start):
                next_start = local_start
            if (high is not None and start > high) or (low is not None and next_start is not None
                                                       and next_start <= low):
                continue
            if bounds.offset.values is not None and low is None:
                continue
            out.append(SegmentSplit(pdir.topic, pdir.partition, pdir.path, key, start, next_start,
                                    pdir.bases, 0, None, remote_options=settings, below=local_start))
    return out


@contextmanager
def fetched_segment(url: str, settings: Iterable[tuple[str, str]]) -> Iterator[str]:
    """One remote ``.log`` object copied to a temporary file (removed on exit): its path."""
    fs, key = fsspec_filesystem(url, dict(settings))
    fd, path = tempfile.mkstemp(prefix="kctl-remote-", suffix=".log")
    os.close(fd)
    try:
        fs.get_file(key, path)
        yield path
    finally:
        os.unlink(path)
