"""Interop with confluent-kafka's registry client and Avro serializer against the same real
registry, byte for byte, for keys and values; schema evolution; an incompatible schema
refused before anything is sent; and one round trip through a Kafka cluster (FakeKafka)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio.to_thread
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from aiokafka_ng import Consumer, Producer, TopicPartition
from aiokafka_ng.schema_registry import (
    AvroDeserializer,
    AvroSerializer,
    IncompatibleSchemaError,
    Schema,
    SchemaRegistryClient,
)
from aiokafka_ng.testing import FakeKafka, SchemaRegistry
from tests.helpers import confluent_registry

pytestmark = pytest.mark.anyio

PAYMENT_V1 = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "namespace": "bank",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)
# BACKWARD-compatible: a field added with a default (new readers read old records).
PAYMENT_V2 = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "namespace": "bank",
        "fields": [
            *json.loads(PAYMENT_V1)["fields"],
            {"name": "currency", "type": "string", "default": "EUR"},
        ],
    }
)
# Not BACKWARD-compatible: a field added without a default.
PAYMENT_BAD = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "namespace": "bank",
        "fields": [*json.loads(PAYMENT_V1)["fields"], {"name": "branch", "type": "int"}],
    }
)
KEY_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "PaymentKey",
        "namespace": "bank",
        "fields": [{"name": "account", "type": "long"}],
    }
)

PAYMENTS = [
    {"id": "p1", "amount": 12.5, "tags": ["card"], "note": None},
    {"id": "p2", "amount": -3.25, "tags": [], "note": "refund ünïcode"},
]
KEYS = [{"account": 1}, {"account": 2**40}]


def _topic() -> str:
    return f"payments-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def ours(schema_registry: SchemaRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with SchemaRegistryClient(schema_registry.url) as client:
        yield client


@pytest.fixture
def theirs(schema_registry: SchemaRegistry) -> Iterator[ConfluentRegistry]:
    with confluent_registry(schema_registry.url) as registry:
        yield registry


def _ctx(topic: str, is_key: bool) -> SerializationContext:
    return SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)


async def _their_serialize(
    registry: ConfluentRegistry, schema: str, topic: str, is_key: bool, objs: list[Any]
) -> list[bytes]:
    """confluent-kafka's serializer, in a worker thread (its client is blocking)."""

    def run() -> list[bytes]:
        serializer = ConfluentAvroSerializer(registry, schema)
        return [serializer(obj, _ctx(topic, is_key)) for obj in objs]

    return await anyio.to_thread.run_sync(run)


async def _their_deserialize(
    registry: ConfluentRegistry,
    topic: str,
    is_key: bool,
    payloads: list[bytes | None],
    reader: str | None = None,
) -> list[Any]:
    def run() -> list[Any]:
        deserializer = ConfluentAvroDeserializer(registry, reader)
        return [deserializer(data, _ctx(topic, is_key)) for data in payloads]

    return await anyio.to_thread.run_sync(run)


@pytest.mark.parametrize("is_key", [False, True], ids=["value", "key"])
async def test_ours_and_theirs_write_the_same_bytes_and_read_each_other(
    ours: SchemaRegistryClient, theirs: ConfluentRegistry, is_key: bool
) -> None:
    topic = _topic()
    schema, objs = (KEY_SCHEMA, KEYS) if is_key else (PAYMENT_V1, PAYMENTS)
    serializer = await AvroSerializer.create(ours, schema, topic=topic, is_key=is_key)
    our_bytes = [serializer(obj) for obj in objs]
    their_bytes = await _their_serialize(theirs, schema, topic, is_key, objs)
    assert our_bytes == their_bytes  # byte for byte: same id, same Avro body
    # Ours read by theirs, and theirs by ours (async and sync forms, fresh caches).
    assert await _their_deserialize(theirs, topic, is_key, list(our_bytes)) == objs
    async with SchemaRegistryClient(ours.url) as fresh:
        deserializer = AvroDeserializer(fresh)
        assert [await deserializer.deserialize(data) for data in their_bytes] == objs
        assert [deserializer(data) for data in their_bytes] == objs


async def test_theirs_registers_first_and_ours_finds_the_same_id(
    ours: SchemaRegistryClient, theirs: ConfluentRegistry
) -> None:
    topic = _topic()
    their_bytes = await _their_serialize(theirs, PAYMENT_V1, topic, False, PAYMENTS[:1])
    serializer = await AvroSerializer.create(ours, PAYMENT_V1, topic=topic, auto_register=False)
    assert serializer(PAYMENTS[0]) == their_bytes[0]


async def test_backward_evolution_new_readers_read_old_records(
    ours: SchemaRegistryClient, theirs: ConfluentRegistry
) -> None:
    topic = _topic()
    subject = f"{topic}-value"
    old_ours = await AvroSerializer.create(ours, PAYMENT_V1, topic=topic)
    old_theirs = await _their_serialize(theirs, PAYMENT_V1, topic, False, PAYMENTS)
    await ours.set_compatibility("BACKWARD", subject)
    new = await AvroSerializer.create(ours, PAYMENT_V2, topic=topic)
    assert new.schema_id != old_ours.schema_id
    assert await ours.get_versions(subject) == [1, 2]
    expected = [{**p, "currency": "EUR"} for p in PAYMENTS]  # the default filled in
    # Our new reader reads old records, written by us and by them.
    reader = AvroDeserializer(ours, reader_schema=PAYMENT_V2)
    old_records = [old_ours(p) for p in PAYMENTS] + old_theirs
    assert [await reader.deserialize(data) for data in old_records] == expected * 2
    # Their new reader reads our old records too.
    our_old = [old_ours(p) for p in PAYMENTS]
    assert await _their_deserialize(theirs, topic, False, list(our_old), PAYMENT_V2) == expected
    # And a new record reads back whole.
    fresh = {**PAYMENTS[0], "currency": "USD"}
    assert await reader.deserialize(new(fresh)) == fresh


async def test_incompatible_schema_fails_before_anything_is_sent(
    ours: SchemaRegistryClient, fake_kafka: FakeKafka
) -> None:
    topic = _topic()
    subject = f"{topic}-value"
    fake_kafka.create_topic(topic, partitions=1)
    await AvroSerializer.create(ours, PAYMENT_V1, topic=topic)
    await ours.set_compatibility("BACKWARD", subject)
    async with Producer(**fake_kafka.client_config()) as producer:
        with pytest.raises(IncompatibleSchemaError) as refused:
            serializer = await AvroSerializer.create(ours, PAYMENT_BAD, topic=topic)
            await producer.send_and_wait(topic, serializer({**PAYMENTS[0], "branch": 1}))
    assert refused.value.subject == subject
    assert subject in str(refused.value)
    assert "compatibility rule" in str(refused.value)
    assert fake_kafka.end_offset(topic, 0) == 0  # nothing was sent
    assert await ours.get_versions(subject) == [1]  # nor registered


async def test_round_trip_through_kafka_with_producer_and_consumer_settings(
    ours: SchemaRegistryClient, theirs: ConfluentRegistry, fake_kafka: FakeKafka
) -> None:
    topic = _topic()
    fake_kafka.create_topic(topic, partitions=1)
    key_serializer = await AvroSerializer.create(ours, KEY_SCHEMA, topic=topic, is_key=True)
    value_serializer = await AvroSerializer.create(ours, PAYMENT_V1, topic=topic)
    config = fake_kafka.client_config()
    async with Producer(
        **config, key_serializer=key_serializer, value_serializer=value_serializer
    ) as producer:
        for key, value in zip(KEYS, PAYMENTS, strict=True):
            await producer.send_and_wait(topic, value, key=key)
    raw = list(fake_kafka.records(topic, 0))
    # What went through Kafka reads with confluent-kafka's deserializer.
    assert await _their_deserialize(theirs, topic, False, [r.value for r in raw]) == PAYMENTS
    assert await _their_deserialize(theirs, topic, True, [r.key for r in raw]) == KEYS
    # And with ours as the consumer's deserializers (ids loaded up front).
    key_deserializer, value_deserializer = AvroDeserializer(ours), AvroDeserializer(ours)
    await key_deserializer.prepare(key_serializer.subject)
    await value_deserializer.prepare(value_serializer.subject)
    async with Consumer(
        **config,
        auto_offset_reset="earliest",
        key_deserializer=key_deserializer,
        value_deserializer=value_deserializer,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        seen: list[tuple[Any, Any]] = []
        async for record in consumer:
            seen.append((record.key, record.value))
            if len(seen) == len(PAYMENTS):
                break
    assert seen == list(zip(KEYS, PAYMENTS, strict=True))


def test_a_schema_is_a_value_the_caches_can_key_by() -> None:
    # The same schema text is the same cache key: a Schema is a value.
    assert Schema(PAYMENT_V1) == Schema(PAYMENT_V1)
    assert hash(Schema(PAYMENT_V1)) == hash(Schema(PAYMENT_V1))
