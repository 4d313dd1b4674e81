"""The ``kafka-log`` Spark data source (Spark 4 Python Data Source API); imports pyspark and pyarrow.

Planning (in Spark's Python planner process): options -> bounds (plus pushed-down filters) -> one input
partition per segment split (plan.py). Reading (in executor Python workers): each split through
kcli's FileBatchReader and batch decoders (read.py), returned as Arrow RecordBatches, not rows.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from kcli.spark import FORMAT, PERMISSIVE_SCHEMA, SCHEMA
from kcli.spark.plan import Bounds, Range, ReadOptions, SegmentSplit, expand_paths, plan
from kcli.spark.read import SplitReader

_INT_COLUMNS = ("partition", "offset")


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafka-log").load(path)``: the records of Kafka log segments on disk."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return PERMISSIVE_SCHEMA if ReadOptions.parse(self.options).permissive else SCHEMA

    def reader(self, schema: StructType) -> KafkaLogReader:
        return KafkaLogReader(ReadOptions.parse(self.options), schema)


class SplitPartition(InputPartition):
    """One input partition: a SegmentSplit (pickled to the executor)."""

    def __init__(self, split: SegmentSplit) -> None:
        super().__init__(split)
        self.split = split


class KafkaLogReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.bounds = Bounds.from_options(opts)

    # -- planning -------------------------------------------------------------------------------
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take filters on topic, partition, offset and timestamp (applied exactly, per record, and used to
        prune and seek); hand every other filter back to Spark."""
        for f in filters:
            narrowed = _narrow(self.bounds, f)
            if narrowed is None:
                yield f
            else:
                self.bounds = narrowed

    def partitions(self) -> list[InputPartition]:
        splits = plan(expand_paths(self.opts.paths), self.bounds, self.opts.max_bytes_per_partition)
        return [SplitPartition(s) for s in splits]

    # -- reading (executor) ---------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split = partition.split if isinstance(partition, SplitPartition) else None
        if split is None:  # Spark's placeholder when planning found nothing
            return iter(())
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")  # what Spark checks each batch against
        return _batches(SplitReader(split, self.opts, self.bounds).chunks(), arrow_schema)


def _batches(chunks: Iterator[dict[str, list]], arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for cols in chunks:
        arrays = [pa.array(cols[f.name], type=f.type) for f in arrow_schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


# -- filter pushdown --------------------------------------------------------------------------------


def _micros(value: _dt.datetime) -> int:
    # Naive datetimes are local time, as pyspark's TimestampType.fromInternal makes them.
    return int(value.replace(microsecond=0).timestamp()) * 1_000_000 + value.microsecond


def _narrow(bounds: Bounds, f: Filter) -> Bounds | None:
    """``bounds`` narrowed by ``f``, or None when ``f`` is not one this source applies itself."""
    if not isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)):
        return None
    if len(f.attribute) != 1:
        return None
    column = f.attribute[0]
    if column == "topic":
        if isinstance(f, EqualTo) and isinstance(f.value, str):
            return replace(bounds.with_topics([f.value]), sql=True)
        if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            return replace(bounds.with_topics(f.value), sql=True)
        return None
    if column in _INT_COLUMNS:
        convert = _as_int
    elif column == "timestamp":
        convert = _as_micros
    else:
        return None
    if isinstance(f, In):
        values = [convert(v) for v in f.value]
        if any(v is None for v in values):
            return None
        narrowed = _range(bounds, column).narrow(values=values)
    else:
        value = convert(f.value)
        if value is None:
            return None
        narrowed = _range(bounds, column)
        if isinstance(f, EqualTo):
            narrowed = narrowed.narrow(lo=value, hi=value)
        elif isinstance(f, GreaterThan):
            narrowed = narrowed.narrow(lo=value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            narrowed = narrowed.narrow(lo=value)
        elif isinstance(f, LessThan):
            narrowed = narrowed.narrow(hi=value - 1)
        else:
            narrowed = narrowed.narrow(hi=value)
    return replace(bounds, **{column: narrowed}, sql=True)


def _range(bounds: Bounds, column: str) -> Range:
    return getattr(bounds, column)


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_micros(value: object) -> int | None:
    return _micros(value) if isinstance(value, _dt.datetime) else None
