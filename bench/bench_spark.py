"""Spark write and read throughput through the aiokafka_ng data source vs one process with
our Producer / Consumer, in one run on one broker, reported as ratios.

Workload: ``--rows`` (default 1M) records of 100-byte values, null keys, the producer's
defaults (acks=all, idempotent, linger 5 ms, 16 KiB batches), each run to a fresh topic
(auto-created: 4 partitions on Tansu) on the same broker.

- single process: ``Producer.send`` in a loop under ``anyio.run``, then ``flush``; the time
  runs from the first send to the end of flush (everything acked);
- Spark ``local[2]``: ``spark.range(rows, numPartitions=2)`` -> 100-byte binary ``value`` ->
  ``df.write.format("aiokafka_ng")``: 2 tasks, each with one producer. The time is the whole
  ``save()`` (planning, generating the rows in the JVM, Arrow transfer to the Python
  workers, sending, flushing, commit), after a small warm-up write in the same session;
- single process read: ``Consumer.getmany`` (manual assign of every partition, from 0)
  until every record of the topic Spark wrote has been handed out;
- one read task and one write task of the data source run in-process, without Spark
  (``read_range`` over one partition of that topic; ``write_batches`` of 10k-row Arrow
  batches to a fresh topic): the source's own per-record cost, for reference;
- Spark read of that topic (``count()`` over the source: every column still crosses from
  the Python workers to the JVM), after a warm-up read of the warm-up topic, as for writes
  (the first query of a session pays for starting Python workers and imports);
- Spark's own ceiling for a Python data source, in the same session: a *null* source whose
  two tasks yield ready-made Arrow batches of the source's schema (10k rows, same columns and
  sizes, built once per task) and a *null* sink that only counts the Arrow batches Spark
  hands it. No Kafka work at all: what Spark, its Arrow transfer and the Python workers cost
  on this machine, which bounds what any data source can reach.

The run ends with the CPU budget of a read on this machine: the CPU all processes spend
per row while the null source is counted (Spark alone), plus the broker's CPU per row while
our source is counted (its fetches), give the rate no source can pass on these cores even
if its own work cost nothing.

Every line but the two in-process tasks is the best of ``--repeat`` runs (default 3) in the
same session, each to a fresh topic for writes: the JVM compiles Spark's generated code
while the first large queries run (a 1M-row write went 0.6M -> 0.9-1.1M rows/s over its
first three runs in one session), so a single run would time Spark's warm-up for whichever
query came first rather than the data source.

``--peer`` instead times Spark's own JVM Kafka connector (``format("kafka")``) beside ours
in one Spark session on a 3-node Apache Kafka cluster (``KafkaCluster``), as ratios; see
:func:`peer_runs` and tests/kafka/spark_peer.py for the connector's version.

Run: ``cd /work/main && PYTHONPATH=. python bench/bench_spark.py [--rows N] [--repeat R]
[--bootstrap H:P] [--peer]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
from cpu_time import machine_cpu, process_cpu

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import KafkaCluster, LocalBroker

VALUE = b"v" * 100


def single_process(bootstrap: str, rows: int) -> float:
    topic = f"bench-single-{uuid.uuid4().hex[:8]}"

    async def main() -> float:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            await producer.send_and_wait(topic, b"warm-up")  # metadata + producer id
            started = time.perf_counter()
            send = producer.send
            for _ in range(rows):
                await send(topic, VALUE)
            await producer.flush()
            return time.perf_counter() - started

    return anyio.run(main)


def single_read(bootstrap: str, topic: str, rows: int) -> float:
    async def main() -> float:
        async with Consumer(bootstrap_servers=bootstrap) as consumer:
            parts = [TopicPartition(topic, p) for p in await consumer.partitions_for_topic(topic)]
            consumer.assign(parts)
            for tp in parts:
                consumer.seek(tp, 0)
            started = time.perf_counter()
            n = 0
            while n < rows:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    n += len(records)
            return time.perf_counter() - started

    return anyio.run(main)


def task_runs(bootstrap: str, topic: str, rows: int) -> tuple[int, float, float]:
    """One read task (the largest partition) and one write task, in-process."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from aiokafka_ng.spark._offsets import partition_bounds
    from aiokafka_ng.spark._read import KafkaRange, plan_read, read_range
    from aiokafka_ng.spark._write import plan_write, write_batches

    bounds = anyio.run(partition_bounds, {"bootstrap.servers": bootstrap}, [topic])
    tp, (low, high) = max(bounds.items(), key=lambda kv: kv[1][1] - kv[1][0])
    plan = plan_read({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False)
    started = time.perf_counter()
    got = sum(b.num_rows for b in read_range(KafkaRange(tp.topic, tp.partition, low, high, plan)))
    read = time.perf_counter() - started
    schema = StructType([StructField("value", BinaryType())])
    sink = f"bench-task-{uuid.uuid4().hex[:8]}"
    wplan = plan_write({"kafka.bootstrap.servers": bootstrap, "topic": sink}, schema)
    batch = pa.RecordBatch.from_arrays([pa.array([VALUE] * 10_000, pa.binary())], ["value"])
    write_batches(wplan, iter([batch]))  # warm-up: metadata, producer id
    n = max(1, rows // 2 // 10_000)
    started = time.perf_counter()
    write_batches(wplan, iter([batch] * n))
    wrote = time.perf_counter() - started
    return got, read, n * 10_000 / wrote


def _null_source() -> Any:
    """A data source doing no Kafka work (see the module docstring): Spark's ceiling."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    from aiokafka_ng.spark._plan import read_schema

    class NullReader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(self.rows // 2), InputPartition(self.rows - self.rows // 2)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            n = 10_000
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(n, pa.binary()),
                    pa.array([VALUE] * n, pa.binary()),
                    pa.repeat(pa.scalar("bench-null", pa.string()), n),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                    pa.array(range(n), pa.int64()),
                    pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                ],
                names=[
                    "key",
                    "value",
                    "topic",
                    "partition",
                    "offset",
                    "timestamp",
                    "timestampType",
                ],
            )
            left = partition.value
            while left >= n:
                yield batch
                left -= n
            if left:
                yield batch.slice(0, left)

    class NullWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NullSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "bench_null"

        def schema(self) -> Any:
            return read_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return NullReader(int(self.options["rows"]))

        def writer(self, schema: Any, overwrite: bool) -> NullWriter:
            return NullWriter()

    return NullSource


#: CPU seconds of the fastest read: ``machine`` for the null source, ``broker`` for ours.
READ_CPU: dict[str, float] = {}


def spark_runs(
    bootstrap: str, rows: int, repeat: int, broker_pid: int | None = None
) -> tuple[float, float, str, float, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from aiokafka_ng.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    spark.dataSource.register(_null_source())

    def write(n: int, topic: str, fmt: str = "aiokafka_ng") -> float:
        df = spark.range(n, numPartitions=2).selectExpr(
            "cast(lpad(cast(id as string), 100, 'v') as binary) as value"
        )
        started = time.perf_counter()
        (
            df.write.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
        return time.perf_counter() - started

    def read(topic: str, fmt: str = "aiokafka_ng") -> tuple[int, float]:
        started = time.perf_counter()
        count = (
            spark.read.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("rows", str(rows))
            .load()
            .count()
        )
        return count, time.perf_counter() - started

    try:
        warm_up = f"bench-spark-warmup-{uuid.uuid4().hex[:8]}"
        write(10_000, warm_up)
        read(warm_up)
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        wrote = write(rows, topic)
        for _ in range(repeat - 1):
            wrote = min(wrote, write(rows, f"bench-spark-{uuid.uuid4().hex[:8]}"))
        took = float("inf")
        for _ in range(repeat):
            before = process_cpu(broker_pid)
            count, elapsed = read(topic)
            assert count == rows, f"read back {count} of {rows} rows"
            if elapsed < took:
                took, READ_CPU["broker"] = elapsed, process_cpu(broker_pid) - before
        write(10_000, "-", "bench_null")
        read("-", "bench_null")
        null_wrote = min(write(rows, "-", "bench_null") for _ in range(repeat))
        null_read = float("inf")
        for _ in range(repeat):
            before = machine_cpu()
            count, elapsed = read("-", "bench_null")
            assert count == rows, f"null source: {count} of {rows} rows"
            if elapsed < null_read:
                null_read, READ_CPU["machine"] = elapsed, machine_cpu() - before
        return wrote, took, topic, null_wrote, null_read
    finally:
        spark.stop()


def peer_runs(bootstrap: str, rows: int, repeat: int) -> dict[str, float]:
    """``--peer``: rows/s of Spark's own connector (``kafka``) and ours (``aiokafka_ng``) in
    one session, same options (bootstrap and topic only: each producer's own defaults), each
    write to a fresh 3-partition topic, each read a ``count()`` of the same topic. The order
    alternates between runs so neither source always runs on a warmer JVM; best of
    ``repeat``. Keys: ``write kafka``, ``write aiokafka_ng``, ``read kafka``, ...."""
    from aiokafka_ng.admin import AdminClient, NewTopic
    from tests.kafka.spark_peer import peer_session

    async def create(names: list[str]) -> None:
        async with AdminClient(bootstrap_servers=bootstrap) as admin:
            replicas = min(3, len((await admin.describe_cluster()).brokers))
            topics = [NewTopic(n, 3, replicas) for n in names]
            (await admin.create_topics(topics)).raise_on_error()

    spark = peer_session("bench_spark --peer", fast_start=False)
    fmts = ("kafka", "aiokafka_ng")

    def write(n: int, fmt: str) -> tuple[str, float]:
        topic = f"bench-peer-{uuid.uuid4().hex[:8]}"
        anyio.run(create, [topic])
        df = spark.range(n, numPartitions=2).selectExpr(
            "cast(lpad(cast(id as string), 100, 'v') as binary) as value"
        )
        writer = df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap)
        writer = writer.option("topic", topic).mode("append")
        started = time.perf_counter()
        writer.save()
        return topic, time.perf_counter() - started

    def read(topic: str, fmt: str) -> float:
        df = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
        started = time.perf_counter()
        count = df.option("subscribe", topic).load().count()
        took = time.perf_counter() - started
        assert count == rows, f"{fmt} read {count} of {rows} rows"
        return took

    best: dict[str, float] = {}
    try:
        for fmt in fmts:  # warm-up: Python workers, imports, the JVM's first queries
            warm, _ = write(10_000, fmt)
            df = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
            df.option("subscribe", warm).load().count()
        topic = ""
        for run in range(repeat):
            for fmt in fmts if run % 2 == 0 else fmts[::-1]:
                topic, took = write(rows, fmt)
                best[f"write {fmt}"] = min(best.get(f"write {fmt}", float("inf")), took)
            for fmt in fmts if run % 2 == 0 else fmts[::-1]:
                took = read(topic, fmt)
                best[f"read {fmt}"] = min(best.get(f"read {fmt}", float("inf")), took)
    finally:
        spark.stop()
    return best


def peer_main(args: argparse.Namespace) -> None:
    cluster = None
    if args.bootstrap is None:
        cluster = KafkaCluster(brokers=3, tls=False)
        cluster.start_sync()
        bootstrap = cluster.bootstrap_servers
    else:
        bootstrap = args.bootstrap
    try:
        repeat = max(1, args.repeat)
        best = peer_runs(bootstrap, args.rows, repeat)
    finally:
        if cluster is not None:
            cluster.stop_sync()
    n = args.rows
    where = "3-node Apache Kafka" if cluster is not None else bootstrap
    print(f"rows: {n} x 100 B values, {where}, Spark local[2], best of {repeat} runs")
    for what in ("write", "read"):
        theirs, ours = best[f"{what} kafka"], best[f"{what} aiokafka_ng"]
        print(
            f"{what:5}: Spark's connector {n / theirs:>10,.0f} rows/s, aiokafka_ng"
            f" {n / ours:>10,.0f} rows/s = {theirs / ours:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--bootstrap", default=None, help="broker (default: start a LocalBroker)")
    parser.add_argument(
        "--peer",
        action="store_true",
        help="Spark's own Kafka connector vs ours in one session, on a 3-node Apache Kafka"
        " cluster unless --bootstrap is given",
    )
    args = parser.parse_args()
    if args.peer:
        peer_main(args)
        return
    broker = None
    if args.bootstrap is None:
        broker = LocalBroker()
        broker.start_sync()
        bootstrap = broker.bootstrap_servers
    else:
        bootstrap = args.bootstrap
    try:
        repeat = max(1, args.repeat)
        single = min(single_process(bootstrap, args.rows) for _ in range(repeat))
        pid = None if broker is None else broker.pid
        wrote, read, topic, null_wrote, null_read = spark_runs(bootstrap, args.rows, repeat, pid)
        single_consume = min(single_read(bootstrap, topic, args.rows) for _ in range(repeat))
        task_rows, task_read, task_write_rate = task_runs(bootstrap, topic, args.rows)
    finally:
        if broker is not None:
            broker.stop_sync()
    n = args.rows
    print(f"rows: {n} x 100 B values, best of {repeat} runs")
    print(f"single-process Producer : {n / single:>10,.0f} rows/s ({single:.2f}s)")
    print(f"Spark write, 2 tasks    : {n / wrote:>10,.0f} rows/s ({wrote:.2f}s)")
    print(f"single-process getmany  : {n / single_consume:>10,.0f} rows/s ({single_consume:.2f}s)")
    print(f"Spark read (count)      : {n / read:>10,.0f} rows/s ({read:.2f}s)")
    print(f"one read task, no Spark : {task_rows / task_read:>10,.0f} rows/s")
    print(f"one write task, no Spark: {task_write_rate:>10,.0f} rows/s")
    print(f"Spark write / single    : {single / wrote:.2f}x")
    print(f"Spark read / single     : {single_consume / read:.2f}x")
    print(
        f"null sink, 2 tasks      : {n / null_wrote:>10,.0f} rows/s = ceiling "
        f"{single / null_wrote:.2f}x single for any sink"
    )
    print(
        f"null source (count)     : {n / null_read:>10,.0f} rows/s = ceiling "
        f"{single_consume / null_read:.2f}x getmany for any source"
    )
    spark_cpu, broker_cpu = READ_CPU.get("machine", 0.0) / n, READ_CPU.get("broker", 0.0) / n
    if spark_cpu and broker_cpu:
        cores = os.cpu_count() or 1
        bound = cores / (spark_cpu + broker_cpu)
        print(
            f"read CPU budget         : Spark alone {spark_cpu * 1e6:.2f} us/row (all processes,"
            f" null source) + broker {broker_cpu * 1e6:.2f} us/row (fetches, Spark read):"
            f" on {cores} cores no source passes {bound:,.0f} rows/s ="
            f" {bound / (n / single_consume):.2f}x getmany even doing no work of its own"
        )


if __name__ == "__main__":
    main()
