"""fence_producers against the real broker (Tansu runs transactions and InitProducerId) and on
the fake broker for per-id errors; abort_transaction and the raft voter operations on the
in-test fake broker (Tansu does not advertise WriteTxnMarkers to clients nor KIP-853's
APIs, TANSU.md). The fake decodes our requests with the codec's server side."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from admin_fake_broker import FakeCluster

from aiokafka_ng import Producer
from aiokafka_ng.admin import AbortTransactionSpec, AdminClient, FencedProducer, TopicPartition
from aiokafka_ng.errors import (
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import add_raft_voter as arv
from aiokafka_ng.protocol.messages import find_coordinator as fc
from aiokafka_ng.protocol.messages import init_producer_id as ipi
from aiokafka_ng.protocol.messages import remove_raft_voter as rrv
from aiokafka_ng.protocol.messages import write_txn_markers as wtm
from aiokafka_ng.testing import LocalBroker
from tests.admin.test_admin_broker import admin_for
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

FIND_COORDINATOR, INIT_PRODUCER_ID, WRITE_TXN_MARKERS, ADD_VOTER, REMOVE_VOTER = 10, 22, 27, 80, 81


def fake_admin(fake: FakeCluster) -> AdminClient:
    return AdminClient(
        bootstrap_servers=fake.bootstrap_servers, retry_backoff_ms=20, retry_backoff_max_ms=50
    )


async def test_fencing_bumps_the_epoch_and_close_stays_bounded(kafka_broker: LocalBroker) -> None:
    # What the fenced instance then sees is not asserted: Tansu closes the connection on a
    # fenced producer's EndTxn instead of answering PRODUCER_FENCED (seen while writing this
    # test), so its abort is never answered. That is the case close(timeout) must bound: it
    # used to wait out request_timeout_ms (30 s) in the abort first.
    tid, topic = topic_name("fence-tx"), topic_name("fence")
    async with admin_for(kafka_broker) as admin:
        # start() and close() in one cancel scope (anyio's rule for the producer's task
        # group); 20 s is well under the 30 s the unbounded abort took.
        with anyio.fail_after(20):
            producer = Producer(
                bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=tid
            )
            await producer.start()
            try:
                producer.begin_transaction()
                await producer.send_and_wait(topic, b"in-flight")
                first = (await admin.fence_producers([tid])).result(tid)
                second = (await admin.fence_producers([tid])).result(tid)
                assert first.producer_id >= 0
                assert second == FencedProducer(first.producer_id, first.producer_epoch + 1)
            finally:
                await producer.close(timeout=1)


async def test_fence_producers_per_id_outcomes_at_their_coordinators() -> None:
    fake = FakeCluster(node_ids=(1, 2))
    seen: list[tuple[int, str | None, int]] = []

    def coordinators(node: int, req: fc.FindCoordinatorRequest, version: int) -> Any:
        assert req.key_type == 1  # transaction coordinators
        return fc.FindCoordinatorResponse(
            coordinators=[
                fc.Coordinator(key=k, node_id=2, host="127.0.0.1", port=fake.ports[2])
                for k in req.coordinator_keys
            ]
        )

    def init(node: int, req: ipi.InitProducerIdRequest, version: int) -> Any:
        seen.append((node, req.transactional_id, req.transaction_timeout_ms))
        if req.transactional_id == "denied":
            return ipi.InitProducerIdResponse(
                error_code=TransactionalIdAuthorizationFailedError.errno
            )
        return ipi.InitProducerIdResponse(producer_id=77, producer_epoch=4)

    fake.handlers[FIND_COORDINATOR] = coordinators
    fake.handlers[INIT_PRODUCER_ID] = init
    async with fake.running(), fake_admin(fake) as admin:
        results = await admin.fence_producers(["tx-a", "denied"], transaction_timeout_ms=30000)
    assert results.result("tx-a") == FencedProducer(77, 4)
    assert isinstance(results["denied"], TransactionalIdAuthorizationFailedError)
    assert sorted(seen) == [(2, "denied", 30000), (2, "tx-a", 30000)]


async def test_abort_transaction_writes_an_abort_marker_at_the_leader() -> None:
    fake = FakeCluster(node_ids=(1, 2), topics={"t": 2}, leaders={("t", 1): 2})
    seen: list[tuple[int, wtm.WriteTxnMarkersRequest]] = []

    def markers(node: int, req: wtm.WriteTxnMarkersRequest, version: int) -> Any:
        seen.append((node, req))
        (m,) = req.markers
        code = ClusterAuthorizationFailedError.errno if m.producer_id == 666 else 0
        return wtm.WriteTxnMarkersResponse(
            markers=[
                wtm.WritableTxnMarkerResult(
                    producer_id=m.producer_id,
                    topics=[
                        wtm.WritableTxnMarkerTopicResult(
                            name=t.name,
                            partitions=[
                                wtm.WritableTxnMarkerPartitionResult(
                                    partition_index=p, error_code=code
                                )
                                for p in t.partition_indexes
                            ],
                        )
                        for t in m.topics
                    ],
                )
            ]
        )

    fake.handlers[WRITE_TXN_MARKERS] = markers
    async with fake.running(), fake_admin(fake) as admin:
        await admin.abort_transaction(AbortTransactionSpec(TopicPartition("t", 1), 42, 3, 9))
        with pytest.raises(ClusterAuthorizationFailedError):
            await admin.abort_transaction(AbortTransactionSpec(TopicPartition("t", 1), 666, 0, 0))
    node, req = seen[0]
    (m,) = req.markers
    assert node == 2  # the partition's leader
    assert (m.producer_id, m.producer_epoch, m.coordinator_epoch) == (42, 3, 9)
    assert m.transaction_result is False  # abort
    assert [(t.name, t.partition_indexes) for t in m.topics] == [("t", [1])]


async def test_raft_voters() -> None:
    fake = FakeCluster()
    added: list[arv.AddRaftVoterRequest] = []
    removed: list[rrv.RemoveRaftVoterRequest] = []

    def add(node: int, req: arv.AddRaftVoterRequest, version: int) -> Any:
        added.append(req)
        return arv.AddRaftVoterResponse()

    def remove(node: int, req: rrv.RemoveRaftVoterRequest, version: int) -> Any:
        removed.append(req)
        return rrv.RemoveRaftVoterResponse(
            error_code=ClusterAuthorizationFailedError.errno, error_message="no"
        )

    fake.handlers[ADD_VOTER] = add
    fake.handlers[REMOVE_VOTER] = remove
    directory = uuid.UUID(int=7)
    async with fake.running(), fake_admin(fake) as admin:
        await admin.add_raft_voter(3003, directory, [("CONTROLLER", "127.0.0.1", 9093)])
        with pytest.raises(ClusterAuthorizationFailedError, match="no"):
            await admin.remove_raft_voter(3003, directory, cluster_id="c1")
    (a,) = added
    assert (a.voter_id, a.voter_directory_id) == (3003, directory)
    assert [(x.name, x.host, x.port) for x in a.listeners] == [("CONTROLLER", "127.0.0.1", 9093)]
    (r,) = removed
    assert (r.voter_id, r.voter_directory_id, r.cluster_id) == (3003, directory, "c1")


async def test_brokers_without_the_apis_name_the_operation() -> None:
    fake = FakeCluster(missing_apis={ADD_VOTER, REMOVE_VOTER})
    async with fake.running(), fake_admin(fake) as admin:
        with pytest.raises(UnsupportedVersionError, match="add_raft_voter"):
            await admin.add_raft_voter(1, uuid.UUID(int=1), [])
        with pytest.raises(UnsupportedVersionError, match="remove_raft_voter"):
            await admin.remove_raft_voter(1, uuid.UUID(int=1))
