"""The transaction coordinator client against canned responses (no broker).

Why canned: Tansu never answers CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS or
NOT_COORDINATOR (one node, coordinator always loaded), and answers INVALID_PRODUCER_EPOCH
only in some places; the retry and error rules are checked here instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.errors import (
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
)
from aiokafka_ng.producer.txn_coordinator import ConsumerGroupMetadata
from aiokafka_ng.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnResponse
from aiokafka_ng.protocol.messages.end_txn import EndTxnResponse
from aiokafka_ng.protocol.messages.init_producer_id import InitProducerIdResponse
from tests.transactions.fakes import (
    add_partitions_answer,
    client,
    init_ok,
    ok_handler,
    txn_cluster,
    txn_offset_commit_answer,
)

pytestmark = pytest.mark.anyio


async def test_init_producer_id_carries_the_transactional_id_and_timeout() -> None:
    cluster = txn_cluster(ok_handler(pid=42, epoch=3))
    assert await client(cluster).init_producer_id() == (42, 3)
    req, version = cluster.sent[0].request, cluster.sent[0].version
    assert (req.transactional_id, req.transaction_timeout_ms) == ("txn-1", 60000)
    assert (req.producer_id, req.producer_epoch) == (-1, -1)
    assert version == 5  # capped at v5 even though the codec knows more
    assert cluster.lookups == [("txn-1", 1)]  # transaction coordinator: key_type 1


async def test_bump_sends_current_id_and_epoch_on_v3_plus() -> None:
    cluster = txn_cluster(ok_handler(pid=42, epoch=4))
    assert await client(cluster).init_producer_id(42, 3) == (42, 4)
    req = cluster.sent[0].request
    assert (req.producer_id, req.producer_epoch) == (42, 3)


@pytest.mark.parametrize("code", [14, 51])  # COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS
async def test_busy_coordinator_is_retried_with_backoff(code: int) -> None:
    answers = [EndTxnResponse(error_code=code)] * 3 + [EndTxnResponse()]

    def handle(node: int, request: Any, version: int) -> Any:
        return answers.pop(0)

    cluster = txn_cluster(handle)
    c = client(cluster)
    await c.end_txn(7, 0, commit=True)
    assert cluster.names() == ["EndTxn"] * 4
    assert c.retried_codes == {code: 3}
    assert cluster.invalidated == []  # same coordinator: no new lookup
    assert cluster.lookups == [("txn-1", 1)]


@pytest.mark.parametrize("code", [15, 16])  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
async def test_not_coordinator_finds_the_coordinator_again(code: int) -> None:
    cluster = txn_cluster(lambda n, r, v: None)
    cluster.coordinators[("txn-1", 1)] = 1

    def handle(node: int, request: Any, version: int) -> Any:
        if node == 1:
            cluster.coordinators[("txn-1", 1)] = 2  # it moved
            return AddOffsetsToTxnResponse(error_code=code)
        return AddOffsetsToTxnResponse()

    cluster.handler = handle
    await client(cluster).add_offsets(7, 0, "group")
    assert [x.node_id for x in cluster.sent] == [1, 2]
    assert cluster.invalidated == [("txn-1", 1)]
    assert cluster.lookups == [("txn-1", 1), ("txn-1", 1)]


async def test_connection_failure_finds_the_coordinator_again() -> None:
    calls = []

    def handle(node: int, request: Any, version: int) -> Any:
        calls.append(node)
        if len(calls) == 1:
            raise KafkaConnectionError("dropped")
        return init_ok()

    cluster = txn_cluster(handle)
    assert await client(cluster).init_producer_id() == (7, 0)
    assert len(calls) == 2 and cluster.invalidated == [("txn-1", 1)]


@pytest.mark.parametrize("code", [47, 90])  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
async def test_fencing_is_raised_as_producer_fenced(code: int) -> None:
    cluster = txn_cluster(lambda n, r, v: EndTxnResponse(error_code=code))
    with pytest.raises(ProducerFencedError, match="another producer with transactional id"):
        await client(cluster).end_txn(7, 0, commit=False)
    assert len(cluster.sent) == 1  # never retried


async def test_other_errors_are_raised_at_once() -> None:
    cluster = txn_cluster(lambda n, r, v: InitProducerIdResponse(error_code=48))
    with pytest.raises(InvalidTxnStateError):
        await client(cluster).init_producer_id()
    assert len(cluster.sent) == 1


async def test_retries_stop_at_max_block() -> None:
    cluster = txn_cluster(lambda n, r, v: EndTxnResponse(error_code=51))
    with pytest.raises(KafkaTimeoutError, match="ConcurrentTransactionsError"):
        await client(cluster, max_block_s=0.1).end_txn(7, 0, commit=True)
    assert len(cluster.sent) > 3


async def test_add_partitions_batches_all_partitions_in_one_v3_request() -> None:
    cluster = txn_cluster(ok_handler())
    await client(cluster).add_partitions(7, 1, [("b", 0), ("a", 2), ("a", 1)])
    assert len(cluster.sent) == 1
    req, version = cluster.sent[0].request, cluster.sent[0].version
    assert version == 3  # v4+ is the broker-to-broker form
    assert (req.v3_and_below_transactional_id, req.v3_and_below_producer_id) == ("txn-1", 7)
    assert req.v3_and_below_producer_epoch == 1
    assert [(t.name, t.partitions) for t in req.v3_and_below_topics] == [
        ("a", [1, 2]),
        ("b", [0]),
    ]


async def test_add_partitions_failure_names_the_partition_not_the_skipped_ones() -> None:
    def handle(node: int, request: Any, version: int) -> Any:
        resp = add_partitions_answer(request, code=55)  # OPERATION_NOT_ATTEMPTED
        resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code = 29
        return resp

    cluster = txn_cluster(handle)
    with pytest.raises(TopicAuthorizationFailedError, match="a-0"):
        await client(cluster).add_partitions(7, 0, [("a", 0), ("a", 1)])


async def test_txn_offset_commit_goes_to_the_group_coordinator() -> None:
    cluster = txn_cluster(lambda n, r, v: None)
    cluster.coordinators[("grp", 0)] = 5
    answers = ["load", "ok"]

    def handle(node: int, request: Any, version: int) -> Any:
        assert node == 5
        return txn_offset_commit_answer(request, code=14 if answers.pop(0) == "load" else 0)

    cluster.handler = handle
    meta = ConsumerGroupMetadata("grp", generation_id=3, member_id="m-1", group_instance_id="i")
    await client(cluster).txn_offset_commit(
        7, 2, meta, {("in", 1): (10, "md", 4), ("in", 0): (5, "", -1)}
    )
    assert len(cluster.sent) == 2
    req, version = cluster.sent[-1].request, cluster.sent[-1].version
    assert version == 4
    assert (
        req.group_id,
        req.generation_id_or_member_epoch,
        req.member_id,
        req.group_instance_id,
    ) == (
        "grp",
        3,
        "m-1",
        "i",
    )
    assert (req.producer_id, req.producer_epoch, req.transactional_id) == (7, 2, "txn-1")
    parts = [
        (p.partition_index, p.committed_offset, p.committed_metadata, p.committed_leader_epoch)
        for p in req.topics[0].partitions
    ]
    assert parts == [(0, 5, "", -1), (1, 10, "md", 4)]
    assert cluster.lookups == [("grp", 0)]
