"""The `kctl` root command: every subcommand by name (imported when used), --version, and the exit-code contract."""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Optional

import typer
from typer.main import get_command

from kcli import __version__
from kcli.cli.common import KctlGroup
from kcli.cli.lazy import Mount

# Every command kctl has, in the order `kctl --help` lists them: its name, where it is defined (a command
# function, or a typer.Typer of subcommands), its help panel and its help line. Nothing here is imported until
# the command is run, completed into or asked for its help (cli/lazy.py); each runs under cli/errors.py's
# exit-status table (guarded): one line and a status, never a traceback. The help line is the first sentence of
# the command's own help (its docstring): tests/cli/test_lazy_mount.py checks the table against the commands.
MOUNTS = (
    Mount("dump-log", "kcli.cli.dump_log:dump_log", "Offline tools",
          "Dump log segments, indexes, producer snapshots, checkpoints and internal topics."),
    Mount("cat", "kcli.cli.cat:cat_cmd", "Offline tools",
          "Print the records of log files as kcat -C prints a topic: the value per line, or a -f format."),
    Mount("verify", "kcli.cli.verify:verify_cmd", "Offline tools",
          "Verify CRCs, batch framing, offsets, indexes, the .txnindex, producer snapshots and checkpoints."),
    Mount("recover", "kcli.cli.recover:recover_cmd", "Offline tools",
          "Recover partitions as a broker's LogLoader would: finish or discard leftovers of interrupted operations, "
          "truncate each partition at its first invalid byte (dropping later segments), rebuild indexes, snapshots "
          "and leader epochs."),
    Mount("compact", "kcli.cli.compact:compact_cmd", "Offline tools",
          "Compact partitions as Kafka's log cleaner would: keep the latest record per key at its offset, "
          "tombstones until their delete horizon, drop aborted transactional data and obsolete markers; the broker "
          "must be stopped."),
    Mount("scan", "kcli.cli.scan:scan_cmd", "Offline tools",
          "Per topic-partition statistics: record counts, bytes by codec, offset and timestamp ranges, distinct "
          "keys, tombstone ratio, largest records, timestamp anomalies."),
    Mount("convert-07", "kcli.cli.kafka07:convert07_cmd", "Offline tools",
          "Convert a Kafka 0.7 log into a modern topic's partition, the broker stopped: each message becomes a record "
          "(a compressed wrapper one batch of the same codec), offsets renumbered from 0, and kafka07-offsets.csv "
          "(byte_offset,offset,records per 0.7 message) written beside the new segments."),
    Mount("acls", "kcli.cli.acls:acls_cmd", "Broker",
          "ACLs as kafka-acls manages them: --add, --remove or --list, through a broker (--bootstrap-server; the "
          "broker needs authorizer.class.name) or offline in ZooKeeper (--zookeeper)."),
    Mount("metrics", "kcli.cli.metrics:metrics_cmd", "Broker",
          "A broker's current metrics (its GET /metrics, Prometheus' text format): name, labels and value per "
          "line."),
    Mount("elect-leaders", "kcli.cli.elect_leaders:elect_leaders_cmd", "Broker",
          "Leader elections as kafka-leader-election runs them (ElectLeaders to the controller): give "
          "--all-topic-partitions, --topic [--partition] or --path-to-json-file."),
    Mount("reassign", "kcli.cli.reassign:reassign_cmd", "Broker",
          "Partition reassignment as kafka-reassign-partitions does it: exactly one of --generate, --execute, "
          "--verify, --cancel, --list."),
    Mount("configs", "kcli.cli.configs:configs_cmd", "Broker",
          "Configs as kafka-configs shows and changes them: --describe or --alter of --entity-type topics|brokers "
          "(DescribeConfigs, with each value's source and synonyms; IncrementalAlterConfigs) or users|clients|ips "
          "(quotas and users' SCRAM credentials, through a broker or in ZooKeeper with -z), --entity-name N or "
          "--entity-default."),
    Mount("produce", "kcli.cli.produce:produce_cmd", "Broker",
          "Write records read from standard input (or -F FILE), one per line or per --delimiter, to TOPIC: kcat "
          "-P, kafka-console-producer."),
    Mount("consume", "kcli.cli.consume:consume_cmd", "Broker",
          "Print the records of TOPIC as kcat -C prints them: the value per line, or a -f format, or --json."),
    Mount("completion", "kcli.cli.completion:completion_cmd", "Shell",
          "Print the completion script for SHELL: commands, subcommands, options and choices complete."),
    Mount("broker", "kcli.cli.broker:app", "Broker", "Run a Kafka-protocol broker that real clients use."),
    Mount("cluster", "kcli.cli.cluster:app", "Broker",
          "Run a local cluster (ZooKeeper and brokers on 127.0.0.1) to try kctl."),
    Mount("zk", "kcli.cli.zk:app", "ZooKeeper",
          "Read-only views of Kafka's registries in ZooKeeper (brokers, topics, controller, consumers, configs, "
          "admin requests) and generic ls/get/tree."),
    Mount("offsets", "kcli.cli.offsets:app", "ZooKeeper",
          "Move consumer offsets between ZooKeeper, Kafka and files: migrate ZooKeeper-stored offsets into "
          "__consumer_offsets (plan, backup, commit, verify), roll back, export and import; find the offsets for a "
          "time (for-time)."),
    Mount("transactions", "kcli.cli.transactions:app", "Broker",
          "List, describe, find hanging and abort transactions (KIP-98, KIP-664), as Kafka's kafka-transactions.sh."),
    Mount("groups", "kcli.cli.groups:app", "Broker",
          "Consumer groups, as kafka-consumer-groups.sh: list, describe (members, assignment, committed offsets, "
          "lag), delete, delete-offsets, reset-offsets (plan, backup, commit, verify) and export; list and describe "
          "also offline on a stopped broker's log dir (--log-dir)."),
    Mount("topics", "kcli.cli.topics:app", "Broker",
          "Topics: a per-topic rollup of log dirs (kctl topics DIR), and kafka-topics' list, describe, create, "
          "delete, alter-config and add-partitions (alter) against any Kafka-protocol broker."),
    Mount("log-dirs", "kcli.cli.log_dirs:app", "Broker",
          "Log directories of a running cluster's brokers: sizes per partition, volume space (kafka-log-dirs)."),
    Mount("users", "kcli.cli.users:app", "Broker",
          "Users' SCRAM credentials (kafka-configs --entity-type users): list, describe, set-scram, delete-scram, "
          "through a broker (-b) or straight in ZooKeeper (-z)."),
    Mount("quotas", "kcli.cli.quotas:app", "Broker",
          "Client quotas of users and client ids (kafka-configs --entity-type users|clients): describe, alter, "
          "through a broker (-b) or straight in ZooKeeper (-z)."),
)


class RootGroup(KctlGroup):
    mounts = MOUNTS


app = typer.Typer(
    cls=RootGroup,  # the commands of MOUNTS; --command-config and -X for those that talk to a broker
    name="kctl",
    help="Operations toolkit for Kafka logs: dump and verify segments, indexes, snapshots and log directories.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """Operations toolkit for Kafka logs. Exit status: 0 ok, 1 problems found, 2 usage error, 3 unreadable input."""


@functools.cache
def command():  # -> typer's click Command (typer vendors click)
    """kctl's click command tree, built once per process; processes forked from one that built it (the test suite's
    fork servers) reuse it, with the commands they loaded."""
    return get_command(app)


def main() -> None:
    # kio (the Kafka protocol's types) registers a hypothesis strategy for each of its types when hypothesis can
    # be imported (a test environment), 0.25 s of every command that talks to Kafka; kctl itself never uses one.
    # The program, unlike the library, says hypothesis is absent (unless something imported it already).
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    # One program name however it is started (`kctl`, `python -m kcli`): usage lines, and the completion
    # variable _KCTL_COMPLETE that `kctl completion` scripts set. What typer's app() does, with the tree cached
    # (its pretty exceptions are off: cli/errors.py's table reports every error).
    command()(prog_name="kctl")
