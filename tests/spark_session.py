"""How the tests start Spark: one builder for the local-mode sessions of the Spark tests and
their driver scripts, and the JVM options every test JVM of Spark's runs with.

Short-lived JVMs on a small shared machine: C1 only (less compiling) and the serial
collector (no GC threads) start them faster and take less of the brokers' CPU (the
standalone cluster's start went from ~43 s to ~18 s at a load average of ~13 with them).
Benchmarks do not use this: C1-only code is slower once warm.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_builder(
    master: str = "local[2]", app: str = "aiokafka_ng tests", *, fast_start: bool = True
) -> Any:
    """A SparkSession builder in local mode on 127.0.0.1 whose Python workers run this
    interpreter (the one with aiokafka_ng). Add settings, then :func:`started`.
    ``fast_start=False`` leaves the JVM's defaults (for benchmarks)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    return builder.config("spark.driver.extraJavaOptions", JVM_OPTS) if fast_start else builder


def started(builder: Any, *, register: bool = True) -> Any:
    """The session of ``builder`` (an existing one if this process has one), quiet, with
    the ``aiokafka_ng`` data source registered."""
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if register:
        from aiokafka_ng.spark import register as register_source

        register_source(session)
    return session


def driver_arguments(description: str | None, *, cluster: bool) -> argparse.Namespace:
    """The command line of the sink tests' driver scripts (retry, speculation, executor
    loss): the three writes' topics and rows, where task 0's first attempt is stopped, and
    with ``cluster`` the directories of a standalone cluster's run."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--rows", type=int, required=True, help="rows of each write")
    p.add_argument("--input", required=True, help="topic the streaming query reads")
    p.add_argument("--alo-out", required=True)
    p.add_argument("--eos-out", required=True)
    p.add_argument("--stream-out", required=True)
    p.add_argument("--fail-at", type=int, required=True)
    p.add_argument("--written", type=int, required=True)
    if cluster:
        p.add_argument("--marks", required=True, help="directory for the attempts' files")
        p.add_argument("--work", required=True, help="directory for the cluster's logs")
    return p.parse_args()
