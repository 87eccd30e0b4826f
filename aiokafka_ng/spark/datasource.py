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
from aiokafka_ng.spark._plan import ReadPlan
from aiokafka_ng.spark._read import KafkaBatchReader, KafkaStreamReader, plan_read, read_schema
from aiokafka_ng.spark._write import KafkaBatchWriter, KafkaStreamWriter, plan_write

__all__ = ["KafkaDataSource"]


class KafkaDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """Kafka through aiokafka_ng: ``spark.read/readStream/write/writeStream.format("aiokafka_ng")``.

    The options are those of Spark's own Kafka connector, with its meanings and defaults;
    docs/spark.md has the table (what is supported, what differs and why).

    Read: ``kafka.bootstrap.servers`` (required); exactly one of ``assign`` /
    ``subscribe`` / ``subscribePattern``; ``startingTimestamp`` /
    ``startingOffsetsByTimestamp`` / ``startingOffsets`` (and the ``ending`` ones, batch
    only); ``failOnDataLoss``, ``includeHeaders``, ``minPartitions``,
    ``maxRecordsPerPartition``, ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` /
    ``maxTriggerDelay`` (streaming), ``kafkaConsumer.pollTimeoutMs``, and consumer settings
    as ``kafka.<property>``.

    Write: ``kafka.bootstrap.servers`` (required), ``topic`` (when given, every row goes
    there, whatever its ``topic`` column says, as in Spark), producer settings as
    ``kafka.<property>``; ``exactlyOnce`` (``exactlyOnceId``, ``exactlyOnceMarkerTopic``,
    ``transactionalIdPrefix``) writes each task in a Kafka transaction that a replayed
    micro-batch cannot duplicate (docs/spark.md, "Exactly-once writes").
    Columns: ``value`` (binary/string, required), ``key``, ``topic``, ``partition``,
    ``headers`` (array<struct<key:string,value:binary>>).
    """

    @classmethod
    def name(cls) -> str:
        return "aiokafka_ng"

    def schema(self) -> StructType:
        # Called by ``load()`` of a batch and of a stream alike (it cannot tell which): check
        # every option now, so a bad one fails at ``load()`` rather than at the first action;
        # what is valid in one kind of query only (``startingOffsets=latest``, ``endingOffsets``)
        # is checked when the query is planned (``reader()``/``streamReader()``), before any
        # task runs.
        plan = plan_read(self.options, streaming=None)
        return read_schema(plan.include_headers, plan.formats)

    def reader(self, schema: StructType) -> DataSourceReader:
        plan = plan_read(self.options, streaming=False)
        self._check_read_schema(schema, plan)
        return KafkaBatchReader(plan)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        plan = plan_read(self.options, streaming=True)
        self._check_read_schema(schema, plan)
        return KafkaStreamReader(plan)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            # A topic cannot be truncated by a write; Spark's own connector refuses Overwrite
            # too rather than append under that name.
            raise SparkOptionError(
                "save mode Overwrite is not allowed for Kafka; use mode('append') "
                "(Spark's own connector allows only Append and ErrorIfExists)"
            )
        return KafkaBatchWriter(plan_write(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(plan_write(self.options, schema, streaming=True))

    @staticmethod
    def _check_read_schema(schema: StructType, plan: ReadPlan) -> None:
        expected = read_schema(plan.include_headers, plan.formats)
        if schema != expected:
            raise SparkOptionError(
                "the aiokafka_ng source has a fixed schema; do not pass .schema(...) "
                f"(expected {expected.simpleString()})"
            )
