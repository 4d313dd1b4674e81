"""`kctl metrics`: a broker's current metric values from its Prometheus endpoint (metrics.http.listener), for a
one-off look. Thin: kcli.client.metrics scrapes and parses; this filters nothing itself and renders."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kcli.cli.common import ExitCode, JsonOpt, fail, write_json_line


def metrics_cmd(
    target: Annotated[str, typer.Argument(metavar="URL|HOST:PORT", show_default=False,
                                          help="The broker's metrics.http.listener: http://host:port[/metrics] or "
                                          "host:port.")],
    prefix: Annotated[Optional[str], typer.Option("--prefix", metavar="PREFIX", show_default=False,
                                                  help="Only the metrics whose names start with this, e.g. "
                                                  "kafka_server_brokertopicmetrics_.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the endpoint.")] = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """A broker's current metrics (its GET /metrics, Prometheus' text format): name, labels and value per line.
    Exit status: 0 ok, 1 no metric matches --prefix, 2 usage error, 3 endpoint unreachable or not metrics."""
    from kcli.client.metrics import scrape_metrics

    scrape = scrape_metrics(target, timeout=timeout, prefix=prefix)
    if as_json:
        write_json_line(scrape.to_json())
    elif scrape.samples:
        from kcli.cli.zk import _console, _table

        table = _table("NAME", "LABELS", "VALUE")
        for sample in scrape.samples:
            labels = ",".join(f"{k}={v}" for k, v in sample.labels.items()) or "-"
            value = sample.to_json()["value"]
            table.add_row(sample.name, _escape(labels), str(value))
        _console().print(table)
    if not scrape.samples:
        raise fail(f"{scrape.url}: no metric " + (f"starts with {prefix!r}" if prefix else "served"),
                   ExitCode.PROBLEMS)


def _escape(text: str) -> str:
    from kcli.cli.common import escape

    return escape(text)
