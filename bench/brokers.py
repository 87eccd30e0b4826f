"""The broker a benchmark runs against, and the Java client as a peer column.

Shared by ``bench_producer.py`` and ``bench_consumer.py`` (not named ``bench_*``: nox runs
those). ``--broker tansu`` (the default) starts a ``LocalBroker``; ``--broker kafka`` a
3-node Apache Kafka cluster (``KafkaCluster``, KRaft, each node broker and controller);
``--bootstrap HOST:PORT`` uses a broker that is already running instead (with
``--broker-pids`` its processes' CPU is measured too). Topics get replication factor
``min(3, brokers in the metadata)``: 3 on the Kafka cluster, 1 on Tansu.

The Java client (kafka-clients at the cluster's pinned version, from the jars
``aiokafka_ng.testing`` caches) is ``java/BenchClient.java``, compiled once per run into a
temporary directory and started as one JVM per measurement; see that file for what it
times.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpu_time import process_cpu

JAVA_SOURCE = Path(__file__).parent / "java" / "BenchClient.java"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        choices=["tansu", "kafka"],
        default="tansu",
        help="start Tansu (LocalBroker) or a 3-node Apache Kafka cluster (KafkaCluster)",
    )
    parser.add_argument(
        "--bootstrap",
        help="use this running broker instead of starting one (--broker then only names it)",
    )
    parser.add_argument(
        "--broker-pids",
        default="",
        help="with --bootstrap: the broker processes whose CPU to measure (comma-separated)",
    )


@dataclass
class Target:
    """A running broker: where it listens, its processes, and the topics made on it."""

    name: str
    bootstrap: str
    pids: list[int]
    replicas: int = 1
    topics: list[str] = field(default_factory=list)

    def cpu(self) -> float:
        """CPU seconds the broker processes have used so far (0.0 when none are known)."""
        return sum(process_cpu(pid) for pid in self.pids)

    def create_topic(self, partitions: int, prefix: str = "bench") -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, partitions, self.replicas)]).values():
            fut.result(30)
        self.topics.append(topic)
        return topic

    def delete_topics(self) -> None:
        from confluent_kafka.admin import AdminClient

        if self.topics:
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            for fut in admin.delete_topics(self.topics).values():
                fut.result(30)
            self.topics.clear()


def _broker_count(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers)


@contextmanager
def open_target(args: argparse.Namespace) -> Iterator[Target]:
    """The broker ``args`` ask for, started (and stopped afterwards) unless ``--bootstrap``
    names one; topics the benchmark created are deleted at the end."""
    with ExitStack() as stack:
        if args.bootstrap:
            pids = [int(p) for p in args.broker_pids.split(",") if p]
            target = Target(args.broker, args.bootstrap, pids)
        elif args.broker == "kafka":
            from aiokafka_ng.testing import KafkaCluster

            cluster = stack.enter_context(KafkaCluster(brokers=3, tls=False))
            pids = [node.pid for node in cluster.brokers if node.pid is not None]
            target = Target("kafka", cluster.bootstrap_servers, pids)
        else:
            from aiokafka_ng.testing import LocalBroker

            broker = stack.enter_context(LocalBroker())
            assert broker.pid is not None
            target = Target("tansu", broker.bootstrap_servers, [broker.pid])
        target.replicas = min(3, _broker_count(target.bootstrap))
        try:
            yield target
        finally:
            target.delete_topics()


def describe(target: Target) -> str:
    """``Tansu`` / ``Apache Kafka, 3 brokers, replication factor 3`` for a heading."""
    if target.name == "kafka":
        jvms = len(target.pids) or "?"
        return f"Apache Kafka, {jvms} broker JVMs, replication factor {target.replicas}"
    return f"Tansu, replication factor {target.replicas}"


class JavaClient:
    """``java/BenchClient.java`` compiled once against the cached Kafka jars; :meth:`run`
    starts one JVM per measurement and returns its JSON line."""

    def __init__(self) -> None:
        from aiokafka_ng.testing._kafka_jars import ensure_jars, find_java

        self.java = find_java()
        self.classpath = f"{ensure_jars()}/*"
        self._classes = tempfile.TemporaryDirectory(prefix="bench-java-")
        javac = str(Path(self.java).with_name("javac"))
        done = subprocess.run(
            [javac, "-cp", self.classpath, "-d", self._classes.name, str(JAVA_SOURCE)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"javac {JAVA_SOURCE.name} failed: {done.stderr.strip()}")
        #: CPU seconds of the JVMs outside their measured scope (start, class loading).
        self.overhead_cpu: list[float] = []

    def close(self) -> None:
        self._classes.cleanup()

    def __enter__(self) -> JavaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, *args: object, timeout: float = 600) -> dict[str, Any]:
        command = [
            self.java,
            "-cp",
            f"{self._classes.name}:{self.classpath}",
            "BenchClient",
            *(str(a) for a in args),
        ]
        # RUSAGE_CHILDREN grows by a child's whole CPU (all its threads) once it is reaped;
        # one JVM runs at a time and the brokers are never reaped meanwhile.
        before = _children_cpu()
        try:
            done = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
        finally:
            total = _children_cpu() - before
        out, err = done.stdout, done.stderr
        lines = [line for line in out.decode().splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"BenchClient {args[0]} failed: {err.decode().strip()[-2000:]}")
        result: dict[str, Any] = json.loads(lines[-1])
        self.overhead_cpu.append(total - result["cpu"])
        return result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"
