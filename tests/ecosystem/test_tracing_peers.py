"""One trace across three clients: aiokafka_ng's tracing with the OpenTelemetry
instrumentations of aiokafka (``opentelemetry-instrumentation-aiokafka``) and confluent-kafka
(``-confluent-kafka``) as peers, in both directions, on a real broker.

Each test is a relay: a peer produces inside an application span, we consume the record
and, in the processing span parented on its context (``record_context``), produce two of
our own -- one by ``send()``, one by the bulk path (``send_many``) -- which the other peer
consumes. The exported spans (in-memory exporter) must form one trace: our consumer span
the child of the peer's send span, and the other peer's consumer span of each record the
child of (aiokafka) or linked to (confluent-kafka) the send span of ours that sent it.

The peers run in a worker thread (aiokafka on an asyncio loop of its own), so the test runs
on asyncio and trio alike.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio.to_thread
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from aiokafka_ng import AdminClient, NewTopic
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.producer import Producer
from aiokafka_ng.tracing import record_context
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def _topics(bootstrap: str, *names: str) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        (await admin.create_topics([NewTopic(n, 1, -1) for n in names])).raise_on_error()


def dump(spans: list[ReadableSpan]) -> str:
    """The spans as lines (trace, span, parent, kind, name, links, attributes): what a trace
    viewer shows, for the report and for a failure's message."""
    out = []
    for s in spans:
        ctx = s.context
        assert ctx is not None
        parent = f"{s.parent.span_id:016x}" if s.parent else "-" * 16
        links = ",".join(f"{link.context.span_id:016x}" for link in s.links) or "-"
        attrs = " ".join(f"{k}={v}" for k, v in sorted((s.attributes or {}).items()))
        scope = s.instrumentation_scope.name if s.instrumentation_scope else "?"
        out.append(
            f"trace={ctx.trace_id:032x} span={ctx.span_id:016x} parent={parent} "
            f"{s.kind.name:<8} {s.name!r} [{scope}] links={links} {attrs}"
        )
    return "\n".join(out)


def _all(spans: list[ReadableSpan], name: str, scope: str) -> list[ReadableSpan]:
    return [
        s
        for s in spans
        if s.name == name and s.instrumentation_scope and s.instrumentation_scope.name == scope
    ]


def _one(spans: list[ReadableSpan], name: str, scope: str) -> ReadableSpan:
    found = _all(spans, name, scope)
    assert len(found) == 1, (name, scope, dump(spans))
    return found[0]


def _our_sends(spans: list[ReadableSpan], topic: str) -> tuple[ReadableSpan, ReadableSpan]:
    """Our two send spans of ``relay``: send()'s, and the send_many call's."""
    found = _all(spans, f"{topic} send", "aiokafka_ng")
    bulk = [s for s in found if "messaging.batch.message_count" in (s.attributes or {})]
    single = [s for s in found if s not in bulk]
    assert len(single) == len(bulk) == 1, dump(spans)
    return single[0], bulk[0]


def _is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.context is not None and parent.context is not None
    return (
        child.parent is not None
        and child.parent.span_id == parent.context.span_id
        and child.context.trace_id == parent.context.trace_id
    )


# ------------------------------------------------------------------ the peers, in a thread


def confluent_produce(bootstrap: str, topic: str, provider: TracerProvider) -> None:
    from confluent_kafka import Producer as ConfluentProducer
    from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor

    producer = ConfluentKafkaInstrumentor.instrument_producer(
        ConfluentProducer({"bootstrap.servers": bootstrap}), tracer_provider=provider
    )
    with provider.get_tracer("app").start_as_current_span("http POST /orders"):
        producer.produce(topic, b"order-1", key=b"o1")
    assert producer.flush(30) == 0


def confluent_consume(bootstrap: str, topic: str, provider: TracerProvider) -> None:
    from confluent_kafka import Consumer as ConfluentConsumer
    from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor

    consumer = ConfluentKafkaInstrumentor.instrument_consumer(
        ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": topic,
                "auto.offset.reset": "earliest",
                # Tansu holds a new group's first join for half the session timeout
                # (docs TANSU.md): 3 s at Kafka's minimum, not 22.5 s at the default.
                "session.timeout.ms": 6000,
            }
        ),
        tracer_provider=provider,
    )
    consumer.subscribe([topic])
    got = 0
    try:
        for _ in range(120):
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got += 1
                if got == RELAYED:
                    return
        raise AssertionError(f"confluent-kafka got {got} of {RELAYED} records in 120 s")
    finally:
        consumer.close()  # ends its process span


def aiokafka_instrumented(provider: TracerProvider) -> Any:
    from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor

    instrumentor = AIOKafkaInstrumentor()
    instrumentor.instrument(tracer_provider=provider)  # patches aiokafka's classes
    return instrumentor


def aiokafka_produce(bootstrap: str, topic: str, provider: TracerProvider) -> None:
    async def main() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            with provider.get_tracer("app").start_as_current_span("http POST /orders"):
                await producer.send_and_wait(topic, b"order-1", key=b"o1")
        finally:
            await producer.stop()

    instrumentor = aiokafka_instrumented(provider)
    try:
        asyncio.run(main())
    finally:
        instrumentor.uninstrument()


def aiokafka_consume(bootstrap: str, topic: str, provider: TracerProvider) -> None:
    async def main() -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=topic,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,  # Tansu's first-join hold: see confluent_consume
        )
        await consumer.start()
        try:
            for _ in range(RELAYED):
                await asyncio.wait_for(consumer.getone(), 120)
        finally:
            await consumer.stop()

    instrumentor = aiokafka_instrumented(provider)
    try:
        asyncio.run(main())
    finally:
        instrumentor.uninstrument()


# ------------------------------------------------------------------ us, in the middle


#: Records ``relay`` sends for the one it consumes: one by send(), one by send_many().
RELAYED = 2


async def relay(bootstrap: str, source: str, target: str, provider: TracerProvider) -> None:
    """Consume one record of ``source`` (traced), handle it in a span parented on its
    context, and send two records to ``target`` from there (traced): one through
    ``send()``, one through the bulk path."""
    async with (
        Consumer(
            source,
            bootstrap_servers=bootstrap,
            group_id=source,
            auto_offset_reset="earliest",
            client_id="relay-in",
            session_timeout_ms=6000,  # Tansu's first-join hold: see confluent_consume
            tracer_provider=provider,
        ) as consumer,
        Producer(
            bootstrap_servers=bootstrap, client_id="relay-out", tracer_provider=provider
        ) as producer,
    ):
        with anyio.fail_after(120):
            record = await consumer.getone()
        context = record_context(record)
        with provider.get_tracer("app").start_as_current_span("handle order", context=context):
            await producer.send_and_wait(target, b"shipment-1", key=b"s1")
            await (await producer.send_many(target, [b"shipment-2"], keys=[b"s1"]))


async def test_confluent_kafka_to_us_to_aiokafka_is_one_trace(
    kafka_broker: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    bootstrap = kafka_broker.bootstrap_servers
    orders, shipments = topic_name("orders"), topic_name("shipments")
    await _topics(bootstrap, orders, shipments)
    await anyio.to_thread.run_sync(confluent_produce, bootstrap, orders, provider)
    await relay(bootstrap, orders, shipments, provider)
    await anyio.to_thread.run_sync(aiokafka_consume, bootstrap, shipments, provider)
    got = list(exporter.get_finished_spans())
    peer = "opentelemetry.instrumentation."
    request = _one(got, "http POST /orders", "app")
    their_send = _one(got, f"{orders} send", peer + "confluent_kafka")
    our_receive = _one(got, f"{orders} receive", "aiokafka_ng")
    handle = _one(got, "handle order", "app")
    our_send, our_bulk = _our_sends(got, shipments)
    their_receives = sorted(
        _all(got, f"{shipments} receive", peer + "aiokafka"),
        key=lambda s: (s.attributes or {})["messaging.kafka.message.offset"],
    )
    assert [(s.attributes or {})["messaging.kafka.message.offset"] for s in their_receives] == [
        0, 1,
    ], dump(got)  # fmt: skip
    assert _is_child(their_send, request), dump(got)
    assert _is_child(our_receive, their_send), dump(got)  # ours extracts theirs
    assert _is_child(handle, their_send), dump(got)  # record_context
    assert _is_child(our_send, handle) and _is_child(our_bulk, handle), dump(got)
    # theirs extracts ours, from either path: send()'s record and the bulk call's record
    assert _is_child(their_receives[0], our_send), dump(got)
    assert _is_child(their_receives[1], our_bulk), dump(got)
    assert (our_receive.kind, our_send.kind) == (SpanKind.CONSUMER, SpanKind.PRODUCER)
    assert (our_send.attributes or {})["messaging.kafka.offset"] == 0
    assert len({s.context.trace_id for s in got if s.context}) == 1, dump(got)


async def test_aiokafka_to_us_to_confluent_kafka_is_one_trace(
    kafka_broker: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    bootstrap = kafka_broker.bootstrap_servers
    orders, shipments = topic_name("orders"), topic_name("shipments")
    await _topics(bootstrap, orders, shipments)
    await anyio.to_thread.run_sync(aiokafka_produce, bootstrap, orders, provider)
    await relay(bootstrap, orders, shipments, provider)
    await anyio.to_thread.run_sync(confluent_consume, bootstrap, shipments, provider)
    got = list(exporter.get_finished_spans())
    peer = "opentelemetry.instrumentation."
    request = _one(got, "http POST /orders", "app")
    their_send = _one(got, f"{orders} send", peer + "aiokafka")
    our_receive = _one(got, f"{orders} receive", "aiokafka_ng")
    handle = _one(got, "handle order", "app")
    our_send, our_bulk = _our_sends(got, shipments)
    their_process = _all(got, f"{shipments} process", peer + "confluent_kafka")
    assert _is_child(their_send, request), dump(got)
    assert _is_child(our_receive, their_send), dump(got)
    assert _is_child(handle, their_send), dump(got)
    assert _is_child(our_send, handle) and _is_child(our_bulk, handle), dump(got)
    # confluent-kafka's instrumentation links its process span to the producer's context
    # (a new trace of its own): the link is what carries the trace across, for the record
    # send() sent and for the one the bulk call sent.
    assert our_send.context is not None and our_bulk.context is not None
    links = [
        [(link.context.trace_id, link.context.span_id) for link in span.links]
        for span in their_process
    ]
    assert sorted(links) == sorted(
        [[(ours.context.trace_id, ours.context.span_id)] for ours in (our_send, our_bulk)]
    ), dump(got)
    assert request.context is not None and request.context.trace_id == our_send.context.trace_id
