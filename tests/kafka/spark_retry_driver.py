"""The Spark driver of tests/kafka/test_spark_exactly_once_retry.py: writes whose first task
attempt fails after it has sent rows, and Spark itself retries the task.

``local[2,4]``: two task slots, and a failed task is retried up to 3 times (plain
``local[2]`` fails the job on the first task failure). Each write's projection has a Python
UDF that, in the first attempt of partition 0 only, stops at its ``--fail-at``-th row, waits
until partition 0 of the output topic holds ``--written`` records (committed or not; each
Spark partition writes to the Kafka partition of its number, so these are the attempt's own
rows), then raises. Spark then runs
the task again, and the retry writes the whole partition. Writes, one after the other:

* ``--eos-out``: a batch write (``df.write``) with ``exactlyOnce``;
* ``--alo-out``: the same batch write with the default at-least-once sink;
* ``--stream-out``: a streaming query (one micro-batch, ``availableNow``) reading
  ``--input`` with ``exactlyOnce``.

Values are ``{i:06d}`` plus padding, so that a few hundred rows fill more than the JVM's
64 KiB buffer to the writer's Python worker and reach it before the UDF stops. Prints
``DONE <topic>`` after each write that succeeded, ``FAILED <topic> ...`` (with the error)
after each that failed; exits 0 unless something else went wrong.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

PAD = "x" * 400


def _high_watermark(bootstrap: str, topic: str) -> int:
    """Records in partition 0 of ``topic``: only Spark partition 0 writes there."""
    import anyio

    from aiokafka_ng.consumer import Consumer
    from aiokafka_ng.consumer.models import TopicPartition

    async def end() -> int:
        async with Consumer(bootstrap_servers=bootstrap) as c:
            tp = TopicPartition(topic, 0)
            return (await c.end_offsets([tp]))[tp]

    return anyio.run(end)


def _failing(bootstrap: str, topic: str, fail_at: int, written: int) -> object:
    """The UDF: value -> padded string; attempt 0 of partition 0 fails at row ``fail_at``."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    seen: dict[int, int] = {}  # per task attempt: rows this worker has transformed

    def transform(v: int) -> str:
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            n = seen[ctx.taskAttemptId()] = seen.get(ctx.taskAttemptId(), 0) + 1
            if n == fail_at:
                deadline = time.monotonic() + 180
                while _high_watermark(bootstrap, topic) < written:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{topic}: attempt 0 wrote < {written} rows in 180 s")
                    time.sleep(0.2)
                raise RuntimeError(f"injected failure of attempt 0 at row {n} ({topic})")
        return f"{v:06d}{PAD}"

    return F.udf(transform, StringType())


def main() -> None:
    from tests.spark_session import (
        batch_write,
        driver_arguments,
        local_builder,
        started,
        stream_write,
    )

    args = driver_arguments(__doc__, cluster=False)

    spark = started(
        local_builder("local[2,4]", "aiokafka_ng exactly-once task retry test")
        # Small Arrow batches: the writer gets rows while the UDF still has rows to go.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    )

    def report(topic: str, write: Any) -> None:
        try:
            write()
        except Exception as exc:  # the test reads what failed the write
            names = [n for n in ("ExactlyOnceReplayError",) if n in str(exc)]
            print(f"FAILED {topic} {names} {str(exc)[:300]!r}", flush=True)
        else:
            print(f"DONE {topic}", flush=True)

    def batch(topic: str, exactly_once: bool) -> None:
        udf = _failing(args.bootstrap, topic, args.fail_at, args.written)
        batch_write(spark, args, udf, topic, exactly_once)

    def stream() -> None:
        udf = _failing(args.bootstrap, args.stream_out, args.fail_at, args.written)
        stream_write(spark, args, udf, tempfile.mkdtemp(prefix="eos-retry-"))

    report(args.alo_out, lambda: batch(args.alo_out, False))
    report(args.eos_out, lambda: batch(args.eos_out, True))
    report(args.stream_out, stream)
    spark.stop()


if __name__ == "__main__":
    main()
