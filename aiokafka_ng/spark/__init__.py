"""PySpark data source ``aiokafka_ng`` (extra ``spark``: pyspark >= 4.2, pyarrow).

Importing this package registers nothing; call :func:`register` once per session::

    from aiokafka_ng.spark import register
    register(spark)
    df.write.format("aiokafka_ng").option("kafka.bootstrap.servers", "h:9092") \\
        .option("topic", "events").mode("append").save()
    spark.read.format("aiokafka_ng").option("kafka.bootstrap.servers", "h:9092") \\
        .option("subscribe", "events").load()

See :class:`~aiokafka_ng.spark.datasource.KafkaDataSource` for the options and columns.
"""

from __future__ import annotations

from typing import Any

try:
    import pyspark
except ModuleNotFoundError as exc:  # the extra is not installed: say which one
    if exc.name != "pyspark":
        raise
    raise ModuleNotFoundError(
        "aiokafka_ng.spark needs PySpark: pip install 'aiokafka-ng[spark]' "
        "(pyspark >= 4.2 and pyarrow)",
        name="pyspark",
    ) from None

# The source needs Spark 4.2's admission control (latestOffset(start, limit), for
# maxOffsetsPerTrigger) and 4.1's DataSourceStreamArrowWriter; say so instead of failing on
# an import of a name an older pyspark lacks.
if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):  # pragma: no cover
    raise ImportError(f"aiokafka_ng.spark needs pyspark >= 4.2 (found {pyspark.__version__})")

from aiokafka_ng.spark._options import SparkOptionError
from aiokafka_ng.spark._registry import REGISTRY_OPTIONS, avro_to_spark
from aiokafka_ng.spark._registry_json import json_schema_to_spark
from aiokafka_ng.spark._registry_protobuf import message_to_spark as protobuf_to_spark
from aiokafka_ng.spark._registry_protobuf import message_to_value as protobuf_to_row
from aiokafka_ng.spark._registry_protobuf import value_to_message as row_to_protobuf
from aiokafka_ng.spark.datasource import KafkaDataSource

# The registry formats' column types (what the source reads a registry-framed value as), and
# Protobuf's row <-> message conversions, as Spark's from_protobuf/to_protobuf apply them.
__all__ = [
    "REGISTRY_OPTIONS",
    "KafkaDataSource",
    "SparkOptionError",
    "avro_to_spark",
    "json_schema_to_spark",
    "protobuf_to_row",
    "protobuf_to_spark",
    "register",
    "row_to_protobuf",
]


def register(spark: Any) -> None:
    """Register the ``aiokafka_ng`` format with a SparkSession.

    A classic (JVM) session gets the data source's Python function with a thread-safe
    environment map. Spark (4.3) shares one ``java.util.HashMap`` of environment variables
    between every Python function made from a registered data source, and each streaming
    query's source runner adds keys to it on the driver (``PythonStreamingSourceRunner.init``
    puts ``SPARK_LOCAL_DIRS`` and three more) from its own stream thread. Two streaming
    queries starting together in one driver then put into the plain HashMap concurrently and
    can corrupt it (its size no longer matches its entries); every task serialised with it
    afterwards fails to deserialise (``java.io.OptionalDataException`` in
    ``HashMap.readObject``) and both queries die. That is what killed the driver of
    tests/kafka/test_spark_exactly_once.py at random. A ``ConcurrentHashMap`` takes
    concurrent puts and serialises consistently while they happen. Spark Connect sessions
    (no JVM here) register the ordinary way.
    """
    sc: Any = getattr(spark, "sparkContext", None)
    jvm = getattr(sc, "_jvm", None) if sc is not None else None
    if jvm is None:
        spark.dataSource.register(KafkaDataSource)
        return
    # pyspark's DataSourceRegistration.register, with the environment map replaced.
    from pyspark.core.rdd import _prepare_for_python_RDD

    pickled, broadcast_vars, environment, includes = _prepare_for_python_RDD(sc, KafkaDataSource)
    env = jvm.java.util.concurrent.ConcurrentHashMap()
    for key, value in environment.items():
        env.put(key, value)
    function = jvm.SimplePythonFunction(
        bytearray(pickled),
        env,
        includes,
        sc.pythonExec,
        sc.pythonVer,
        broadcast_vars,
        sc._javaAccumulator,
    )
    source = getattr(
        jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource"
    )(function)
    spark._jsparkSession.dataSource().registerPython(KafkaDataSource.name(), source)
