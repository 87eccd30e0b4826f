"""Spark's own task retry against the sink, on Apache Kafka (issue 35, item 2).

A real Spark driver (tests/kafka/spark_retry_driver.py, ``local[2,4]`` so failed tasks are
retried) makes the first attempt of one write task fail after that attempt has put rows in
Kafka (partition 0 of the output shows them): a Python UDF in the projection, upstream of
the sink in the same task, raises. Spark retries the task. What happens, measured here:

* at-least-once batch write: the failed attempt's rows stay and the retry writes its whole
  partition again: duplicates, at least as many as the attempt had written.
* exactlyOnce, batch and streaming: never a duplicate, but not always exactly once. Spark
  (4.3) may end the failed attempt's input to the sink's Python writer as if it were
  complete (an Arrow stream cut at a batch boundary reads as a whole one); when the writer
  gets there before Spark stops it, that attempt commits its partial rows with its marker.
  The retry then finds the marker with fewer rows than it has and fails with
  ExactlyOnceReplayError, every attempt: the write (or the streaming query, at that
  micro-batch) fails, and the rows the failed attempt had not reached are missing. When the
  failed attempt is stopped first, its transaction is aborted and the retry writes every row
  once. Both outcomes occurred in runs of this test; it accepts either, never a duplicate.

Speculative tasks are not tested: Spark never launches them in local mode
(``TaskSchedulerImpl.start`` starts the speculation checks only ``if (!isLocal && ...)``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest

from aiokafka_ng.admin import NewTopic
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, unique

pytestmark = pytest.mark.kafka

ROWS = 2_000  # per write; partition 0 of each write has ~half of them
FAIL_AT = 600  # the failing attempt stops at this row of its partition ...
WRITTEN = 200  # ... once the output holds at least this many records
DRIVER = Path(__file__).with_name("spark_retry_driver.py")
ROOT = Path(__file__).resolve().parents[2]


async def _setup(cluster: KafkaCluster, topics: dict[str, str]) -> None:
    async with admin_for(cluster) as admin:
        new = [NewTopic(t, 2, 3) for t in topics.values()]
        (await admin.create_topics(new)).raise_on_error()
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5) as producer:
        for i in range(ROWS):
            await producer.send(topics["input"], f"{i}".encode(), f"k{i}".encode())
        await producer.flush()


async def _read(cluster: KafkaCluster, topic: str, isolation: str) -> list[int]:
    tps = [TopicPartition(topic, p) for p in range(2)]
    out: list[int] = []
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level=isolation
    ) as c:
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)  # read_committed: the last stable offsets
        with anyio.fail_after(120):
            while [tp for tp in tps if await c.position(tp) < ends[tp]]:
                for records in (await c.getmany(timeout_ms=500)).values():
                    out.extend(int(r.value[:6]) for r in records)
    return out


async def _log_size(cluster: KafkaCluster, topic: str) -> int:
    async with Consumer(bootstrap_servers=cluster.bootstrap_servers) as c:
        ends = await c.end_offsets([TopicPartition(topic, p) for p in range(2)])
    return sum(ends.values())


@pytest.fixture(scope="module")
def retried(
    kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Runs the driver once (one JVM for the three writes); the topics it wrote."""
    topics = {name: unique(f"retry-{name}") for name in ("input", "eos", "alo", "stream")}
    anyio.run(_setup, kafka_cluster, topics)
    log = tmp_path_factory.mktemp("retry") / "driver.log"
    with log.open("w") as out:
        done = subprocess.run(
            [
                sys.executable,
                str(DRIVER),
                "--bootstrap",
                kafka_cluster.bootstrap_servers,
                "--rows",
                str(ROWS),
                "--input",
                topics["input"],
                "--eos-out",
                topics["eos"],
                "--alo-out",
                topics["alo"],
                "--stream-out",
                topics["stream"],
                "--fail-at",
                str(FAIL_AT),
                "--written",
                str(WRITTEN),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=400,
        )
    text = log.read_text(errors="replace")
    assert done.returncode == 0, f"driver rc {done.returncode}\n{text[-4000:]}"
    # Each write's first attempt really failed, by the injected error.
    for name in ("eos", "alo", "stream"):
        assert f"injected failure of attempt 0 at row {FAIL_AT} ({topics[name]})" in text, name
    outcome = {
        name: line
        for line in text.splitlines()
        for name in ("eos", "alo", "stream")
        if line.startswith(("DONE ", "FAILED ")) and line.split()[1] == topics[name]
    }
    return {**topics, **{f"{name}-outcome": line for name, line in outcome.items()}}


def _never_duplicates(kafka_cluster: KafkaCluster, retried: dict[str, str], name: str) -> None:
    outcome = retried[f"{name}-outcome"]
    values = anyio.run(_read, kafka_cluster, retried[name], "read_committed")
    counts = Counter(values)
    assert max(counts.values()) == 1, f"duplicated rows ({outcome})"
    if outcome == f"DONE {retried[name]}":
        # The failed attempt did not commit: the retry wrote the partition, exactly once,
        # and the failed attempt's rows are in the log, aborted.
        assert sorted(counts) == list(range(ROWS)), "lost rows"
        assert anyio.run(_log_size, kafka_cluster, retried[name]) >= ROWS + WRITTEN
    else:
        # The failed attempt committed the rows it had when its input was cut; every retry
        # then refused to write on top of them.
        assert outcome.startswith(f"FAILED {retried[name]} ['ExactlyOnceReplayError']"), outcome
        assert WRITTEN <= len(counts) < ROWS, len(counts)


def test_an_upstream_failure_in_an_exactly_once_batch_task_never_duplicates(
    kafka_cluster: KafkaCluster, retried: dict[str, str]
) -> None:
    _never_duplicates(kafka_cluster, retried, "eos")


def test_an_upstream_failure_in_an_exactly_once_streaming_task_never_duplicates(
    kafka_cluster: KafkaCluster, retried: dict[str, str]
) -> None:
    _never_duplicates(kafka_cluster, retried, "stream")


def test_a_retried_at_least_once_task_duplicates_what_the_failed_attempt_wrote(
    kafka_cluster: KafkaCluster, retried: dict[str, str]
) -> None:
    assert retried["alo-outcome"] == f"DONE {retried['alo']}"
    values = anyio.run(_read, kafka_cluster, retried["alo"], "read_uncommitted")
    counts = Counter(values)
    assert sorted(counts) == list(range(ROWS)), "lost rows"
    duplicates = len(values) - ROWS
    assert duplicates >= WRITTEN, duplicates
    # Only partition 0's rows (the failed task's) are duplicated.
    assert all(v < ROWS // 2 for v, n in counts.items() if n > 1)
