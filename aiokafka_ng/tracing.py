"""OpenTelemetry tracing of the producer and the consumer (the ``tracing`` extra).

Turned on per client with ``tracer_provider=`` (an OpenTelemetry ``TracerProvider``; pass
``opentelemetry.trace.get_tracer_provider()`` for the global one)::

    Producer(bootstrap_servers=..., tracer_provider=provider)
    Consumer("orders", bootstrap_servers=..., tracer_provider=provider)

What is traced, and how it meets the OpenTelemetry Kafka instrumentations
(``opentelemetry-instrumentation-aiokafka`` and ``-confluent-kafka``), so that one trace
crosses our client, aiokafka and confluent-kafka:

* ``send()``: a PRODUCER span ``"<topic> send"``, child of the caller's current span,
  started when ``send()`` is called and ended when the record is acknowledged (with its
  partition and offset) or fails (status ERROR, the exception recorded, ``error.type``).
  Its context goes into the record's headers through the globally configured propagator
  (W3C ``traceparent``, and ``tracestate``/``baggage`` when there are any): header values
  are the propagator's strings encoded as UTF-8, as both instrumentations write and read
  them. Headers of the same names the caller passed are replaced, not doubled: the record's
  creation context is this send's.
* ``send_batch()`` / ``send_many()`` (Arrow columns included): one PRODUCER span for the
  call (``messaging.batch.message_count``), ended when every record is decided. Its context
  is injected once, into one header list, and every record of the call carries those
  headers, in the same format as ``send()``'s: the bulk path writes that constant header
  set on each record of a run (``RecordBatchBuilder.append_run``), so a consumer links each
  record to the call's span. A ``send_batch()`` that goes record by record through
  ``send()`` (ProducerRecords, one of them with headers, a partition or a timestamp of its
  own) gives each record a span of its own, a child of the call's, whose context the record
  carries: a record's own headers are kept and a ``traceparent`` among them replaced, as
  for any ``send()``.
* ``getone()`` / iteration of a ``Consumer``: a CONSUMER span ``"<topic> receive"`` per
  record handed out, child of the producer's context found in the record's headers (as
  aiokafka's instrumentation makes it) and linked to it (as confluent-kafka's does).
  ``getmany()``: one CONSUMER span for the call, linked to each record's producer context
  (as confluent-kafka's ``consume``), child of the caller's span; so does a
  ``ShareConsumer``'s ``poll()`` (and its iteration, which polls). A consumer span ends
  when the records are handed out; the application's own processing spans take
  :func:`record_context` as parent.

Attributes follow the messaging semantic conventions: ``messaging.system=kafka``,
``messaging.operation.name``/``.type``, ``messaging.destination.name``,
``messaging.destination.partition.id``, ``messaging.kafka.offset``, ``messaging.client.id``,
``messaging.kafka.message.key`` (a str key, or UTF-8 bytes; other keys' ``str()``),
``messaging.kafka.message.tombstone``, ``messaging.consumer.group.name``, ``server.address``
and ``server.port`` (the first bootstrap server, as confluent-kafka's instrumentation does).
Span names are the instrumentations' (``"<topic> send"``), not the newer convention's
``"send <topic>"``, so a trace reads the same whichever client made each span.

Cost: with tracing off a client does one attribute check per ``send()``, per bulk call and
per record handed out, nothing else (the compiled send path stays as it is, and a bulk run
writes no headers). With it on, ``send()`` takes the Python path (the record has headers)
and a span is made per record; a bulk call makes one span and encodes its headers once per
batch it fills, and its records stay on the bulk path.

Only ``opentelemetry-api`` is needed here; this module is imported when a client is given a
``tracer_provider``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

__all__ = ["ConsumerTracing", "ProducerTracing", "TraceHeaders", "record_context"]

_INSTRUMENTATION = "aiokafka_ng"
_T = TypeVar("_T")

Headers = Sequence[tuple[str, bytes | None]]


# The clients' types, structurally: this module is imported by the producer and the
# consumers, and imports none of them (nor their configs) back.
class _Record(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> Any: ...
    @property
    def value(self) -> Any: ...
    @property
    def headers(self) -> Headers: ...


_Future = Any  # a DeliveryFuture or a BatchDelivery (asyncio-future-like)


class TraceHeaders(list[tuple[str, bytes | None]]):
    """A record's headers with its trace context in them: the list ``send()`` is given by
    :meth:`ProducerTracing.send`, and by which it knows the record is already traced."""

    __slots__ = ()


class _HeaderSetter(Setter[TraceHeaders]):
    def set(self, carrier: TraceHeaders, key: str, value: str) -> None:
        carrier.append((key, value.encode()))


class _HeaderGetter(Getter[Headers]):
    def get(self, carrier: Headers, key: str) -> list[str] | None:
        for name, value in carrier:
            if name == key and value is not None:
                # Not ours to fail a hand-out over: a value that is not UTF-8 is not a
                # context the propagator would accept anyway.
                return [value.decode(errors="replace")]
        return None

    def keys(self, carrier: Headers) -> list[str]:
        return [name for name, _ in carrier]


_SETTER = _HeaderSetter()
_GETTER = _HeaderGetter()


def record_context(record: _Record) -> Context:
    """The trace context the record's producer sent in its headers (an empty context when
    there is none): the parent for the application's processing span, e.g.
    ``tracer.start_as_current_span("handle", context=record_context(record))``."""
    return propagate.extract(record.headers, getter=_GETTER)


def _key_text(key: Any) -> str | None:
    if key is None:
        return None
    if isinstance(key, bytes | bytearray | memoryview):
        try:
            return bytes(key).decode()
        except UnicodeDecodeError:
            return None  # binary keys: their repr would be noise, not an identifier
    return str(key)


def _client_attributes(client_id: str | None, bootstrap_servers: str | list[str]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"messaging.system": "kafka"}
    if client_id:
        attrs["messaging.client.id"] = client_id
    servers = bootstrap_servers
    if isinstance(servers, str):
        servers = servers.split(",")
    first = servers[0].strip() if servers else ""
    host, sep, port = first.rpartition(":")
    if sep and port.isdigit():
        attrs["server.address"] = host.strip("[]")
        attrs["server.port"] = int(port)
    elif first:
        attrs["server.address"] = first
    return attrs


def _tracer(provider: Any) -> trace.Tracer:
    # The version from the imported package root, not an import of it: the root imports
    # every client, and the clients import this module (the layers allow no edge up).
    version = str(getattr(sys.modules.get("aiokafka_ng"), "__version__", "unknown"))
    return trace.get_tracer(_INSTRUMENTATION, version, tracer_provider=provider)


def _type_name(exc: BaseException) -> str:
    """``error.type`` of an exception: its fully qualified type name (the convention's)."""
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def _failed(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", _type_name(exc))
    span.set_status(Status(StatusCode.ERROR, str(exc)))


class ProducerTracing:
    """The producer's spans (see the module docstring); made by ``Producer()`` when its
    config has a ``tracer_provider``."""

    #: The header list of a record whose span is started: ``Producer.send`` checks for it.
    carrier = TraceHeaders

    def __init__(self, config: Any, send: Callable[..., Awaitable[_Future]]) -> None:
        self._send = send  # the producer's send(), which sends a traced record as it is
        self._tracer = _tracer(config.tracer_provider)
        self._attrs = _client_attributes(config.client_id, config.bootstrap_servers)
        self._attrs["messaging.operation.name"] = "send"
        self._attrs["messaging.operation.type"] = "send"

    async def send(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Iterable[tuple[str, bytes | None]] | None,
    ) -> _Future:
        """The producer's ``send()`` inside a PRODUCER span that ends when the record is
        decided; the span's context goes in the record's headers."""
        attrs = dict(self._attrs)
        attrs["messaging.destination.name"] = topic
        if partition is not None:
            attrs["messaging.destination.partition.id"] = str(partition)
        key_text = _key_text(key)
        if key_text is not None:
            attrs["messaging.kafka.message.key"] = key_text
        if value is None:
            attrs["messaging.kafka.message.tombstone"] = True
        span = self._tracer.start_span(f"{topic} send", kind=SpanKind.PRODUCER, attributes=attrs)
        carrier = TraceHeaders()
        try:
            propagate.inject(carrier, context=trace.set_span_in_context(span), setter=_SETTER)
            if headers:
                # The caller's headers first, less those the propagator wrote (a record
                # forwarded with its old context gets this send's); malformed ones are
                # left for send() to reject.
                injected = {name for name, _ in carrier}
                carrier[:0] = [h for h in headers if not _named(h, injected)]
            fut = await self._send(topic, value, key, partition, timestamp_ms, carrier)
        except BaseException as exc:
            _failed(span, exc)
            span.end()
            raise
        fut.add_done_callback(lambda f: _end_send(span, f))
        return fut

    async def bulk(self, topic: str, call: Callable[[TraceHeaders], Awaitable[_T]]) -> _T:
        """A ``send_batch``/``send_many`` call inside one PRODUCER span, ended when every
        record of it is decided: ``call`` is given the span's context as headers, which
        every record of its run carries; sends made meanwhile (records with headers of
        their own) are its children."""
        attrs = dict(self._attrs)
        attrs["messaging.destination.name"] = topic
        span = self._tracer.start_span(f"{topic} send", kind=SpanKind.PRODUCER, attributes=attrs)
        try:
            headers = TraceHeaders()
            propagate.inject(headers, context=trace.set_span_in_context(span), setter=_SETTER)
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                result = await call(headers)
        except BaseException as exc:
            _failed(span, exc)
            span.end()
            raise
        futures: list[Any] = result if isinstance(result, list) else [result]
        _BulkEnd(span, futures)
        return result


def _named(header: Any, names: set[str]) -> bool:
    return isinstance(header, tuple) and len(header) == 2 and header[0] in names


def _end_send(span: trace.Span, fut: _Future) -> None:
    if fut.cancelled():
        span.set_attribute("error.type", "cancelled")
        span.set_status(Status(StatusCode.ERROR, "cancelled"))
    else:
        exc = fut.exception()
        if exc is not None:
            _failed(span, exc)
        else:
            md = fut.result()
            span.set_attribute("messaging.destination.partition.id", str(md.partition))
            if md.offset >= 0:
                span.set_attribute("messaging.kafka.offset", md.offset)
    span.end()


class _BulkEnd:
    """Ends a bulk call's span once all of its futures (one ``BatchDelivery``, or one
    future per record) are decided."""

    __slots__ = ("failed", "futures", "left", "span")

    def __init__(self, span: trace.Span, futures: list[_Future]) -> None:
        self.span = span
        self.futures = futures
        self.left = len(futures)
        self.failed = 0
        count = sum(getattr(f, "count", 1) for f in futures)
        span.set_attribute("messaging.batch.message_count", count)
        if not futures:
            span.end()
        for fut in futures:
            fut.add_done_callback(self.done)

    def done(self, fut: Any) -> None:
        if fut.cancelled():
            self.failed += 1
        elif hasattr(fut, "failed"):  # a BatchDelivery counts its failed records
            self.failed += fut.failed
        elif fut.exception() is not None:
            self.failed += 1
        self.left -= 1
        if self.left:
            return
        span = self.span
        if self.failed:
            first = next(
                (f.exception() for f in self.futures if not f.cancelled() and f.exception()),
                None,
            )
            span.set_attribute("error.type", _type_name(first) if first else "cancelled")
            span.set_status(Status(StatusCode.ERROR, f"{self.failed} record(s) failed"))
        span.end()
        self.futures = []


class ConsumerTracing:
    """The consumer's spans (see the module docstring); made by ``Consumer()`` when its
    config has a ``tracer_provider``."""

    def __init__(self, config: Any) -> None:
        self._tracer = _tracer(config.tracer_provider)
        attrs = _client_attributes(config.client_id, config.bootstrap_servers)
        if config.group_id is not None:
            attrs["messaging.consumer.group.name"] = config.group_id
        attrs["messaging.operation.name"] = "receive"
        attrs["messaging.operation.type"] = "receive"
        self._attrs = attrs

    def received(self, record: _Record) -> None:
        """One record handed out: a CONSUMER span, child of and linked to its producer's."""
        attrs = dict(self._attrs)
        topic = record.topic
        attrs["messaging.destination.name"] = topic
        attrs["messaging.destination.partition.id"] = str(record.partition)
        attrs["messaging.kafka.offset"] = record.offset
        key_text = _key_text(record.key)
        if key_text is not None:
            attrs["messaging.kafka.message.key"] = key_text
        if record.value is None:
            attrs["messaging.kafka.message.tombstone"] = True
        parent = propagate.extract(record.headers, getter=_GETTER)
        sent = trace.get_current_span(parent).get_span_context()
        links = [Link(sent)] if sent.is_valid else None
        span = self._tracer.start_span(
            f"{topic} receive",
            context=parent if sent.is_valid else None,
            kind=SpanKind.CONSUMER,
            attributes=attrs,
            links=links,
        )
        span.end()

    def received_many(self, batches: Iterable[Sequence[Any]]) -> None:
        """Records handed out together (``getmany()``'s lists, a share consumer's
        ``poll()``): one CONSUMER span linked to each record's producer."""
        attrs = dict(self._attrs)
        topics: set[str] = set()
        partitions: set[int] = set()
        links: list[Link] = []
        count = 0
        for batch in batches:
            count += len(batch)
            for record in batch:
                topics.add(record.topic)
                partitions.add(record.partition)
                parent = propagate.extract(record.headers, getter=_GETTER)
                sent = trace.get_current_span(parent).get_span_context()
                if sent.is_valid:
                    links.append(Link(sent))
        names = sorted(topics)
        if len(names) == 1:
            attrs["messaging.destination.name"] = names[0]
            if len(partitions) == 1:
                attrs["messaging.destination.partition.id"] = str(partitions.pop())
        attrs["messaging.batch.message_count"] = count
        span = self._tracer.start_span(
            f"{', '.join(names)} receive", kind=SpanKind.CONSUMER, attributes=attrs, links=links
        )
        span.end()
