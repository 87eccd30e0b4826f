"""Spark's own task retry against the sink, on Apache Kafka (issue 35, item 2).

A real Spark driver (tests/kafka/spark_retry_driver.py, ``local[2,4]`` so failed tasks are
retried) makes the first attempt of one write task fail after that attempt has put rows in
Kafka (partition 0 of the output shows them): a Python UDF in the projection, upstream of
the sink in the same task, raises. Spark retries the task. What happens, measured here:

* at-least-once batch write: the failed attempt's rows stay and the retry writes its whole
  partition again: duplicates, at least as many as the attempt had written.
* exactlyOnce, batch and streaming: every row exactly once. Spark (4.3) may end the failed
  attempt's input to the sink's Python writer as if it were complete (an Arrow stream cut
  at a batch boundary reads as a whole one), so that attempt may prepare a transaction of
  partial rows with its marker; but the task failed, Spark drops its commit message, and
  the driver commits only the transaction of the attempt Spark kept. The retry's
  InitProducerId aborts the failed attempt's transaction (its rows stay in the log,
  aborted). Before the driver committed, such a partial commit failed every retry with
  ExactlyOnceReplayError and the rest of the partition was missing.

Speculative tasks are in tests/kafka/test_spark_exactly_once_speculation.py: Spark never
launches them in local mode (``TaskSchedulerImpl.start`` starts the speculation checks only
``if (!isLocal && ...)``), so that test runs a two-host standalone cluster; so does
tests/kafka/test_spark_exactly_once_executor_loss.py (an executor killed mid-write: in
local mode the executor is the driver's JVM).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import log_ends, read_all, spark_topics, unique

pytestmark = pytest.mark.kafka

ROWS = 2_000  # per write; partition 0 of each write has ~half of them
FAIL_AT = 600  # the failing attempt stops at this row of its partition ...
WRITTEN = 200  # ... once the output holds at least this many records
DRIVER = Path(__file__).with_name("spark_retry_driver.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def retried(
    kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Runs the driver once (one JVM for the three writes); the topics it wrote."""
    topics = {name: unique(f"retry-{name}") for name in ("input", "eos", "alo", "stream")}
    anyio.run(partial(spark_topics, alternate=False), kafka_cluster, topics, ROWS)
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


def _values(records: list[Any]) -> list[int]:
    return [int(r.value[:6]) for r in records]


def _exactly_once(kafka_cluster: KafkaCluster, retried: dict[str, str], name: str) -> None:
    outcome = retried[f"{name}-outcome"]
    assert outcome == f"DONE {retried[name]}", outcome
    values = _values(anyio.run(read_all, kafka_cluster, retried[name], 2))
    counts = Counter(values)
    assert max(counts.values()) == 1, "duplicated rows"
    assert sorted(counts) == list(range(ROWS)), "lost rows"
    # The failed attempt's rows are in the log, aborted.
    assert anyio.run(log_ends, kafka_cluster, retried[name], 2) >= ROWS + WRITTEN


def test_an_upstream_failure_in_an_exactly_once_batch_task_is_exactly_once(
    kafka_cluster: KafkaCluster, retried: dict[str, str]
) -> None:
    _exactly_once(kafka_cluster, retried, "eos")


def test_an_upstream_failure_in_an_exactly_once_streaming_task_is_exactly_once(
    kafka_cluster: KafkaCluster, retried: dict[str, str]
) -> None:
    _exactly_once(kafka_cluster, retried, "stream")


def test_a_retried_at_least_once_task_duplicates_what_the_failed_attempt_wrote(
    kafka_cluster: KafkaCluster, retried: dict[str, str]
) -> None:
    assert retried["alo-outcome"] == f"DONE {retried['alo']}"
    values = _values(anyio.run(read_all, kafka_cluster, retried["alo"], 2, "read_uncommitted"))
    counts = Counter(values)
    assert sorted(counts) == list(range(ROWS)), "lost rows"
    duplicates = len(values) - ROWS
    assert duplicates >= WRITTEN, duplicates
    # Only partition 0's rows (the failed task's) are duplicated.
    assert all(v < ROWS // 2 for v, n in counts.items() if n > 1)
