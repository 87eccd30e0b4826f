"""The interop matrix: format (Avro, JSON Schema, Protobuf) x field (key, value) x direction
(ours written and read by confluent-kafka's serializers, theirs written and read by ours),
against the same real registry. In each cell both sides write the same bytes for the same
records (whichever registered the schema first, the other finds the same id), and the
reading side gets the records back."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import pydantic
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as TheirAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as TheirAvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as TheirJsonDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as TheirJsonSerializer
from confluent_kafka.schema_registry.protobuf import (
    ProtobufDeserializer as TheirProtobufDeserializer,
)
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as TheirProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from aiokafka_ng.schema_registry import (
    AvroDeserializer,
    AvroSerializer,
    JsonDeserializer,
    JsonSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    SchemaRegistryClient,
    message_indexes_of,
    schema_id_of,
)
from aiokafka_ng.testing import SchemaRegistry
from tests.helpers import confluent_registry
from tests.schema_registry.conftest import ProtoModules

pytestmark = pytest.mark.anyio

AVRO_VALUE = json.dumps(
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
AVRO_KEY = json.dumps(
    {
        "type": "record",
        "name": "PaymentKey",
        "namespace": "bank",
        "fields": [{"name": "account", "type": "long"}],
    }
)
AVRO_VALUES = [
    {"id": "p1", "amount": 12.5, "tags": ["card"], "note": None},
    {"id": "p2", "amount": -3.25, "tags": [], "note": "refund ünïcode"},
]
AVRO_KEYS = [{"account": 1}, {"account": 2**40}]


class Line(pydantic.BaseModel):
    sku: str
    qty: int = 1


class Payment(pydantic.BaseModel):
    """A pydantic model as the JSON schema source (nested model: ``$defs``, an alias)."""

    model_config = pydantic.ConfigDict(populate_by_name=True)

    id: str
    amount: float
    lines: list[Line] = []
    note: str | None = None
    paid_by: str = pydantic.Field(default="card", alias="paidBy")


JSON_VALUE = json.dumps(Payment.model_json_schema(), separators=(",", ":"))
JSON_KEY = json.dumps(
    {
        "title": "PaymentKey",
        "type": "object",
        "properties": {"account": {"type": "integer"}},
        "required": ["account"],
    }
)
JSON_VALUES = [
    Payment(id="p1", amount=12.5, lines=[Line(sku="a", qty=2)]),
    Payment(id="p2", amount=-3.25, note="refund ünïcode", paid_by="cash"),
]
JSON_KEYS = [{"account": 1}, {"account": 2**40}]


def _dump(model: Any, ctx: Any = None) -> Any:
    return model.model_dump(mode="json", by_alias=True)


@dataclass(frozen=True)
class Case:
    """One format and field: the records, and both sides' serializer and deserializer."""

    records: list[Any]
    ours_write: Callable[[SchemaRegistryClient, str], Any]  # async -> our serializer
    ours_read: Callable[[SchemaRegistryClient], Any]  # our deserializer
    theirs_write: Callable[[ConfluentRegistry], Any]  # their serializer
    theirs_read: Callable[[ConfluentRegistry], Any]  # their deserializer


def _cases(pb: ProtoModules, is_key: bool) -> dict[str, Case]:
    field = {"is_key": is_key}
    order = pb.shop.Order(id=7, item="tea", tags=["x", "ü"])
    order.price.currency = "EUR"
    order.price.units = 3
    order.lines.add(sku="a", qty=2)
    order.at.seconds = 1_700_000_000
    pb_cls = pb.shop.OrderKey if is_key else pb.shop.Order
    pb_records = (
        [pb.shop.OrderKey(id=1), pb.shop.OrderKey(id=2**40)]
        if is_key
        else [order, pb.shop.Order(id=8)]
    )
    avro_schema = AVRO_KEY if is_key else AVRO_VALUE
    json_source: Any = JSON_KEY if is_key else Payment
    json_text = JSON_KEY if is_key else JSON_VALUE
    return {
        "avro": Case(
            AVRO_KEYS if is_key else AVRO_VALUES,
            lambda c, t: AvroSerializer.create(c, avro_schema, topic=t, **field),
            lambda c: AvroDeserializer(c),
            lambda r: TheirAvroSerializer(r, avro_schema),
            lambda r: TheirAvroDeserializer(r),
        ),
        "json": Case(
            JSON_KEYS if is_key else JSON_VALUES,
            lambda c, t: JsonSerializer.create(c, json_source, topic=t, **field),
            lambda c: JsonDeserializer(c) if is_key else JsonDeserializer(c, model=Payment),
            lambda r: TheirJsonSerializer(json_text, r, None if is_key else _dump),
            lambda r: TheirJsonDeserializer(
                None,
                schema_registry_client=r,
                from_dict=None if is_key else (lambda d, ctx: Payment.model_validate(d)),
            ),
        ),
        "protobuf": Case(
            pb_records,
            lambda c, t: ProtobufSerializer.create(c, pb_cls, topic=t, **field),
            lambda c: ProtobufDeserializer(pb_cls),
            lambda r: TheirProtobufSerializer(pb_cls, r, {"use.deprecated.format": False}),
            lambda r: TheirProtobufDeserializer(pb_cls, {"use.deprecated.format": False}),
        ),
    }


@pytest.fixture
async def ours(schema_registry: SchemaRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with SchemaRegistryClient(schema_registry.url) as client:
        yield client


@pytest.fixture
def theirs(schema_registry: SchemaRegistry) -> Iterator[ConfluentRegistry]:
    with confluent_registry(schema_registry.url) as registry:
        yield registry


async def _their_run(fn: Callable[[], list[Any]]) -> list[Any]:
    """confluent-kafka's client blocks: its calls run in a worker thread."""
    return await anyio.to_thread.run_sync(fn)


@pytest.mark.parametrize("direction", ["ours_to_theirs", "theirs_to_ours"])
@pytest.mark.parametrize("field", ["key", "value"])
@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf"])
async def test_interop_matrix(
    ours: SchemaRegistryClient,
    theirs: ConfluentRegistry,
    protos: ProtoModules,
    fmt: str,
    field: str,
    direction: str,
) -> None:
    is_key = field == "key"
    case = _cases(protos, is_key)[fmt]
    topic = f"matrix-{fmt}-{uuid.uuid4().hex[:10]}"
    ctx = SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)

    def their_bytes() -> list[bytes]:
        serializer = case.theirs_write(theirs)
        return [serializer(record, ctx) for record in case.records]

    if direction == "ours_to_theirs":
        serializer = await case.ours_write(ours, topic)  # registers first
        written = [serializer(record) for record in case.records]
        assert written == await _their_run(their_bytes)  # byte for byte

        def their_read() -> list[Any]:
            deserializer = case.theirs_read(theirs)
            return [deserializer(data, ctx) for data in written]

        assert await _their_run(their_read) == case.records
    else:
        written = await _their_run(their_bytes)  # they register first
        serializer = await case.ours_write(ours, topic)
        assert [serializer(record) for record in case.records] == written  # byte for byte
        async with SchemaRegistryClient(ours.url) as fresh:  # nothing cached
            deserializer = case.ours_read(fresh)
            assert [await deserializer.deserialize(data) for data in written] == case.records
            assert [deserializer(data) for data in written] == case.records  # sync form
    assert {schema_id_of(data) for data in written} == {serializer.schema_id}
    if fmt == "protobuf":  # OrderKey is shop.proto's second message, Order its first
        assert message_indexes_of(written[0]) == ([1] if is_key else [0])
