"""Registry-framed JSON Schema and Protobuf keys and values in the Spark source and sink
(issue 52 item 6), against the real Schema Registry (Apicurio) and the local broker, with
confluent-kafka's serializers as the peer: what they write Spark reads as typed columns, and
what Spark writes they read. Avro's are in test_spark_registry.py.

The type mappings have unit tests at the end (no Spark, no registry).
"""

from __future__ import annotations

import datetime
import decimal
import json
import struct
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as TheirJsonDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as TheirJsonSerializer
from confluent_kafka.schema_registry.protobuf import (
    ProtobufDeserializer as TheirProtobufDeserializer,
)
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as TheirProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiokafka_ng.spark import (
    SparkOptionError,
    json_schema_to_spark,
    protobuf_to_row,
    protobuf_to_spark,
    row_to_protobuf,
)
from tests.helpers import confluent_registry, topic_name
from tests.schema_registry.conftest import ProtoModules, protos  # noqa: F401 (the fixture)

UTC = datetime.UTC


class Address(pydantic.BaseModel):
    city: str
    zip: int


class Order(pydantic.BaseModel):
    id: int
    customer: str
    note: str | None = None
    paid: bool
    tags: list[str]
    prices: dict[str, float]
    at: datetime.datetime
    day: datetime.date
    address: Address


ORDER_SCHEMA = json.dumps(Order.model_json_schema(), separators=(",", ":"))


def order(i: int) -> Order:
    return Order(
        id=i,
        customer=f"c{i % 3}-ü",
        note=None if i % 2 else f"note {i}",
        paid=bool(i % 2),
        tags=[f"t{j}" for j in range(i % 3)],
        prices={f"sku{j}": j + 0.5 for j in range(i % 3)},
        at=datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=i),
        day=datetime.date(2026, 1, 1) + datetime.timedelta(days=i),
        address=Address(city=f"city{i}", zip=10000 + i),
    )


@pytest.fixture
def theirs(schema_registry: Any) -> Iterator[ConfluentRegistry]:
    with confluent_registry(schema_registry.url) as registry:
        yield registry


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
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
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        for _ in range(200):
            if len(out) >= n:
                break
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def spark_rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy("offset").collect()]


def write(df: Any, bootstrap: str, topic: str, url: str, **options: str) -> None:
    df.write.format("aiokafka_ng").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).option("schema.registry.url", url).options(**options).mode("append").save()


def local(at: datetime.datetime) -> datetime.datetime:
    """A timestamp as Spark hands it back: in the session's zone, naive."""
    return at.astimezone().replace(tzinfo=None)


def test_json_schema_values_read_and_written_with_confluent_kafka(
    spark: Any, kafka_broker: Any, schema_registry: Any, theirs: ConfluentRegistry
) -> None:
    bootstrap, url = kafka_broker.bootstrap_servers, schema_registry.url
    source, sink = topic_name("srj-in"), topic_name("srj-out")
    ids = [
        theirs.register_schema(f"{topic}-value", ConfluentSchema(ORDER_SCHEMA, "JSON"))
        for topic in (source, sink)
    ]
    serializer = TheirJsonSerializer(
        ORDER_SCHEMA,
        theirs,
        lambda o, ctx: o.model_dump(mode="json"),
        {"auto.register.schemas": False},
    )
    ctx = SerializationContext(source, MessageField.VALUE)
    orders = [order(i) for i in range(12)]
    produce(bootstrap, source, [(None, serializer(o, ctx)) for o in orders])

    options = {"subscribe": source, "valueFormat": "json_schema", "schema.registry.url": url}
    df = spark.read.format("aiokafka_ng").option("kafka.bootstrap.servers", bootstrap)
    df = df.options(**options).load()
    assert df.schema["value"].dataType == json_schema_to_spark(json.loads(ORDER_SCHEMA), "value")
    got = [r["value"] for r in spark_rows(df)]
    want = [o.model_dump() | {"at": local(o.at)} for o in orders]
    assert got == want

    write(df.select("value"), bootstrap, sink, url, valueFormat="json_schema")
    deserializer = TheirJsonDeserializer(
        None, schema_registry_client=theirs, from_dict=lambda d, ctx: Order.model_validate(d)
    )
    ctx = SerializationContext(sink, MessageField.VALUE)
    back = [deserializer(v, ctx) for _, v in consume(bootstrap, sink, len(orders))]
    assert sorted(back, key=lambda o: o.id) == orders

    # A record of the wrong shape (framed JSON with the subject's id) fails naming its
    # offset, or is null.
    produce(bootstrap, source, [(None, struct.pack(">bI", 0, ids[0]) + b'{"id":"x"}')])
    with pytest.raises(Exception, match=rf"{source}-0 offset 12 is not readable as subject"):
        spark.read.format("aiokafka_ng").option("kafka.bootstrap.servers", bootstrap).options(
            **options
        ).load().collect()
    lenient = (
        spark.read.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**options, mode="PERMISSIVE")
        .load()
    )
    assert [r["value"] is None for r in spark_rows(lenient)][-2:] == [False, True]


def _orders(pb: ProtoModules) -> list[Any]:
    out = []
    for i in range(10):
        o = pb.shop.Order(id=2**40 + i, item=f"item {i}-ü", tags=[f"t{j}" for j in range(i % 3)])
        if i % 2:
            o.price.currency = "EUR"
            o.price.units = i
        for j in range(i % 3):
            o.lines.add(sku=f"s{j}", qty=j + 1)
        if i % 3:
            o.at.seconds = 1_700_000_000 + i
        out.append(o)
    return out


def test_protobuf_keys_and_values_read_and_written_with_confluent_kafka(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    theirs: ConfluentRegistry,
    protos: ProtoModules,  # noqa: F811 (the fixture imported above)
) -> None:
    bootstrap, url = kafka_broker.bootstrap_servers, schema_registry.url
    source, sink = topic_name("srp-in"), topic_name("srp-out")
    conf = {"use.deprecated.format": False}
    value_ser = TheirProtobufSerializer(protos.shop.Order, theirs, conf)
    key_ser = TheirProtobufSerializer(protos.shop.OrderKey, theirs, conf)
    orders = _orders(protos)

    def framed(topic: str) -> list[tuple[bytes | None, bytes | None]]:
        keys = SerializationContext(topic, MessageField.KEY)
        values = SerializationContext(topic, MessageField.VALUE)
        return [
            (key_ser(protos.shop.OrderKey(id=o.id), keys), value_ser(o, values)) for o in orders
        ]

    produce(bootstrap, source, framed(source))
    framed(sink)  # registers the sink's subjects (and the imported file) as confluent-kafka does

    options = {
        "subscribe": source,
        "valueFormat": "protobuf",
        "keyFormat": "protobuf",
        "keyMessageName": "srtest.shop.OrderKey",
        "schema.registry.url": url,
    }
    df = (
        spark.read.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**options)
        .load()
    )
    assert df.schema["value"].dataType == protobuf_to_spark(protos.shop.Order.DESCRIPTOR, "value")
    assert df.schema["key"].dataType == StructType([StructField("id", LongType(), False)])
    rows = spark_rows(df)
    assert [r["key"] for r in rows] == [{"id": o.id} for o in orders]
    first, second = rows[0]["value"], rows[1]["value"]
    assert first == {
        "id": 2**40,
        "item": "item 0-ü",
        "price": None,
        "tags": [],
        "lines": [],
        "at": None,
    }
    assert second["price"] == {"currency": "EUR", "units": 1}
    assert second["lines"] == [{"sku": "s0", "qty": 1}]
    assert second["at"] == local(datetime.datetime.fromtimestamp(1_700_000_001, UTC))

    write(
        df.select("key", "value"),
        bootstrap,
        sink,
        url,
        valueFormat="protobuf",
        keyFormat="protobuf",
        keyMessageName="srtest.shop.OrderKey",
    )
    value_de = TheirProtobufDeserializer(protos.shop.Order, conf)
    key_de = TheirProtobufDeserializer(protos.shop.OrderKey, conf)
    back = consume(bootstrap, sink, len(orders))
    keys = SerializationContext(sink, MessageField.KEY)
    values = SerializationContext(sink, MessageField.VALUE)
    pairs = sorted(((key_de(k, keys), value_de(v, values)) for k, v in back), key=lambda p: p[0].id)
    assert [k.id for k, _ in pairs] == [o.id for o in orders]
    assert [v for _, v in pairs] == orders


# ------------------------------------------------------------------ no Spark session needed


def test_json_schema_types_map_to_sparks() -> None:
    t = json_schema_to_spark(json.loads(ORDER_SCHEMA), "value")
    assert isinstance(t, StructType)
    assert {f.name: (f.dataType, f.nullable) for f in t.fields} == {
        "id": (LongType(), False),
        "customer": (StringType(), False),
        "note": (StringType(), True),  # Optional: anyOf [string, null], not required
        "paid": (BooleanType(), False),
        "tags": (ArrayType(StringType(), False), False),
        "prices": (MapType(StringType(), DoubleType(), False), False),
        "at": (TimestampType(), False),
        "day": (DateType(), False),
        "address": (  # a $ref into $defs
            StructType(
                [StructField("city", StringType(), False), StructField("zip", LongType(), False)]
            ),
            False,
        ),
    }


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": ["string", "integer"]}, "field 'v' allows 2 different types"),
        ({"type": "object"}, "field 'v': an object with neither 'properties'"),
        (
            {"$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}},
             "$ref": "#/$defs/N"},
            "field 'v.n': recursive definition '#/\\$defs/N'",
        ),
        ({"$ref": "other.json"}, "is not a definition of this schema"),
        ({"enum": [1, 2]}, "an enum of non-strings"),
    ],
)  # fmt: skip
def test_json_schemas_spark_has_no_type_for_are_refused(schema: Any, message: str) -> None:
    with pytest.raises(SparkOptionError, match=message):
        json_schema_to_spark(schema, "v")


def test_protobuf_messages_map_to_sparks(protos: ProtoModules) -> None:  # noqa: F811
    t = protobuf_to_spark(protos.shop.Order.DESCRIPTOR, "value")
    line = StructType(
        [StructField("sku", StringType(), False), StructField("qty", IntegerType(), False)]
    )
    money = StructType(
        [StructField("currency", StringType(), False), StructField("units", LongType(), False)]
    )
    assert t == StructType(
        [
            StructField("id", LongType(), False),
            StructField("item", StringType(), False),
            StructField("price", money, True),  # a message field has presence
            StructField("tags", ArrayType(StringType(), False), False),
            StructField("lines", ArrayType(line, False), False),
            StructField("at", TimestampType(), True),  # google.protobuf.Timestamp
        ]
    )


def test_protobuf_maps_enums_unsigned_and_recursion() -> None:
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="u.proto", package="u", syntax="proto3")
    msg = file.message_type.add(name="U")
    entry = msg.nested_type.add(name="PricesEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    msg.field.add(
        name="prices", number=1, type=F.TYPE_MESSAGE, type_name=".u.U.PricesEntry",
        label=F.LABEL_REPEATED,
    )  # fmt: skip
    color = file.enum_type.add(name="Color")
    color.value.add(name="RED", number=0)
    color.value.add(name="BLUE", number=1)
    msg.field.add(
        name="color", number=2, type=F.TYPE_ENUM, type_name=".u.Color", label=F.LABEL_OPTIONAL
    )
    msg.field.add(name="big", number=3, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    msg.field.add(name="small", number=4, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    node = file.message_type.add(name="Node")
    node.field.add(name="next", number=1, type=F.TYPE_MESSAGE, type_name=".u.Node")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    u: Any = GetMessageClass(pool.FindMessageTypeByName("u.U"))
    spark_type = protobuf_to_spark(u.DESCRIPTOR, "v")
    assert spark_type == StructType(
        [
            StructField("prices", MapType(StringType(), DoubleType(), False), False),
            StructField("color", StringType(), False),  # the value's name
            StructField("big", DecimalType(20, 0), False),  # every uint64 fits
            StructField("small", LongType(), False),
        ]
    )
    # A row as Arrow gives it (a map as pairs) to a message and back.
    row = {"prices": [("a", 1.5)], "color": "BLUE", "big": 2**64 - 1, "small": 2**32 - 1}
    message = row_to_protobuf(u, row)
    assert (message.prices["a"], message.color, message.big) == (1.5, 1, 2**64 - 1)
    assert protobuf_to_row(message, spark_type) == {
        "prices": {"a": 1.5},
        "color": "BLUE",
        "big": decimal.Decimal(2**64 - 1),
        "small": 2**32 - 1,
    }
    with pytest.raises(ValueError, match="'GREEN' is not a value of its enum"):
        row_to_protobuf(u, {"color": "GREEN"})
    with pytest.raises(SparkOptionError, match=r"field 'v\.next': recursive message 'u\.Node'"):
        protobuf_to_spark(pool.FindMessageTypeByName("u.Node"), "v")
