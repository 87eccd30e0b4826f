"""fence_producers against the real broker (Tansu runs transactions and InitProducerId) and on
FakeKafka for per-id errors (its transaction coordinator answers, one id refused by a
script); abort_transaction and the raft voter operations on FakeKafka with the APIs
scripted (neither Tansu nor FakeKafka offers WriteTxnMarkers to clients nor KIP-853's
APIs, TANSU.md). The fake decodes our requests with the codec's server side."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.admin import AbortTransactionSpec, AdminClient, FencedProducer, TopicPartition
from aiokafka_ng.errors import (
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import add_raft_voter as arv
from aiokafka_ng.protocol.messages import init_producer_id as ipi
from aiokafka_ng.protocol.messages import remove_raft_voter as rrv
from aiokafka_ng.protocol.messages import write_txn_markers as wtm
from aiokafka_ng.testing import FakeKafka, LocalBroker
from aiokafka_ng.testing.fake import Received
from tests.admin.test_admin_broker import admin_for
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

FIND_COORDINATOR, INIT_PRODUCER_ID, WRITE_TXN_MARKERS, ADD_VOTER, REMOVE_VOTER = 10, 22, 27, 80, 81


def fake_admin(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


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
    def denied(call: Received) -> Any:
        return ipi.InitProducerIdResponse(error_code=TransactionalIdAuthorizationFailedError.errno)

    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_admin(kafka) as admin:
        for tid in ("tx-a", "denied"):
            kafka.move_coordinator(tid, 2)
        # The model has no ACLs: the refusal is scripted, for that id only.
        kafka.answer(
            INIT_PRODUCER_ID, denied, match=lambda call: call.request.transactional_id == "denied"
        )
        results = await admin.fence_producers(["tx-a", "denied"], transaction_timeout_ms=30000)
        again = (await admin.fence_producers(["tx-a"])).result("tx-a")
    first = results.result("tx-a")
    assert first.producer_id >= 0
    assert again == FencedProducer(first.producer_id, first.producer_epoch + 1)  # bumped
    assert isinstance(results["denied"], TransactionalIdAuthorizationFailedError)
    seen = [
        (r.node, r.request.transactional_id, r.request.transaction_timeout_ms)
        for r in kafka.received(INIT_PRODUCER_ID)
    ]
    assert sorted(seen[:2]) == [(2, "denied", 30000), (2, "tx-a", 30000)]
    assert kafka.received(FIND_COORDINATOR)[0].request.key_type == 1  # transaction coordinators


async def test_abort_transaction_writes_an_abort_marker_at_the_leader() -> None:
    seen: list[tuple[int, wtm.WriteTxnMarkersRequest]] = []

    def markers(call: Received) -> Any:
        req: wtm.WriteTxnMarkersRequest = call.request
        seen.append((call.node, req))
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

    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.create_topic("t", 2, 1)
        kafka.move_leader("t", 1, 2)
        kafka.answer(WRITE_TXN_MARKERS, markers)
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
    added: list[arv.AddRaftVoterRequest] = []
    removed: list[rrv.RemoveRaftVoterRequest] = []

    def add(call: Received) -> Any:
        req: arv.AddRaftVoterRequest = call.request
        added.append(req)
        return arv.AddRaftVoterResponse()

    def remove(call: Received) -> Any:
        req: rrv.RemoveRaftVoterRequest = call.request
        removed.append(req)
        return rrv.RemoveRaftVoterResponse(
            error_code=ClusterAuthorizationFailedError.errno, error_message="no"
        )

    directory = uuid.UUID(int=7)
    async with FakeKafka(brokers=1, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.answer(ADD_VOTER, add)
        kafka.answer(REMOVE_VOTER, remove)
        await admin.add_raft_voter(3003, directory, [("CONTROLLER", "127.0.0.1", 9093)])
        with pytest.raises(ClusterAuthorizationFailedError, match="no"):
            await admin.remove_raft_voter(3003, directory, cluster_id="c1")
    (a,) = added
    assert (a.voter_id, a.voter_directory_id) == (3003, directory)
    assert [(x.name, x.host, x.port) for x in a.listeners] == [("CONTROLLER", "127.0.0.1", 9093)]
    (r,) = removed
    assert (r.voter_id, r.voter_directory_id, r.cluster_id) == (3003, directory, "c1")


async def test_brokers_without_the_apis_name_the_operation() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, fake_admin(kafka) as admin:
        assert not {ADD_VOTER, REMOVE_VOTER} & set(kafka.api_versions)  # not modelled
        with pytest.raises(UnsupportedVersionError, match="add_raft_voter"):
            await admin.add_raft_voter(1, uuid.UUID(int=1), [])
        with pytest.raises(UnsupportedVersionError, match="remove_raft_voter"):
            await admin.remove_raft_voter(1, uuid.UUID(int=1))
