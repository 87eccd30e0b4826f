"""The Spark driver of tests/kafka/test_spark_exactly_once_speculation.py: writes in which
Spark itself launches a speculative copy of a slow task (``spark.speculation=true``).

Spark never speculates in local mode (``TaskSchedulerImpl.start`` runs its checks only when
not local), and in ``local-cluster[2,1,1024]`` it marks the slow task speculatable but never
launches the copy: a copy never runs on a host where an attempt of the task ran
(``TaskSetManager.dequeueTaskFromList``: ``!(speculative && hasAttemptOnHost(index,
host))``) and every executor of a local cluster is on the same host. So this script starts
a small standalone cluster of the pip-installed Spark (``bin/spark-class``): a master on
127.0.0.1 and two workers of one core each on 127.0.0.2 and 127.0.0.3 (Linux routes all of
127/8 to the loopback interface), which makes two hosts; it stops them on exit.

Each write has two tasks (partition 0 of each holds ``--rows`` / 2 rows). A Python UDF in
the projection makes the first attempt of partition 0 slow: at its ``--fail-at``-th row it
waits until partition 0 of the output holds ``--written`` records (each Spark partition
writes to the Kafka partition of its number), then until Spark's speculative copy has
taken over: for an exactlyOnce write, until partition 0's last stable offset is past 0
(the copy's InitProducerId aborted the attempt's open transaction) or the copy's rows are
all in Kafka (its producer started: of the two producers of the slot, the later fenced the
other), for the at-least-once write until the copy's rows are all in Kafka. Then it goes
on (if Spark has not killed it yet). Every attempt of partition 0 leaves a file
``{topic}.a{attempt}`` in ``--marks``, and Spark's ``TaskSetManager`` logs its decisions
(INFO) to stderr: the test reads both as the proof that a copy ran.

Writes, one after the other: ``--alo-out`` (at-least-once batch write), ``--eos-out``
(exactlyOnce batch write), ``--stream-out`` (exactlyOnce streaming query over
``--input``, one micro-batch). Prints ``DONE <topic> attempts=<list>`` after each write
that succeeded, ``FAILED <topic> <error names> ...`` after each that failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PAD = "x" * 400
ROOT = Path(__file__).resolve().parents[2]
_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.tsm.name = org.apache.spark.scheduler.TaskSetManager
logger.tsm.level = info
"""


def _spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-class")


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], within: float) -> str:
    """The first match of ``pattern`` in ``log`` (the daemon's output), bounded."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{log.name}: no {pattern!r} (rc {proc.poll()}):\n{log.read_text()}")


@contextmanager
def standalone_cluster(work: Path) -> Iterator[str]:
    """A master and two one-core workers on distinct loopback hosts; the master's URL."""
    env = {
        **os.environ,
        "SPARK_LOG_DIR": str(work),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYTHONPATH": str(ROOT),
    }
    procs: list[subprocess.Popen[bytes]] = []

    def daemon(name: str, host: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [_spark_class(), *args, "--host", host, "--webui-port", "0"],
                env={**env, "SPARK_LOCAL_IP": host},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc, log

    try:
        master, log = daemon("master", "127.0.0.1", "org.apache.spark.deploy.master.Master")
        url = _wait_for(log, r"Starting Spark master at (spark://\S+)", master, 120)
        workers = [
            daemon(
                f"worker{h}",
                f"127.0.0.{h}",
                "org.apache.spark.deploy.worker.Worker",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(work / f"worker{h}"),
                url,
            )
            for h in (2, 3)
        ]
        for proc, log in workers:
            _wait_for(log, r"(Successfully registered with master)", proc, 120)
        yield url
    finally:
        for proc in reversed(procs):  # workers first: they stop their executors
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _ends(bootstrap: str, topic: str, isolation: str) -> int:
    """Partition 0's end: the high watermark, or under read_committed the last stable
    offset."""
    import anyio

    from aiokafka_ng.consumer import Consumer
    from aiokafka_ng.consumer.models import TopicPartition

    async def end() -> int:
        async with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation) as c:
            tp = TopicPartition(topic, 0)
            return (await c.end_offsets([tp]))[tp]

    return anyio.run(end)


def _slow_first_attempt(
    args: argparse.Namespace, topic: str, exactly_once: bool, slow: bool = True
) -> Any:
    """The UDF: value -> padded string; attempt 0 of partition 0 waits for its copy."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    bootstrap, fail_at, written, rows = args.bootstrap, args.fail_at, args.written, args.rows
    marks = Path(args.marks)
    seen: dict[int, int] = {}  # per task attempt: rows this worker has transformed

    def wait(what: str, done: Any) -> None:
        deadline = time.monotonic() + 120
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: attempt 0 waited 120 s for {what}")
            time.sleep(0.1)

    def transform(v: int) -> str:
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.partitionId() == 0:
            attempt = ctx.attemptNumber()
            n = seen[ctx.taskAttemptId()] = seen.get(ctx.taskAttemptId(), 0) + 1
            if n == 1:
                (marks / f"{topic}.a{attempt}").touch()
            if n == fail_at and attempt == 0 and slow:
                wait("its rows", lambda: _ends(bootstrap, topic, "read_uncommitted") >= written)

                def copied() -> bool:  # the copy's rows of partition 0 are all in Kafka
                    high = _ends(bootstrap, topic, "read_uncommitted")
                    return high >= written + rows // 2

                if exactly_once:
                    # The copy's producer start aborted our transaction (the last stable
                    # offset moves past our records), or the copy's rows are all in Kafka:
                    # its producer started, and of the two the later fenced the other.
                    wait(
                        "the copy",
                        lambda: _ends(bootstrap, topic, "read_committed") > 0 or copied(),
                    )
                else:
                    wait("the copy's rows", copied)
        return f"{v:06d}{PAD}"

    return F.udf(transform, StringType())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--rows", type=int, required=True, help="rows of each write")
    p.add_argument("--input", required=True, help="topic the streaming query reads")
    p.add_argument("--alo-out", required=True)
    p.add_argument("--eos-out", required=True)
    p.add_argument("--stream-out", required=True)
    p.add_argument("--fail-at", type=int, required=True)
    p.add_argument("--written", type=int, required=True)
    p.add_argument("--marks", required=True, help="directory for the attempts' files")
    p.add_argument("--work", required=True, help="directory for the cluster's logs and files")
    args = p.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    work = Path(args.work)
    (work / "log4j2.properties").write_text(_LOG4J)
    from pyspark.sql import SparkSession

    from aiokafka_ng.spark import register

    with standalone_cluster(work) as master:
        spark = (
            SparkSession.builder.master(master)
            .appName("aiokafka_ng exactly-once speculation test")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config(
                "spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'}",
            )
            .config("spark.executorEnv.PYTHONPATH", str(ROOT))
            .config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", "2")
            # Both executors (one per host) before the first task: task 0 and task 1 run
            # on different hosts, and the copy of task 0 goes where task 1 ran.
            .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
            .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
            .config("spark.speculation", "true")
            .config("spark.speculation.interval", "100ms")
            .config("spark.speculation.quantile", "0.5")
            .config("spark.speculation.multiplier", "1.5")
            .config("spark.speculation.minTaskRuntime", "500ms")
            # A waiting UDF reads no input, which the efficiency check (on by default)
            # would also call slow; off, the rule is the plain duration threshold.
            .config("spark.speculation.efficiency.enabled", "false")
            .getOrCreate()
        )
        try:
            register(spark)
            _writes(spark, args)
        finally:
            spark.stop()


def _writes(spark: Any, args: argparse.Namespace) -> None:
    from pyspark.sql import functions as F

    kafka = {"kafka.bootstrap.servers": args.bootstrap}
    marks = Path(args.marks)

    def report(topic: str, write: Any) -> None:
        try:
            write(True)
        except Exception as exc:  # the test reads what failed the write
            names = [
                n for n in ("ExactlyOnceCommitError", "ExactlyOnceReplayError") if n in str(exc)
            ]
            print(f"FAILED {topic} {names} {str(exc)[:300]!r}", flush=True)
            if names == ["ExactlyOnceCommitError"]:
                # Spark kept an attempt its copy had fenced: the documented way out is to
                # run the same write again (same exactlyOnceId, same checkpoint).
                write(False)
                print(f"RERUN DONE {topic}", flush=True)
        else:
            attempts = sorted(
                int(f.name.rsplit(".a", 1)[1]) for f in marks.glob(f"{topic}.a[0-9]*")
            )
            print(f"DONE {topic} attempts={attempts}", flush=True)

    def batch_write(topic: str, exactly_once: bool, slow: bool) -> None:
        udf = _slow_first_attempt(args, topic, exactly_once, slow)
        df = spark.range(args.rows, numPartitions=2).select(
            udf(F.col("id")).alias("value"), F.spark_partition_id().alias("partition")
        )
        writer = df.write.format("aiokafka_ng").options(**kafka).option("topic", topic)
        if exactly_once:
            writer = writer.option("exactlyOnce", "true").option("exactlyOnceId", topic)
        writer.mode("append").save()

    def stream_write(slow: bool) -> None:
        udf = _slow_first_attempt(args, args.stream_out, True, slow)
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
            .option("checkpointLocation", os.path.join(args.work, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    report(args.alo_out, lambda slow: batch_write(args.alo_out, False, slow))
    report(args.eos_out, lambda slow: batch_write(args.eos_out, True, slow))
    report(args.stream_out, stream_write)


if __name__ == "__main__":
    main()
