"""Registry-framed Avro values in the Spark source and sink (issue 52 item 6), against the
real Schema Registry (Apicurio) and the local broker, with confluent-kafka's serializers as
the peer: what they write Spark reads as typed columns, and what Spark writes they read.

The type mapping and the planning checks have unit tests at the end (no Spark, no registry).
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from aiokafka_ng.spark import SparkOptionError, avro_to_spark
from tests.helpers import confluent_registry, topic_name

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "items", "type": {"type": "array", "items": "int"}},
        {"name": "prices", "type": {"type": "map", "values": "double"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "total",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "int"}],
            },
        },
    ],
}
# BACKWARD-compatible: a field added with a default.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}],
}
UTC = datetime.UTC


def order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "customer": f"c{i % 3}-ü",
        "note": None if i % 2 else f"note {i}",
        "status": "PAID" if i % 3 else "NEW",
        "items": list(range(i % 4)),
        "prices": {f"sku{j}": j + 0.5 for j in range(i % 3)},
        "at": datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=i),
        "day": datetime.date(2026, 1, 1) + datetime.timedelta(days=i),
        "total": decimal.Decimal(i * 101) / 100,
        "ref": str(uuid.UUID(int=i)),
        "address": {"city": f"city{i}", "zip": 10000 + i},
    }


@pytest.fixture
def theirs(schema_registry: Any) -> Iterator[ConfluentRegistry]:
    with confluent_registry(schema_registry.url) as registry:
        yield registry


def registered(registry: ConfluentRegistry, subject: str, schema: dict[str, Any]) -> int:
    return registry.register_schema(subject, ConfluentSchema(json.dumps(schema), "AVRO"))


def confluent_write(
    bootstrap: str, registry: ConfluentRegistry, topic: str, rows: list[dict[str, Any]]
) -> None:
    serializer = ConfluentAvroSerializer(
        registry, json.dumps(ORDER_V1), conf={"auto.register.schemas": False}
    )
    producer = ConfluentProducer({"bootstrap.servers": bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for row in rows:
        producer.produce(topic, serializer(row, ctx), partition=0)
    assert producer.flush(30) == 0


def confluent_read(bootstrap: str, registry: ConfluentRegistry, topic: str, n: int) -> list[Any]:
    deserializer = ConfluentAvroDeserializer(registry)
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            # Tansu holds a new group's first join for half the session timeout: 3 s at
            # Kafka's minimum, not 22.5 s at the default.
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(200):
            if len(out) >= n:
                break
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return out


def spark_rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy("offset").collect()]


def as_spark(row: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """``order(i)`` as Spark hands it back: timestamps in the session's zone, naive."""
    out = {**row, **extra}
    out["at"] = row["at"].astimezone().replace(tzinfo=None)
    return out


def read_options(bootstrap: str, url: str, topic: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "valueFormat": "avro",
        "schema.registry.url": url,
    }


def test_spark_reads_what_confluent_kafka_wrote_and_confluent_kafka_reads_what_spark_wrote(
    spark: Any, kafka_broker: Any, schema_registry: Any, theirs: ConfluentRegistry
) -> None:
    bootstrap, url = kafka_broker.bootstrap_servers, schema_registry.url
    source, sink = topic_name("sr-in"), topic_name("sr-out")
    for topic in (source, sink):
        registered(theirs, f"{topic}-value", ORDER_V1)
    rows = [order(i) for i in range(30)]
    confluent_write(bootstrap, theirs, source, rows)

    df = spark.read.format("aiokafka_ng").options(**read_options(bootstrap, url, source)).load()
    value_type = df.schema["value"].dataType
    assert value_type == avro_to_spark(ORDER_V1, "value")
    got = [r["value"] for r in spark_rows(df)]
    assert got == [as_spark(r) for r in rows]

    # The typed column goes back out through the sink, framed with the sink topic's schema.
    (
        df.select("value")
        .write.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("valueFormat", "avro")
        .option("schema.registry.url", url)
        .mode("append")
        .save()
    )
    back = confluent_read(bootstrap, theirs, sink, len(rows))
    for r in back:
        r["ref"] = str(r["ref"])  # fastavro decodes a uuid string to a UUID
    assert sorted(back, key=lambda r: r["id"]) == rows


def test_old_records_read_as_the_new_version_and_bad_payloads_fail_or_are_null(
    spark: Any, kafka_broker: Any, schema_registry: Any, theirs: ConfluentRegistry
) -> None:
    bootstrap, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = topic_name("sr-evolve")
    subject = f"{topic}-value"
    registered(theirs, subject, ORDER_V1)
    confluent_write(bootstrap, theirs, topic, [order(1)])  # written under v1
    registered(theirs, subject, ORDER_V2)
    options = read_options(bootstrap, url, topic)
    df = spark.read.format("aiokafka_ng").options(**options).load()
    # Read as the latest version: the field v1 lacks gets its default.
    assert [r["value"] for r in spark_rows(df)] == [as_spark(order(1), channel="web")]
    v1 = spark.read.format("aiokafka_ng").options(**options, valueSchemaVersion="1").load()
    assert "channel" not in v1.schema["value"].dataType.names

    # A payload that is not registry-framed Avro.
    producer = ConfluentProducer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"not avro", partition=0)
    assert producer.flush(30) == 0
    with pytest.raises(Exception, match=rf"{topic}-0 offset 1 is not readable as subject"):
        spark.read.format("aiokafka_ng").options(**options).load().collect()
    lenient = spark.read.format("aiokafka_ng").options(**options, mode="PERMISSIVE").load()
    assert [r["value"] is None for r in spark_rows(lenient)] == [False, True]


def test_planning_refuses_what_cannot_work_naming_it(
    spark: Any, kafka_broker: Any, schema_registry: Any, theirs: ConfluentRegistry
) -> None:
    bootstrap, url = kafka_broker.bootstrap_servers, schema_registry.url
    topic = topic_name("sr-plan")
    registered(theirs, f"{topic}-value", ORDER_V1)
    base = read_options(bootstrap, url, topic)

    def load(**options: str) -> Any:
        return spark.read.format("aiokafka_ng").options(**{**base, **options}).load()

    with pytest.raises(Exception, match=r"'schema\.registry\.url' is required"):
        load(**{"schema.registry.url": ""})
    with pytest.raises(Exception, match="option 'valueFormat' must be one of"):
        load(valueFormat="json")
    with pytest.raises(Exception, match=f"subject '{topic}-nope'"):
        load(valueSubject=f"{topic}-nope")
    with pytest.raises(Exception, match="'valueSubject' is required"):
        load(subscribe=f"{topic},{topic}-other")

    # The sink checks the column against the schema before any task runs.
    wrong = spark.createDataFrame(
        [({"id": 1, "customer": "x"},)],
        StructType([StructField("value", StructType(
            [StructField("id", LongType()), StructField("customer", StringType()),
             StructField("colour", StringType())]))]),
    )  # fmt: skip
    with pytest.raises(Exception, match=r"has fields the schema does not: \['colour'\]"):
        (
            wrong.write.format("aiokafka_ng")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("valueFormat", "avro")
            .option("schema.registry.url", url)
            .mode("append")
            .save()
        )


# ------------------------------------------------------------------ no Spark session needed


def test_avro_types_map_to_sparks() -> None:
    t = avro_to_spark(ORDER_V1, "value")
    assert isinstance(t, StructType)
    types = {f.name: (f.dataType, f.nullable) for f in t.fields}
    assert types == {
        "id": (LongType(), False),
        "customer": (StringType(), False),
        "note": (StringType(), True),
        "status": (StringType(), False),
        "items": (ArrayType(IntegerType(), False), False),
        "prices": (MapType(StringType(), DoubleType(), False), False),
        "at": (TimestampType(), False),
        "day": (DateType(), False),
        "total": (DecimalType(10, 2), False),
        "ref": (StringType(), False),
        "address": (
            StructType(
                [
                    StructField("city", StringType(), False),
                    StructField("zip", IntegerType(), False),
                ]
            ),
            False,
        ),
    }
    local = {"type": "long", "logicalType": "local-timestamp-micros"}
    assert avro_to_spark(local, "v") == TimestampNTZType()
    assert avro_to_spark({"type": "fixed", "name": "F", "size": 4}, "v") == BinaryType()


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (["null", "int", "string"], "field 'v' is a union of 2 non-null types"),
        (
            {"type": "record", "name": "Node", "fields": [{"name": "next", "type": "Node"}]},
            "field 'v.next': recursive record 'Node'",
        ),
        ({"type": "int", "logicalType": "time-millis"}, "time-millis is not supported"),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0},
            "precision 40 > 38",
        ),
    ],
)
def test_avro_types_spark_has_not_are_refused_naming_the_field(schema: Any, message: str) -> None:
    with pytest.raises(SparkOptionError, match=message):
        avro_to_spark(schema, "v")
