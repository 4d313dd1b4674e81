"""`kctl cluster run`: a ZooKeeper and N brokers on this machine, the way a newcomer tries a cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kcli.cli.common import ExitCode, err_console, escape, write_json_line

app = typer.Typer(no_args_is_help=True, help="Run a local cluster (ZooKeeper and brokers on 127.0.0.1) to try kctl.")


@app.command("run")
def run_cmd(
    brokers: Annotated[int, typer.Option("--brokers", "-n", min=1, max=64, help="How many brokers (ids 0..N-1).")] = 3,
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", help="Where ZooKeeper's and every broker's data live; "
                                           "a restart with the same directory reuses data and ports.")
                        ] = Path("kctl-cluster"),
    base_port: Annotated[Optional[int], typer.Option(
        "--base-port", min=1, max=65535, show_default=False,
        help="Broker i listens on BASE_PORT+i (default: the ports of the last start in this directory, else free "
             "ports).")] = None,
    zookeeper_port: Annotated[Optional[int], typer.Option(
        "--zookeeper-port", min=1, max=65535, show_default=False,
        help="ZooKeeper's port (default: the last start's, else a free port).")] = None,
    override: Annotated[Optional[list[str]], typer.Option(
        "--override", show_default=False,
        help="key=value for every broker's server.properties (repeatable), e.g. num.partitions=3.")] = None,
    racks: Annotated[int, typer.Option("--racks", min=0, help="Spread the brokers over this many racks, "
                                       "broker.rack r0, r1, ... round robin (0: no racks).")] = 0,
    rack_prefix: Annotated[str, typer.Option("--rack-prefix", help="What the rack names start with: "
                                             "--rack-prefix RACK gives RACK0, RACK1, ...")] = "r",
    start_timeout: Annotated[float, typer.Option(
        "--start-timeout", min=1, help="Seconds each broker has to answer after it is started (a loaded "
                                       "machine may need more).")] = 60.0,
    exit_on_failure: Annotated[bool, typer.Option(
        "--exit-on-failure", help="Stop the whole cluster and exit 1 when a broker exits on its own (default: "
                                  "report it and keep the others).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Write one JSON object (bootstrap, zookeeper, brokers, "
                                          "data_dir) to standard output once every broker answers.")] = False,
    security: Annotated[bool, typer.Option(
        "--security", help="Secure the cluster: one SASL_SSL listener per broker (TLS with a test CA made in "
        "DATA_DIR/security, SCRAM-SHA-512 logins), the brokers logging in to each other as user 'broker', an "
        "'admin' user for you; prints the client settings (client.properties for Kafka's tools and kctl "
        "--command-config, librdkafka.properties for kcat -F and confluent-kafka).")] = False,
) -> None:
    """Start ZooKeeper (Debian's zookeeper package) and N brokers on 127.0.0.1, print the bootstrap list, and
    stop them all on Ctrl-C. The bootstrap list (or the --json object) goes to standard output, progress to
    standard error.

    \b
    Example:
      kctl cluster run --brokers 3                        # prints 127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2
      kcat -b 127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2 -L   # in another terminal
      kctl zk brokers --zookeeper 127.0.0.1:ZKPORT/kctl   # as printed on standard error

    \b
    Exit status:
      0  stopped cleanly (Ctrl-C, SIGTERM)
      1  a broker or ZooKeeper exited on its own or had to be killed; the data directory is in use
      2  bad options, or a port already in use
      3  Java or Debian's zookeeper package missing (the message names the apt-get command); ZooKeeper
         would not start
    """
    from kcli.cluster.runner import ClusterSpec, run_cluster
    from kcli.processes import stop_on_signals

    spec = ClusterSpec(brokers=brokers, data_dir=data_dir, base_port=base_port, zookeeper_port=zookeeper_port,
                       overrides=tuple(override or ()), racks=racks, rack_prefix=rack_prefix,
                       start_timeout_s=start_timeout, exit_on_failure=exit_on_failure, security=security)
    with stop_on_signals() as stop:
        result = run_cluster(spec, stop=stop, on_event=lambda event: _render(event, as_json))
    raise typer.Exit(int(ExitCode.OK if result.ok else ExitCode.PROBLEMS))


def _render(event, as_json: bool) -> None:
    from kcli.cluster.runner import ProcessExited, Progress, Started

    if isinstance(event, Progress):
        err_console.print(f"kctl cluster: {event.message}", markup=False)
    elif isinstance(event, Started):
        info = event.cluster
        if as_json:
            write_json_line(info.to_json())
        else:
            print(info.bootstrap)
        sys.stdout.flush()
        err_console.print(f"\n[bold]Cluster up[/] in {escape(str(info.data_dir))}")
        err_console.print(f"  bootstrap  {escape(info.bootstrap)}")
        err_console.print(f"  zookeeper  {escape(info.zookeeper)}  (pid {info.zookeeper_pid})")
        for b in info.brokers:
            rack = f"  rack {b.rack}" if b.rack else ""
            err_console.print(f"  broker {b.id}   {b.address}  (pid {b.pid}){rack}  log {escape(str(b.log))}")
        if info.security is not None:
            _render_security(info)
        else:
            err_console.print(f"Try:  kcat -b {escape(info.bootstrap)} -L\n"
                              f"      kctl zk brokers --zookeeper {escape(info.zookeeper)}\n"
                              "Ctrl-C stops the cluster.\n")
    elif isinstance(event, ProcessExited):
        then = "stopping the cluster" if event.fatal else "the others keep running"
        err_console.print(f"kctl cluster: {event.name} (pid {event.pid}) exited with status {event.status}; {then}. "
                          f"The end of {event.log}:", markup=False)
        err_console.print(event.log_tail or "(empty)", markup=False)


def _render_security(info) -> None:
    """The client settings of a --security cluster: files to point clients at, and kcat's -X lines."""
    security = info.security
    settings = security.client_settings(java=False)
    x = " ".join(f"-X {k}={v}" for k, v in settings.items())
    err_console.print(f"  security   SASL_SSL, SCRAM-SHA-512 as user admin (password in "
                      f"{escape(str(security.client_properties))}), CA {escape(str(security.ca))}")
    err_console.print("Client settings:\n"
                      f"  Kafka's tools, kctl:      --command-config {escape(str(security.client_properties))}\n"
                      f"  kcat, confluent-kafka:    -F {escape(str(security.librdkafka_properties))}  (or -X ...)")
    err_console.print(f"Try:  kcat -b {escape(info.bootstrap)} -F {escape(str(security.librdkafka_properties))} -L\n"
                      f"      kcat -b {escape(info.bootstrap)} {escape(x)} -L\n"
                      f"      kctl topics list -b {escape(info.bootstrap)} --command-config "
                      f"{escape(str(security.client_properties))}\n"
                      "Ctrl-C stops the cluster.\n")
