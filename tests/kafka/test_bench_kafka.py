"""The benchmarks' Kafka path (``--broker kafka``, Java client column) at a tiny size, so it
cannot rot: ``bench/bench_producer.py`` and ``bench/bench_consumer.py`` run as scripts on the
session's cluster (``--bootstrap``/``--broker-pids``, not a cluster of their own: three more
JVMs on a 2-core machine). The figures are not checked, only that every client ran and the
ratios against the Java client were printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiokafka_ng.testing import KafkaCluster

pytestmark = pytest.mark.kafka

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench(cluster: KafkaCluster, script: str, *args: str) -> str:
    pids = ",".join(str(node.pid) for node in cluster.brokers if node.pid is not None)
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    target = ["--broker", "kafka", "--bootstrap", cluster.bootstrap_servers, "--broker-pids", pids]
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *target, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_bench_producer_on_kafka_with_the_java_client(kafka_cluster: KafkaCluster) -> None:
    out = bench(
        kafka_cluster,
        "bench_producer.py",
        *("--records", "2000", "--patterns", "gather", "--rates", ""),
        *("--clients", "ours,aiokafka,confluent,java"),
    )
    assert "Apache Kafka, 3 broker JVMs, replication factor 3" in out, out
    row = next(line for line in out.splitlines() if line.startswith("gather 100 B keyed"))
    # ours, aiokafka, confluent, 2 ratios, null (not run), null/conf, ng/null, java, ng/java,
    # traced and tr/ng (not run)
    cells = row.split()[4:]
    assert len(cells) == 12 and cells[-3].endswith("x") and cells[-4] != "-", row
    assert cells[-2:] == ["-", "-"], row
    cpu = next(line for line in out.splitlines() if "gather 100 B keyed" in line and "java" in line)
    assert cpu.count("+") == 4, cpu


def test_bench_consumer_on_kafka_with_the_java_client(kafka_cluster: KafkaCluster) -> None:
    out = bench(kafka_cluster, "bench_consumer.py", "--records", "2000", "--rounds", "1")
    assert "Apache Kafka, 3 broker JVMs, replication factor 3" in out, out
    assert "java poll" in out
    ratios = [line for line in out.splitlines() if "/ java poll" in line]
    assert len(ratios) == 2 and all(line.endswith("x") for line in ratios), out
