"""kcli on Spark (optional extra ``kcli[spark]``): pyspark is imported only inside this package.

``register(spark)`` adds the ``kafka-log`` batch data source::

    import kcli.spark
    kcli.spark.register(spark)
    df = spark.read.format("kafka-log").load("/var/lib/kafka/data")      # a log dir, partition dir or glob

This module imports nothing from pyspark, so ``import kcli.spark`` works without the extra installed;
``SCHEMA`` is the column contract (Spark DDL) that ``kctl scan`` and other readers build on.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from kcli.spark.schema import CORRUPT_COLUMN, FILTER_PUSHDOWN_CONF, FORMAT, PERMISSIVE_SCHEMA, SCHEMA

__all__ = ["CORRUPT_COLUMN", "FORMAT", "PERMISSIVE_SCHEMA", "SCHEMA", "register"]


def register(spark: Any) -> None:
    """Register the ``kafka-log`` format on ``spark`` and turn on Python filter pushdown, which it uses."""
    from kcli.spark.datasource import with_parallelism

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext; the server's config decides
        sc = None
    default_exec = sc.pythonExec if sc is not None else None
    # The data source's Python workers run the interpreter recorded at registration. In local mode with no
    # interpreter configured that is whatever `python3` is on PATH, which may lack kcli and pyarrow;
    # the driver's own interpreter has both and is on the same machine.
    if (sc is not None and sc.master.startswith("local") and not os.environ.get("PYSPARK_PYTHON")
            and not sc.getConf().get("spark.pyspark.python")):
        sc.pythonExec = sys.executable
    try:
        # Splits sized for the cluster: at least defaultParallelism of them where the bytes allow.
        spark.dataSource.register(with_parallelism(sc.defaultParallelism if sc is not None else None))
    finally:
        if sc is not None:
            sc.pythonExec = default_exec
