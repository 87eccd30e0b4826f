"""The cost of the sink's exactlyOnce mode: rows/s of the same writes with and without it.

Usage::

    python tests/kafka/spark_eos_bench.py [--bootstrap HOST:PORT] [--rows N] [--batches K]

Without ``--bootstrap`` it starts a 3-node Apache Kafka (``KafkaCluster``). One ``local[2]``
SparkSession writes an N-row DataFrame (100-byte values, 2 partitions) to a fresh
3-partition topic, alternating at-least-once and exactly-once, ``--reps`` times each
(best of each reported); then K writes of N/K rows each, the size of a small micro-batch,
where the transaction's fixed cost per task shows.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import anyio


async def _topic(bootstrap: str, name: str) -> None:
    from aiokafka_ng.admin import AdminClient, NewTopic

    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        (await admin.create_topics([NewTopic(name, 3, 3)])).raise_on_error()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bootstrap", help="Apache Kafka bootstrap servers (default: start one)")
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from aiokafka_ng.testing import KafkaCluster

        cluster = KafkaCluster(brokers=3)
        cluster.start_sync()
        bootstrap = cluster.bootstrap_servers
    from pyspark.sql import functions as F

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script
    from tests.spark_session import local_builder, started

    spark = started(local_builder(app="aiokafka_ng exactlyOnce cost", fast_start=False))
    try:
        topic = f"eos-bench-{uuid.uuid4().hex[:8]}"
        anyio.run(_topic, bootstrap, topic)

        def frame(n: int) -> object:
            df = spark.range(n, numPartitions=2).select(
                F.col("id").cast("string").alias("key"),
                F.lpad(F.col("id").cast("string"), 100, "x").alias("value"),
            )
            return df.cache()

        def write(df: object, exactly_once: bool) -> float:
            w = (
                df.write.format("aiokafka_ng")  # type: ignore[attr-defined]
                .mode("append")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", topic)
            )
            if exactly_once:
                w = w.option("exactlyOnce", "true").option("exactlyOnceId", uuid.uuid4().hex)
            began = time.perf_counter()
            w.save()
            return time.perf_counter() - began

        big = frame(args.rows)
        big.count()  # type: ignore[attr-defined]
        write(big, False)  # warm-up: Python workers, metadata
        best: dict[bool, float] = {False: 1e9, True: 1e9}
        for _ in range(args.reps):
            for mode in (False, True):
                best[mode] = min(best[mode], write(big, mode))
        small_n = args.rows // args.batches
        small = frame(small_n)
        small.count()  # type: ignore[attr-defined]
        total: dict[bool, float] = {False: 0.0, True: 0.0}
        for _ in range(args.batches):
            for mode in (False, True):
                total[mode] += write(small, mode)
        for mode, name in ((False, "at-least-once"), (True, "exactly-once ")):
            print(
                f"{name}: {args.rows} rows in one write: {args.rows / best[mode]:,.0f} rows/s; "
                f"{args.batches} writes of {small_n}: {args.rows / total[mode]:,.0f} rows/s "
                f"({total[mode] / args.batches * 1000:.0f} ms per write)"
            )
        print(
            f"exactly-once / at-least-once: {best[False] / best[True]:.2f} (one write), "
            f"{total[False] / total[True]:.2f} (small writes)"
        )
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop_sync()


if __name__ == "__main__":
    main()
