"""Exception tree shared by every layer: each carries the file and byte position it is about."""

from __future__ import annotations


class KcliError(Exception):
    """Root of kcli's exceptions.

    ``path`` names the file (or request) and ``position`` the byte position of the
    problem, when known, so that every error message can point at the damage.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        position: int | None = None,
        base_offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.path = path
        self.position = position
        self.base_offset = base_offset
        super().__init__(self.describe())

    def describe(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.position is not None:
            where.append(f"byte {self.position}")
        if self.base_offset is not None:
            where.append(f"base offset {self.base_offset}")
        return f"{', '.join(where)}: {self.reason}" if where else self.reason

    def at(self, *, path: str | None = None, position: int | None = None) -> KcliError:
        """Fill in location details known only to the caller; returns self for ``raise e.at(...)``."""
        if path is not None and self.path is None:
            self.path = path
        if position is not None and self.position is None:
            self.position = position
        self.args = (self.describe(),)
        return self


class CorruptRecordError(KcliError):
    """A batch or record does not decode: framing, CRC, varints, compression."""


class CorruptBatchSizeError(CorruptRecordError):
    """A batch length below the minimum record overhead (a zero-filled tail, usually): reading stops there."""


class CorruptIndexError(KcliError):
    """An .index, .timeindex or .txnindex file is inconsistent or malformed."""


class CorruptSnapshotError(KcliError):
    """A producer-state .snapshot file fails its version, schema or CRC check."""


class CorruptCheckpointError(KcliError):
    """A text checkpoint file, partition.metadata or meta.properties is malformed."""


class UnsupportedCodecError(KcliError):
    """A compression codec id kcli does not know (or that is not allowed for the magic)."""


class UnsupportedCompressionTypeError(UnsupportedCodecError):
    """Kafka's UnsupportedCompressionTypeException: data the requested format cannot carry, e.g. a zstd batch
    down-converted for a Fetch older than v10 (a broker answers UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = "UNSUPPORTED_COMPRESSION_TYPE"


class InputError(KcliError):
    """The input cannot be read at all: missing file, permission denied, not a Kafka file."""


class UsageError(KcliError):
    """The request itself is wrong (an inverted range, options that contradict each other): nothing was read."""


def describe_os_error(exc: OSError, path: object = None) -> str:
    """``path: reason`` for an OSError, naming the file it concerns (``exc.filename`` when the caller has none)."""
    where = exc.filename if exc.filename is not None else path
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{where}: {reason}" if where is not None else reason


class PortInUseError(UsageError):
    """A loopback port a launcher was told (or chose earlier) to use is taken by another process."""


class BadVersion(KcliError):
    """A versioned metadata write (a ZooKeeper node or the standalone store's document) expected another version:
    someone else changed it since it was read (ZooKeeper's BADVERSION / NODEEXISTS); re-read and retry."""
