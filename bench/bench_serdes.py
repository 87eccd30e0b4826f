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

In the clients (``--clients``, on a broker: Tansu by default, ``brokers.py``'s options):
the same serializers where applications call them, in the producer and the consumer, for
``--client-formats``. Producer: ours ``await send()`` (``gather`` every 10k, as
bench_producer's gather row) with ``value_serializer=`` our serializer, against confluent-
kafka's ``produce()`` loop (``poll(0)`` every 1,000, ``flush()``) with its serializer
called on each value, as its docs show; each also with the values already serialized (the
same bytes), and the serializer's cost in the client is the difference in the client
process's CPU per record. Consumer: ours ``getmany()`` with ``value_deserializer=`` our
deserializer (its writer schema loaded first), against confluent-kafka's ``consume()`` loop
with its deserializer called on each value; each also without. ``--client-records`` each
(default 50,000), best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import asyncio
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
from brokers import add_options, describe, open_target
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


# -- in the clients -----------------------------------------------------------------------

PARTITIONS = 4
WINDOW = 10_000


async def _ours_produce(bootstrap: str, topic: str, items: list[Any], ser: Any) -> None:
    from aiokafka_ng import Producer

    async with Producer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, value_serializer=ser
    ) as producer:
        await producer.partitions_for(topic)
        futs = []
        for i, item in enumerate(items):
            futs.append(await producer.send(topic, item, partition=i % PARTITIONS))
            if len(futs) == WINDOW:
                await asyncio.gather(*futs)
                futs = []
        await asyncio.gather(*futs)


def _their_produce(bootstrap: str, topic: str, items: list[Any], ser: Any, ctx: Any) -> None:
    from confluent_kafka import Producer as TheirProducer

    producer = TheirProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    producer.list_topics(topic, timeout=30)
    for i, item in enumerate(items):
        value = item if ser is None else ser(item, ctx)
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


async def _ours_consume(bootstrap: str, topic: str, n: int, de: Any) -> None:
    from aiokafka_ng.consumer import Consumer, TopicPartition

    async with Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", value_deserializer=de
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        count = 0
        while count < n:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=10000)).values():
                count += len(records)


def _their_consume(bootstrap: str, topic: str, n: int, de: Any, ctx: Any) -> None:
    from confluent_kafka import Consumer as TheirConsumer
    from confluent_kafka import TopicPartition as TheirTP

    consumer = TheirConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 10,  # see bench_consumer.py: Tansu holds a 500 ms fetch
    })  # fmt: skip
    try:
        consumer.assign([TheirTP(topic, p, 0) for p in range(PARTITIONS)])
        count = 0
        while count < n:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error() is None:
                    if de is not None:
                        de(msg.value(), ctx)
                    count += 1
    finally:
        consumer.close()


def _cpu_us(fn: Callable[[], Any], n: int, repeat: int) -> float:
    """CPU microseconds per record this process spends in ``fn()``, best of ``repeat``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best / n * 1e6


def in_clients(
    target: Any,
    name: str,
    items: list[Any],
    ours: tuple[Any, Any],
    theirs: tuple[Any, Any],
    repeat: int,
) -> tuple[float, float, float, float]:
    """(producer: ours, theirs; consumer: ours, theirs): the serializer's CPU microseconds
    per record in each client, as the difference with and without it."""
    bootstrap, n = target.bootstrap, len(items)
    (our_ser, our_de), (their_ser, their_de) = ours, theirs
    payloads = [our_ser(item) for item in items]

    topic = target.create_topic(PARTITIONS, "serdes")  # every producer run appends to it

    def produced(ours_side: bool, serialize: bool) -> Callable[[], Any]:
        def go() -> None:
            if ours_side:
                values = items if serialize else payloads
                asyncio.run(_ours_produce(bootstrap, topic, values, our_ser if serialize else None))
            else:
                ctx = SerializationContext(topic, MessageField.VALUE)
                values = items if serialize else payloads
                _their_produce(bootstrap, topic, values, their_ser if serialize else None, ctx)

        return go

    source = target.create_topic(PARTITIONS, "serdes")
    _their_produce(bootstrap, source, payloads, None, None)
    ctx = SerializationContext(source, MessageField.VALUE)

    def consumed(ours_side: bool, deserialize: bool) -> Callable[[], Any]:
        def go() -> None:
            if ours_side:
                asyncio.run(_ours_consume(bootstrap, source, n, our_de if deserialize else None))
            else:
                _their_consume(bootstrap, source, n, their_de if deserialize else None, ctx)

        return go

    costs = []
    for make in (produced, consumed):
        for side in (True, False):
            with_it = _cpu_us(make(side, True), n, repeat)
            without = _cpu_us(make(side, False), n, repeat)
            costs.append(with_it - without)
            print(
                f"  {name:<19}{'producer' if make is produced else 'consumer'} "
                f"{'ours' if side else 'theirs':<7}{without:8.2f} -> {with_it:8.2f} us/record"
            )
    return costs[0], costs[1], costs[2], costs[3]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--registry-url", default=None)
    parser.add_argument(
        "--clients", action="store_true", help="also time them in the producer and consumer"
    )
    parser.add_argument("--client-records", type=int, default=50_000)
    parser.add_argument("--client-formats", default="avro,json (dict),protobuf")
    add_options(parser)
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
        if args.clients:
            _client_table(args, ours, theirs, objects)
    finally:
        if registry is not None:
            registry.stop_sync()


def _client_table(
    args: argparse.Namespace,
    ours: dict[str, tuple[Any, Any]],
    theirs: dict[str, tuple[Any, Any, str]],
    objects: dict[str, list[Any]],
) -> None:
    names = [n.strip() for n in args.client_formats.split(",") if n.strip()]
    rows = {}
    with open_target(args) as target:
        print(
            f"\nin the clients: {args.client_records} records, {PARTITIONS} partitions, "
            f"{describe(target)}; client CPU us/record without -> with the serializer"
        )
        for name in names:
            items = (objects[name] * (args.client_records // len(objects[name]) + 1))[
                : args.client_records
            ]
            their_ser, their_de, _ = theirs[name]
            rows[name] = in_clients(target, name, items, ours[name], (their_ser, their_de),
                                    args.repeat)  # fmt: skip
    print("\nserialization cost per record in the clients (CPU microseconds, with - without)")
    print(f"{'format':<19}{'producer ours':>14}{'theirs':>9}{'consumer ours':>15}{'theirs':>9}")
    for name, (p_ours, p_theirs, c_ours, c_theirs) in rows.items():
        print(f"{name:<19}{p_ours:>14.2f}{p_theirs:>9.2f}{c_ours:>15.2f}{c_theirs:>9.2f}")


if __name__ == "__main__":
    main()
