"""An exactly-once Kafka -> Spark -> Kafka pipeline with the ``aiokafka_ng`` source and sink.

The sink's ``exactlyOnce`` mode writes each task's output in a Kafka transaction together
with a marker of its micro-batch, which the driver commits once Spark accepted every task,
so a batch replayed after a crash (driver killed after it committed, before the checkpoint
did) writes nothing twice. The source reads with
``kafka.isolation.level=read_committed``, so a previous stage's aborted writes never enter
this one, and whoever reads the output must do the same (our consumer's
``isolation_level="read_committed"``, librdkafka's and Java's ``isolation.level``).

Each run processes what is in the input topic now (``Trigger.AvailableNow``) and stops; the
script writes records, runs, writes more and runs again on the same checkpoint, then reads
the output read_committed and checks it holds every input record once.

Usage::

    python examples/spark_exactly_once.py BOOTSTRAP_SERVERS

BOOTSTRAP_SERVERS must be Apache Kafka (or another broker with transactions and
read_committed; the bundled Tansu broker does not hide aborted records). Needs the ``spark``
extra (pyspark, pyarrow) and Java 17.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid

import anyio
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aiokafka_ng.admin import AdminClient, NewTopic
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark import register


def run_once(spark: SparkSession, bootstrap: str, source: str, sink: str, checkpoint: str) -> int:
    """One AvailableNow run of the exactly-once pipeline; returns the rows it processed."""
    orders = (
        spark.readStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        # Committed records only: what an upstream transactional writer aborted is skipped.
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    upper = orders.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))
    query = (
        upper.writeStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return sum(p["numInputRows"] for p in query.recentProgress)


async def _create(bootstrap: str, *topics: str) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        (await admin.create_topics([NewTopic(t, 2, 1) for t in topics])).raise_on_error()


async def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        values = [b"order-%d" % i for i in range(first, first + count)]
        keys = [b"%d" % i for i in range(first, first + count)]
        futures = await producer.send_batch(topic, values, keys=keys)
        await producer.flush()
        for fut in futures:
            fut.result()


async def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic``, read up to its last stable offsets.

    Kafka answers the driver's commit (EndTxn) before the brokers write the commit markers,
    so right after a run the last stable offsets may still trail the high watermarks: wait
    (bounded) until they meet, as no transaction of ours is left open."""
    async with (
        Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as c,
        Consumer(bootstrap_servers=bootstrap) as uncommitted,
    ):
        parts = [TopicPartition(topic, p) for p in sorted(await c.partitions_for_topic(topic))]
        c.assign(parts)
        await c.seek_to_beginning(*parts)
        for _ in range(300):  # 0.1 s apart: 30 s
            ends = await c.end_offsets(parts)
            if ends == await uncommitted.end_offsets(parts):
                break
            await anyio.sleep(0.1)
        out: list[tuple[bytes | None, bytes | None]] = []
        with anyio.fail_after(60):
            while [tp for tp in parts if await c.position(tp) < ends[tp]]:
                for records in (await c.getmany(timeout_ms=200)).values():
                    out.extend((r.key, r.value) for r in records)
        return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="exactly-once Kafka -> Spark -> Kafka stream")
    parser.add_argument("bootstrap", help="Apache Kafka bootstrap servers, HOST:PORT")
    parser.add_argument("--records", type=int, default=3000, help="input records per run")
    args = parser.parse_args(argv[1:])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiokafka_ng exactly-once pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    tag = uuid.uuid4().hex[:8]
    source, sink = f"orders-{tag}", f"orders-upper-{tag}"
    n = args.records
    try:
        anyio.run(_create, args.bootstrap, source, sink)
        runs = []
        with tempfile.TemporaryDirectory(prefix="aiokafka-ng-checkpoint-") as checkpoint:
            for first in (0, n):
                anyio.run(_produce, args.bootstrap, source, first, n)
                runs.append(run_once(spark, args.bootstrap, source, sink, checkpoint))
        written = anyio.run(read_committed, args.bootstrap, sink)
    finally:
        spark.stop()
    expected = sorted((b"%d" % i, b"ORDER-%d" % i) for i in range(2 * n))
    ok = sorted((k or b"", v or b"") for k, v in written) == expected
    print(f"runs processed {runs} rows; read_committed output has {len(written)} records")
    print("every input record exactly once in the output:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
