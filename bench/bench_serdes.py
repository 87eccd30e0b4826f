"""Schema-registry serialization cost per record: ours beside confluent-kafka's serializers.

For Avro, JSON Schema (a pydantic model; a plain dict; a dict read by a reader that validates
against the writer schema, as confluent-kafka's does by default) and Protobuf, the time one
``serializer(obj)`` and one ``deserializer(bytes)`` takes, after the registry work is done
(schemas registered and loaded: what is left is the per-record cost the producer's
``value_serializer`` and the consumer's ``value_deserializer`` pay). Both sides write the
same bytes (checked before timing). The time is this process's CPU time
(``time.process_time``), not wall time: on a shared machine the wall time of a loop
mostly measures the other processes. confluent-kafka's serializers are called with a
``SerializationContext`` as its producer would.

Run: ``cd /work/main && PYTHONPATH=. python bench/bench_serdes.py [--records N]
[--registry-url URL]``. Without ``--registry-url`` it starts a registry
(``aiokafka_ng.testing.SchemaRegistry``: Apicurio, Java 21+). The Protobuf messages are
generated at start from tests/schema_registry/protos by grpcio-tools' protoc. Prints
CPU microseconds per record (best of ``--repeat`` runs) and the ratio theirs/ours.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pydantic
from confluent_kafka.schema_registry import SchemaRegistryClient as TheirRegistry
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
)

PB_CONF = {"use.deprecated.format": False}
PROTOS = Path(__file__).resolve().parent.parent / "tests" / "schema_registry" / "protos"

AVRO = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "namespace": "bench",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "account", "type": "long"},
            {"name": "amount", "type": "double"},
            {"name": "currency", "type": "string"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)


class Payment(pydantic.BaseModel):
    id: str
    account: int
    amount: float
    currency: str
    tags: list[str]
    note: str | None = None


def _payment(i: int) -> dict[str, Any]:
    return {
        "id": f"pay-{i:08d}",
        "account": 1_000_000 + i,
        "amount": i * 1.25,
        "currency": "EUR",
        "tags": ["card", "online"],
        "note": None if i % 2 else "gift",
    }


def _protos() -> Any:
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="bench-pb2-")
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    well_known = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(["protoc", f"-I{PROTOS}", f"-I{well_known}", f"--python_out={out}", *files])
    if code != 0:
        raise SystemExit(f"protoc failed on {files}")
    sys.path.insert(0, out)
    return importlib.import_module("srtest.shop_pb2")


def _with_ctx(fn: Callable[[Any, Any], Any], ctx: Any, item: Any) -> Any:
    return fn(item, ctx)


def _per_record_us(fn: Callable[[Any], Any], items: list[Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for item in items:
            fn(item)
        best = min(best, time.process_time() - start)
    return best / len(items) * 1e6


async def _ours(url: str, topic: str, shop: Any) -> dict[str, tuple[Any, Any]]:
    client = SchemaRegistryClient(url)
    avro = await AvroSerializer.create(client, AVRO, topic=topic + "-avro")
    json_model = await JsonSerializer.create(client, Payment, topic=topic + "-json")
    protobuf = await ProtobufSerializer.create(client, shop.Order, topic=topic + "-pb")
    avro_reader, json_reader = AvroDeserializer(client), JsonDeserializer(model=Payment)
    await avro_reader.load(avro.schema_id)
    # confluent-kafka's JSON reader validates against the writer schema by default; ours
    # only with validate=True: both kinds are timed.
    json_validating = JsonDeserializer(client, validate=True)
    await json_validating.load(json_model.schema_id)
    await client.aclose()
    return {
        "avro": (avro, avro_reader),
        "json (pydantic)": (json_model, json_reader),
        "json (dict)": (json_model, JsonDeserializer()),
        "json (validating)": (json_model, json_validating),
        "protobuf": (protobuf, ProtobufDeserializer(shop.Order)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--registry-url", default=None)
    args = parser.parse_args()
    shop = _protos()
    registry = None
    url = args.registry_url
    if url is None:
        from aiokafka_ng.testing import SchemaRegistry

        registry = SchemaRegistry()
        registry.start_sync()
        url = registry.url
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        ours = anyio.run(_ours, url, topic, shop)
        theirs_registry = TheirRegistry({"url": url, "timeout": 10})

        def dump(model: Any, ctx: Any) -> Any:
            return model.model_dump(mode="json")

        schema_text = json.dumps(Payment.model_json_schema(), separators=(",", ":"))
        theirs = {
            "avro": (
                TheirAvroSerializer(theirs_registry, AVRO),
                TheirAvroDeserializer(theirs_registry),
                "-avro",
            ),
            "json (pydantic)": (
                TheirJsonSerializer(schema_text, theirs_registry, dump),
                TheirJsonDeserializer(
                    None,
                    schema_registry_client=theirs_registry,
                    from_dict=lambda d, ctx: Payment.model_validate(d),
                ),
                "-json",
            ),
            "json (dict)": (
                TheirJsonSerializer(schema_text, theirs_registry),
                TheirJsonDeserializer(None, schema_registry_client=theirs_registry),
                "-json",
            ),
            "json (validating)": (
                TheirJsonSerializer(schema_text, theirs_registry),
                TheirJsonDeserializer(None, schema_registry_client=theirs_registry),
                "-json",
            ),
            "protobuf": (
                TheirProtobufSerializer(shop.Order, theirs_registry, PB_CONF),
                TheirProtobufDeserializer(shop.Order, PB_CONF),
                "-pb",
            ),
        }
        dicts = [_payment(i) for i in range(args.records)]
        objects: dict[str, list[Any]] = {
            "avro": dicts,
            "json (pydantic)": [Payment(**d) for d in dicts],
            "json (dict)": dicts,
            "json (validating)": dicts,
            "protobuf": [shop.Order(id=d["account"], item=d["id"], tags=d["tags"]) for d in dicts],
        }
        print(f"{args.records} records, best of {args.repeat}; CPU microseconds per record")
        print(
            f"{'format':<19}{'ser ours':>10}{'ser theirs':>12}{'x':>6}"
            f"{'de ours':>10}{'de theirs':>12}{'x':>6}"
        )
        for name, items in objects.items():
            our_ser, our_de = ours[name]
            their_ser, their_de, suffix = theirs[name]
            ctx = SerializationContext(topic + suffix, MessageField.VALUE)
            payloads = [our_ser(item) for item in items]
            their_payloads = [their_ser(item, ctx) for item in items[:100]]
            assert payloads[:100] == their_payloads, f"{name}: not the same bytes"
            s_ours = _per_record_us(our_ser, items, args.repeat)
            s_theirs = _per_record_us(partial(_with_ctx, their_ser, ctx), items, args.repeat)
            d_ours = _per_record_us(our_de, payloads, args.repeat)
            d_theirs = _per_record_us(partial(_with_ctx, their_de, ctx), payloads, args.repeat)
            print(
                f"{name:<19}{s_ours:>10.2f}{s_theirs:>12.2f}{s_theirs / s_ours:>6.1f}"
                f"{d_ours:>10.2f}{d_theirs:>12.2f}{d_theirs / d_ours:>6.1f}"
            )
    finally:
        if registry is not None:
            registry.stop_sync()


if __name__ == "__main__":
    main()
