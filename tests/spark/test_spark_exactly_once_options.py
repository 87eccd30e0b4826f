"""The exactlyOnce sink options are checked while the write is planned (no Spark, no broker),
and docs/spark.md's exactly-once tables list exactly the options the sink accepts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from aiokafka_ng.spark import KafkaDataSource, SparkOptionError

# The option set the docs must list: only the sink's code can say which options it takes.
from aiokafka_ng.spark._exactly_once import EXACTLY_ONCE_OPTIONS

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
SCHEMA = StructType([StructField("value", BinaryType())])
DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def plan_write(options: dict[str, str], schema: StructType, streaming: bool = False) -> Any:
    """The plan of the write Spark plans with ``options``: what the data source's writer
    (or stream writer) for the query holds."""
    source = KafkaDataSource(options)
    writer = source.streamWriter(schema, False) if streaming else source.writer(schema, False)
    return writer.plan


def test_off_by_default_and_its_options_need_it() -> None:
    assert plan_write({**BOOT, "topic": "t"}, SCHEMA).exactly_once is None
    with pytest.raises(SparkOptionError, match="needs option 'exactlyOnce'"):
        plan_write({**BOOT, "topic": "t", "exactlyOnceId": "x"}, SCHEMA)


def test_streaming_uses_the_query_id_and_the_topic_for_markers() -> None:
    plan = plan_write({**BOOT, "topic": "t", "exactlyOnce": "true"}, SCHEMA, streaming=True)
    eos = plan.exactly_once
    assert eos is not None
    assert (eos.write_id, eos.marker_topic, eos.prefix, eos.streaming) == (
        None,
        "t",
        "aiokafka_ng-spark-",  # transactionalIdPrefix's default in docs/spark.md
        True,
    )


def test_a_batch_write_needs_an_id() -> None:
    with pytest.raises(SparkOptionError, match="exactlyOnceId"):
        plan_write({**BOOT, "topic": "t", "exactlyOnce": "true"}, SCHEMA)
    plan = plan_write(
        {**BOOT, "topic": "t", "exactlyOnce": "true", "exactlyOnceId": "job-7"}, SCHEMA
    )
    assert plan.exactly_once is not None and plan.exactly_once.write_id == "job-7"


def test_the_sink_owns_the_transactional_id_and_needs_a_marker_topic() -> None:
    for key in ("kafka.transactional.id", "kafka.enable.idempotence"):
        with pytest.raises(SparkOptionError, match=key):
            plan_write({**BOOT, "topic": "t", "exactlyOnce": "true", key: "true"}, SCHEMA, True)
    with pytest.raises(SparkOptionError, match="exactlyOnceMarkerTopic"):
        plan_write({**BOOT, "exactlyOnce": "true"}, SCHEMA, streaming=True)
    plan = plan_write(
        {**BOOT, "topic": "t", "exactlyOnce": "true", "exactlyOnceMarkerTopic": "m"},
        SCHEMA,
        streaming=True,
    )
    assert plan.exactly_once is not None and plan.exactly_once.marker_topic == "m"


def _section() -> str:
    return DOC.read_text().split("## Exactly-once writes\n", 1)[1].split("\n## ", 1)[0]


def test_docs_list_the_exactly_once_options() -> None:
    documented = set(re.findall(r"^\| `([A-Za-z.]+)` \|", _section(), re.M))
    assert documented == EXACTLY_ONCE_OPTIONS


def test_docs_guarantee_table_names_what_the_kafka_test_proves() -> None:
    section = _section()
    assert "tests/kafka/test_spark_exactly_once.py" in section
    for failure in ("driver killed", "task retry", "speculative", "executor lost"):
        assert failure in section.lower(), failure
