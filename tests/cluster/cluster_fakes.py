"""An in-process fake of a broker's Metadata/FindCoordinator answers, for cluster unit tests.

Used where Tansu cannot show a behaviour: it auto-creates every topic a Metadata request
names (TANSU.md), so "topic B never resolves" or "the coordinator is still loading" cannot be
produced by the real broker. The fake plugs in at the pool's ``connector`` seam, so the
Cluster code under test is exactly the production code; only the Connection is replaced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest
from aiokafka_ng.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30


def topic(
    name: str, partitions: int = 3, *, leader: int = 1, epoch: int = 0, error: int = 0
) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=error,
        name=name,
        partitions=[
            MetadataResponsePartition(
                partition_index=i,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=[leader],
                isr_nodes=[leader],
            )
            for i in range(partitions)
        ],
    )


def unknown(name: str) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name)


@dataclass
class Sent:
    api: str
    version: int
    request: Any


class FakeConnection:
    def __init__(self, broker: FakeBroker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.api_versions = dict(broker.api_versions)
        self._closed = anyio.Event()
        self.in_flight = 0
        self.close_reason = ""  # Connection.close_reason: the pool logs it on a drop

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def version_for(self, request_type: type[Any]) -> int:
        _low, high = self.api_versions[request_type.API_KEY]
        return min(high, request_type.MAX_VERSION)

    async def send(
        self,
        request: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  (Connection.send's signature)
        expect_response: bool = True,
        limits: Any = None,  # the decode limits of a real answer; nothing is decoded here
    ) -> Any:
        if self.closed:
            raise KafkaConnectionError(f"{self.host}:{self.port}: closed")
        version = self.version_for(type(request)) if version is None else version
        self.in_flight += 1
        try:
            return await self.broker.handle(self, request, version)
        finally:
            self.in_flight -= 1

    def statistics(self) -> Any:
        return _Stats(self.in_flight)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def aclose(self) -> None:
        self._closed.set()


@dataclass
class _Stats:
    in_flight: int
    submitting: int = 0


class FakeBroker:
    """Answers Metadata from ``topics`` (name -> callable(round) -> topic) and FindCoordinator
    from ``coordinator_codes`` (error codes to answer first, then success)."""

    def __init__(self, node_id: int = 1, host: str = "fake", port: int = 9092) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.api_versions: dict[int, tuple[int, int]] = {
            MetadataRequest.API_KEY: (0, 12),
            FindCoordinatorRequest.API_KEY: (0, 6),
            ApiVersionsRequest.API_KEY: (0, 4),
        }
        self.topics: dict[str, Callable[[int], MetadataResponseTopic]] = {}
        self.sent: list[Sent] = []
        self.connects = 0
        self.refuse: set[tuple[str, int]] = set()  # addresses whose connect fails
        self.connect_error: Exception | None = None  # raised by every connect when set
        self.connect_gate: anyio.Event | None = None  # hold connects until set
        self.metadata_gate: anyio.Event | None = None  # hold Metadata answers until set
        self.metadata_hook: Callable[[list[str]], None] | None = None
        self.coordinator_codes: list[int] = []
        self.coordinator_node = node_id
        self.connections: list[FakeConnection] = []
        self._rounds: dict[str, int] = {}

    def metadata_requests(self) -> list[Sent]:
        return [s for s in self.sent if s.api == "Metadata"]

    @asynccontextmanager
    async def connector(self, host: str, port: int) -> AsyncIterator[FakeConnection]:
        await anyio.lowlevel.checkpoint()
        if self.connect_gate is not None:
            await self.connect_gate.wait()
        if (host, port) in self.refuse:
            raise KafkaConnectionError(f"connecting to {host}:{port}: refused")
        if self.connect_error is not None:
            raise self.connect_error
        self.connects += 1
        conn = FakeConnection(self, host, port)
        self.connections.append(conn)
        try:
            yield conn
        finally:
            await conn.aclose()

    async def handle(self, conn: FakeConnection, request: Any, version: int) -> Any:
        if isinstance(request, MetadataRequest):
            self.sent.append(Sent("Metadata", version, request))
            names = [t.name for t in request.topics or []]
            if self.metadata_hook is not None:
                self.metadata_hook(names)
            if self.metadata_gate is not None:
                await self.metadata_gate.wait()
            topics = []
            for name in names:
                n = self._rounds[name] = self._rounds.get(name, 0) + 1
                make = self.topics.get(name, lambda _n, name=name: unknown(name))
                topics.append(make(n))
            return MetadataResponse(
                brokers=[
                    MetadataResponseBroker(node_id=self.node_id, host=self.host, port=self.port)
                ],
                cluster_id="fake-cluster",
                controller_id=self.node_id,
                topics=topics,
            )
        if isinstance(request, FindCoordinatorRequest):
            self.sent.append(Sent("FindCoordinator", version, request))
            keys = request.coordinator_keys if version >= 4 else [request.key]
            code = self.coordinator_codes.pop(0) if self.coordinator_codes else 0
            node = self.coordinator_node
            if version >= 4:
                return FindCoordinatorResponse(
                    coordinators=[
                        Coordinator(
                            key=k, node_id=node, host=self.host, port=self.port, error_code=code
                        )
                        for k in keys
                    ]
                )
            return FindCoordinatorResponse(
                error_code=code, node_id=node, host=self.host, port=self.port
            )
        raise AssertionError(f"unexpected request {request!r}")
