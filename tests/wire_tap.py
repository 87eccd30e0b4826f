"""A tap on a client's in-memory connections to a FakeKafka: every request the client wrote (to
which node, at which version), what it had in flight on each connection, which partitions
its Produce requests named, and the errors it was answered.

It wraps :meth:`FakeKafka.transport` (the public ``transport`` setting of our clients), so it
sees the wire as the client wrote and read it; FakeKafka answers one request at a time per
connection (as Kafka mutes a connection), so the client's pipelined requests wait there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from aiokafka_ng.protocol.framing import (
    FrameReader,
    decode_request,
    decode_response,
    peek_correlation_id,
)
from aiokafka_ng.protocol.messages import RESPONSE_TYPES
from aiokafka_ng.testing import FakeKafka

PRODUCE = 0


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as the client wrote it."""

    node: int
    request: Any
    version: int

    @property
    def name(self) -> str:
        """The request's type without the ``Request`` suffix (``"EndTxn"``)."""
        return type(self.request).__name__.removesuffix("Request")


class TappedConnection(anyio.abc.ByteStream):
    """One connection: requests written and not yet answered (by correlation id)."""

    def __init__(self, tap: WireTap, node: int, inner: anyio.abc.ByteStream) -> None:
        self.tap = tap
        self.node = node
        self.inner = inner
        self.closed = False
        self.pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self._out = FrameReader(1 << 30)
        self._in = FrameReader(1 << 30)

    @property
    def in_flight(self) -> int:
        return 0 if self.closed else len(self.pending)

    async def send(self, item: bytes) -> None:
        self._out.feed(item)
        while (frame := self._out.next_frame()) is not None:
            header, request = decode_request(frame)
            self.tap.sent.append(Sent(self.node, request, header.api_version))
            if header.api_key == PRODUCE:
                if getattr(request, "acks", 1) == 0:
                    continue  # never answered
                for t in request.topic_data:  # type: ignore[attr-defined]
                    name = t.name or self.tap.kafka.topic_name(t.topic_id)
                    for p in t.partition_data:
                        self.tap.produce_requests[(name, p.index)] += 1
            self.pending[header.correlation_id] = (header.api_key, header.api_version)
        self.tap.max_in_flight = max(self.tap.max_in_flight, len(self.pending))
        await self.inner.send(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            data = await self.inner.receive(max_bytes)
        except BaseException:
            self.closed = True
            raise
        self._in.feed(data)
        while (frame := self._in.next_frame()) is not None:
            api_key, version = self.pending.pop(peek_correlation_id(frame))
            if api_key == PRODUCE:
                _, response = decode_response(RESPONSE_TYPES[PRODUCE], version, frame)
                for t in response.responses:  # type: ignore[attr-defined]
                    for p in t.partition_responses:
                        if p.error_code:
                            self.tap.produce_errors[p.error_code] += 1
        return data

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


class WireTap:
    """Use :meth:`client_config` instead of ``kafka.client_config()``."""

    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka
        self.connections: list[TappedConnection] = []
        #: The most requests one connection ever had awaiting answers.
        self.max_in_flight = 0
        #: Produce requests that named each (topic, partition).
        self.produce_requests: Counter[tuple[str | None, int]] = Counter()
        #: Partition errors in Produce answers, by error code.
        self.produce_errors: Counter[int] = Counter()
        #: Every request written, in order.
        self.sent: list[Sent] = []

    def requests(self, *names: str) -> list[Sent]:
        """The requests written named ``names`` (``"EndTxn"``; all if none), in order."""
        return [s for s in self.sent if not names or s.name in names]

    def client_config(self) -> dict[str, Any]:
        return {**self.kafka.client_config(), "transport": self.transport}

    async def transport(self, host: str, port: int) -> anyio.abc.ByteStream:
        inner = await self.kafka.transport(host, port)
        node = next(n for n, fake in self.kafka.nodes.items() if fake.port == port)
        conn = TappedConnection(self, node, inner)
        self.connections.append(conn)
        return conn

    def open_connections(self) -> list[TappedConnection]:
        return [c for c in self.connections if not c.closed]
