"""Speculative duplicate tasks (``spark.speculation=true``) against the sink, on Apache Kafka
(issue 35, item 2).

Spark speculates only on a cluster with more than one host (see
tests/kafka/spark_speculation_driver.py: local mode never checks, and local-cluster has
one host, where a copy is never launched); the driver starts a standalone cluster of the
pip-installed Spark with two one-core workers on 127.0.0.2 and 127.0.0.3. In each of its
writes the first attempt of task 0 waits, after it has put rows in Kafka, until Spark's
speculative copy of the task has taken over, so Spark launches the copy every time (the
test checks Spark's log and the attempts the UDF saw). What happens, measured here:

* at-least-once: both copies' rows are in the output: duplicates, at least those the
  first attempt wrote before the copy ran.
* exactlyOnce (batch and streaming): every row exactly once. Usually the copy's
  InitProducerId fences the first attempt and aborts its open transaction; the first
  attempt fails on its next send (fenced) or is killed, Spark keeps the copy and the driver
  commits its transaction. Under load the first attempt's writer may start its producer
  after the copy's (seen once: the copy launched 2.6 s into the task): then it fences the
  copy, which fails at its prepare, and Spark keeps the first attempt. Either way one
  attempt's transaction is committed, the other's aborted.

Seen as well (2 of 8 exactly-once writes in 4 runs): Spark keeps the attempt that finished
first, but the other attempt's producer started later and fenced it (the first attempt's
writer may start its producer seconds into the task, after the copy's). Then the driver's
commit fails with ExactlyOnceCommitError and nothing of that task is visible; the driver
runs the same write again (same exactlyOnceId, same checkpoint), which writes the slot
once. The test accepts either way, and checks every row exactly once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import read_all, spark_topics, unique

pytestmark = pytest.mark.kafka

ROWS = 2_000  # per write; partition 0 of each write has ~half of them
FAIL_AT = 600  # the first attempt of task 0 waits at this row of its partition ...
WRITTEN = 200  # ... once the output holds at least this many records
DRIVER = Path(__file__).with_name("spark_speculation_driver.py")
ROOT = Path(__file__).resolve().parents[2]
NAMES = ("alo", "eos", "stream")


@pytest.fixture(scope="module")
def speculated(
    kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Runs the driver once (one Spark application for the three writes); the topics it
    wrote and each write's outcome line."""
    topics = {name: unique(f"spec-{name}") for name in ("input", *NAMES)}
    anyio.run(partial(spark_topics, alternate=True), kafka_cluster, topics, ROWS)
    tmp = tmp_path_factory.mktemp("speculation")
    marks = tmp / "marks"
    marks.mkdir()
    log = tmp / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                "--bootstrap",
                kafka_cluster.bootstrap_servers,
                "--rows",
                str(ROWS),
                "--input",
                topics["input"],
                "--alo-out",
                topics["alo"],
                "--eos-out",
                topics["eos"],
                "--stream-out",
                topics["stream"],
                "--fail-at",
                str(FAIL_AT),
                "--written",
                str(WRITTEN),
                "--marks",
                str(marks),
                "--work",
                str(tmp),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its group: master, workers, executors, Python workers
        )
        try:
            rc = driver.wait(timeout=400)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
    text = log.read_text(errors="replace")
    assert rc == 0, f"driver rc {rc}\n{text[-4000:]}"
    # Spark launched a speculative copy of task 0 in each write (three writes, one stage
    # each), and it ran: its UDF saw attempt 1 of partition 0. (Under load the copy may be
    # slow enough to be copied again: at least one copy per stage.)
    copied = set(re.findall(r"Starting task 0\.1 in stage (\d+)\.", text))
    assert len(copied) == len(NAMES), f"speculative copies in stages {copied}\n{text[-4000:]}"
    # And in each, the attempt Spark did not keep ended: killed, or failed (fenced).
    lost = set(re.findall(r"Lost task 0\.\d in stage (\d+)\.", text))
    assert lost == copied, f"{lost} {copied}\n{text[-4000:]}"
    outcome = {
        name: [
            line.split(" attempts=")[0]
            for line in text.splitlines()
            if line.startswith(("DONE ", "FAILED ", "RERUN DONE "))
            and line.split()[-1 if line.startswith("RERUN") else 1] == topics[name]
        ]
        for name in NAMES
    }
    attempts = {
        name: line.split(" attempts=")[-1]
        for line in text.splitlines()
        for name in NAMES
        if line.startswith("DONE ") and line.split()[1] == topics[name]
    }
    for name, seen in attempts.items():  # what the UDF saw: the first attempt and a copy
        assert {0, 1} <= set(json.loads(seen)), (name, seen)
    print(outcome)
    return {**topics, **{f"{name}-outcome": lines for name, lines in outcome.items()}}


def _values(records: list[Any]) -> list[int]:
    return [int(r.value[:6]) for r in records]


def _exactly_once(kafka_cluster: KafkaCluster, speculated: dict[str, Any], name: str) -> None:
    topic = speculated[name]
    outcome = speculated[f"{name}-outcome"]
    # Spark kept the attempt that was not fenced: done. Or (the copy started between the
    # first attempt's prepare and the driver's commit) it kept a fenced one: the write
    # failed with ExactlyOnceCommitError, and the same write run again completed.
    if outcome != [f"DONE {topic}"]:
        assert len(outcome) == 2 and outcome[1] == f"RERUN DONE {topic}", outcome
        assert outcome[0].startswith(f"FAILED {topic} ['ExactlyOnceCommitError']"), outcome
    counts = Counter(_values(anyio.run(read_all, kafka_cluster, speculated[name], 2)))
    assert max(counts.values()) == 1, "duplicated rows"
    assert sorted(counts) == list(range(ROWS)), "lost rows"


def test_a_speculative_copy_of_an_exactly_once_batch_task_is_exactly_once(
    kafka_cluster: KafkaCluster, speculated: dict[str, Any]
) -> None:
    _exactly_once(kafka_cluster, speculated, "eos")


def test_a_speculative_copy_of_an_exactly_once_streaming_task_is_exactly_once(
    kafka_cluster: KafkaCluster, speculated: dict[str, Any]
) -> None:
    _exactly_once(kafka_cluster, speculated, "stream")


def test_a_speculative_copy_of_an_at_least_once_task_duplicates_rows(
    kafka_cluster: KafkaCluster, speculated: dict[str, Any]
) -> None:
    assert speculated["alo-outcome"] == [f"DONE {speculated['alo']}"]
    values = _values(anyio.run(read_all, kafka_cluster, speculated["alo"], 2, "read_uncommitted"))
    counts = Counter(values)
    assert sorted(counts) == list(range(ROWS)), "lost rows"
    assert len(values) - ROWS >= WRITTEN, len(values) - ROWS
    # Only partition 0's rows (the speculated task's) are duplicated.
    assert all(v < ROWS // 2 for v, n in counts.items() if n > 1)
