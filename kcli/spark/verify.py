"""``kctl verify --engine spark``: kcli.tools.verify's checks, one Spark task per partition directory.

The driver expands the paths and groups the files exactly as the local ``verify`` does (one group per
directory); each group is checked on an executor by the same library code (``verify_group``), and the
partial reports are merged in group order, so the report - counts, problems and their order - and therefore
the output and exit status are the local engine's. A library error raised on an executor (an unreadable
file) is carried back and raised again on the driver as the same exception class, so exit statuses match too.
Executors must see the paths under the same names as the driver (a shared filesystem) and have kcli installed.
"""

from __future__ import annotations

import time

from kcli import errors
from kcli.errors import KcliError
from kcli.spark.session import local_python
from kcli.tools.verify import VerifyReport, merge_reports, plan_groups, verify_group


def _check(item, deep: bool):
    """Executor side: (group index, report) or (group index, the KcliError's class name and fields)."""
    index, files = item
    try:
        return index, verify_group(files, deep=deep), None
    except KcliError as exc:
        return index, None, (type(exc).__name__, exc.reason, exc.path, exc.position, exc.base_offset)


def verify_spark(spark, paths: list[str], *, deep: bool = False) -> VerifyReport:
    """``kcli.tools.verify.verify`` on ``spark``: the same VerifyReport (``seconds`` aside)."""
    started = time.perf_counter()
    groups, notes = plan_groups(paths)  # skipped entries and warnings: reported as the local engine does
    parts: list[VerifyReport | None] = [None] * len(groups)
    if groups:
        with local_python(spark):
            sc = spark.sparkContext
            rdd = sc.parallelize(list(enumerate(groups)), numSlices=len(groups))
            results = rdd.map(lambda item: _check(item, deep)).collect()
        failures = []
        for index, report, failure in results:
            parts[index] = report
            if failure is not None:
                failures.append((index, failure))
        if failures:  # the first one in group order: the one the local engine would have stopped at
            _index, (name, reason, path, position, base_offset) = min(failures)
            cls = getattr(errors, name, KcliError)
            if not (isinstance(cls, type) and issubclass(cls, KcliError)):
                cls = KcliError
            raise cls(reason, path=path, position=position, base_offset=base_offset)
    return merge_reports(paths, [p for p in parts if p is not None], deep=deep,
                         seconds=time.perf_counter() - started, notes=notes)


__all__ = ["verify_spark"]
