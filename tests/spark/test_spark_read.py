"""Spark reads through the aiokafka_ng source: a batch read returns exactly what our producer
wrote (offsets, keys, values, headers, timestamps), JSON offset ranges, split ranges, and a
streaming read stopped and restarted from its checkpoint sees every record once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import topic_name
from tests.spark.helpers import Record, produce


def _rows(n_per_partition: int, partitions: int, tag: str = "") -> list[Any]:
    rows = []
    for i in range(n_per_partition * partitions):
        p = i % partitions
        key = None if i % 17 == 0 else b"key-%d" % i
        value = None if i % 101 == 0 else (b"%s-value-%d-" % (tag.encode(), i)) + b"y" * (i % 40)
        headers: list[tuple[str, bytes | None]] = (
            [("i", b"%d" % i), ("nul", None), ("ünï", b"\x00\xff")] if i % 3 == 0 else []
        )
        rows.append((p, key, value, headers))
    return rows


def _by_position(records: list[Record]) -> dict[tuple[int, int], tuple[Any, ...]]:
    return {
        (p, off): (key, value, [tuple(h) for h in headers], ts)
        for p, off, key, value, headers, ts in records
    }


def _collected(df: Any) -> dict[tuple[int, int], tuple[Any, ...]]:
    out: dict[tuple[int, int], tuple[Any, ...]] = {}
    for r in df.selectExpr("*", "unix_millis(timestamp) as ts_ms").collect():
        pos = (r["partition"], r["offset"])
        assert pos not in out, f"{pos} read twice"
        assert r["timestampType"] == 0
        # A record without headers reads as null, as with Spark's own connector.
        assert r["headers"] is None or len(r["headers"]) > 0
        headers = [
            (h["key"], None if h["value"] is None else bytes(h["value"]))
            for h in r["headers"] or ()
        ]
        key = None if r["key"] is None else bytes(r["key"])
        value = None if r["value"] is None else bytes(r["value"])
        out[pos] = (key, value, headers, r["ts_ms"])
    return out


def test_batch_read_returns_what_the_producer_wrote(spark: Any, kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("spark-read")
    # Tansu auto-creates 4 partitions; partition 3 stays empty (it must yield no task).
    written = produce(bootstrap, topic, _rows(700, 3))

    df = (
        spark.read.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("maxRecordsPerPartition", "300")
        .option("includeHeaders", "true")
        .load()
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.rdd.getNumPartitions() == 9  # 3 partitions of 700 records, split by 300
    got = _collected(df)
    assert got == _by_position(written)

    # Per-partition JSON offsets, naming every partition as Spark requires:
    # p0 [100, 150), p1 [earliest, 10), p2 [690, 690), p3 (empty) [earliest, latest).
    ranged = (
        spark.read.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 100, "1": -2, "2": 690, "3": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 150, "1": 10, "2": 690, "3": -1}}))
        .load()
    )
    assert "headers" not in ranged.columns  # includeHeaders defaults to false, as in Spark
    positions = sorted((r["partition"], r["offset"]) for r in ranged.collect())
    assert positions == [(0, o) for o in range(100, 150)] + [(1, o) for o in range(10)]

    # A batch read never waits for records not yet written: it fails while planning.
    with pytest.raises(Exception, match="past the partition's end"):
        (
            spark.read.format("aiokafka_ng")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("endingOffsets", json.dumps({topic: {"0": 10**9, "1": -1, "2": -1, "3": -1}}))
            .load()
            .collect()
        )


def _run_stream(
    spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path, **options: str
) -> list[int]:
    """Runs a streaming query to parquet until what is there now is read; its batches' sizes."""
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "150", **options}
    reader = (
        spark.readStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .options(**options)
        .load()
    )
    query = (
        reader.selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_streaming_read_restarts_from_checkpoint_once_each(
    spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("spark-stream-read")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = produce(bootstrap, topic, _rows(100, 3, "a"))

    batches = _run_stream(spark, bootstrap, topic, out, checkpoint)
    assert sum(batches) == 300
    assert batches == [150, 150]  # maxOffsetsPerTrigger

    second = produce(bootstrap, topic, _rows(50, 3, "b"))
    batches = _run_stream(spark, bootstrap, topic, out, checkpoint)
    assert batches == [150]  # only what arrived after the checkpointed offsets

    rows = spark.read.parquet(str(out)).collect()
    got = [(r["partition"], r["offset"], r["value"]) for r in rows]
    assert len(got) == len({(p, o) for p, o, _ in got}) == 450
    expected = {(p, off, value) for p, off, _, value, _, _ in first + second}
    assert {(p, o, None if v is None else bytes(v)) for p, o, v in got} == expected


def test_streaming_read_from_latest_reads_only_what_comes_after(
    spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    """``startingOffsets=latest`` set explicitly on ``readStream`` (``load()`` used to refuse
    it with the batch rule): the first run starts at the end, the next reads what came since."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("spark-stream-latest")
    produce(bootstrap, topic, _rows(40, 3, "before"))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    assert _run_stream(spark, bootstrap, topic, out, checkpoint, startingOffsets="latest") == []
    after = produce(bootstrap, topic, _rows(20, 3, "after"))
    assert _run_stream(spark, bootstrap, topic, out, checkpoint, startingOffsets="latest") == [60]
    rows = spark.read.parquet(str(out)).collect()
    got = {
        (r["partition"], r["offset"], None if r["value"] is None else bytes(r["value"]))
        for r in rows
    }
    assert len(rows) == len(got) == 60
    assert got == {(p, off, value) for p, off, _, value, _, _ in after}


def test_assign_pattern_and_min_partitions(spark: Any, kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    prefix = topic_name("spark-pat")
    a, b, other = f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"  # ``other`` must not match
    for topic in (a, b, other):
        produce(
            bootstrap,
            topic,
            [
                (p, None, b"%s-%d" % (topic.encode(), i), [])
                for i, p in enumerate([0, 0, 1, 1, 1, 2])
            ],
        )

    def read(**options: str) -> Any:
        return (
            spark.read.format("aiokafka_ng")
            .option("kafka.bootstrap.servers", bootstrap)
            .options(**options)
            .load()
        )

    df = read(subscribePattern=f"{prefix}-.*", minPartitions="6")
    # 12 records in 6 non-empty partitions of a and b, split to at least 6 tasks.
    assert df.rdd.getNumPartitions() >= 6
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in df.collect())
    assert got == sorted(
        (t, p, o) for t in (a, b) for p, n in ((0, 2), (1, 3), (2, 1)) for o in range(n)
    )
    # assign: exactly the named partitions; kafka.group.id is accepted (no group is joined).
    df = read(assign=json.dumps({a: [1], other: [0, 2]}), **{"kafka.group.id": "spark-etl"})
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in df.collect())
    assert got == [(a, 1, 0), (a, 1, 1), (a, 1, 2), (other, 0, 0), (other, 0, 1), (other, 2, 0)]
    with pytest.raises(Exception, match="do not exist"):
        read(assign=json.dumps({a: [7]})).collect()
