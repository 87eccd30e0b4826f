"""examples/spark_exactly_once.py on Apache Kafka (it needs transactions and a
read_committed that hides aborted records, which the bundled Tansu broker does not)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiokafka_ng.testing import KafkaCluster

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def test_exactly_once_example_runs_twice_and_checks_its_output(
    kafka_cluster: KafkaCluster,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "spark_exactly_once.py"),
            kafka_cluster.bootstrap_servers,
            "--records",
            "2000",
        ],
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=280,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()[-3000:]
    assert "runs processed [2000, 2000] rows; read_committed output has 4000 records" in out
    assert "every input record exactly once in the output: True" in out
