"""Typed records through Apache Kafka (issue 52): registry-framed keys and values written by
the producer's serializer settings and read by the consumer's deserializer settings, on
the session's Kafka cluster and the Apicurio registry, and read again by confluent-kafka's
deserializers (the other tests in tests/schema_registry go through FakeKafka or Tansu)."""

from __future__ import annotations

import pydantic
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as TheirAvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as TheirJsonDeserializer
from confluent_kafka.schema_registry.protobuf import (
    ProtobufDeserializer as TheirProtobufDeserializer,
)
from confluent_kafka.serialization import MessageField, SerializationContext

from aiokafka_ng import Producer
from aiokafka_ng.schema_registry import (
    AvroDeserializer,
    AvroSerializer,
    JsonDeserializer,
    JsonSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    SchemaRegistryClient,
)
from aiokafka_ng.testing import KafkaCluster, SchemaRegistry
from tests.helpers import confluent_registry
from tests.kafka.helpers import new_topic, read_all
from tests.schema_registry.conftest import ProtoModules, protos  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

PAYMENT = (
    '{"type": "record", "name": "Payment", "namespace": "shop", "fields": '
    '[{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}'
)


class Receipt(pydantic.BaseModel):
    order_id: int
    total: float


async def test_typed_records_through_apache_kafka(
    kafka_cluster: KafkaCluster,
    schema_registry: SchemaRegistry,
    protos: ProtoModules,  # noqa: F811 (the fixture imported above)
) -> None:
    async with (
        SchemaRegistryClient(schema_registry.url) as client,
        new_topic(kafka_cluster, 1) as first,
        new_topic(kafka_cluster, 1) as second,
    ):
        with confluent_registry(schema_registry.url) as theirs:
            await write_and_read(kafka_cluster, client, theirs, protos, first, second)


async def write_and_read(
    kafka_cluster: KafkaCluster,
    client: SchemaRegistryClient,
    theirs: ConfluentRegistry,
    protos: ProtoModules,  # noqa: F811
    first: str,
    second: str,
) -> None:
    # Protobuf keys and JSON Schema (pydantic) values.
    key_ser = await ProtobufSerializer.create(
        client, protos.shop.OrderKey, topic=first, is_key=True
    )
    value_ser = await JsonSerializer.create(client, Receipt, topic=first)
    sent = [(protos.shop.OrderKey(id=i), Receipt(order_id=i, total=i * 2.5)) for i in (1, 2)]
    async with Producer(
        bootstrap_servers=kafka_cluster.bootstrap_servers,
        key_serializer=key_ser,
        value_serializer=value_ser,
    ) as producer:
        for key, value in sent:
            await producer.send_and_wait(first, value, key=key)
    typed = await read_all(
        kafka_cluster,
        first,
        1,
        key_deserializer=ProtobufDeserializer(protos.shop.OrderKey),
        value_deserializer=JsonDeserializer(model=Receipt),
    )
    assert [(r.key, r.value) for r in typed] == sent
    raw = await read_all(kafka_cluster, first, 1)
    their_key = TheirProtobufDeserializer(protos.shop.OrderKey, {"use.deprecated.format": False})
    their_value = TheirJsonDeserializer(
        None, schema_registry_client=theirs, from_dict=lambda d, ctx: Receipt(**d)
    )
    keys = SerializationContext(first, MessageField.KEY)
    values = SerializationContext(first, MessageField.VALUE)
    assert [(their_key(r.key, keys), their_value(r.value, values)) for r in raw] == sent

    # Avro values.
    avro_ser = await AvroSerializer.create(client, PAYMENT, topic=second)
    payments = [{"id": 7, "amount": 12.5}, {"id": 8, "amount": 0.25}]
    async with Producer(
        bootstrap_servers=kafka_cluster.bootstrap_servers, value_serializer=avro_ser
    ) as producer:
        for payment in payments:
            await producer.send_and_wait(second, payment)
    avro_de = AvroDeserializer(client)
    await avro_de.prepare(avro_ser.subject)  # ids loaded up front: it decodes in poll
    typed = await read_all(kafka_cluster, second, 1, value_deserializer=avro_de)
    assert [r.value for r in typed] == payments
    raw = await read_all(kafka_cluster, second, 1)
    their_avro = TheirAvroDeserializer(theirs)
    values = SerializationContext(second, MessageField.VALUE)
    assert [their_avro(r.value, values) for r in raw] == payments
