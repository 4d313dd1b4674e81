"""The SparkSession of kctl's Spark engines (scan, verify, compact): quiet, no UI, kcli's data source registered.

pyspark is imported inside ``get_session`` only, so importing this module is free; without pyspark
``get_session`` raises ``SparkUnavailableError`` (the CLI turns it into a usage error, exit status 2).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

from kcli.errors import KcliError

# log4j2: errors only, on stderr; written once per process and handed to the driver JVM at launch, so even
# Spark's start-up banner ("Setting default log level ...", NativeCodeLoader) stays off the terminal.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# The shell's loggers at the root's level: Spark then skips its "Setting default log level" banner.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.context.name = org.apache.spark.SparkContext
logger.context.level = error
"""
# pyspark warns about pandas 3 whenever it builds an Arrow UDF; kcli's engines do not use pandas.
PANDAS_WARNING = "PySpark does not yet fully support pandas"


class SparkUnavailableError(KcliError):
    """--engine spark without pyspark installed (or without Java)."""


def _log4j2_file() -> str:
    path = Path(tempfile.gettempdir()) / f"kctl-log4j2-{os.getuid() if hasattr(os, 'getuid') else 0}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        os.replace(tmp, path)
    return str(path)


def get_session(master: str | None = None, app_name: str = "kctl", *, config: dict[str, str] | None = None):
    """A SparkSession for ``master`` (default: ``spark.master`` from spark-submit/the environment, else
    ``local[*]``) with the Spark UI off, logging at ERROR and the ``kafka-log`` data source registered.

    An already active session is reused (its master wins; ``config`` is applied where Spark allows it).
    """
    warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailableError("--engine spark needs pyspark: pip install 'kcli[spark]' (and Java 17+)") from None
    active = SparkSession.getActiveSession()
    if active is None:
        conf = SparkConf()  # picks up spark.* system properties set by spark-submit
        builder = SparkSession.builder.appName(app_name)
        if master:
            builder = builder.master(master)
        elif not conf.contains("spark.master") and not os.environ.get("MASTER"):
            builder = builder.master("local[*]")
        log4j = f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "16",
            "spark.driver.extraJavaOptions": log4j,
            "spark.executor.extraJavaOptions": log4j,
            **(config or {}),
        }

        for key, value in settings.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except Exception as exc:  # noqa: BLE001 - no Java, bad master URL: one clear line instead of a JVM trace
            raise SparkUnavailableError(f"cannot start Spark ({master or 'local[*]'}): {str(exc).splitlines()[0]}") from None
        sc = session.sparkContext
        if (sc.master.startswith("local") and not os.environ.get("PYSPARK_PYTHON")
                and not sc.getConf().get("spark.pyspark.python")):
            # Local Python workers run this interpreter (it has kcli and pyarrow), not whatever python3 is on PATH.
            sc.pythonExec = sys.executable
    else:
        session = active
        for key, value in (config or {}).items():
            try:
                session.conf.set(key, value)
            except Exception:  # noqa: BLE001 - static configs cannot change on a running session
                pass
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


@contextmanager
def local_python(session):
    """While building UDFs and RDDs: with a local master and no Python configured, run Python workers with this
    interpreter (Spark records the executable when a Python function is wrapped). On a cluster, executors
    use the configured ``spark.pyspark.python``/``PYSPARK_PYTHON``, which must have kcli installed."""
    sc = session.sparkContext
    default = sc.pythonExec
    quiet = warnings.catch_warnings()
    quiet.__enter__()
    warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
    if (sc.master.startswith("local") and not os.environ.get("PYSPARK_PYTHON")
            and not sc.getConf().get("spark.pyspark.python")):
        sc.pythonExec = sys.executable
    try:
        yield
    finally:
        sc.pythonExec = default
        quiet.__exit__(None, None, None)


def register(session) -> None:
    """Register kcli's ``kafka-log`` data source on ``session`` (kcli.spark.register, when it exists)."""
    import kcli.spark

    registrar = getattr(kcli.spark, "register", None)
    if registrar is None:
        raise SparkUnavailableError("kcli.spark.register is missing: the kafka-log data source is not installed")
    registrar(session)


__all__ = ["SparkUnavailableError", "get_session", "local_python", "register"]
