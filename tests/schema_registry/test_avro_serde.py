"""AvroSerializer / AvroDeserializer against the real registry: framing, subject name
strategies, auto-register on and off, latest version, references, and the synchronous
deserializer's loaded ids."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aiokafka_ng.schema_registry import (
    AvroDeserializer,
    AvroSerializer,
    Schema,
    SchemaNotFoundError,
    SchemaReference,
    SchemaRegistryClient,
    SerializationError,
    SubjectNotFoundError,
    UnknownSchemaIdError,
    record_name_strategy,
    schema_id_of,
    topic_record_name_strategy,
)
from aiokafka_ng.testing import SchemaRegistry

pytestmark = pytest.mark.anyio

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}


def _topic() -> str:
    return f"orders-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def client(schema_registry: SchemaRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with SchemaRegistryClient(schema_registry.url) as registry_client:
        yield registry_client


async def test_value_and_key_round_trip_in_the_confluent_framing(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    value_ser = await AvroSerializer.create(client, ORDER, topic=topic)
    key_ser = await AvroSerializer.create(client, '"string"', topic=topic, is_key=True)
    assert (value_ser.subject, key_ser.subject) == (f"{topic}-value", f"{topic}-key")
    order = {"id": 7, "item": "tea"}
    payload = value_ser(order)
    assert payload is not None
    # magic 0, then the id as 4 bytes big-endian, then Avro: zig-zag 7 = 14, len 3 = 6.
    assert payload == b"\x00" + struct.pack(">I", value_ser.schema_id) + b"\x0e\x06tea"
    assert schema_id_of(payload) == value_ser.schema_id
    key = key_ser("k1")
    assert key == b"\x00" + struct.pack(">I", key_ser.schema_id) + b"\x04k1"
    assert value_ser(None) is None  # a tombstone stays one
    deserializer = AvroDeserializer(client)
    assert await deserializer.deserialize(payload) == order
    assert await deserializer.deserialize(key) == "k1"
    assert deserializer(payload) == order  # loaded now: the synchronous form decodes it
    assert deserializer.loaded_ids == {value_ser.schema_id, key_ser.schema_id}


async def test_subject_name_strategies(client: SchemaRegistryClient) -> None:
    topic = _topic()
    record = {**ORDER, "name": f"Order{uuid.uuid4().hex[:8]}"}
    by_record = await AvroSerializer.create(
        client, record, topic=topic, subject_name_strategy=record_name_strategy
    )
    by_topic_record = await AvroSerializer.create(
        client, record, topic=topic, subject_name_strategy=topic_record_name_strategy
    )
    assert by_record.subject == f"shop.{record['name']}"
    assert by_topic_record.subject == f"{topic}-shop.{record['name']}"
    subjects = await client.get_subjects()
    assert by_record.subject in subjects
    assert by_topic_record.subject in subjects
    with pytest.raises(ValueError, match="needs a named schema"):
        await AvroSerializer.create(
            client, '"long"', topic=topic, subject_name_strategy=record_name_strategy
        )


async def test_auto_register_off_needs_the_schema_registered(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    with pytest.raises(SubjectNotFoundError, match=f"{topic}-value"):
        await AvroSerializer.create(client, ORDER, topic=topic, auto_register=False)
    registered_id = await client.register(f"{topic}-value", Schema(json.dumps(ORDER)))
    other = {**ORDER, "fields": [*ORDER["fields"], {"name": "n", "type": "int"}]}
    with pytest.raises(SchemaNotFoundError):
        await AvroSerializer.create(client, other, topic=topic, auto_register=False)
    serializer = await AvroSerializer.create(
        client, Schema(json.dumps(ORDER)), topic=topic, auto_register=False
    )
    assert serializer.schema_id == registered_id
    assert await client.get_versions(f"{topic}-value") == [1]  # nothing new registered


async def test_use_latest_version_writes_with_the_newest_schema(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    subject = f"{topic}-value"
    await client.register(subject, Schema(json.dumps(ORDER)))
    newer = {
        **ORDER,
        "fields": [*ORDER["fields"], {"name": "qty", "type": "int", "default": 1}],
    }
    newer_id = await client.register(subject, Schema(json.dumps(newer)))
    serializer = await AvroSerializer.create(
        client, topic=topic, use_latest_version=True, auto_register=False
    )
    assert serializer.schema_id == newer_id
    payload = serializer({"id": 1, "item": "x", "qty": 3})
    assert await AvroDeserializer(client).deserialize(payload) == {"id": 1, "item": "x", "qty": 3}
    with pytest.raises(ValueError, match="auto_register=False"):
        AvroSerializer(client, topic=topic, use_latest_version=True)


async def test_references_are_resolved_through_the_registry(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    address_subject = f"{topic}-address"
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "shop",
        "fields": [{"name": "city", "type": "string"}],
    }
    await client.register(address_subject, Schema(json.dumps(address)))
    customer = Schema(
        json.dumps(
            {
                "type": "record",
                "name": "Customer",
                "namespace": "shop",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "home", "type": "shop.Address"},
                ],
            }
        ),
        references=(SchemaReference("shop.Address", address_subject, 1),),
    )
    serializer = await AvroSerializer.create(client, customer, topic=topic)
    value = {"name": "Ada", "home": {"city": "London"}}
    payload = serializer(value)
    async with SchemaRegistryClient(client.url) as fresh:  # nothing cached
        assert await AvroDeserializer(fresh).deserialize(payload) == value


async def test_sync_deserializer_names_an_unloaded_id_and_prepare_loads_a_subject(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    serializer = await AvroSerializer.create(client, ORDER, topic=topic)
    payload = serializer({"id": 1, "item": "a"})
    async with SchemaRegistryClient(client.url) as fresh:
        deserializer = AvroDeserializer(fresh)
        with pytest.raises(UnknownSchemaIdError) as info:
            deserializer(payload)
        assert info.value.schema_id == serializer.schema_id
        assert f"load({serializer.schema_id})" in str(info.value)
        assert await deserializer.prepare(serializer.subject) == [serializer.schema_id]
        assert deserializer(payload) == {"id": 1, "item": "a"}


async def test_bad_bytes_and_bad_values_are_named(client: SchemaRegistryClient) -> None:
    topic = _topic()
    serializer = await AvroSerializer.create(client, ORDER, topic=topic)
    with pytest.raises(SerializationError, match=f"subject '{topic}-value'"):
        serializer({"id": "not a long", "item": "x"})
    deserializer = AvroDeserializer(client)
    with pytest.raises(SerializationError, match="magic byte 1"):
        await deserializer.deserialize(b"\x01\x00\x00\x00\x01\x02")
    with pytest.raises(SerializationError, match="too short"):
        deserializer(b"\x00\x00")
    truncated = serializer({"id": 1, "item": "long enough"})
    assert truncated is not None
    with pytest.raises(SerializationError, match="cannot decode"):
        await deserializer.deserialize(truncated[:-3])
    unprepared = AvroSerializer(client, ORDER, topic=topic)
    with pytest.raises(RuntimeError, match="prepare"):
        unprepared({"id": 1, "item": "x"})


async def test_to_dict_and_from_dict(client: SchemaRegistryClient) -> None:
    class Order:
        def __init__(self, id: int, item: str) -> None:
            self.id, self.item = id, item

    def to_dict(order: Order) -> dict[str, Any]:
        return {"id": order.id, "item": order.item}

    serializer = await AvroSerializer.create(client, ORDER, topic=_topic(), to_dict=to_dict)
    deserializer = AvroDeserializer(client, from_dict=lambda d: Order(**d))
    back = await deserializer.deserialize(serializer(Order(3, "cup")))
    assert isinstance(back, Order)
    assert (back.id, back.item) == (3, "cup")
