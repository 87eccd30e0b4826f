"""The Spark driver of tests/kafka/test_spark_exactly_once_speculation.py: writes in which
Spark itself launches a speculative copy of a slow task (``spark.speculation=true``).

Spark never speculates in local mode (``TaskSchedulerImpl.start`` runs its checks only when
not local), and in ``local-cluster[2,1,1024]`` it marks the slow task speculatable but never
launches the copy: a copy never runs on a host where an attempt of the task ran
(``TaskSetManager.dequeueTaskFromList``: ``!(speculative && hasAttemptOnHost(index,
host))``) and every executor of a local cluster is on the same host. So this script starts
a small standalone cluster of the pip-installed Spark (tests/kafka/spark_standalone.py: a
master on 127.0.0.1 and two one-core workers on 127.0.0.2 and 127.0.0.3), which makes two
hosts; it stops them on exit.

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
import sys
import time
from pathlib import Path
from typing import Any

from tests.kafka.spark_standalone import partition_end as _ends
from tests.kafka.spark_standalone import session_builder, standalone_cluster
from tests.spark_session import batch_write, driver_arguments, stream_write

PAD = "x" * 400


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
    args = driver_arguments(__doc__, cluster=True)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    work = Path(args.work)
    from aiokafka_ng.spark import register

    with standalone_cluster(work) as master:
        spark = (
            session_builder(master, work, "aiokafka_ng exactly-once speculation test")
            # Both executors (one per host) before the first task (session_builder): task 0
            # and task 1 run on different hosts, and the copy of task 0 goes where task 1
            # ran.
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

    def batch(topic: str, exactly_once: bool, slow: bool) -> None:
        udf = _slow_first_attempt(args, topic, exactly_once, slow)
        batch_write(spark, args, udf, topic, exactly_once)

    def stream(slow: bool) -> None:
        udf = _slow_first_attempt(args, args.stream_out, True, slow)
        stream_write(spark, args, udf, os.path.join(args.work, "checkpoint"))

    report(args.alo_out, lambda slow: batch(args.alo_out, False, slow))
    report(args.eos_out, lambda slow: batch(args.eos_out, True, slow))
    report(args.stream_out, stream)


if __name__ == "__main__":
    main()
