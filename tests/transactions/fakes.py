"""A scripted transaction/group coordinator for canned-response tests (no broker).

``txn_cluster(handler)`` is a :class:`~aiokafka_ng.testing.ScriptedCluster` whose
``coordinator()`` answers from its ``coordinators`` table (tests change it to simulate a moved
coordinator) and whose requests go to the test's handler as ``(node_id, request, version)``.
The handler returns a response object or raises (e.g. a ``KafkaConnectionError``).
"""

from __future__ import annotations

from typing import Any

from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.txn_coordinator import TxnCoordinatorClient
from aiokafka_ng.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aiokafka_ng.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from aiokafka_ng.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from aiokafka_ng.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokafka_ng.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing import ScriptedCluster
from aiokafka_ng.testing.scripted import Handler

# Version 6 of InitProducerId and TxnOffsetCommit is not yet stable: pinned, the
# tests see the version a broker advertising the newest would get.
_VERSIONS: dict[type[ApiMessage], int] = {
    t: t.MAX_VERSION
    for t in (
        InitProducerIdRequest,
        AddPartitionsToTxnRequest,
        AddOffsetsToTxnRequest,
        TxnOffsetCommitRequest,
        EndTxnRequest,
    )
}


def txn_cluster(handler: Handler) -> ScriptedCluster:
    """A scripted cluster whose every request goes to ``handler``, round-tripped through
    the codec at the highest version of its type first; coordinators on node 1."""
    return ScriptedCluster(handler=handler, versions=dict(_VERSIONS), codec_check=True)


def client(cluster: ScriptedCluster, *, max_block_s: float = 5.0) -> TxnCoordinatorClient:
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
