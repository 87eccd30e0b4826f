"""aiokafka_ng.tracing: the spans our producer and consumer make and the trace context they
carry in record headers. On FakeKafka in memory, on virtual time, asyncio and trio; the
peers (aiokafka's and confluent-kafka's OpenTelemetry instrumentations) are in
test_tracing_peers.py."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.errors import MessageSizeTooLargeError
from aiokafka_ng.producer import Producer, ProducerRecord
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.tracing import record_context

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _traceparent(span: ReadableSpan) -> bytes:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def _consume(kafka: FakeKafka, topic: str, n: int, **config: Any) -> list[Any]:
    async with Consumer(**kafka.client_config(), auto_offset_reset="earliest", **config) as c:
        c.assign([TopicPartition(topic, 0)])
        return [await c.getone() for _ in range(n)]


async def test_a_send_is_a_producer_span_ended_at_acknowledgement_its_context_in_the_headers(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("orders", partitions=1)
        async with Producer(
            **kafka.client_config(), client_id="shop", tracer_provider=provider
        ) as producer:
            with provider.get_tracer("app").start_as_current_span("checkout") as parent:
                fut = await producer.send("orders", b"v", key=b"k1", headers=[("h", b"1")])
            assert _named(exporter, "orders send") == []  # open until acknowledged
            await fut
            await producer.flush()
            md = fut.result()
        (span,) = _named(exporter, "orders send")
        assert span.kind is SpanKind.PRODUCER
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        assert dict(span.attributes or {}) == {
            "messaging.system": "kafka",
            "messaging.client.id": "shop",
            "server.address": "127.0.0.1",
            "server.port": int(kafka.bootstrap_servers.rsplit(":", 1)[1]),
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": "orders",
            "messaging.kafka.message.key": "k1",
            "messaging.destination.partition.id": "0",
            "messaging.kafka.offset": md.offset,
        }
        assert span.status.status_code is StatusCode.UNSET
        (record,) = await _consume(kafka, "orders", 1)
        assert list(record.headers) == [("h", b"1"), ("traceparent", _traceparent(span))]
        sent = trace.get_current_span(record_context(record)).get_span_context()
        assert (sent.trace_id, sent.span_id, sent.is_remote) == (
            span.context.trace_id, span.context.span_id, True
        )  # fmt: skip


async def test_a_failed_send_ends_its_span_with_the_error(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(**kafka.client_config(), max_request_size=1000, tracer_provider=provider) as p,
    ):
        fut = await p.send("big", b"x" * 2000)
        with pytest.raises(MessageSizeTooLargeError) as info:
            await fut
        await p.flush()
    (span,) = _named(exporter, "big send")
    assert span.status.status_code is StatusCode.ERROR
    error = type(info.value)
    assert (span.attributes or {})["error.type"] == f"{error.__module__}.{error.__qualname__}"
    assert [e.name for e in span.events] == ["exception"]


async def test_an_old_trace_context_is_replaced_not_doubled(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    old = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("fwd", partitions=1)
        async with Producer(**kafka.client_config(), tracer_provider=provider) as producer:
            await producer.send_and_wait("fwd", b"v", headers=[("traceparent", old), ("a", None)])
            await producer.flush()
        (span,) = _named(exporter, "fwd send")
        (record,) = await _consume(kafka, "fwd", 1)
    assert list(record.headers) == [("a", None), ("traceparent", _traceparent(span))]


async def test_a_consumed_record_is_a_consumer_span_child_of_and_linked_to_its_producer(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", partitions=1)
        async with Producer(**kafka.client_config(), tracer_provider=provider) as producer:
            for i in range(3):
                await producer.send("t", b"v%d" % i, key=b"k" if i else None)
            await producer.flush()
        sent = _named(exporter, "t send")
        assert len(sent) == 3
        records = await _consume(
            kafka, "t", 2, group_id="g", client_id="reader", tracer_provider=provider
        )
        async with Consumer(
            **kafka.client_config(), auto_offset_reset="earliest", tracer_provider=provider
        ) as consumer:
            consumer.assign([TopicPartition("t", 0)])
            batch = await consumer.getmany(timeout_ms=1000)
    assert [r.offset for r in records] == [0, 1]
    received = _named(exporter, "t receive")
    assert len(received) == 3  # two records one by one, then one getmany call
    for span, send, record in zip(received[:2], sent, records, strict=False):
        assert span.kind is SpanKind.CONSUMER
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        assert span.context.trace_id == send.context.trace_id
        assert [link.context.span_id for link in span.links] == [send.context.span_id]
        attrs = dict(span.attributes or {})
        assert attrs["messaging.consumer.group.name"] == "g"
        assert attrs["messaging.client.id"] == "reader"
        assert attrs["messaging.kafka.offset"] == record.offset
        assert attrs["messaging.destination.partition.id"] == "0"
        assert attrs["messaging.operation.type"] == "receive"
    assert "messaging.kafka.message.key" not in (received[0].attributes or {})
    assert (received[1].attributes or {})["messaging.kafka.message.key"] == "k"
    many = received[2]
    assert sum(len(v) for v in batch.values()) == 3
    assert many.parent is None  # no current span: a root linked to the three producers
    assert [link.context.span_id for link in many.links] == [s.context.span_id for s in sent]
    assert (many.attributes or {})["messaging.batch.message_count"] == 3


async def test_bulk_calls_are_one_span_each_and_their_records_carry_no_context(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("bulk", partitions=1)
        async with Producer(**kafka.client_config(), tracer_provider=provider) as producer:
            run = await producer.send_many("bulk", [b"a", b"b", b"c"])
            futs = await producer.send_batch(
                "bulk", [ProducerRecord(b"d"), ProducerRecord(b"e", headers=[("h", b"1")])]
            )
            assert _named(exporter, "bulk send") == []  # open until decided
            await run
            for fut in futs:
                await fut
            await producer.flush()
        records = await _consume(kafka, "bulk", 5)
    by_count: dict[Any, list[ReadableSpan]] = {}
    for span in _named(exporter, "bulk send"):
        by_count.setdefault((span.attributes or {}).get("messaging.batch.message_count"), [])
        by_count[(span.attributes or {}).get("messaging.batch.message_count")].append(span)
    (many,), (batch,), singles = by_count[3], by_count[2], by_count[None]
    # A send_batch with a ProducerRecord that has headers goes record by record through
    # send(): a span each, children of the call's, their contexts in the records; the
    # bulk path's records (send_many) have none.
    assert [s.parent.span_id for s in singles if s.parent] == [batch.context.span_id] * 2
    assert [list(r.headers) for r in records] == [
        [], [], [],
        [("traceparent", _traceparent(singles[0]))],
        [("h", b"1"), ("traceparent", _traceparent(singles[1]))],
    ]  # fmt: skip
    assert all(s.status.status_code is StatusCode.UNSET for s in (many, batch, *singles))


async def test_tracing_off_adds_no_headers() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("plain", partitions=1)
        async with Producer(**kafka.client_config()) as producer:
            await producer.send_and_wait("plain", b"v")
        (record,) = await _consume(kafka, "plain", 1)
    assert list(record.headers) == []
