"""How the tests start Spark: one builder for the local-mode sessions of the Spark tests and
their driver scripts, and the JVM options every test JVM of Spark's runs with.

Short-lived JVMs on a small shared machine: C1 only (less compiling) and the serial
collector (no GC threads) start them faster and take less of the brokers' CPU (the
standalone cluster's start went from ~43 s to ~18 s at a load average of ~13 with them).
Benchmarks do not use this: C1-only code is slower once warm.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_builder(
    master: str = "local[2]", app: str = "aiokafka_ng tests", *, fast_start: bool = True
) -> Any:
    """A SparkSession builder in local mode on 127.0.0.1 whose Python workers run this
    interpreter (the one with aiokafka_ng). Add settings, then :func:`started`.
    ``fast_start=False`` leaves the JVM's defaults (for benchmarks)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    return builder.config("spark.driver.extraJavaOptions", JVM_OPTS) if fast_start else builder


def started(builder: Any, *, register: bool = True) -> Any:
    """The session of ``builder`` (an existing one if this process has one), quiet, with
    the ``aiokafka_ng`` data source registered."""
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if register:
        from aiokafka_ng.spark import register as register_source

        register_source(session)
    return session


def driver_arguments(description: str | None, *, cluster: bool) -> argparse.Namespace:
    """The command line of the sink tests' driver scripts (retry, speculation, executor
    loss): the three writes' topics and rows, where task 0's first attempt is stopped, and
    with ``cluster`` the directories of a standalone cluster's run."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--rows", type=int, required=True, help="rows of each write")
    p.add_argument("--input", required=True, help="topic the streaming query reads")
    p.add_argument("--alo-out", required=True)
    p.add_argument("--eos-out", required=True)
    p.add_argument("--stream-out", required=True)
    p.add_argument("--fail-at", type=int, required=True)
    p.add_argument("--written", type=int, required=True)
    if cluster:
        p.add_argument("--marks", required=True, help="directory for the attempts' files")
        p.add_argument("--work", required=True, help="directory for the cluster's logs")
    return p.parse_args()


def batch_write(
    spark: Any, args: argparse.Namespace, udf: Any, topic: str, exactly_once: bool
) -> None:
    """The sink drivers' batch write: ``--rows`` ids in two tasks through ``udf`` to ``topic``,
    each Spark partition to the Kafka partition of its number; exactlyOnce keyed by the topic."""
    from pyspark.sql import functions as F

    df = spark.range(args.rows, numPartitions=2).select(
        udf(F.col("id")).alias("value"), F.spark_partition_id().alias("partition")
    )
    writer = (
        df.write.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", topic)
    )
    if exactly_once:
        writer = writer.option("exactlyOnce", "true").option("exactlyOnceId", topic)
    writer.mode("append").save()


def stream_write(spark: Any, args: argparse.Namespace, udf: Any, checkpoint: str) -> None:
    """The sink drivers' exactlyOnce streaming write: ``--input`` from the start through
    ``udf`` to ``--stream-out``, until what is there now is written."""
    from pyspark.sql import functions as F

    kafka = {"kafka.bootstrap.servers": args.bootstrap}
    source = (
        spark.readStream.format("aiokafka_ng")
        .options(**kafka)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        source.select(
            udf(F.col("value").cast("string").cast("long")).alias("value"),
            F.spark_partition_id().alias("partition"),
        )
        .writeStream.format("aiokafka_ng")
        .options(**kafka)
        .option("topic", args.stream_out)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
