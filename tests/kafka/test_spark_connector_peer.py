"""Spark's own Kafka connector (``format("kafka")``, the JVM one) as the reference for ours
(``format("aiokafka_ng")``): the same batch reads and writes with the same options on the same
topics of the real 3-node Kafka cluster, the DataFrames diffed row by row, every column.

One SparkSession for the module (tests/kafka/spark_peer.py says which connector version and
why). The two differences found are fixed in aiokafka_ng/spark and pinned here: a record
without headers reads as null ``headers`` (ours gave ``[]``), and save mode Overwrite is
refused. Spark's default save mode, ErrorIfExists, cannot reach a Python data source (Spark
accepts only Append and Overwrite for those), so ours is written with ``mode("append")``;
docs/spark.md says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from aiokafka_ng.admin import NewTopic, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, unique
from tests.kafka.spark_peer import peer_session

pytestmark = pytest.mark.kafka

N = 60  # records of the main topic, 20 per partition
GAP = 5  # records deleted from the start of the gap topic's partition 1


class Topics:
    def __init__(self, cluster: KafkaCluster, prefix: str) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers
        self.prefix = prefix
        self.main = f"{prefix}-main"  # CreateTime, headers, null keys and values
        self.other = f"{prefix}-other"  # LogAppendTime
        self.gap = f"{prefix}-gap"  # partition 1 starts at GAP after DeleteRecords
        self.base_ms = 0  # timestamp of the main topic's record 0
        # written by Spark's connector / ours: with a partition column, and keyed
        self.writes = [f"{prefix}-{w}" for w in ("wj", "wo", "kj", "ko")]


async def _seed(cluster: KafkaCluster, t: Topics) -> None:
    names = [t.main, t.other, t.gap, *t.writes]
    async with admin_for(cluster) as admin:
        (
            await admin.create_topics(
                [
                    NewTopic(t.main, 3, 3),
                    NewTopic(
                        t.other, 3, 3, topic_configs={"message.timestamp.type": "LogAppendTime"}
                    ),
                    NewTopic(t.gap, 3, 3),
                    *(NewTopic(w, 3, 3) for w in t.writes),
                ]
            )
        ).raise_on_error()
        await eventually(
            lambda: admin.describe_topics(names), lambda r: set(names) <= set(r.succeeded)
        )
        # Recent timestamps: records older than retention.ms (7 days) could be deleted
        # between two reads, which would show as data loss rather than a difference.
        t.base_ms = int(time.time() * 1000) - 60_000
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as p:
            for i in range(N):
                headers: list[tuple[str, bytes | None]] = []
                if i % 2:
                    headers = [("h", b"%d" % i), ("h", None), ("ünï", b"\x00\xff")]
                await p.send(
                    t.main,
                    value=None if i % 11 == 0 else b"v%d" % i,
                    key=None if i % 7 == 0 else b"k%d" % i,
                    partition=i % 3,
                    timestamp_ms=t.base_ms + i,
                    headers=headers,
                )
            for i in range(30):
                await p.send(t.other, value=b"o%d" % i, partition=i % 3)
                await p.send(t.gap, value=b"g%d" % i, partition=i % 3)
            await p.flush()
        (await admin.delete_records({TopicPartition(t.gap, 1): GAP})).raise_on_error()


@pytest.fixture(scope="module")
def topics(kafka_cluster: KafkaCluster) -> Iterator[Topics]:
    t = Topics(kafka_cluster, unique("peer"))
    anyio.run(_seed, kafka_cluster, t)
    yield t

    async def drop() -> None:
        async with admin_for(kafka_cluster) as admin:
            await admin.delete_topics([t.main, t.other, t.gap, *t.writes])

    anyio.run(drop)


@pytest.fixture(scope="module")
def spark(topics: Topics) -> Iterator[Any]:
    # After the cluster (``topics``): where --kafka=auto skips the Kafka tests, no JVM or Ivy
    # download is started for nothing.
    session = peer_session("aiokafka_ng vs Spark's Kafka connector")
    try:
        yield session
    finally:
        session.stop()


def _read(spark: Any, fmt: str, bootstrap: str, options: dict[str, str]) -> tuple[Any, list[Any]]:
    df = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).options(**options)
    df = df.load()
    return df.schema, sorted(df.collect(), key=lambda r: (r.topic, r.partition, r.offset))


def _assert_same(spark: Any, t: Topics, options: dict[str, str], count: int) -> list[Any]:
    """Both connectors read ``options``: same schema, same rows, every column."""
    j_schema, theirs = _read(spark, "kafka", t.bootstrap, options)
    o_schema, ours = _read(spark, "aiokafka_ng", t.bootstrap, options)
    assert o_schema == j_schema
    assert len(theirs) == count  # the case reads what it means to
    for j, o in zip(theirs, ours, strict=True):
        assert o.asDict(recursive=True) == j.asDict(recursive=True)
    return ours


def _offsets(topic: str, by_partition: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in by_partition.items()}})


def _cases(t: Topics) -> list[tuple[str, dict[str, str], int]]:
    """(name, options, rows Spark's connector reads) of every read compared."""
    b = t.base_ms
    return [
        ("subscribe, default offsets", {"subscribe": t.main}, N),
        ("includeHeaders", {"subscribe": t.main, "includeHeaders": "true"}, N),
        (
            "earliest/latest by name",
            {"subscribe": t.main, "startingOffsets": "earliest", "endingOffsets": "latest"},
            N,
        ),
        (
            "assign, JSON offsets with -2/-1",
            {
                "assign": json.dumps({t.main: [0, 2]}),
                "startingOffsets": _offsets(t.main, {0: 3, 2: -2}),
                "endingOffsets": _offsets(t.main, {0: 10, 2: -1}),
                "includeHeaders": "true",
            },
            7 + 20,
        ),
        ("subscribe two topics", {"subscribe": f"{t.main},{t.other}"}, N + 30),
        ("subscribePattern", {"subscribePattern": f"{t.prefix}-(main|other)"}, N + 30),
        ("minPartitions", {"subscribe": f"{t.main},{t.other}", "minPartitions": "7"}, N + 30),
        (
            "startingTimestamp/endingTimestamp",
            {
                "subscribe": t.main,
                "startingTimestamp": str(b + 10),
                "endingTimestamp": str(b + 40),
            },
            30,
        ),
        (
            "offsetsByTimestamp per partition",
            {
                "subscribe": t.main,
                "startingOffsetsByTimestamp": _offsets(t.main, {0: b + 20, 1: b, 2: b + 50}),
                "endingOffsetsByTimestamp": _offsets(t.main, {0: b + 50, 1: b + 59, 2: b + 59}),
            },
            10 + 20 + 3,  # partition 1: no record at b + 59, so it ends at latest
        ),
        (
            "failOnDataLoss=false over a DeleteRecords gap",
            {
                "assign": json.dumps({t.gap: [0, 1, 2]}),
                "startingOffsets": _offsets(t.gap, {0: -2, 1: 0, 2: -2}),
                "failOnDataLoss": "false",
            },
            30 - GAP,
        ),
        (
            "earliest after DeleteRecords",
            {"subscribe": t.gap, "failOnDataLoss": "true"},
            30 - GAP,
        ),
    ]


def test_batch_reads_match_sparks_connector(topics: Topics, spark: Any) -> None:
    for name, options, count in _cases(topics):
        try:
            _assert_same(spark, topics, options, count)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


def test_timestamps_headers_and_types_as_spark_reads_them(topics: Topics, spark: Any) -> None:
    """The diff above, pinned on values: CreateTime and LogAppendTime, null headers where a
    record has none (ours gave an empty array before), duplicate and null-valued headers."""
    rows = _assert_same(spark, topics, {"subscribe": topics.main, "includeHeaders": "true"}, N)
    assert {r.timestampType for r in rows} == {0}
    by_i = {(r.partition, r.offset): r for r in rows}
    for i in range(N):
        r = by_i[(i % 3, i // 3)]
        assert int(r.timestamp.timestamp() * 1000) == topics.base_ms + i
        if i % 2:
            assert [(h.key, h.value) for h in r.headers] == [
                ("h", b"%d" % i),
                ("h", None),
                ("ünï", b"\x00\xff"),
            ]
        else:
            assert r.headers is None
    other = _assert_same(spark, topics, {"subscribe": topics.other}, 30)
    assert {r.timestampType for r in other} == {1}


def test_fail_on_data_loss_both_refuse_a_deleted_start(topics: Topics, spark: Any) -> None:
    """failOnDataLoss=true (the default) and a JSON start below the log start offset: both
    connectors fail the query rather than read on."""
    options = {
        "assign": json.dumps({topics.gap: [1]}),
        "startingOffsets": _offsets(topics.gap, {1: 0}),
    }
    for fmt in ("kafka", "aiokafka_ng"):
        with pytest.raises(Exception) as info:
            _read(spark, fmt, topics.bootstrap, options)
        text = str(info.value)
        assert "failOnDataLoss" in text or "lost" in text.lower(), (fmt, text[:2000])


def _source(spark: Any) -> Any:
    from pyspark.sql import functions as F

    ids = spark.range(0, 48, numPartitions=1)
    return ids.select(
        F.when(F.col("id") % 5 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("key"), F.col("id").cast("string")).cast("binary"))
        .alias("key"),
        F.when(F.col("id") % 13 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("value"), F.col("id").cast("string")))
        .alias("value"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.when(F.col("id") % 4 == 0, F.lit(None))
        .otherwise(
            F.array(
                F.struct(
                    F.lit("a").alias("key"),
                    F.col("id").cast("string").cast("binary").alias("value"),
                ),
                F.struct(F.lit("n").alias("key"), F.lit(None).cast("binary").alias("value")),
            )
        )
        .alias("headers"),
    )


def _written(spark: Any, t: Topics, topic: str) -> list[tuple[Any, ...]]:
    _, rows = _read(
        spark, "aiokafka_ng", t.bootstrap, {"subscribe": topic, "includeHeaders": "true"}
    )
    return [(r.partition, r.offset, r.key, r.value, r.timestampType, r.headers) for r in rows]


def test_writes_land_as_sparks_do(topics: Topics, spark: Any) -> None:
    """The same DataFrame (null keys and values, headers with a null value and null headers,
    an explicit partition column, a topic column) written by each connector to its own topic,
    read back by one reader: same partitions, offsets, keys, values, headers, timestamp type.
    One Spark task writes, so the order within a partition is the DataFrame's in both."""
    from pyspark.sql import functions as F

    src = _source(spark)
    theirs, ours = f"{topics.prefix}-wj", f"{topics.prefix}-wo"
    started = time.time()
    src.withColumn("topic", F.lit(theirs)).write.format("kafka").option(
        "kafka.bootstrap.servers", topics.bootstrap
    ).save()
    src.withColumn("topic", F.lit(ours)).write.format("aiokafka_ng").option(
        "kafka.bootstrap.servers", topics.bootstrap
    ).mode("append").save()
    j, o = _written(spark, topics, theirs), _written(spark, topics, ours)
    assert len(j) == 48
    assert o == j
    _, rows = _read(spark, "kafka", topics.bootstrap, {"subscribe": ours})
    assert all(started - 1 <= r.timestamp.timestamp() <= time.time() + 1 for r in rows)


def test_keyed_rows_go_to_the_partitions_spark_picks(topics: Topics, spark: Any) -> None:
    """No partition column: each connector's producer picks a partition per key (Java's
    murmur2 for Spark's); every keyed row lands on the same partition with both, and the
    ``topic`` option wins over the rows' topic column in both."""
    from pyspark.sql import functions as F

    src = spark.range(0, 60, numPartitions=1).select(
        F.concat(F.lit("key-"), F.col("id").cast("string")).alias("key"),
        F.col("id").cast("string").alias("value"),
        F.lit("not-this-topic").alias("topic"),
    )
    theirs, ours = f"{topics.prefix}-kj", f"{topics.prefix}-ko"
    src.write.format("kafka").option("kafka.bootstrap.servers", topics.bootstrap).option(
        "topic", theirs
    ).save()
    src.write.format("aiokafka_ng").option("kafka.bootstrap.servers", topics.bootstrap).option(
        "topic", ours
    ).mode("append").save()
    j = {bytes(r[2]): r[0] for r in _written(spark, topics, theirs)}
    o = {bytes(r[2]): r[0] for r in _written(spark, topics, ours)}
    assert len(j) == 60 and len(set(j.values())) == 3
    assert o == j


def test_save_modes_against_sparks(topics: Topics, spark: Any) -> None:
    """Overwrite and Ignore are refused by both; ErrorIfExists, Spark's default (an append on
    Kafka), is refused for ours by Spark itself, which allows a Python data source only Append
    and Overwrite: the documented difference (docs/spark.md)."""
    df = spark.createDataFrame([("v",)], "value string")
    for fmt in ("kafka", "aiokafka_ng"):
        writer = df.write.format(fmt).option("kafka.bootstrap.servers", topics.bootstrap)
        writer = writer.option("topic", f"{topics.prefix}-wj")
        for mode in ("overwrite", "ignore"):
            with pytest.raises(Exception, match=rf"(?i){mode}"):
                writer.mode(mode).save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("aiokafka_ng").option("kafka.bootstrap.servers", topics.bootstrap).option(
            "topic", f"{topics.prefix}-wo"
        ).mode("errorifexists").save()
