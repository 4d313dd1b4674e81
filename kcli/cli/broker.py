"""`kctl broker run`: a standalone Kafka-protocol broker on Kafka's on-disk layout."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from kcli.cli.common import ExitCode, exit_code_for, fail
from kcli.errors import KcliError

app = typer.Typer(no_args_is_help=True, help="Run a Kafka-protocol broker that real clients use.")


class LogLevel(str, Enum):
    """--log-level: a choice, so that a misspelt level is a usage error (2), not a failed start."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@app.command("run")
def run_cmd(
    config: Annotated[Optional[str], typer.Option("--config", "-c", help="A server.properties file.", show_default=False)] = None,
    override: Annotated[Optional[list[str]], typer.Option("--override", help="key=value, as kafka-server-start.sh takes it (repeatable).", show_default=False)] = None,
    log_level: Annotated[LogLevel, typer.Option("--log-level", case_sensitive=False, help="Logging threshold.")] = LogLevel.INFO,
) -> None:
    """Serve the Kafka protocol on 127.0.0.1:9092 with data in ./kctl-data unless configured otherwise.

    Honours broker.id, listeners, advertised.listeners, log.dirs, num.partitions, auto.create.topics.enable,
    log.segment.bytes, log.index.interval.bytes, log.flush.interval.messages/ms, message.max.bytes,
    socket.request.max.bytes and more (see kctl-broker(1)). SIGTERM or SIGINT stop it cleanly; a start after
    an unclean stop recovers the logs first.
    """
    import asyncio
    import logging

    from kcli.broker.config import ConfigError, load_config
    from kcli.broker.server import KafkaServer

    logging.basicConfig(level=log_level.value.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        broker_config = load_config(config, override or [])
    except ConfigError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    try:
        asyncio.run(KafkaServer(broker_config).run())
    except KcliError as exc:
        # kctl(1)'s table, as kctl-broker(1) states it: ZooKeeper unreachable or a log dir that cannot be
        # used is 3; a log dir locked or of another broker is 1
        raise fail(exc.describe(), exit_code_for(exc) or ExitCode.PROBLEMS) from None
    except OSError as exc:  # a listener that cannot be bound
        raise fail(f"cannot serve: {exc}", ExitCode.UNREADABLE) from None
