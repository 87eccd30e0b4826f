"""A checkpointed structured-streaming pipeline through Kafka with the ``aiokafka_ng`` source
and sink: read a topic as a stream, upper-case each value, write the result to another topic.

Each run processes what is in the input topic now (``Trigger.AvailableNow``) and stops. Run
it, add records, run it again with the same checkpoint directory: the second run starts where
the first one's checkpoint ends, so the output topic holds every input record exactly once.

Usage::

    python examples/spark_streaming_pipeline.py [BOOTSTRAP_SERVERS]

Without BOOTSTRAP_SERVERS it starts a LocalBroker (Tansu) of its own, writes 2 x 3,000
records and runs the pipeline twice. Needs the ``spark`` extra (pyspark, pyarrow) and Java 17.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from typing import Any

import anyio
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark import register


def run_once(spark: SparkSession, bootstrap: str, source: str, sink: str, checkpoint: str) -> int:
    """One AvailableNow run of the pipeline; returns the rows it processed."""
    register(spark)
    orders = (
        spark.readStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .load()
    )
    upper = orders.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))
    query = (
        upper.writeStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return sum(p["numInputRows"] for p in query.recentProgress)


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    async def main() -> None:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            values = [b"order-%d" % i for i in range(first, first + count)]
            keys = [b"%d" % i for i in range(first, first + count)]
            futures = await producer.send_batch(topic, values, keys=keys)
            await producer.flush()
            for fut in futures:
                fut.result()

    anyio.run(main)


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic``: read from the start until nothing new came for 2 s."""

    async def main() -> list[tuple[bytes | None, bytes | None]]:
        async with Consumer(bootstrap_servers=bootstrap) as consumer:
            partitions = await consumer.partitions_for_topic(topic)
            parts = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(parts)
            for tp in parts:
                consumer.seek(tp, 0)
            out: list[tuple[bytes | None, bytes | None]] = []
            idle_since = anyio.current_time()
            while anyio.current_time() - idle_since < 2:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    out.extend((r.key, r.value) for r in records)
                    idle_since = anyio.current_time()
            return out

    return anyio.run(main)


def run_twice(spark: SparkSession, bootstrap: str, per_run: int = 3000) -> dict[str, Any]:
    """Write, run, write more, run again (same checkpoint); check the output topic."""
    tag = uuid.uuid4().hex[:8]
    source, sink = f"orders-{tag}", f"orders-upper-{tag}"
    with tempfile.TemporaryDirectory(prefix="aiokafka-ng-checkpoint-") as checkpoint:
        produce(bootstrap, source, 0, per_run)
        first = run_once(spark, bootstrap, source, sink, checkpoint)
        produce(bootstrap, source, per_run, per_run)
        second = run_once(spark, bootstrap, source, sink, checkpoint)
    written = read_all(bootstrap, sink)
    expected = sorted((b"%d" % i, b"ORDER-%d" % i) for i in range(2 * per_run))
    return {
        "runs": [first, second],
        "output_records": len(written),
        "exactly_once": sorted((k or b"", v or b"") for k, v in written) == expected,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="checkpointed Kafka -> Spark -> Kafka stream")
    parser.add_argument("bootstrap", nargs="?", help="broker (default: start a LocalBroker)")
    args = parser.parse_args(argv[1:])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiokafka_ng streaming pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    broker = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            from aiokafka_ng.testing import LocalBroker

            broker = LocalBroker()
            broker.start_sync()
            bootstrap = broker.bootstrap_servers
        result = run_twice(spark, bootstrap)
    finally:
        if broker is not None:
            broker.stop_sync()
        spark.stop()
    print(f"runs processed {result['runs']} rows; output has {result['output_records']} records")
    print("every input record exactly once in the output:", result["exactly_once"])
    return 0 if result["exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
