"""Restarting an exactly-once streaming query whose micro-batch is pending, with a different
number of partitions, on Apache Kafka (issue 35, item 2).

*Pending batch.* The batch's output is committed to Kafka (every slot's transaction and
marker) but the checkpoint's commit log does not have it, the state a driver killed between
its Kafka commit and Spark's commit log leaves. Here the commit log cannot be written: the
checkpoint's ``commits`` is a file, not a directory, so Spark fails the query when it
writes ``commits/0``, after the sink's commit, and the restart replays batch 0 from
``offsets/0``. A SIGKILL in that window (milliseconds wide) would not land there every run.

One ``local[2]`` session for the module; a restart is a new query on the same checkpoint,
which Spark resumes exactly as a new driver would (offset and commit logs).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokafka_ng.admin import NewPartitions, NewTopic
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, log_ends, read_all, unique
from tests.spark_session import local_builder, started

pytestmark = pytest.mark.kafka

N1 = 400  # before the first run: batch 0
N2 = 300  # after it, over every partition: batch 1


@pytest.fixture(scope="module")
def spark(kafka_cluster: KafkaCluster) -> Iterator[Any]:
    from pyspark import SparkContext

    started_before = SparkContext._active_spark_context is not None
    session = started(local_builder(app="aiokafka_ng exactly-once restart test"))
    try:
        yield session
    finally:
        if not started_before:  # a session this fixture did not start is someone else's
            session.stop()


async def _produce(cluster: KafkaCluster, topic: str, first: int, n: int, parts: int) -> None:
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5) as producer:
        for i in range(first, first + n):
            await producer.send(topic, f"{i}".encode(), f"k{i % 50}".encode(), i % parts)
        await producer.flush()


async def _topics(cluster: KafkaCluster, *names: str) -> None:
    async with admin_for(cluster) as admin:
        (await admin.create_topics([NewTopic(t, 2, 3) for t in names])).raise_on_error()


async def _add_partition(cluster: KafkaCluster, topic: str) -> None:
    async with admin_for(cluster) as admin:
        (await admin.create_partitions({topic: NewPartitions(3)})).raise_on_error()
        # Every broker knows partition 2 before records go there (KRaft: see eventually).
        await eventually(
            lambda: admin.describe_topics([topic]),
            lambda r: topic in r.succeeded and len(r.succeeded[topic].partitions) == 3,
        )


def _query(
    spark: Any,
    cluster: KafkaCluster,
    source: str,
    out: str,
    cp: Path,
    write_tasks: int | None,
    earliest: bool = True,
) -> Any:
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", source)
    )
    if earliest:  # else the default, latest
        reader = reader.option("startingOffsets", "earliest")
    df = reader.load().select(
        "key", F.concat(F.lit("out-"), F.col("value").cast("string")).alias("value")
    )
    if write_tasks is not None:
        df = df.repartition(write_tasks, "key")  # the write stage's tasks: the slots
    return (
        df.writeStream.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("topic", out)
        .option("exactlyOnce", "true")
        # A transaction of a failed run that no later task fences (a slot that is gone)
        # is aborted by Kafka after this, rather than holding read_committed readers.
        .option("kafka.transaction.timeout.ms", "10000")
        .option("checkpointLocation", str(cp))
        .trigger(availableNow=True)
        .start()
    )


def _run(query: Any) -> str | None:
    """Wait for an availableNow query; None if it finished, else its error's text."""
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: the test checks what failed it
        return str(exc)
    return None


def _writable(directory: Path, writable: bool) -> None:
    """Let nothing create files in ``directory`` (or undo it). root ignores permissions:
    for root it is the immutable attribute (chattr, ext4 and most Linux filesystems)."""
    if os.geteuid() != 0:
        directory.chmod(0o755 if writable else 0o555)
        return
    done = subprocess.run(
        ["chattr", "-i" if writable else "+i", str(directory)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"chattr on {directory}: {done.stderr}"


def _pending_batch(spark: Any, cluster: KafkaCluster, *args: Any) -> int:
    """Runs the query (whose checkpoint exists) on the input as it is now: its last batch
    is committed to Kafka, not to the checkpoint's commit log. Returns that batch's id."""
    cp: Path = args[2]
    commits = cp / "commits"
    _writable(commits, False)
    try:
        error = _run(_query(spark, cluster, *args))
    finally:
        _writable(commits, True)
    assert error is not None and "commits" in error, error
    pending = max(int(f.name) for f in (cp / "offsets").glob("[0-9]*"))
    assert pending not in _committed(cp)
    return pending


def _committed(cp: Path) -> list[int]:
    return sorted(int(f.name) for f in (cp / "commits").glob("[0-9]*"))


def _offsets(cp: Path, batch: int) -> dict[str, int]:
    last = (cp / "offsets" / str(batch)).read_text().splitlines()[-1]
    return {p: o for ps in json.loads(last).values() for p, o in ps.items()}


def _values(records: list[Any]) -> Counter[int]:
    return Counter(int(r.value.decode().removeprefix("out-")) for r in records)


async def _settled(cluster: KafkaCluster, topic: str) -> None:
    """Until no transaction is open in the topic (last stable offsets = high watermarks):
    an orphan of a failed run ends at its transaction.timeout.ms (10 s) plus Kafka's check
    interval (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s)."""
    tps = [TopicPartition(topic, p) for p in range(2)]
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed"
    ) as c:

        async def ends() -> tuple[int, int]:
            return sum((await c.end_offsets(tps)).values()), await log_ends(cluster, topic, 2)

        stable, high = await eventually(ends, lambda e: e[0] == e[1], attempts=1200)
    assert stable == high, f"{topic}: a transaction still open after 60 s"


def _assert_once(cluster: KafkaCluster, topic: str, n: int, first: int = 0) -> None:
    """Rows ``first`` to ``n - 1`` are in ``topic`` once each, and nothing else."""
    anyio.run(_settled, cluster, topic)  # so that read_committed shows every commit
    counts = _values(anyio.run(read_all, cluster, topic, 2))
    dup = {v: c for v, c in counts.items() if c > 1}
    assert not dup, f"duplicated: {list(dup.items())[:5]}"
    assert sorted(counts) == list(range(first, n)), f"{len(counts)} of {n - first} rows"


def test_input_partitions_added_while_a_batch_is_pending(
    spark: Any, kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    source, out = unique("restart-in"), unique("restart-out")
    anyio.run(_topics, kafka_cluster, source, out)
    cp = tmp_path / "cp"
    # A new query's checkpoint must be empty (Spark refuses one holding files but no
    # query): a first run, on the still empty input, makes it.
    assert _run(_query(spark, kafka_cluster, source, out, cp, None)) is None
    anyio.run(_produce, kafka_cluster, source, 0, N1, 2)
    pending = _pending_batch(spark, kafka_cluster, source, out, cp, None)
    assert _offsets(cp, pending) == {"0": N1 // 2, "1": N1 // 2}
    _assert_once(kafka_cluster, out, N1)

    anyio.run(_add_partition, kafka_cluster, source)
    anyio.run(_produce, kafka_cluster, source, N1, N2, 3)
    error = _run(_query(spark, kafka_cluster, source, out, cp, None))
    assert error is None, error

    # The pending batch was replayed with the partitions of its offset log; partition 2
    # joined at the next batch, from its first record.
    assert _offsets(cp, pending) == {"0": N1 // 2, "1": N1 // 2}
    third = N2 // 3
    assert _offsets(cp, pending + 1) == {"0": N1 // 2 + third, "1": N1 // 2 + third, "2": third}
    assert _committed(cp)[-2:] == [pending, pending + 1]
    _assert_once(kafka_cluster, out, N1 + N2)
    # The replay wrote nothing, not even aborted records: both its slots found their
    # markers.
    everything = anyio.run(read_all, kafka_cluster, out, 2, "read_uncommitted")
    assert len(everything) == N1 + N2


def test_a_pending_batch_replayed_with_more_write_tasks_fails_and_duplicates_nothing(
    spark: Any, kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    source, out = unique("restart-in"), unique("restart-out")
    anyio.run(_topics, kafka_cluster, source, out)
    cp = tmp_path / "cp"
    assert _run(_query(spark, kafka_cluster, source, out, cp, 2)) is None  # as above
    anyio.run(_produce, kafka_cluster, source, 0, N1, 2)
    pending = _pending_batch(spark, kafka_cluster, source, out, cp, 2)
    _assert_once(kafka_cluster, out, N1)

    # repartition(3) instead of (2): slots 0 and 1 get other rows than they committed.
    error = _run(_query(spark, kafka_cluster, source, out, cp, 3))
    assert error is not None and "ExactlyOnceReplayError" in error, error
    assert pending not in _committed(cp)
    # The write failed before the driver's commit: no transaction of the replay is
    # committed, the rows are still there once each.
    _assert_once(kafka_cluster, out, N1)

    # The plan restored, the pending batch is replayed as it ran: nothing more written.
    error = _run(_query(spark, kafka_cluster, source, out, cp, 2))
    assert error is None, error
    assert _committed(cp)[-1] == pending
    _assert_once(kafka_cluster, out, N1)


def test_a_pending_first_batch_that_started_at_latest_is_replayed_as_it_ran(
    spark: Any, kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """Spark asks the source for its initial offset again when it replays batch 0. When the
    source resolved ``latest`` there, the replay started at the new end, past the batch's
    end, and read the partitions from offset 0: ExactlyOnceReplayError for ever (0 rows
    committed, N1 replayed), or with the at-least-once sink rows from before the start."""
    source, out = unique("restart-in"), unique("restart-out")
    anyio.run(_topics, kafka_cluster, source, out)
    anyio.run(_produce, kafka_cluster, source, 0, N1, 2)  # before the start: never read
    cp = tmp_path / "cp"
    (cp / "commits").mkdir(parents=True)  # an empty commit log: Spark takes the checkpoint
    pending = _pending_batch(spark, kafka_cluster, source, out, cp, None, False)
    assert pending == 0

    anyio.run(_produce, kafka_cluster, source, N1, N2, 2)
    error = _run(_query(spark, kafka_cluster, source, out, cp, None, False))
    assert error is None, error
    assert _committed(cp) == [0, 1]
    _assert_once(kafka_cluster, out, N1 + N2, first=N1)
