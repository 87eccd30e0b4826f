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
from aiokafka_ng.spark.datasource import KafkaDataSource

__all__ = ["KafkaDataSource", "SparkOptionError", "register"]


def register(spark: Any) -> None:
    """Register the ``aiokafka_ng`` format with a SparkSession."""
    spark.dataSource.register(KafkaDataSource)
