"""ZkOffsetStore: the old consumers' offsets in ZooKeeper (``/consumers/<group>/offsets/<topic>/<partition>``),
read with kazoo's async calls (many requests in flight per round trip) and written only for a roll-back
(``kctl offsets migrate --to-zookeeper``, ``kctl offsets import --to zookeeper``).

Errors name the znode: a malformed offset raises ZnodeFormatError, a lost session ZooKeeperConnectionError.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.exceptions import (
    EXCEPTIONS,
    BadArgumentsError,
    KazooException,
    MarshallingError,
    NoAuthError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    UnimplementedError,
)
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    MultiHeader,
    ZnodeStat,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)

from kcli.errors import KcliError
from kcli.zk import models, paths
from kcli.zk.registry import CONSUMERS, ZkRegistry, ZnodeAccessError, ZnodeMissingError

TopicPartition = tuple[str, int]
CHUNK = 1000  # groups per burst of reads
MULTI_READ_OPS = 1000  # reads per multiRead request (responses stay far below jute.maxbuffer's 1 MiB)


class MultiRead(namedtuple("MultiRead", "operations")):
    """ZooKeeper 3.6+'s multiRead (OpCode 22, ZOOKEEPER-3406): many getData/getChildren in one request, each
    answered on its own (a missing znode fails only its own read). Shaped like kazoo's request classes so
    kazoo's connection sends it; ``operations`` are (GetData.type or GetChildren.type, full path)."""

    type = 22

    def serialize(self) -> bytearray:
        b = bytearray()
        for op_type, path in self.operations:
            b.extend(MultiHeader(op_type, False, -1).serialize() + write_string(path) + b"\x00")  # watch: false
        return b + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GetData.type:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                results.append((value, stat))
            elif header.type == GetChildren.type:
                count = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(data, offset)
                    children.append(child)
                results.append(children)
            else:  # -1: an error result, its code follows
                err = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[err]())
            header, offset = MultiHeader.deserialize(data, offset)
        return results


def consumer_group(group: str) -> str:
    return paths.child(CONSUMERS, group)


def offsets_dir(group: str) -> str:
    return f"{consumer_group(group)}/offsets"


def offset_path(group: str, topic: str, partition: int) -> str:
    return paths.consumer_offset(group, topic, partition)


def ids_dir(group: str) -> str:
    return f"{consumer_group(group)}/ids"


class ZkOffsetStore(ZkRegistry):
    """The ZooKeeper side of an offset migration, as kcli.tools.offsets sees a store."""

    kind = "zookeeper"

    @property
    def location(self) -> str:
        return self.connect.text

    _multi_read: bool | None = None  # None: not yet known whether the server serves multiRead
    read_errors: dict[str, str] = {}  # group -> why its offsets cannot be read (a malformed znode); per read()

    def _wait(self, pending: list[tuple[Any, str, Any]], doing: str) -> list[tuple[Any, Any]]:
        """Results of async calls in order; a missing znode yields None, other failures raise naming the path."""
        out = []
        for key, path, async_result in pending:
            try:
                with self._zk(doing, path):
                    value = async_result.get(timeout=self.timeout)
            except ZnodeMissingError:
                value = None
            out.append((key, value))
        return out

    def _read_many(self, op_type: int, znodes: list[str]) -> list[Any]:
        """getData ((data, stat)) or getChildren (names) of many znodes, None for a missing one: multiRead
        batches when the server has it (one round trip per thousand), else one async call per znode."""
        if not znodes:
            return []
        client = self._require()
        doing = "reading" if op_type == GetData.type else "listing"
        if self._multi_read is None:
            self._multi_read = self._try_multi_read(client)
        if not self._multi_read:
            call = client.get_async if op_type == GetData.type else client.get_children_async
            return [v for _, v in self._wait([(p, p, call(p)) for p in znodes], doing)]
        pending = []
        for start in range(0, len(znodes), MULTI_READ_OPS):
            chunk = znodes[start:start + MULTI_READ_OPS]
            async_result = client.handler.async_result()
            client._call(MultiRead([(op_type, (client.chroot or "") + p) for p in chunk]), async_result)
            pending.append((chunk, async_result))
        out: list[Any] = []
        for chunk, async_result in pending:
            with self._zk(doing, chunk[0]):
                results = async_result.get(timeout=self.timeout)
            for path, value in zip(chunk, results):
                if isinstance(value, NoNodeError):
                    out.append(None)
                elif isinstance(value, NoAuthError):
                    raise ZnodeAccessError("ZooKeeper's ACL refuses the read", path=self._where(path))
                elif isinstance(value, KazooException):
                    raise KcliError(f"ZooKeeper refused {doing} {self._where(path)}: {type(value).__name__}")
                else:
                    out.append(value)
        return out

    def _try_multi_read(self, client: Any) -> bool:
        async_result = client.handler.async_result()
        client._call(MultiRead([(GetChildren.type, client.chroot or "/")]), async_result)
        with self._zk("probing multiRead at", "/"):
            try:
                result = async_result.get(timeout=self.timeout)
            except (UnimplementedError, MarshallingError, BadArgumentsError, RuntimeInconsistency):
                return False  # ZooKeeper < 3.6
        return isinstance(result, list) and len(result) == 1 and isinstance(result[0], list)

    def list_groups(self) -> list[str]:
        return self._children_or_empty(CONSUMERS)

    def read(self, groups: Sequence[str], progress: Callable[[int], None] | None = None,
             topics: Sequence[str] | None = None) -> dict[str, dict[TopicPartition, int]]:
        """Stored offsets per group (a group without offsets maps to {})."""
        wanted = set(topics) if topics else None
        out: dict[str, dict[TopicPartition, int]] = {}
        self.read_errors = {}
        for start in range(0, len(groups), CHUNK):
            chunk = list(groups[start:start + CHUNK])
            for group in chunk:
                paths.child(CONSUMERS, group)  # a name that is no znode is refused before any read
                out[group] = {}
            listed = self._read_many(GetChildren.type, [offsets_dir(g) for g in chunk])
            topic_dirs = [(g, t) for g, names in zip(chunk, listed) for t in sorted(names or ())
                          if wanted is None or t in wanted]
            listed = self._read_many(GetChildren.type, [paths.child(offsets_dir(g), t) for g, t in topic_dirs])
            keys = []
            for (group, topic), names in zip(topic_dirs, listed):
                for name in names or ():
                    if not name.isascii() or not name.isdigit():
                        path = f"{paths.child(offsets_dir(group), topic)}/{name}"
                        self.read_errors.setdefault(group, models.ZnodeFormatError(
                            f"{name!r} is not a partition number", path=self._where(path)).describe())
                        continue
                    keys.append((group, topic, int(name)))
            values = self._read_many(GetData.type, [offset_path(g, t, p) for g, t, p in keys])
            for (group, topic, partition), value in zip(keys, values):
                if value is None:
                    continue  # deleted between the listing and the read
                path = offset_path(group, topic, partition)
                try:
                    out[group][(topic, partition)] = models.parse_offset(self._where(path), value[0])
                except models.ZnodeFormatError as exc:  # refuses this group only, not the whole plan
                    self.read_errors.setdefault(group, exc.describe())
            for group in chunk:
                out[group] = {} if group in self.read_errors else dict(sorted(out[group].items()))
            if progress is not None:
                progress(len(chunk))
        return out

    def live_members(self, groups: Sequence[str]) -> dict[str, str | None]:
        """Consumers registered under /consumers/<group>/ids (ephemeral: they are running)."""
        out: dict[str, str | None] = {}
        for start in range(0, len(groups), CHUNK):
            chunk = list(groups[start:start + CHUNK])
            for group, names in zip(chunk, self._read_many(GetChildren.type, [ids_dir(g) for g in chunk])):
                out[group] = (f"{len(names)} consumer(s) registered in ZooKeeper at {self._where(ids_dir(group))}"
                              if names else None)
        return out

    def write(self, group: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, str | None]:
        """Set (or create) the group's offset znodes, plain decimal text as the old consumer wrote it, in one
        ZooKeeper transaction: the group is written completely or not at all."""
        client = self._require()
        items = sorted(offsets.items())
        topic_dirs = sorted({paths.child(offsets_dir(group), t) for (t, _), _ in items})
        for path, found in zip(topic_dirs, self._read_many(GetData.type, topic_dirs)):
            if found is None:
                with self._zk("creating", path):
                    client.ensure_path(path)
        existing = self._read_many(GetData.type, [offset_path(group, t, p) for (t, p), _ in items])
        transaction = client.transaction()
        for ((topic, partition), offset), found in zip(items, existing):
            data = str(offset).encode()
            if found is None:
                transaction.create(offset_path(group, topic, partition), data)
            else:
                transaction.set_data(offset_path(group, topic, partition), data)
        first = offset_path(group, *items[0][0]) if items else offsets_dir(group)
        with self._zk("writing", first):
            results = transaction.commit_async().get(timeout=self.timeout)
        failed = [(tp, r) for ((tp, _), r) in zip(items, results) if isinstance(r, Exception)
                  and not isinstance(r, RolledBackError)]
        if failed:
            (topic, partition), error = failed[0]
            raise KcliError(f"ZooKeeper refused the transaction for group {group}: {type(error).__name__}",
                            path=self._where(offset_path(group, topic, partition)))
        return {tp: None for tp in offsets}


def consumer_lag(offsets: dict[str, dict[int, int]], ranges: Any) -> dict[TopicPartition, tuple[int | None, int | None]]:
    """(log end offset, lag) per stored offset; ``ranges`` has topic_partitions/log_offsets (kcli.client's
    KafkaClient). A topic or partition the cluster does not have gets (None, None)."""
    counts = ranges.topic_partitions(sorted(offsets))
    present = [(t, p) for t, parts in offsets.items() for p in parts
               if counts.get(t) is not None and p < counts[t]]
    ends = ranges.log_offsets(present) if present else {}
    out: dict[TopicPartition, tuple[int | None, int | None]] = {}
    for topic, parts in offsets.items():
        for partition, offset in parts.items():
            rng = ends.get((topic, partition))
            out[(topic, partition)] = (rng[1], rng[1] - offset) if rng else (None, None)
    return out
