"""The Spark driver that tests/kafka/test_spark_exactly_once.py kills and restarts.

One ``local[2]`` driver runs two streaming queries side by side over the same input topic:
the exactly-once sink (``--eos-out``) and the default at-least-once sink (``--alo-out``),
each with its own checkpoint, so every SIGKILL hits both at the same moment. The transform
keeps the key and rewrites the value (``v`` -> ``out-v``). ``trigger(availableNow=True)``:
the driver exits 0 once both queries have caught up with the input.

Run alone (``python tests/kafka/spark_eos_driver.py --help``) it also prints each query's
rows/s, which is how docs/spark.md's cost of exactly-once was measured.
"""

from __future__ import annotations

import argparse
import os
import time


def _listener() -> type:
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        """One line per micro-batch with Spark's own timings: the test's log shows them."""

        def onQueryStarted(self, event: object) -> None:
            pass

        def onQueryProgress(self, event: object) -> None:
            p = event.progress  # type: ignore[attr-defined]
            print(f"BATCH {p.name} {p.batchId} rows={p.numInputRows} {p.durationMs}", flush=True)

        def onQueryIdle(self, event: object) -> None:
            pass

        def onQueryTerminated(self, event: object) -> None:
            pass

    return Progress


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--eos-out", help="exactly-once output topic")
    p.add_argument("--alo-out", help="at-least-once output topic")
    p.add_argument("--checkpoints", required=True, help="directory of both checkpoints")
    p.add_argument("--per-trigger", type=int, default=2000, help="maxOffsetsPerTrigger")
    args = p.parse_args()
    began = time.monotonic()

    from pyspark.sql import functions as F

    from tests.spark_session import local_builder, started

    spark = started(local_builder(app="aiokafka_ng exactly-once kill test"))
    spark.streams.addListener(_listener()())
    print(f"SESSION {time.monotonic() - began:.1f}s", flush=True)

    def start(topic: str, name: str, exactly_once: bool) -> object:
        source = (
            spark.readStream.format("aiokafka_ng")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.input)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.per_trigger))
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        out = source.select(
            F.col("key"), F.concat(F.lit("out-"), F.col("value").cast("string")).alias("value")
        )
        writer = (
            out.writeStream.format("aiokafka_ng")
            .queryName(name)
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", os.path.join(args.checkpoints, name))
            .trigger(availableNow=True)
        )
        if exactly_once:
            # Short, so a zombie transaction the last kill left open cannot hold the
            # read_committed readers of the test for Kafka's default minute.
            writer = writer.option("exactlyOnce", "true").option(
                "kafka.transaction.timeout.ms", "10000"
            )
        return writer.start()

    queries = []
    if args.eos_out:
        queries.append(("exactly-once", start(args.eos_out, "eos", True)))
    if args.alo_out:
        queries.append(("at-least-once", start(args.alo_out, "alo", False)))
    print(f"STARTED {time.monotonic() - began:.1f}s", flush=True)
    for name, q in queries:
        began = time.monotonic()
        q.awaitTermination()  # type: ignore[attr-defined]
        rows = sum(
            int(p.get("numInputRows", 0))
            for p in q.recentProgress  # type: ignore[attr-defined]
        )
        print(f"DONE {name} {rows} rows, {time.monotonic() - began:.1f}s", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
