"""`kctl transactions`: ongoing and hanging transactions of a cluster (Kafka's kafka-transactions.sh).

Thin: kcli.client.transactions does the requests; this renders tables or one JSON object.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ConnectionGroup, GroupTimeoutOpt, JsonOpt, kafka_client, ExitCode, fail,
                             write_json_line)
from kcli.cli.zk import _cell, _show, _table, _time

app = typer.Typer(cls=ConnectionGroup, no_args_is_help=True,
                  help="List, describe, find hanging and abort transactions (KIP-98, KIP-664), as Kafka's "
                  "kafka-transactions.sh. -b/--timeout go before or after the subcommand.")

TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker.")]


@app.callback()
def transactions_group(bootstrap: BootstrapOpt = None, timeout: GroupTimeoutOpt = None) -> None:
    """List, describe, find hanging and abort transactions, as kafka-transactions.sh. -b/--timeout go before or
    after the subcommand (kctl transactions -b B list). Exit status: 0 ok, 1 an id not found or a hanging
    transaction found, 2 usage error, 3 no broker."""
    # Declared for --help; ConnectionGroup hands -b/--timeout given here to the subcommand.


@contextmanager
def _client(bootstrap: str | None, timeout: float) -> Iterator[Any]:
    with kafka_client(bootstrap, timeout, "kctl-transactions") as client:
        yield client


@app.command("list")
def list_cmd(
    bootstrap: BootstrapOpt = None,
    state: Annotated[Optional[list[str]], typer.Option(
        "--state", show_default=False, help="Only transactions in this state (Empty, Ongoing, PrepareCommit, "
        "PrepareAbort, CompleteCommit, CompleteAbort; repeat for several).")] = None,
    producer_id: Annotated[Optional[list[int]], typer.Option(
        "--producer-id", show_default=False, help="Only this producer id (repeat for several).")] = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Every transactional id the coordinators know (ListTransactions to every broker)."""
    from kcli.client.transactions import list_transactions

    with _client(bootstrap, timeout) as client:
        listings = list_transactions(client, states=state or (), producer_ids=producer_id or ())
    if as_json:
        write_json_line({"transactions": [t.to_json() for t in listings]})
        return
    table = _table("TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "STATE")
    for t in listings:
        table.add_row(_cell(t.transactional_id), str(t.coordinator_id), str(t.producer_id), t.state)
    _show(table)


@app.command("describe")
def describe_cmd(
    transactional_id: Annotated[list[str], typer.Argument(help="Transactional id(s).", show_default=False)],
    bootstrap: BootstrapOpt = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """State, producer id and epoch, timeout, start time and partitions of transactional ids (from their
    coordinators). An unknown id exits 1."""
    from kcli.client.transactions import describe_transactions

    with _client(bootstrap, timeout) as client:
        found = describe_transactions(client, transactional_id)
    rows = [found[t] for t in dict.fromkeys(transactional_id)]
    if as_json:
        write_json_line({"transactions": [d.to_json() for d in rows]})
        return
    now = int(time.time() * 1000)
    table = _table("TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "START",
                   "AGE MS", "PARTITIONS")
    for d in rows:
        age = str(now - d.start_time_ms) if d.start_time_ms >= 0 else "-"
        table.add_row(_cell(d.transactional_id), str(d.coordinator_id), str(d.producer_id), str(d.producer_epoch),
                      d.state, str(d.timeout_ms), _time(d.start_time_ms) if d.start_time_ms >= 0 else "-", age,
                      _cell([f"{t}-{p}" for t, p in d.partitions]))
    _show(table)


@app.command("find-hanging")
def find_hanging_cmd(
    bootstrap: BootstrapOpt = None,
    topic: Annotated[Optional[list[str]], typer.Option(
        "--topic", "-t", show_default=False, help="Only this topic (repeat for several; default: every topic but "
        "the internal ones).")] = None,
    max_transaction_timeout: Annotated[int, typer.Option(
        "--max-transaction-timeout", min=0, help="Milliseconds an open transaction must be older than "
        "(the brokers' transaction.max.timeout.ms).")] = 900_000,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Transactions open in a partition (DescribeProducers) for longer than --max-transaction-timeout that their
    coordinator does not have open with that partition: nothing will end them but `abort`. Exit 1 when any."""
    from kcli.client.transactions import find_hanging

    with _client(bootstrap, timeout) as client:
        hanging = find_hanging(client, topics=topic, max_transaction_timeout_ms=max_transaction_timeout)
    if as_json:
        write_json_line({"hanging": [h.to_json() for h in hanging]})
    else:
        table = _table("TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "START OFFSET",
                       "LAST TIMESTAMP", "AGE MS", "TRANSACTIONAL ID", "COORDINATOR STATE")
        for h in hanging:
            table.add_row(_cell(h.topic), str(h.partition), str(h.producer_id), str(h.producer_epoch),
                          str(h.coordinator_epoch), str(h.start_offset), _time(h.last_timestamp), str(h.age_ms),
                          _cell(h.transactional_id), _cell(h.coordinator_state))
        _show(table)
    if hanging:
        raise typer.Exit(int(ExitCode.PROBLEMS))


@app.command("abort")
def abort_cmd(
    topic: Annotated[str, typer.Option("--topic", "-t", help="The partition's topic.", show_default=False)],
    partition: Annotated[int, typer.Option("--partition", "-p", min=0, help="The partition.", show_default=False)],
    bootstrap: BootstrapOpt = None,
    start_offset: Annotated[Optional[int], typer.Option(
        "--start-offset", min=0, show_default=False, help="The open transaction's first offset (find-hanging's "
        "START OFFSET): its producer is looked up with DescribeProducers.")] = None,
    producer_id: Annotated[Optional[int], typer.Option("--producer-id", show_default=False)] = None,
    producer_epoch: Annotated[Optional[int], typer.Option("--producer-epoch", show_default=False)] = None,
    coordinator_epoch: Annotated[Optional[int], typer.Option("--coordinator-epoch", show_default=False)] = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Write an ABORT marker for an open transaction into one partition (WriteTxnMarkers to its leader): what
    ends a hanging transaction. Name it by --start-offset, or by --producer-id and --producer-epoch."""
    from kcli.client.transactions import abort_transaction

    if start_offset is None and (producer_id is None or producer_epoch is None):
        raise fail("give --start-offset, or --producer-id and --producer-epoch", ExitCode.USAGE)
    with _client(bootstrap, timeout) as client:
        found = abort_transaction(client, topic, partition, producer_id=producer_id, producer_epoch=producer_epoch,
                                  coordinator_epoch=coordinator_epoch, start_offset=start_offset)
    pid = found.producer_id if found is not None else producer_id
    epoch = found.producer_epoch if found is not None else producer_epoch
    if as_json:
        write_json_line({"aborted": {"topic": topic, "partition": partition, "producer_id": pid,
                                     "producer_epoch": epoch, "start_offset": start_offset}})
    else:
        typer.echo(f"aborted the transaction of producer {pid} (epoch {epoch}) in {topic}-{partition}")
