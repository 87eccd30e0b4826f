"""Executor loss mid-write against the sink, on Apache Kafka (issue 35, item 2).

An executor exists apart from the driver only on a cluster, so the driver
(tests/kafka/spark_executor_loss_driver.py) starts the standalone cluster of
tests/kafka/spark_standalone.py: two one-core workers on 127.0.0.2 and 127.0.0.3. In each
of its writes the first attempt of task 0 stops once partition 0 of the output holds rows
of it, and the driver SIGKILLs that attempt's executor JVM; Spark sees the executor exit
(ExecutorLostFailure) and runs task 0 again on another executor. The test checks Spark's
log and the attempts the UDF saw (attempt 0 on the killed JVM, attempt 1 on another).
What happens, measured here:

* at-least-once: the killed attempt's rows stay in Kafka and the rerun writes the whole
  partition again: duplicates, at least the rows the killed attempt had written.
* exactlyOnce (batch and streaming): the killed attempt's rows sat in its open
  transaction; the rerun's producer start (InitProducerId of the same slot's
  transactional id) aborts it, and the driver commits the rerun's: every row exactly once.
"""

from __future__ import annotations

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
FAIL_AT = 600  # the first attempt of task 0 stops at this row of its partition ...
WRITTEN = 200  # ... once the output holds at least this many records; then its JVM dies
DRIVER = Path(__file__).with_name("spark_executor_loss_driver.py")
ROOT = Path(__file__).resolve().parents[2]
NAMES = ("alo", "eos", "stream")


@pytest.fixture(scope="module")
def lost(kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Runs the driver once (one Spark application for the three writes); the topics it
    wrote, after checking that each write lost the executor of its task 0 mid-task."""
    topics = {name: unique(f"exec-{name}") for name in ("input", *NAMES)}
    anyio.run(partial(spark_topics, alternate=True), kafka_cluster, topics, ROWS)
    tmp = tmp_path_factory.mktemp("executor-loss")
    marks = tmp / "marks"
    marks.mkdir()
    log = tmp / "driver.log"
    args = {
        "bootstrap": kafka_cluster.bootstrap_servers,
        "rows": ROWS,
        "input": topics["input"],
        "alo-out": topics["alo"],
        "eos-out": topics["eos"],
        "stream-out": topics["stream"],
        "fail-at": FAIL_AT,
        "written": WRITTEN,
        "marks": marks,
        "work": tmp,
    }
    with log.open("w") as out:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), *(f"--{k}={v}" for k, v in args.items())],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            # Its own group, with the master, workers and executors it starts (pyspark's
            # daemons make groups of their own, and end when their JVM's pipe closes).
            start_new_session=True,
        )
        try:
            rc = driver.wait(timeout=240)
        finally:
            # The driver stops its cluster on any exit; this also ends whatever a driver
            # that hung or died left behind.
            try:
                os.killpg(driver.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            driver.wait()
    text = log.read_text(errors="replace")
    assert rc == 0, f"driver rc {rc}\n{text[-4000:]}"
    tail = text[-4000:]
    # Spark lost the executor running attempt 0 of task 0, once per write (one stage each),
    # and finished attempt 1 of the task on another executor.
    lost = re.findall(
        r"Lost task 0\.0 in stage (\d+)\.0 \(TID \d+\) \(\S+ executor (\d+)\): ExecutorLostFailure",
        text,
    )
    assert len({stage for stage, _ in lost}) == len(NAMES), f"{lost}\n{tail}"
    for stage, executor in lost:
        rerun = re.search(
            rf"Finished task 0\.1 in stage {stage}\.0 \(TID \d+\) in \d+ ms on \S+ "
            r"\(executor (\d+)\)",
            text,
        )
        assert rerun, f"no rerun of task 0 in stage {stage}\n{tail}"
        assert rerun.group(1) != executor, (stage, executor)
    for name in NAMES:
        topic = topics[name]
        assert f"DONE {topic}" in text.splitlines(), f"{name}\n{tail}"
        killed = re.findall(rf"^KILLED {topic} (\d+)$", text, re.M)
        assert len(killed) == 1, (name, killed)
        # What the UDF saw: attempt 0 on the killed JVM (it stopped mid-partition there),
        # attempt 1 on another executor JVM, no further attempt.
        pids = {f.name.rsplit(".a", 1)[1]: f.read_text() for f in marks.glob(f"{topic}.a*")}
        assert set(pids) == {"0", "1"}, (name, pids)
        assert pids["0"] == killed[0] != pids["1"], (name, pids, killed)
    return topics


def _values(records: list[Any]) -> list[int]:
    return [int(r.value[:6]) for r in records]


def _exactly_once(kafka_cluster: KafkaCluster, topic: str) -> None:
    counts = Counter(_values(anyio.run(read_all, kafka_cluster, topic, 2)))
    assert max(counts.values()) == 1, "duplicated rows"
    assert sorted(counts) == list(range(ROWS)), "lost rows"
    # The killed attempt's rows are in the log too (read_uncommitted sees them), in its
    # transaction that the rerun aborted: they were written, and are not visible.
    everything = anyio.run(read_all, kafka_cluster, topic, 2, "read_uncommitted")
    print(f"{topic}: {len(everything) - ROWS} aborted records of the killed attempt")
    assert len(everything) - ROWS >= WRITTEN, len(everything) - ROWS


def test_an_exactly_once_batch_write_survives_executor_loss_mid_write(
    kafka_cluster: KafkaCluster, lost: dict[str, str]
) -> None:
    _exactly_once(kafka_cluster, lost["eos"])


def test_an_exactly_once_streaming_write_survives_executor_loss_mid_write(
    kafka_cluster: KafkaCluster, lost: dict[str, str]
) -> None:
    _exactly_once(kafka_cluster, lost["stream"])


def test_executor_loss_mid_write_duplicates_rows_at_least_once(
    kafka_cluster: KafkaCluster, lost: dict[str, str]
) -> None:
    values = _values(anyio.run(read_all, kafka_cluster, lost["alo"], 2, "read_uncommitted"))
    counts = Counter(values)
    assert sorted(counts) == list(range(ROWS)), "lost rows"
    # The killed attempt's rows (at least WRITTEN) stay and the rerun writes them again;
    # only partition 0's rows (the lost task's) are duplicated.
    print(f"{lost['alo']}: {len(values) - ROWS} duplicated rows")
    assert len(values) - ROWS >= WRITTEN, len(values) - ROWS
    assert all(v < ROWS // 2 for v, n in counts.items() if n > 1)
