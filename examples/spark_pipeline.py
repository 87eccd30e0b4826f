"""A small Spark pipeline through Kafka with the ``aiokafka_ng`` data source.

Generated orders -> transform (JSON value, customer as key, a header) -> write to a topic ->
read the topic back -> aggregate revenue per customer, checked against the same aggregate
computed without Kafka.

Usage::

    python examples/spark_pipeline.py [BOOTSTRAP_SERVERS] [ROWS]

Runs Spark with ``local[2]``. Without BOOTSTRAP_SERVERS it starts a LocalBroker (Tansu) of
its own. Needs the ``spark`` extra (pyspark, pyarrow) and Java 17.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aiokafka_ng.spark import register


def orders(spark: SparkSession, rows: int) -> DataFrame:
    """Generated orders: id, customer (c0..c9), amount in cents."""
    return spark.range(rows, numPartitions=2).select(
        F.col("id").alias("order_id"),
        F.concat(F.lit("c"), (F.col("id") % 10).cast("string")).alias("customer"),
        ((F.col("id") * 37) % 1000 + 1).alias("amount_cents"),
    )


def run_pipeline(spark: SparkSession, bootstrap_servers: str, rows: int = 10_000) -> dict[str, Any]:
    """Run the pipeline once on a fresh topic; returns what it measured and checked."""
    register(spark)
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    source = orders(spark, rows)

    # Transform: the customer becomes the key (so a customer's orders share a partition),
    # the order is serialized as JSON, and a header says which schema the value follows.
    schema_header = F.struct(F.lit("schema").alias("key"), F.lit(b"order-v1").alias("value"))
    to_kafka = source.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct("order_id", "customer", "amount_cents")).alias("value"),
        F.array(schema_header).alias("headers"),
    )
    started = time.perf_counter()
    (
        to_kafka.write.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("kafka.linger.ms", "10")
        .option("topic", topic)
        .mode("append")
        .save()
    )
    wrote_s = time.perf_counter() - started

    # Read back and aggregate per customer.
    order_schema = "order_id long, customer string, amount_cents long"
    back = (
        spark.read.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .load()
        .select(
            F.col("key").cast("string").alias("key"),
            F.from_json(F.col("value").cast("string"), order_schema).alias("order"),
        )
        .select("key", "order.*")
    )
    from_kafka = {
        r["customer"]: (r["orders"], r["revenue"])
        for r in back.groupBy("customer")
        .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue"))
        .collect()
    }
    expected = {
        r["customer"]: (r["orders"], r["revenue"])
        for r in source.groupBy("customer")
        .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue"))
        .collect()
    }
    return {
        "topic": topic,
        "rows": rows,
        "write_seconds": wrote_s,
        "per_customer": from_kafka,
        "matches": from_kafka == expected,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Spark -> Kafka -> Spark with aiokafka_ng")
    parser.add_argument("bootstrap", nargs="?", help="broker (default: start a LocalBroker)")
    parser.add_argument("rows", nargs="?", type=int, default=10_000)
    args = parser.parse_args(argv[1:])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiokafka_ng pipeline")
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
        result = run_pipeline(spark, bootstrap, args.rows)
    finally:
        if broker is not None:
            broker.stop_sync()
        spark.stop()
    print(f"wrote {result['rows']} orders to {result['topic']} in {result['write_seconds']:.2f}s")
    for customer, (count, revenue) in sorted(result["per_customer"].items()):
        print(f"  {customer}: {count} orders, {revenue / 100:.2f} revenue")
    print("aggregate matches the source:", result["matches"])
    return 0 if result["matches"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
