"""One write task and one read task run directly (no Spark job), through the data source's
Spark API -- ``KafkaDataSource(options).writer(schema, False).write(batches)`` and
``.reader(schema).read(partition)``, the calls Spark makes on an executor: the commit message
counts, string columns sent as UTF-8, and a read range's Arrow batches match the source
schema."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest

from aiokafka_ng.errors import MessageTooLargeError
from aiokafka_ng.spark import KafkaDataSource
from tests.helpers import topic_name
from tests.spark.helpers import produce, read_confluent

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def _schema(arrow: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow)


def _write_task(options: dict[str, str], batches: list[pa.RecordBatch]) -> Any:
    """One write task of a batch query (mode append) over ``batches``: its commit message."""
    writer = KafkaDataSource(options).writer(_schema(batches[0].schema), False)
    return writer.write(iter(batches))


def _read_task(options: dict[str, str]) -> Iterable[pa.RecordBatch]:
    """The read task of a batch query over one partition range (the options name one)."""
    source = KafkaDataSource(options)
    reader = source.reader(source.schema())
    [partition] = reader.partitions()
    return reader.read(partition)  # type: ignore[no-any-return]


def test_write_task_reports_counts_per_topic(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    default, other = topic_name("task-default"), topic_name("task-other")
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["k0", None, "k2", "k3"], pa.string()),
            pa.array(["zero", "one", None, "three"], pa.string()),
            pa.array([default, other, default, other], pa.string()),
            pa.array([[("h", b"\x00")], None, [], [("n", None)]], HEADER_TYPE),
        ],
        names=["key", "value", "topic", "headers"],
    )
    # No 'topic' option: each row's topic column routes it.
    message = _write_task({"kafka.bootstrap.servers": bootstrap}, [batch, batch.slice(0, 0)])
    assert (message.rows, message.per_topic) == (4, {default: 2, other: 2})
    assert message.bytes == len(b"k0zero") + len(b"one") + len(b"k2") + len(b"k3three")

    got = {m.key(): (m.value(), m.headers()) for m in read_confluent(bootstrap, default, 2)}
    assert got == {b"k0": (b"zero", [("h", b"\x00")]), b"k2": (None, None)}
    got = {m.key(): (m.value(), m.headers()) for m in read_confluent(bootstrap, other, 2)}
    assert got == {None: (b"one", None), b"k3": (b"three", [("n", None)])}


@pytest.mark.parametrize("kernel", [True, False], ids=["arrow-buffers", "lists"])
def test_a_bulk_write_task_encodes_from_the_arrow_columns(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch, kernel: bool
) -> None:
    # Values and keys for one topic: with the C kernel the producer gets the Arrow columns
    # as BinaryColumn objects and encodes the records from their buffers; without it, lists.
    # Either way confluent-kafka reads back every row, keyed rows on murmur2's partition.
    from aiokafka_ng.producer import Producer
    from aiokafka_ng.producer.partitioner import default_partition
    from aiokafka_ng.protocol import speedups
    from aiokafka_ng.spark import _write

    if not kernel:
        monkeypatch.setattr(_write, "BinaryColumn", None)
    seen: list[str] = []
    send_many = Producer.send_many

    async def spy(self: Producer, topic: str, values: Any, **kw: Any) -> Any:
        seen.append(type(values).__name__)
        return await send_many(self, topic, values, **kw)

    monkeypatch.setattr(Producer, "send_many", spy)
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("task-bulk")
    keys = [None if i % 7 == 0 else f"key-{i % 50}" for i in range(3000)]
    values = [None if i % 11 == 0 else b"value-%d" % i for i in range(3000)]
    table = pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.large_binary())], names=["key", "value"]
    )
    # Slices: the columns' offsets and validity bitmaps do not start at 0.
    batches = [table.slice(0, 1000), table.slice(1000, 1500), table.slice(2500)]
    message = _write_task({"kafka.bootstrap.servers": bootstrap, "topic": topic}, batches)
    assert (message.rows, message.per_topic) == (3000, {topic: 3000})
    assert message.bytes == sum(len(k or "") for k in keys) + sum(len(v or b"") for v in values)
    assert seen == ["BinaryColumn" if kernel and speedups.AVAILABLE else "list"] * 3
    got = read_confluent(bootstrap, topic, 3000)
    partitions = {m.partition() for m in got}
    assert sorted((m.key(), m.value() or b"-") for m in got if m.key() is not None) == sorted(
        (k.encode(), v or b"-") for k, v in zip(keys, values, strict=True) if k is not None
    )
    assert sorted(m.value() or b"" for m in got) == sorted(v or b"" for v in values)
    n = max(partitions) + 1
    for m in got:
        if m.key() is not None:
            assert m.partition() == default_partition(m.key(), n)


def test_write_task_fails_with_the_records_error(kafka_broker: Any) -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([b"ok", b"x" * 5000])], names=["value"])
    options = {
        "kafka.bootstrap.servers": kafka_broker.bootstrap_servers,
        "kafka.max.request.size": "1000",
        "topic": topic_name("task-fail"),
    }
    with pytest.raises(MessageTooLargeError) as info:
        _write_task(options, [batch])
    notes = info.value.__notes__
    assert any("record #1 (1 of records #0-#1 failed) of this task" in n for n in notes)


def test_read_task_yields_arrow_batches_of_the_range(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("task-read")
    written = produce(
        bootstrap, topic, [(1, b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)]) for i in range(30)]
    )
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "assign": json.dumps({topic: [1]}),
        "startingOffsets": json.dumps({topic: {"1": 5}}),
        "endingOffsets": json.dumps({topic: {"1": 25}}),
        "includeHeaders": "true",
    }
    table = pa.Table.from_batches(list(_read_task(options)))
    assert table.column_names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert table.column("offset").to_pylist() == list(range(5, 25))
    assert set(table.column("partition").to_pylist()) == {1}
    expected = [(k, v, h, ts) for _, off, k, v, h, ts in written if 5 <= off < 25]
    millis = table.column("timestamp").cast(pa.int64()).to_pylist()
    got = [
        (k, v, [(h["key"], h["value"]) for h in hs], us // 1000)
        for k, v, hs, us in zip(
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("headers").to_pylist(),
            millis,
            strict=True,
        )
    ]
    assert got == expected
    # Without includeHeaders (Spark's default) there is no headers column.
    plain = {**options, "endingOffsets": json.dumps({topic: {"1": 7}}), "includeHeaders": "false"}
    table = pa.Table.from_batches(list(_read_task(plain)))
    assert "headers" not in table.column_names and table.num_rows == 2
