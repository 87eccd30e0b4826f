"""ProtobufSerializer / ProtobufDeserializer: the message-index encoding by golden bytes and
round trips, and against the real registry the framing, references for imported files,
subject name strategies, auto-register off and the latest version; and Protobuf keys with
JSON values as a producer's and a consumer's settings, through FakeKafka."""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from hypothesis import given
from hypothesis import strategies as st

from aiokafka_ng import Consumer, Producer, TopicPartition
from aiokafka_ng.schema_registry import (
    JsonDeserializer,
    JsonSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    Schema,
    SchemaRegistryClient,
    SerializationError,
    SubjectNotFoundError,
    UnknownSchemaIdError,
    decode_message_indexes,
    encode_message_indexes,
    message_indexes_of,
    record_name_strategy,
    topic_record_name_strategy,
)
from aiokafka_ng.testing import FakeKafka, SchemaRegistry
from tests.schema_registry.conftest import ProtoModules


def _topic() -> str:
    return f"pb-{uuid.uuid4().hex[:10]}"


def test_message_indexes_golden_bytes() -> None:
    assert encode_message_indexes([0]) == b"\x00"  # the shortcut: a count of zero
    assert encode_message_indexes([1]) == b"\x02\x02"  # count 1, index 1 (zig-zag: 2, 2)
    assert encode_message_indexes([0, 0]) == b"\x04\x00\x00"
    assert encode_message_indexes([2, 70]) == b"\x04\x04\x8c\x01"  # 70 -> 140: two bytes
    assert decode_message_indexes(b"\x00rest") == ([0], 1)
    assert decode_message_indexes(b"..\x04\x04\x8c\x01", 2) == ([2, 70], 6)
    with pytest.raises(SerializationError, match="end before"):
        decode_message_indexes(b"\x04\x04")
    with pytest.raises(SerializationError, match="count"):
        decode_message_indexes(b"\x01")  # zig-zag -1
    with pytest.raises(ValueError):
        encode_message_indexes([])


@given(st.lists(st.integers(min_value=0, max_value=2**31 - 1), min_size=1, max_size=8))
def test_message_indexes_round_trip(indexes: list[int]) -> None:
    encoded = encode_message_indexes(indexes)
    assert decode_message_indexes(encoded + b"tail") == (indexes, len(encoded))


@pytest.fixture
async def client(schema_registry: SchemaRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with SchemaRegistryClient(schema_registry.url) as registry_client:
        yield registry_client


@pytest.mark.anyio
async def test_framing_message_indexes_and_references(
    client: SchemaRegistryClient, protos: ProtoModules
) -> None:
    topic = _topic()
    shop = protos.shop
    serializer = await ProtobufSerializer.create(client, shop.Order, topic=topic)
    order = shop.Order(id=7, item="tea")
    order.price.currency = "EUR"
    payload = serializer(order)
    header = b"\x00" + struct.pack(">I", serializer.schema_id)
    assert payload == header + b"\x00" + order.SerializeToString()
    assert serializer(None) is None
    # Nested (Order.Line: [0, 0]) and second top-level (OrderKey: [1]) messages, same file.
    line = await ProtobufSerializer.create(client, shop.Order.Line, topic=topic + "l")
    key = await ProtobufSerializer.create(client, shop.OrderKey, topic=topic, is_key=True)
    assert line.schema_id == key.schema_id == serializer.schema_id  # one file, one schema
    assert line(shop.Order.Line(sku="a")) == header + b"\x04\x00\x00" + b"\x0a\x01a"
    key_payload = key(shop.OrderKey(id=1))
    assert key_payload == header + b"\x02\x02" + b"\x08\x01"
    assert message_indexes_of(key_payload) == [1]
    assert ProtobufDeserializer(shop.Order)(payload) == order
    assert await ProtobufDeserializer(shop.OrderKey).deserialize(key_payload) == shop.OrderKey(id=1)
    # The imported file is registered under its name and referenced; the well-known
    # timestamp.proto is not.
    registered = await client.get_latest_version(serializer.subject)
    (ref,) = registered.schema.references
    assert (ref.name, ref.subject) == ("srtest/money.proto", "srtest/money.proto")
    money = await client.get_version(ref.subject, ref.version)
    assert money.schema.schema_type == "PROTOBUF"
    described = FileDescriptorProto.FromString(base64.b64decode(money.schema.schema_str))
    assert described.name == "srtest/money.proto"
    assert [m.name for m in described.message_type] == ["Money"]


@pytest.mark.anyio
async def test_strategies_auto_register_off_and_latest_version(
    client: SchemaRegistryClient, protos: ProtoModules
) -> None:
    topic = _topic()
    shop = protos.shop
    by_topic_record = await ProtobufSerializer.create(
        client, shop.OrderKey, topic=topic, subject_name_strategy=topic_record_name_strategy
    )
    assert by_topic_record.subject == f"{topic}-srtest.shop.OrderKey"
    by_record = ProtobufSerializer(
        client, shop.OrderKey, topic=topic, subject_name_strategy=record_name_strategy
    )
    assert await by_record.prepare() == by_topic_record.schema_id
    assert by_record.subject == "srtest.shop.OrderKey"
    with pytest.raises(SubjectNotFoundError):
        await ProtobufSerializer.create(client, shop.Order, topic=topic, auto_register=False)
    registered = await ProtobufSerializer.create(client, shop.Order, topic=topic)
    looked_up = await ProtobufSerializer.create(
        client, shop.Order, topic=topic, auto_register=False
    )
    assert looked_up.schema_id == registered.schema_id
    # The latest version's file locates the message: Order.Line is [0, 0] in it.
    latest = await ProtobufSerializer.create(
        client,
        shop.Order.Line,
        topic=topic,
        auto_register=False,
        use_latest_version=True,
    )
    assert latest.schema_id == registered.schema_id
    assert message_indexes_of(latest(shop.Order.Line()) or b"") == [0, 0]


@pytest.mark.anyio
async def test_wrong_messages_and_bytes_are_refused(
    client: SchemaRegistryClient, protos: ProtoModules
) -> None:
    shop = protos.shop
    serializer = await ProtobufSerializer.create(client, shop.OrderKey, topic=_topic())
    with pytest.raises(SerializationError, match=r"takes srtest\.shop\.OrderKey messages"):
        serializer(shop.Order(id=1))
    payload = serializer(shop.OrderKey(id=1))
    assert payload is not None
    with pytest.raises(SerializationError, match="cannot decode"):
        ProtobufDeserializer(shop.OrderKey)(payload[:-1])  # the varint cut short
    with pytest.raises(SerializationError, match="too short"):
        ProtobufDeserializer(shop.OrderKey)(b"\x00\x00")


class Receipt(pydantic.BaseModel):
    order_id: int
    total: float


@pytest.mark.anyio
async def test_as_the_producer_and_consumer_settings(
    client: SchemaRegistryClient, protos: ProtoModules, fake_kafka: FakeKafka
) -> None:
    # Protobuf keys and JSON (pydantic) values, through Kafka, as the clients' settings.
    topic = _topic()
    fake_kafka.create_topic(topic, partitions=1)
    key_serializer = await ProtobufSerializer.create(
        client, protos.shop.OrderKey, topic=topic, is_key=True
    )
    value_serializer = await JsonSerializer.create(client, Receipt, topic=topic)
    sent = [(protos.shop.OrderKey(id=i), Receipt(order_id=i, total=i * 2.5)) for i in (1, 2)]
    config = fake_kafka.client_config()
    async with Producer(
        **config, key_serializer=key_serializer, value_serializer=value_serializer
    ) as producer:
        for key, value in sent:
            await producer.send_and_wait(topic, value, key=key)
        with pytest.raises(SerializationError):  # refused in send: nothing is queued
            await producer.send_and_wait(topic, {"order_id": "x"}, key=sent[0][0])
    assert fake_kafka.end_offset(topic, 0) == len(sent)
    async with Consumer(
        **config,
        auto_offset_reset="earliest",
        key_deserializer=ProtobufDeserializer(protos.shop.OrderKey),
        value_deserializer=JsonDeserializer(model=Receipt),
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        seen = []
        async for record in consumer:
            seen.append((record.key, record.value))
            if len(seen) == len(sent):
                break
    assert seen == sent


@pytest.mark.anyio
async def test_read_without_a_generated_class(
    client: SchemaRegistryClient, protos: ProtoModules
) -> None:
    shop = protos.shop
    topic = _topic()
    order = shop.Order(id=7, item="tea", tags=["ü"])
    order.price.currency = "EUR"  # srtest/money.proto, a reference
    order.lines.add(sku="a", qty=2)
    order.at.seconds = 1_700_000_000  # google/protobuf/timestamp.proto, a well-known type
    value = await ProtobufSerializer.create(client, shop.Order, topic=topic)
    line = await ProtobufSerializer.create(client, shop.Order.Line, topic=topic + "l")
    key = await ProtobufSerializer.create(client, shop.OrderKey, topic=topic, is_key=True)
    payloads = [value(order), line(shop.Order.Line(sku="b")), key(shop.OrderKey(id=3))]
    async with SchemaRegistryClient(client.url) as fresh:
        reader = ProtobufDeserializer(client=fresh)
        with pytest.raises(UnknownSchemaIdError):
            reader(payloads[0])  # the sync form: nothing loaded yet
        decoded = [await reader.deserialize(data) for data in payloads]
    assert [type(m).DESCRIPTOR.full_name for m in decoded] == [
        "srtest.shop.Order",
        "srtest.shop.Order.Line",
        "srtest.shop.OrderKey",
    ]
    # Built from the registry, not the generated classes: the same fields, the same bytes.
    assert not isinstance(decoded[0], shop.Order)
    first: Any = decoded[0]
    assert (first.id, first.price.currency, first.lines[0].qty, first.at.seconds) == (
        7,
        "EUR",
        2,
        1_700_000_000,
    )
    assert [m.SerializeToString() for m in decoded if m is not None] == [
        order.SerializeToString(),
        shop.Order.Line(sku="b").SerializeToString(),
        shop.OrderKey(id=3).SerializeToString(),
    ]
    assert reader.loaded_ids == {value.schema_id}
    assert reader(payloads[2]) is not None  # loaded now: the sync form decodes it
    with pytest.raises(ValueError, match="registry client"):
        ProtobufDeserializer()

    # The classes it builds, by message name, with the indexes that frame them.
    with pytest.raises(UnknownSchemaIdError):
        reader.find_message(value.schema_id + 1000)
    cls, indexes = reader.find_message(value.schema_id)  # the file's first message
    assert (cls.DESCRIPTOR.full_name, indexes) == ("srtest.shop.Order", (0,))
    cls, indexes = reader.find_message(value.schema_id, "srtest.shop.Order.Line")
    framed, start = decode_message_indexes(payloads[1], 5)
    assert tuple(framed) == indexes == (0, 0)
    assert cls.FromString(payloads[1][start:]) == decoded[1]
    with pytest.raises(SerializationError, match=r"has no message 'srtest\.shop\.Nope'"):
        reader.find_message(value.schema_id, "srtest.shop.Nope")


@pytest.mark.anyio
async def test_what_cannot_be_read_without_a_class_says_why(
    client: SchemaRegistryClient, protos: ProtoModules
) -> None:
    # .proto text (as Java clients register it) cannot be built without a .proto parser.
    text = Schema('syntax = "proto3";\npackage t;\nmessage A { int64 x = 1; }\n', "PROTOBUF")
    text_id = await client.register(f"{_topic()}-value", text)
    reader = ProtobufDeserializer(client=client)
    framed = b"\x00" + struct.pack(">I", text_id) + b"\x00\x08\x01"
    with pytest.raises(SerializationError, match="not a file descriptor"):
        await reader.deserialize(framed)
    # Indexes that name no message of the writer's file.
    key = await ProtobufSerializer.create(client, protos.shop.OrderKey, topic=_topic())
    payload = key(protos.shop.OrderKey(id=1)) or b""
    beyond = payload[:5] + encode_message_indexes([5]) + payload[7:]
    with pytest.raises(SerializationError, match=r"no message at indexes \[5\]"):
        await reader.deserialize(beyond)
    # An Avro schema id is not read as Protobuf.
    avro_id = await client.register(f"{_topic()}-value", Schema('"string"'))
    with pytest.raises(SerializationError, match="not PROTOBUF"):
        await reader.deserialize(b"\x00" + struct.pack(">I", avro_id) + b"\x00")
