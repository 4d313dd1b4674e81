"""The compiled record path (aiokafka's reader over kcli's decompression) decodes exactly what the
pure-Python reference decoder does, on every real batch and on generated ones."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from fixture_index import load_expectations
from kcli.records import BatchReader, Codec, Header, Record, RecordBatch, build_record_batch
from kcli.records import accel


def _fields(records):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers, r.sequence) for r in records]


def test_compiled_reader_is_installed():
    assert accel.available(), "aiokafka's compiled reader is a dependency; the fast path must be exercised"


def test_fixture_batches_agree(fixtures_dir):
    compared = 0
    for exp in load_expectations(fixtures_dir):
        for batch in BatchReader(exp.path.read_bytes()):
            if not isinstance(batch, RecordBatch) or exp.undecodable:
                continue
            assert _fields(batch.records()) == _fields(batch.records(strict=True)), batch
            compared += batch.records_count
    assert compared > 40000


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.tuples(st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=80),
                              st.integers(-5000, 5000)), min_size=1, max_size=20),
    codec=st.sampled_from(list(Codec)),
    log_append=st.booleans(),
    base_sequence=st.sampled_from([-1, 0, 2**31 - 5]),
)
def test_generated_batches_agree(values, codec, log_append, base_sequence):
    from kcli.records import TimestampType

    records = [Record(100 + i * 2, 1_700_000_000_000 + dt, k, v, (Header("h", k),) if i % 3 == 0 else ())
               for i, (k, v, dt) in enumerate(values)]
    raw = build_record_batch(records, codec=codec, producer_id=5 if base_sequence >= 0 else -1, producer_epoch=0,
                             base_sequence=base_sequence, max_timestamp=1_800_000_000_000 if log_append else None,
                             timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME)
    (batch,) = list(BatchReader(raw))
    assert _fields(batch.records()) == _fields(batch.records(strict=True))


def test_pure_path_when_disabled(tmp_path):
    code = "from kcli.records import accel; print(accel.available())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"KCLI_NO_EXTENSIONS": "1", "PATH": ""}, check=True)
    assert out.stdout.strip() == "False"
