"""The source's Arrow batches from column buffers (``_read._to_arrow``), record by record,
against the records put into the columns (no Spark, no broker): offsets with gaps
(compaction, a window's start), batches of both timestamp types with their own bases, null
and empty keys and values, headers. The records go in as the source's fetches put them, one
record batch each (``RecordColumns.add_batch``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.record_columns import RecordColumns
from aiokafka_ng.protocol.record_reader import iter_batches
from aiokafka_ng.protocol.records import RecordBatchBuilder
from aiokafka_ng.spark import KafkaDataSource

# The conversion under test, and the read range it converts for: the source's own (the way
# to them through the public reader is a broker's fetch, as test_spark_task.py reads).
from aiokafka_ng.spark._read import KafkaRange, _to_arrow

_BYTES = st.one_of(st.none(), st.binary(max_size=20))
_RECORD = st.tuples(
    st.integers(1, 2**40),  # offset step (1: consecutive)
    st.integers(0, 2**42),  # timestamp
    st.sampled_from([0, 1]),  # timestamp type
    _BYTES,
    _BYTES,
)


def _plan(include_headers: bool) -> Any:
    """The read plan Spark's planning makes for ``subscribe=t`` (a stream reader's: no
    broker is asked for it)."""
    options = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    if include_headers:
        options["includeHeaders"] = "true"
    source = KafkaDataSource(options)
    return source.streamReader(source.schema()).plan


@settings(deadline=None, max_examples=200)
@given(st.integers(0, 2**40), st.lists(_RECORD, min_size=1, max_size=60), st.booleans())
def test_arrow_batch_matches_the_records(first: int, records: list[Any], headers: bool) -> None:
    cols = RecordColumns(with_headers=headers)
    offset = first
    expected = []
    for step, ts, ts_type, key, value in records:
        hs = (("h", key),) if headers and key else ()
        builder = RecordBatchBuilder(base_offset=offset, timestamp_type=ts_type)
        builder.append(ts, key, value, hs)
        [record_batch] = iter_batches(builder.build())
        cols.add_batch(record_batch, 0, 1 << 62)
        expected.append(
            (key, value, offset, ts, ts_type, [{"key": "h", "value": key}] if hs else None)
        )
        offset += step
    batch = _to_arrow(pa, KafkaRange("t", 3, 0, 1, _plan(headers)), cols)
    rows = batch.to_pylist()
    assert len(rows) == len(records)
    for row, (key, value, off, _ts, ts_type, hs) in zip(rows, expected, strict=True):
        assert (row["key"], row["value"], row["offset"]) == (key, value, off)
        assert (row["topic"], row["partition"], row["timestampType"]) == ("t", 3, ts_type)
        if headers:
            # no headers -> null, as Spark's own connector reads it (not an empty array)
            assert row["headers"] == hs
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert micros == [e[3] * 1000 for e in expected]
    assert batch.column("value").null_count == sum(v is None for *_, v in records)
