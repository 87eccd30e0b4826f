"""A small standalone Spark cluster of the pip-installed Spark, for the drivers of the Spark
tests that need more than local mode (tests/kafka/spark_speculation_driver.py,
tests/kafka/spark_executor_loss_driver.py).

A master on 127.0.0.1 and two workers of one core each on 127.0.0.2 and 127.0.0.3 (Linux
routes all of 127/8 to the loopback interface), started with ``bin/spark-class``: two hosts,
each running one executor of the application. Spark needs two hosts to launch a speculative
copy (never on a host where an attempt of the task ran), and an executor that is not the
driver's JVM to lose one. :func:`standalone_cluster` stops the daemons on exit, failure
included: workers first, which stop their executors.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.spark_session import JVM_OPTS

ROOT = Path(__file__).resolve().parents[2]
_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.tsm.name = org.apache.spark.scheduler.TaskSetManager
logger.tsm.level = info
"""


def _spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-class")


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], within: float) -> str:
    """The first match of ``pattern`` in ``log`` (the daemon's output), bounded."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{log.name}: no {pattern!r} (rc {proc.poll()}):\n{log.read_text()}")


@contextmanager
def standalone_cluster(work: Path) -> Iterator[str]:
    """A master and two one-core workers on distinct loopback hosts; the master's URL."""
    env = {
        **os.environ,
        "SPARK_LOG_DIR": str(work),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS,
        "PYTHONPATH": str(ROOT),
    }
    procs: list[subprocess.Popen[bytes]] = []

    def daemon(name: str, host: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [_spark_class(), *args, "--host", host, "--webui-port", "0"],
                env={**env, "SPARK_LOCAL_IP": host},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc, log

    try:
        master, log = daemon("master", "127.0.0.1", "org.apache.spark.deploy.master.Master")
        url = _wait_for(log, r"Starting Spark master at (spark://\S+)", master, 120)
        workers = [
            daemon(
                f"worker{h}",
                f"127.0.0.{h}",
                "org.apache.spark.deploy.worker.Worker",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(work / f"worker{h}"),
                url,
            )
            for h in (2, 3)
        ]
        for proc, log in workers:
            _wait_for(log, r"(Successfully registered with master)", proc, 120)
        yield url
    finally:
        for proc in reversed(procs):  # workers first: they stop their executors
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def session_builder(master: str, work: Path, app: str) -> Any:
    """A SparkSession builder for the cluster at ``master``: driver on 127.0.0.1, one
    one-core executor per worker, both registered before the first task (so task 0 and
    task 1 of a two-task stage start on different hosts), TaskSetManager's decisions
    logged (INFO) to stderr."""
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    (work / "log4j2.properties").write_text(_LOG4J)
    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'} {JVM_OPTS}",
        )
        .config("spark.executor.extraJavaOptions", JVM_OPTS)
        .config("spark.executorEnv.PYTHONPATH", str(ROOT))
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    )


def partition_end(bootstrap: str, topic: str, isolation: str) -> int:
    """Partition 0's end: the high watermark, or under read_committed the last stable
    offset."""
    import anyio

    from aiokafka_ng.consumer import Consumer
    from aiokafka_ng.consumer.models import TopicPartition

    async def end() -> int:
        async with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation) as c:
            tp = TopicPartition(topic, 0)
            return (await c.end_offsets([tp]))[tp]

    return anyio.run(end)
