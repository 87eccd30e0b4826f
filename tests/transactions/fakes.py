"""A fake transaction/group coordinator for canned-response tests (no broker).

``FakeCluster`` answers ``coordinator()`` from a table that tests can change (to simulate a
moved coordinator), and hands out ``FakeConn`` objects whose ``send`` calls the test's
handler with ``(node_id, request, version)``. The handler returns a response object or
raises (e.g. a ``KafkaConnectionError``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio

from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.txn_coordinator import TxnCoordinatorClient
from aiokafka_ng.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnResponse
from aiokafka_ng.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from aiokafka_ng.protocol.messages.end_txn import EndTxnResponse
from aiokafka_ng.protocol.messages.init_producer_id import InitProducerIdResponse
from aiokafka_ng.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

Handler = Callable[[int, Any, int], Any]


class FakeConn:
    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def version_for(self, request_type: type[Any]) -> int:
        return int(request_type.MAX_VERSION)

    async def send(
        self,
        request: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the Connection.send signature)
    ) -> Any:
        await anyio.lowlevel.checkpoint()
        assert version is not None
        # Every request must survive a round trip through the codec at the version chosen.
        request = type(request).decode(request.encode(version), version)
        self.cluster.sent.append((self.node_id, request, version))
        response = self.cluster.handler(self.node_id, request, version)
        if inspect.isawaitable(response):  # a handler may hold the answer back
            response = await response
        return response


class FakeCluster:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.coordinators: dict[tuple[str, int], int] = {}
        self.default_node = 1
        self.lookups: list[tuple[str, int]] = []
        self.invalidated: list[tuple[str, int]] = []
        self.sent: list[tuple[int, Any, int]] = []
        self._cache: dict[tuple[str, int], int] = {}

    async def coordinator(self, key: str, key_type: int = 0) -> int:
        cached = self._cache.get((key, key_type))
        if cached is not None:
            return cached
        self.lookups.append((key, key_type))
        node = self._cache[(key, key_type)] = self.coordinators.get(
            (key, key_type), self.default_node
        )
        return node

    def invalidate_coordinator(self, key: str, key_type: int = 0) -> None:
        self.invalidated.append((key, key_type))
        self._cache.pop((key, key_type), None)

    async def connection(self, node_id: int) -> FakeConn:
        return FakeConn(self, node_id)

    async def coordinator_connection(self, node_id: int) -> FakeConn:
        return await self.connection(node_id)

    def names(self) -> list[str]:
        return [type(r).__name__.removesuffix("Request") for _, r, _ in self.sent]


def client(cluster: FakeCluster, *, max_block_s: float = 5.0) -> TxnCoordinatorClient:
    return TxnCoordinatorClient(
        cluster,
        "txn-1",
        transaction_timeout_ms=60000,
        retry_backoff=ExponentialBackoff(1, 5),
        request_timeout_s=1.0,
        max_block_s=max_block_s,
    )


# ---------------------------------------------------------------------- canned answers


def init_ok(pid: int = 7, epoch: int = 0) -> InitProducerIdResponse:
    return InitProducerIdResponse(producer_id=pid, producer_epoch=epoch)


def add_partitions_answer(request: AddPartitionsToTxnRequest, code: int = 0) -> Any:
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.v3_and_below_topics
        ]
    )


def txn_offset_commit_answer(request: TxnOffsetCommitRequest, code: int = 0) -> Any:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def ok_handler(pid: int = 7, epoch: int = 0) -> Handler:
    """A coordinator that accepts everything."""

    def handle(node: int, request: Any, version: int) -> Any:
        name = type(request).__name__
        if name == "InitProducerIdRequest":
            return init_ok(pid, epoch)
        if name == "AddPartitionsToTxnRequest":
            return add_partitions_answer(request)
        if name == "AddOffsetsToTxnRequest":
            return AddOffsetsToTxnResponse()
        if name == "TxnOffsetCommitRequest":
            return txn_offset_commit_answer(request)
        if name == "EndTxnRequest":
            return EndTxnResponse()
        raise AssertionError(f"unexpected {name}")

    return handle
