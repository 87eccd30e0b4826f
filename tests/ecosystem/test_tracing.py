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
from tests.protocol.arrow_columns import column

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


async def test_bulk_calls_are_one_span_each_whose_context_their_records_carry(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    old = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("bulk", partitions=1)
        async with Producer(**kafka.client_config(), tracer_provider=provider) as producer:
            run = await producer.send_many("bulk", [b"a", b"b", b"c"])
            futs = await producer.send_batch(
                "bulk",
                [
                    ProducerRecord(b"d"),
                    ProducerRecord(b"e", headers=[("h", b"1")]),
                    ProducerRecord(b"f", headers=[("traceparent", old), ("g", None)]),
                ],
            )
            assert _named(exporter, "bulk send") == []  # open until decided
            await run
            for fut in futs:
                await fut
            await producer.flush()
        records = await _consume(kafka, "bulk", 6)
    sent = _named(exporter, "bulk send")
    singles = sorted((s for s in sent if s.parent), key=lambda s: s.start_time or 0)
    (batch,) = [s for s in sent if s.context.span_id == singles[0].parent.span_id]
    (many,) = [s for s in sent if s.parent is None and s is not batch]
    assert [(s.attributes or {}).get("messaging.batch.message_count") for s in (many, batch)] == [
        3, 3,
    ]  # fmt: skip
    # send_many's records take the bulk path and carry its span's context. A send_batch with
    # a ProducerRecord that has headers goes record by record through send(): a span each,
    # children of the call's, their contexts in the records (a record's own headers kept,
    # an old traceparent replaced).
    assert [s.parent.span_id for s in singles if s.parent] == [batch.context.span_id] * 3
    assert [list(r.headers) for r in records] == [
        [("traceparent", _traceparent(many))],
        [("traceparent", _traceparent(many))],
        [("traceparent", _traceparent(many))],
        [("traceparent", _traceparent(singles[0]))],
        [("h", b"1"), ("traceparent", _traceparent(singles[1]))],
        [("g", None), ("traceparent", _traceparent(singles[2]))],
    ]
    assert all(s.status.status_code is StatusCode.UNSET for s in (many, batch, *singles))


def _keys(mode: str, call: int, n: int) -> list[bytes | None] | None:
    if mode == "none":
        return None
    if mode == "mixed":  # null keys beside keyed ones: placed record by record
        return [None if i % 3 == 0 else b"k%d-%d" % (call, i % 7) for i in range(n)]
    return [b"k%d-%d" % (call, i % 7) for i in range(n)]


def _to_partition(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    return 0 if key is None else all_partitions[key[-1] % len(all_partitions)]


@pytest.mark.parametrize("keys", ["none", "keyed", "mixed", "partitioner"])
@pytest.mark.parametrize("form", ["send_many", "send_batch", "records", "arrow"])
async def test_every_record_of_a_bulk_call_carries_the_call_spans_context(
    spans: tuple[TracerProvider, InMemorySpanExporter], form: str, keys: str
) -> None:
    """Every form of the bulk path and every way it places a run (sticky partition, keyed
    groups, record by record, a user partitioner; many batches; the first call's run
    waiting for the topic's metadata, the second's placed at once): each record carries the
    trace context of its own call's span, ``tracestate`` too when the trace has one."""
    provider, exporter = spans
    tracer = provider.get_tracer("app")
    n = 300
    # The second call runs in a trace that came in with a tracestate (a remote parent).
    remote = trace.NonRecordingSpan(
        trace.SpanContext(
            0x0AF7651916CD43DD8448EB211C80319C,
            0xB7AD6B7169203331,
            is_remote=True,
            trace_flags=trace.TraceFlags(1),
            trace_state=trace.TraceState([("vendor", "opaque-1")]),
        )
    )
    parents = [None, trace.set_span_in_context(remote)]
    config: dict[str, Any] = {"batch_size": 2048, "tracer_provider": provider}
    if keys == "partitioner":
        config["partitioner"] = _to_partition
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("runs", partitions=3)
        async with Producer(**kafka.client_config(), **config) as producer:
            for call, parent in enumerate(parents):
                values: list[bytes | None] = [b"%d:%03d" % (call, i) + b"x" * 60 for i in range(n)]
                ks = _keys("mixed" if keys == "partitioner" else keys, call, n)
                with tracer.start_as_current_span(f"call-{call}", context=parent):
                    if form == "send_many":
                        await (await producer.send_many("runs", values, keys=ks))
                    elif form == "arrow":
                        cols = column(values), None if ks is None else column(ks)
                        await (await producer.send_many("runs", cols[0], keys=cols[1]))
                    elif form == "send_batch":
                        for fut in await producer.send_batch("runs", values, keys=ks):
                            await fut
                    else:
                        recs = [
                            ProducerRecord(v, None if ks is None else ks[i])
                            for i, v in enumerate(values)
                        ]
                        for fut in await producer.send_batch("runs", recs):
                            await fut
            await producer.flush()
            batches = producer.statistics().batches_sent
        records = [r for p in range(3) for r in kafka.records("runs", p)]
    sent = _named(exporter, "runs send")
    calls = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("call-")}
    assert len(sent) == 2
    by_call = {}
    for span in sent:
        assert span.parent is not None
        (name,) = [c for c, s in calls.items() if s.context.span_id == span.parent.span_id]
        by_call[int(name[-1])] = span
        assert (span.attributes or {})["messaging.batch.message_count"] == n
    expected = {
        0: [("traceparent", _traceparent(by_call[0]))],
        1: [("traceparent", _traceparent(by_call[1])), ("tracestate", b"vendor=opaque-1")],
    }
    assert by_call[1].context.trace_id == remote.get_span_context().trace_id
    assert len(records) == 2 * n
    assert batches >= 20  # 2 KiB batches of ~100-byte records: runs across many batches
    for record in records:
        assert list(record.headers) == expected[int(record.value[:1])], record
    # What a consumer makes of it: the call's span, as the producer's context.
    linked = trace.get_current_span(record_context(records[0])).get_span_context()
    assert linked.span_id == by_call[int(records[0].value[:1])].context.span_id


@pytest.mark.parametrize("traced", [False, True])
async def test_a_bulk_record_is_charged_to_buffer_memory_as_a_send_of_it_is(
    spans: tuple[TracerProvider, InMemorySpanExporter], traced: bool
) -> None:
    # With tracing on, a record's trace headers count in buffer_memory whichever call sent
    # it (send() charges a record's headers; a bulk run charges its headers per record).
    provider, _ = spans
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("mem", partitions=1)
        async with Producer(
            **kafka.client_config(),
            linger_ms=60_000,
            tracer_provider=provider if traced else None,
        ) as producer:
            await producer.send_and_wait("mem", b"warm-up")  # the topic's metadata is known
            assert producer.statistics().buffer_bytes_used == 0
            await producer.send("mem", b"x" * 10)
            one = producer.statistics().buffer_bytes_used
            await producer.send_many("mem", [b"y" * 10] * 50)
            many = producer.statistics().buffer_bytes_used - one
            await producer.flush()
        records = kafka.records("mem", 0)
    header_bytes = sum(len(k) + len(v or b"") + 10 for k, v in records[-1].headers)
    assert bool(header_bytes) is traced
    assert many == 50 * one


async def test_tracing_off_adds_no_headers() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("plain", partitions=1)
        async with Producer(**kafka.client_config()) as producer:
            await producer.send_and_wait("plain", b"v")
        (record,) = await _consume(kafka, "plain", 1)
    assert list(record.headers) == []
