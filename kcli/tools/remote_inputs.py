"""Remote segments (tiered storage, KIP-405) as inputs of the offline tools: an fsspec URL names one object, a
partition's directory or a whole store (kcli.storage.remote's layout); its segment objects are fetched into a
temporary directory laid out as Kafka's (``<topic>-<partition>/<20-digit offset>.log`` and indexes), the tool
reads them as local files, and every file name it reports maps back to the object's URL (``remote_name``)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kcli.errors import InputError
from kcli.storage.remote import fsspec_filesystem
from kcli.tools.report import Problem, Severity

# <20-digit start offset>-<22-character segment id>.<kind>, kcli.storage.remote's object names
_OBJECT = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.(log|index|timeindex|txnindex)$")
_LOCAL_SUFFIX = {"log": ".log", "index": ".index", "timeindex": ".timeindex", "txnindex": ".txnindex"}


def is_remote(path: str) -> bool:
    return "://" in path


@dataclass
class RemoteInputs:
    paths: list[str]  # what the tool reads: local paths as given, fetched copies for URLs
    names: dict[str, str] = field(default_factory=dict)  # a fetched copy's path -> the object's URL
    warnings: list[Problem] = field(default_factory=list)  # objects not read (a second upload of a segment)

    def remote_name(self, local: str) -> str:
        if local in self.names:
            return self.names[local]
        for path, url in self.names.items():  # a directory of fetched copies
            parent = str(Path(path).parent)
            if local == parent:
                return url.rsplit("/", 1)[0]
        return local

    def rename_problems(self, problems: list[Any]) -> list[Any]:
        """Problems (kcli.tools.report.Problem) naming fetched copies name the objects instead."""
        return [replace(p, file=self.remote_name(p.file)) if p.file in self.names or any(
            p.file == str(Path(k).parent) for k in self.names) else p for p in problems]


def parse_storage_options(items: list[str] | None) -> dict[str, str]:
    """``--storage-option KEY=VALUE`` (repeatable): fsspec storage options (s3fs: endpoint_url, key, secret)."""
    options: dict[str, str] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not key or not eq:
            raise InputError(f"--storage-option {item!r}: give KEY=VALUE")
        options[key.strip()] = value
    return options


def broker_storage_options(props: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """The remote store of a broker's server.properties: (rsm.config.url, the other rsm.config.* options)."""
    prefix = props.get("remote.log.storage.manager.impl.prefix") or "rsm.config."
    settings = {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}
    return settings.pop("url", None), settings


@contextmanager
def remote_inputs(paths: list[str], options: Mapping[str, str] | None = None) -> Iterator[RemoteInputs]:
    """Fetch the segment objects the URLs among ``paths`` name into a temporary directory (removed on exit)."""
    if not any(is_remote(p) for p in paths):
        yield RemoteInputs(list(paths))
        return
    with tempfile.TemporaryDirectory(prefix="kctl-remote-") as tmp:
        out = RemoteInputs([])
        for index, path in enumerate(paths):
            if not is_remote(path):
                out.paths.append(path)
                continue
            fs, root = fsspec_filesystem(path, options or {})
            local_root = Path(tmp) / str(index)
            try:
                if fs.isfile(root):
                    keys = [root]
                else:
                    keys = sorted(k for k in fs.find(root) if _OBJECT.match(k.rsplit("/", 1)[-1]))
            except OSError as exc:
                raise InputError(f"cannot list {path}: {exc}", path=path) from exc
            if not keys:
                raise InputError(f"no remote log segments under {path}", path=path)
            seen: set[str] = set()
            for key in keys:
                name = key.rsplit("/", 1)[-1]
                match = _OBJECT.match(name)
                parent = key.rsplit("/", 2)[-2] if key.count("/") else "remote"
                if match is None:
                    local = local_root / parent / name
                else:
                    local = local_root / _partition_dir(parent) / (match.group(1) + _LOCAL_SUFFIX[match.group(3)])
                if str(local) in seen:
                    out.warnings.append(Problem(fs.unstrip_protocol(key), None, int(match.group(1)) if match else None,
                                                "another upload of the same segment was read instead (a copy "
                                                "not finished, or not yet deleted?)", "remote_duplicate_segment",
                                                Severity.WARNING))
                    continue
                seen.add(str(local))
                local.parent.mkdir(parents=True, exist_ok=True)
                try:
                    fs.get_file(key, str(local))
                except OSError as exc:
                    raise InputError(f"cannot read {fs.unstrip_protocol(key)}: {exc}", path=fs.unstrip_protocol(key)) from exc
                out.names[str(local)] = fs.unstrip_protocol(key)
            if fs.isfile(root):
                out.paths.append(str(next(iter(p for p, u in out.names.items() if u == fs.unstrip_protocol(root)))))
            else:
                out.paths.append(str(local_root))
        yield out


def _partition_dir(name: str) -> str:
    """``<topic>-<partition>-<22-character topic id>`` -> ``<topic>-<partition>``, as Kafka names it locally."""
    if len(name) > 23 and name[-23] == "-":
        return name[:-23]
    return name
