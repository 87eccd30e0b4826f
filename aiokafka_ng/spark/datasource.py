"""The Python data source ``aiokafka_ng`` (Spark 4's ``pyspark.sql.datasource`` API).

Spark creates :class:`KafkaDataSource` on the driver with the query's options, asks it for
a schema, then for a reader or writer; the reader/writer objects are pickled to the
executors. Validation happens in those driver-side calls, so a bad option or a missing
column fails the query while it is planned, with a message naming the option or column.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from aiokafka_ng.spark._options import SparkOptionError
from aiokafka_ng.spark._read import SCHEMA, KafkaBatchReader, KafkaStreamReader, plan_read
from aiokafka_ng.spark._write import KafkaBatchWriter, KafkaStreamWriter, plan_write

__all__ = ["KafkaDataSource"]


class KafkaDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """Kafka through aiokafka_ng: ``spark.read/readStream/write/writeStream.format("aiokafka_ng")``.

    Read options: ``kafka.bootstrap.servers`` (required), ``subscribe`` ("t1,t2"),
    ``startingOffsets``/``endingOffsets`` (earliest | latest | JSON per partition),
    ``maxRecordsPerPartition`` (split long ranges), ``maxOffsetsPerTrigger`` (streaming),
    ``kafkaConsumer.pollTimeoutMs``, and consumer settings as ``kafka.<property>``.

    Write options: ``kafka.bootstrap.servers`` (required), ``topic`` (default topic; a
    non-null ``topic`` column overrides it per row), producer settings as ``kafka.<property>``.
    Columns: ``value`` (binary/string, required), ``key``, ``topic``, ``partition``,
    ``headers`` (array<struct<key:string,value:binary>>).
    """

    @classmethod
    def name(cls) -> str:
        return "aiokafka_ng"

    def schema(self) -> StructType:
        # Called by ``load()`` (reads only): check the options now, so a bad one fails at
        # ``load()`` rather than at the first action.
        plan_read(self.options, streaming=False)
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_read_schema(schema)
        return KafkaBatchReader(plan_read(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_read_schema(schema)
        return KafkaStreamReader(plan_read(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaBatchWriter(plan_write(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(plan_write(self.options, schema))

    @staticmethod
    def _check_read_schema(schema: StructType) -> None:
        if schema != SCHEMA:
            raise SparkOptionError(
                "the aiokafka_ng source has a fixed schema; do not pass .schema(...) "
                f"(expected {SCHEMA.simpleString()})"
            )
