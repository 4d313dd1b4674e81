"""kctl's start-up: what `--help`, `--version`, a command's `--help` and shell completion import.

Scripts run kctl in loops, the shell runs the whole program for every TAB, and each library a command needs is
imported when that command runs (cli/*.py import them inside the command functions). These tests start kctl
as a process under ``python -X importtime`` and assert on the list of modules it imported, never on timings.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support import REPO

# Modules that no start-up path may import: the offline tools and storage engine, the admin client, the broker,
# ZooKeeper, Spark, the event loop, and rich's console, tables and progress bars (printing is what loads them).
HEAVY = (
    "kcli.records",
    "kcli.storage",
    "kcli.tools.dump",
    "kcli.tools.verify",
    "kcli.tools.scan",
    "kcli.tools.compact",
    "kcli.tools.recover",
    "kcli.storage.cleaner",
    "kcli.storage.recovery",
    "kcli.client",
    "kcli.broker",
    "kcli.broker.server",
    "kcli.cluster",
    "kcli.zk",
    "kcli.spark",
    "pyspark",
    "kazoo",
    "asyncio",
    "multiprocessing",
    "concurrent.futures",
    "rich.console",
    "rich.table",
    "rich.progress",
)


def imported_modules(*args: str, env: dict[str, str] | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules `python -X importtime -m kcli ARGS` imported (importtime's report on stderr), and the run."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kcli", *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )
    modules = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the report's header line
                modules.add(name)
    assert "kcli.cli.app" in modules, proc.stderr[-2000:]
    return modules, proc


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [
    ["--help"],
    ["--version"],
    ["dump-log", "--help"],
    ["cat", "--help"],
    ["verify", "--help"],
    ["recover", "--help"],
    ["compact", "--help"],
    ["scan", "--help"],
    ["broker", "run", "--help"],
    ["cluster", "--help"],
    ["zk", "--help"],
    ["groups", "--help"],
    ["topics", "--help"],
    ["offsets", "--help"],
    ["transactions", "--help"],
    ["completion", "bash"],
], ids=" ".join)
def test_start_up_imports_no_library(args):
    modules, proc = imported_modules(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert heavy_in(modules) == [], f"kctl {' '.join(args)} imported {heavy_in(modules)}"


def test_a_tab_imports_no_library():
    """The _KCTL_COMPLETE protocol (what `kctl completion` scripts run for each TAB) answers from the CLI alone."""
    modules, proc = imported_modules(env={"_KCTL_COMPLETE": "complete_bash", "COMP_WORDS": "kctl dump-log --key-enc",
                                          "COMP_CWORD": "2"})
    assert proc.returncode == 0 and "--key-encoding" in proc.stdout, proc.stderr[-2000:]
    assert heavy_in(modules) == []


def test_a_usage_error_imports_no_library():
    modules, proc = imported_modules("dump-log")  # no files: exit 2 with kctl's own one-line message
    assert proc.returncode == 2 and "kctl: Missing required argument" in proc.stderr
    assert heavy_in(modules) == []  # a plain one-line message goes straight to stderr (cli/errors.py)


def test_plain_messages_print_as_rich_prints_them(capsys):
    """err_console's shortcut for a plain line writes what rich's console would; anything else goes to rich."""
    import io

    from rich.console import Console

    from kcli.cli.errors import _StderrConsole

    for text in ("warning: p/00.index (offset 0): offset index is missing [missing_index]", "kctl: 127.0.0.1:1: no",
                 "a  b   ", "x" * 300, "", "tab\there", "a:smile:b", "caf\u00e9 \u4e2d", "[bold]x[/bold]", "bell\x07"):
        buffer = io.StringIO()
        Console(file=buffer, highlight=False, soft_wrap=True).print(text, markup=False)
        _StderrConsole().print(text, markup=False)
        assert capsys.readouterr().err == buffer.getvalue(), repr(text)


def test_running_a_command_imports_its_library():
    """The other side: the laziness moved the imports, it did not lose them (a check of this test's parsing)."""
    modules, proc = imported_modules("verify", "sample-logs/kafka-logs")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"kcli.tools.verify", "kcli.storage.segment", "kcli.records.batch"} <= modules


def test_defaults_kept_in_the_cli_match_the_library():
    """Option defaults the CLI states itself so that --help need not import the library."""
    from kcli.cli import compact as compact_cli, scan as scan_cli
    from kcli.storage.cleaner import DEFAULT_MAX_MEMORY
    from kcli.tools.scan import DEFAULT_TOP

    assert compact_cli.DEFAULT_MAX_MEMORY == DEFAULT_MAX_MEMORY
    assert scan_cli.DEFAULT_TOP == DEFAULT_TOP


def test_reading_records_loads_crc32c_without_its_package_init():
    """kcli.records.crc loads the crc32c package's C module alone: the package's __init__ imports
    importlib.metadata and argparse (40-60 ms); a later `import crc32c` runs it and finds the same function."""
    code = ("import sys; from kcli.records.crc import crc32c; "
            "print(crc32c(b'123456789'), 'crc32c' in sys.modules); "
            "import crc32c as package; print(package.crc32c is crc32c)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(0xE3069283), "False", "True"]


# -- the offline commands at work: what `kctl verify`, `dump-log` and `cat` of a small file may import ------------
# Issue 31: each command imports only what it runs. None of these runs the broker, a client, ZooKeeper or Spark,
# the event loop, the protocol's types (kio), typer's pydantic conversion, or another command's module.
OFFLINE_FORBIDDEN = (
    "kcli.broker", "kcli.client", "kcli.cluster", "kcli.zk", "kcli.spark", "kcli.protocol",
    "pyspark", "kazoo", "confluent_kafka", "kafka", "kio", "hypothesis", "asyncio", "ssl", "multiprocessing",
    "concurrent.futures", "pydantic", "pydantic_core", "typer._adapters", "aiokafka.client", "aiokafka.producer",
    "aiokafka.consumer", "aiokafka.record.memory_records", "importlib.metadata",
)
# The CLI's own modules any command imports: the entry, its plumbing, the mount table's loader.
CLI_CORE = {"kcli.cli", "kcli.cli.app", "kcli.cli.common", "kcli.cli.errors", "kcli.cli.lazy", "kcli.cli.coercion"}
SEGMENT = "sample-logs/kafka-logs/orders-0/00000000000000000000.log"  # 24 KiB: v2 batches of every codec


@pytest.mark.parametrize(("args", "own"), [
    (["verify", "sample-logs/kafka-logs/orders-0"], {"kcli.cli.verify"}),
    (["verify", SEGMENT], {"kcli.cli.verify"}),
    (["verify", "--deep", "sample-logs/kafka-logs"], {"kcli.cli.verify"}),
    (["dump-log", SEGMENT], {"kcli.cli.dump_log"}),
    (["dump-log", "--deep-iteration", "--print-data-log", SEGMENT], {"kcli.cli.dump_log"}),
    (["cat", SEGMENT], {"kcli.cli.cat", "kcli.cli.dump_log"}),
], ids=lambda v: " ".join(sorted(v) if isinstance(v, set) else v))  # a set's order differs between xdist workers
def test_offline_commands_import_only_what_they_run(args, own):
    modules, proc = imported_modules(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    forbidden = sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in OFFLINE_FORBIDDEN))
    assert forbidden == [], f"kctl {' '.join(args)} imported {forbidden}"
    assert {m for m in modules if m.startswith("kcli.cli")} == CLI_CORE | own


def test_a_plain_v2_verify_loads_no_codec_and_no_compiled_reader(tmp_path):
    """A partition of uncompressed batches: no codec library and no aiokafka at all (verify reads no records)."""
    from kcli.records import Codec, Record
    from kcli.storage.log import LogConfig, PartitionLog

    partition = tmp_path / "t-0"
    with PartitionLog(partition, config=LogConfig(segment_bytes=4096)) as log:
        for i in range(40):
            log.append([Record(0, 1_700_000_000_000 + i, b"k%d" % i, b"v" * 100)], codec=Codec.NONE)
    modules, proc = imported_modules("verify", str(partition))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    loaded = sorted(m for m in modules if m.split(".")[0] in ("lz4", "snappy", "zstandard", "cramjam", "aiokafka"))
    assert loaded == []


def test_an_online_command_before_it_connects_imports_no_test_library():
    """An online command imports the protocol (kio) and the client, but not hypothesis (kio's optional hook), the
    broker, Spark, ZooKeeper's client or typer's pydantic conversion, before it gets to connect."""
    modules, proc = imported_modules("consume", "-b", "127.0.0.1:1", "--timeout", "1", "t")
    assert proc.returncode == 3 and "127.0.0.1:1" in proc.stderr, proc.stderr[-2000:]
    assert {"kio", "kcli.client.client"} <= modules
    # (importtime also lists an import that failed: kio's `import hypothesis.strategies` is tried, and refused)
    forbidden = sorted(m for m in modules if m in ("hypothesis", "hypothesis.core", "pydantic", "pyspark", "kazoo")
                       or m.startswith(("kcli.broker", "kcli.spark", "kcli.zk", "typer._adapters")))
    assert forbidden == []
