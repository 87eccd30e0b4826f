"""A SparkSession with Spark's own Kafka connector (``format("kafka")``) beside ours.

Used by tests/kafka/test_spark_connector_peer.py and ``bench/bench_spark.py --peer``.

The connector is ``org.apache.spark:spark-sql-kafka-0-10_2.13``, resolved by Spark's Ivy
from Maven Central into ``~/.cache/aiokafka_ng/ivy`` (once; later sessions read the cache).
Its version should be the installed PySpark's, but Maven Central serves no Spark 4.3.0
artifact at all (not even spark-core), so it is pinned to 4.2.0, the newest served; it
loads and runs on the 4.3.0 runtime (every read and write in the peer test works).
``AIOKAFKA_NG_SPARK_KAFKA_PACKAGE`` overrides the coordinate. Hadoop's client jars, which
the connector depends on, are excluded: PySpark ships its own.

``spark.jars.packages`` is read only when the Spark JVM starts, so this session must be the
first of its Python process; :func:`peer_session` fails saying so otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.spark_session import local_builder, started

CONNECTOR = os.environ.get(
    "AIOKAFKA_NG_SPARK_KAFKA_PACKAGE", "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
)
IVY_DIR = Path(
    os.environ.get("AIOKAFKA_NG_SPARK_IVY", Path.home() / ".cache" / "aiokafka_ng" / "ivy")
)
_EXCLUDES = "org.apache.hadoop:hadoop-client-api,org.apache.hadoop:hadoop-client-runtime"
_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def peer_session(app_name: str, *, fast_start: bool = True) -> Any:
    """A ``local[2]`` session where both ``kafka`` and ``aiokafka_ng`` are registered."""
    from pyspark import SparkContext

    from aiokafka_ng.spark import register

    started_before = SparkContext._gateway is not None
    session = started(
        local_builder(app=app_name, fast_start=fast_start)
        .config("spark.jars.packages", CONNECTOR)
        .config("spark.jars.excludes", _EXCLUDES)
        .config("spark.jars.ivy", str(IVY_DIR)),
        register=False,
    )
    try:
        session._jvm.java.lang.Class.forName(
            _PROVIDER, True, session._jvm.Thread.currentThread().getContextClassLoader()
        )
    except Exception as exc:
        if not started_before:  # a session this call did not start is someone else's
            session.stop()
        why = (
            "a Spark JVM was already running in this process without it (spark.jars.packages "
            "is read only at JVM start): run this first, or in its own process"
            if started_before
            else f"resolving {CONNECTOR} failed"
        )
        raise RuntimeError(f"Spark's Kafka connector is not loaded: {why}") from exc
    register(session)
    return session
