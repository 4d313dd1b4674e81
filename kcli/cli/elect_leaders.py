"""`kctl elect-leaders`: kafka-leader-election. Preferred or unclean leader elections for every partition, a
topic's partitions, one partition, or the partitions of a JSON file (ElectLeaders to the controller).

Thin: kcli.client.elections does the request; this parses the options and prints Kafka's lines.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ExitCode, JsonOpt, err_console, fail, kafka_client, request_timeout_ms,
                             write_json_line)
from kcli.errors import KcliError


class Election(str, enum.Enum):
    preferred = "preferred"
    unclean = "unclean"


def elect_leaders_cmd(
    election_type: Annotated[Election, typer.Option(
        "--election-type", case_sensitive=False, help="preferred: move leadership back to each partition's "
        "first replica; unclean: elect a replica outside the ISR where no in-sync replica is alive (may lose "
        "acknowledged records).")] = Election.preferred,
    all_topic_partitions: Annotated[bool, typer.Option(
        "--all-topic-partitions", help="Every partition of the cluster (only those that needed an election are "
        "reported).")] = False,
    topic: Annotated[Optional[str], typer.Option("--topic", metavar="TOPIC", show_default=False,
                                                 help="A topic: its partitions (or --partition's).")] = None,
    partition: Annotated[Optional[int], typer.Option("--partition", min=0, metavar="N", show_default=False,
                                                     help="With --topic: only this partition.")] = None,
    json_file: Annotated[Optional[Path], typer.Option(
        "--path-to-json-file", metavar="FILE", show_default=False,
        help='Partitions from a JSON file: {"partitions": [{"topic": '
        '"t", "partition": 0}, ...]}.')] = None,
    bootstrap: BootstrapOpt = None,
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker "
                                           "request (the broker gets a second less for the election).")] = 10.0,
) -> None:
    """Leader elections as kafka-leader-election runs them (ElectLeaders to the controller): give
    --all-topic-partitions, --topic [--partition] or --path-to-json-file. Prints which partitions got a new
    leader, which needed none, and why others failed. Exit status: 0 ok, 1 a partition's election failed (not
    needed is not a failure), 2 usage error, 3 unreadable file or no broker."""
    from kcli.client.elections import ElectionType, elect_leaders, parse_election_json, topic_partitions

    given = [name for name, on in (("--all-topic-partitions", all_topic_partitions), ("--topic", topic is not None),
                                   ("--path-to-json-file", json_file is not None)) if on]
    if len(given) != 1:
        raise fail("give one of --all-topic-partitions, --topic, --path-to-json-file" if not given else
                   f"give one of {', '.join(given)}, not several", ExitCode.USAGE)
    if partition is not None and topic is None:
        raise fail("--partition needs --topic", ExitCode.USAGE)
    wanted: list[tuple[str, int]] | None = None
    if json_file is not None:
        text = json_file.read_text()  # a missing or unreadable file: the exit-status table's 3
        try:
            wanted = parse_election_json(text, str(json_file))
        except KcliError as exc:
            raise fail(exc.describe(), ExitCode.USAGE) from None
    kind = ElectionType[election_type.value.upper()]
    with kafka_client(bootstrap, timeout, "kctl-elect-leaders") as client:
        if topic is not None:
            wanted = [(topic, partition)] if partition is not None else topic_partitions(client, topic)
        results = elect_leaders(client, kind, wanted, timeout_ms=request_timeout_ms(timeout))
    failed = [r for r in results if r.failed]
    if as_json:
        write_json_line({"election_type": kind.name, "results": [r.to_json() for r in results]})
    else:
        _render(kind.name, results)
    if failed:
        err_console.print(f"kctl: {len(failed)} replica(s) could not be elected", markup=False)
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _render(kind: str, results: list[Any]) -> None:
    """LeaderElectionCommand's lines."""
    elected = [r.name for r in results if r.elected]
    not_needed = [r.name for r in results if r.not_needed]
    if elected:
        typer.echo(f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}")
    if not_needed:
        typer.echo(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for r in results:
        if r.failed:
            typer.echo(f"Error completing leader election ({kind}) for partition: {r.name}: {r.error}"
                       + (f": {r.message}" if r.message else ""))
