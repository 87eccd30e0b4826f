"""JsonSerializer / JsonDeserializer against the real registry: pydantic models as schema
source and as what is read, framing, validation before sending, subject name strategies,
auto-register off, latest version, references, and the validating deserializer's loaded
ids."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import AsyncIterator

import pydantic
import pytest

from aiokafka_ng.schema_registry import (
    IncompatibleSchemaError,
    JsonDeserializer,
    JsonSerializer,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SerializationError,
    SubjectNotFoundError,
    UnknownSchemaIdError,
    record_name_strategy,
    topic_record_name_strategy,
)
from aiokafka_ng.testing import SchemaRegistry

pytestmark = pytest.mark.anyio


class Order(pydantic.BaseModel):
    id: int
    item: str
    qty: int = pydantic.Field(default=1, ge=1)


class OrderV2(Order):
    """A reader with a field added (a default): reads records written before it existed."""

    gift: bool = False


def _topic() -> str:
    return f"json-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def client(schema_registry: SchemaRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with SchemaRegistryClient(schema_registry.url) as registry_client:
        yield registry_client


async def test_a_pydantic_model_is_the_schema_and_what_is_read(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    serializer = await JsonSerializer.create(client, Order, topic=topic)
    assert serializer.subject == f"{topic}-value"
    registered = await client.get_schema(serializer.schema_id)
    assert registered.schema_type == "JSON"
    assert json.loads(registered.schema_str) == Order.model_json_schema()
    payload = serializer(Order(id=7, item="thé"))
    header = b"\x00" + struct.pack(">I", serializer.schema_id)
    assert payload == header + '{"id":7,"item":"thé","qty":1}'.encode()
    plain = serializer({"id": 8, "item": "tea", "qty": 2})
    assert plain == header + b'{"id":8,"item":"tea","qty":2}'
    assert serializer(None) is None  # a tombstone stays one
    # Read as the model (no registry needed), as dicts, and as a newer model.
    assert JsonDeserializer(model=Order)(payload) == Order(id=7, item="thé")
    assert JsonDeserializer()(payload) == {"id": 7, "item": "thé", "qty": 1}
    assert JsonDeserializer(model=OrderV2)(payload) == OrderV2(id=7, item="thé", gift=False)
    with pytest.raises(SerializationError, match="is not a OrderV2"):
        JsonDeserializer(model=OrderV2)(header + b'{"id":"x"}')


async def test_a_value_that_breaks_the_schema_fails_before_it_is_encoded(
    client: SchemaRegistryClient,
) -> None:
    serializer = await JsonSerializer.create(client, Order, topic=_topic())
    with pytest.raises(SerializationError) as broken:
        serializer({"id": 1, "item": "tea", "qty": 0})  # minimum 1
    assert serializer.subject in str(broken.value)
    assert "at qty" in str(broken.value)
    with pytest.raises(SerializationError, match="'item' is a required property"):
        serializer({"id": 1})
    # Without validation the same value is encoded as it is.
    lax = await JsonSerializer.create(client, Order, topic=_topic(), validate=False)
    assert lax({"id": 1}) is not None


async def test_subject_name_strategies_use_the_title(client: SchemaRegistryClient) -> None:
    topic = _topic()
    title = f"Order{uuid.uuid4().hex[:8]}"
    schema = {**Order.model_json_schema(), "title": title}
    by_record = await JsonSerializer.create(
        client, schema, topic=topic, subject_name_strategy=record_name_strategy
    )
    by_topic_record = await JsonSerializer.create(
        client, schema, topic=topic, subject_name_strategy=topic_record_name_strategy
    )
    assert by_record.subject == title
    assert by_topic_record.subject == f"{topic}-{title}"
    assert by_record.schema_id == by_topic_record.schema_id  # same schema, same id


async def test_auto_register_off_and_latest_version(client: SchemaRegistryClient) -> None:
    topic = _topic()
    with pytest.raises(SubjectNotFoundError):
        await JsonSerializer.create(client, Order, topic=topic, auto_register=False)
    first = await JsonSerializer.create(client, Order, topic=topic)
    looked_up = await JsonSerializer.create(client, Order, topic=topic, auto_register=False)
    assert looked_up.schema_id == first.schema_id
    newer = await JsonSerializer.create(client, OrderV2, topic=topic)
    latest = await JsonSerializer.create(
        client, topic=topic, auto_register=False, use_latest_version=True
    )
    assert latest.schema_id == newer.schema_id != first.schema_id
    # It validates against the latest schema (OrderV2's gift is a boolean).
    with pytest.raises(SerializationError, match="at gift"):
        latest({"id": 1, "item": "tea", "gift": "yes"})
    with pytest.raises(ValueError, match="auto_register=False"):
        JsonSerializer(client, Order, topic=topic, use_latest_version=True)


async def test_references_resolve_through_the_registry(client: SchemaRegistryClient) -> None:
    topic = _topic()
    address_subject = f"{topic}-address"
    address = {
        "title": "Address",
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    await client.register(address_subject, Schema(json.dumps(address), "JSON"))
    customer = {
        "title": "Customer",
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
    }
    schema = Schema(
        json.dumps(customer), "JSON", (SchemaReference("address.json", address_subject, 1),)
    )
    serializer = await JsonSerializer.create(client, schema, topic=topic)
    payload = serializer({"name": "Ada", "home": {"city": "London"}})
    assert payload is not None
    with pytest.raises(SerializationError, match="at home"):
        serializer({"name": "Ada", "home": {"town": "London"}})  # the referenced schema's rule
    deserializer = JsonDeserializer(client, validate=True)
    assert await deserializer.deserialize(payload) == {"name": "Ada", "home": {"city": "London"}}


async def test_the_validating_deserializer_decodes_loaded_ids(client: SchemaRegistryClient) -> None:
    topic = _topic()
    lax = await JsonSerializer.create(client, Order, topic=topic, validate=False)
    good, bad = lax(Order(id=1, item="tea")), lax({"id": 1, "item": "tea", "qty": 0})
    deserializer = JsonDeserializer(client, model=Order, validate=True)
    with pytest.raises(UnknownSchemaIdError) as unknown:
        deserializer(good)
    assert unknown.value.schema_id == lax.schema_id
    assert await deserializer.prepare(lax.subject) == [lax.schema_id]
    assert deserializer.loaded_ids == {lax.schema_id}
    assert deserializer(good) == Order(id=1, item="tea")
    with pytest.raises(SerializationError, match="does not fit its schema"):
        deserializer(bad)
    with pytest.raises(SerializationError, match="magic byte"):
        deserializer(b"\x01\x00\x00\x00\x01{}")
    with pytest.raises(ValueError, match="registry client"):
        JsonDeserializer(validate=True)


class Ticket(pydantic.BaseModel):
    # A closed model (additionalProperties: false): adding a field with a default is then a
    # BACKWARD-compatible change, as the registry's JSON Schema rules see it (on an open
    # model, a new property narrows what the old schema allowed).
    model_config = pydantic.ConfigDict(extra="forbid", title="Ticket")

    id: int
    seat: str


class TicketV2(Ticket):
    model_config = pydantic.ConfigDict(extra="forbid", title="Ticket")

    vip: bool = False


class TicketBad(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", title="Ticket")

    id: str  # was an integer
    seat: str


async def test_backward_evolution_and_an_incompatible_model_refused(
    client: SchemaRegistryClient,
) -> None:
    topic = _topic()
    old = await JsonSerializer.create(client, Ticket, topic=topic)
    await client.set_compatibility("BACKWARD", old.subject)
    with pytest.raises(IncompatibleSchemaError) as refused:
        await JsonSerializer.create(client, TicketBad, topic=topic)
    assert refused.value.subject == old.subject
    assert "compatibility rule" in str(refused.value)
    assert await client.get_versions(old.subject) == [1]  # nothing registered
    new = await JsonSerializer.create(client, TicketV2, topic=topic)
    assert new.schema_id != old.schema_id
    assert await client.get_versions(old.subject) == [1, 2]
    # The new reader reads a record written before the field existed, the default filled in.
    reader = JsonDeserializer(client, model=TicketV2, validate=True)
    assert await reader.deserialize(old(Ticket(id=1, seat="4A"))) == TicketV2(id=1, seat="4A")
    assert await reader.deserialize(new(TicketV2(id=2, seat="1A", vip=True))) == TicketV2(
        id=2, seat="1A", vip=True
    )
