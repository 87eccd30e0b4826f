"""Reassignments, the metadata quorum, client-metrics resources and unregistering a broker,
on FakeKafka in memory, the APIs scripted with ``FakeKafka.answer``: Tansu is one broker
without these APIs (TANSU.md). The fake decodes our requests with the codec's server side,
so the asserted requests are what went over the wire."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.admin import (
    AdminClient,
    NewPartitionReassignment,
    PartitionReassignment,
    QuorumReplicaState,
    TopicPartition,
)
from aiokafka_ng.errors import (
    BrokerIdNotRegisteredError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    NotControllerError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import alter_partition_reassignments as apr
from aiokafka_ng.protocol.messages import describe_quorum as dq
from aiokafka_ng.protocol.messages import list_config_resources as lcr
from aiokafka_ng.protocol.messages import list_partition_reassignments as lpr
from aiokafka_ng.protocol.messages import unregister_broker as ub
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

ALTER_REASSIGN, LIST_REASSIGN, DESCRIBE_QUORUM, UNREGISTER, LIST_METRICS = 45, 46, 55, 64, 74


def admin_for(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


async def test_alter_reassignments_at_the_controller_with_per_partition_outcomes() -> None:
    seen: list[tuple[int, apr.AlterPartitionReassignmentsRequest]] = []

    def handle(call: Received) -> Any:
        req: apr.AlterPartitionReassignmentsRequest = call.request
        seen.append((call.node, req))
        if len(seen) == 1:  # the first answer: a controller that moved (retried)
            return apr.AlterPartitionReassignmentsResponse(
                error_code=NotControllerError.errno, error_message="moved"
            )
        codes = {
            0: 0,
            1: InvalidReplicaAssignmentError.errno,
            2: NoReassignmentInProgressError.errno,
        }
        return apr.AlterPartitionReassignmentsResponse(
            responses=[
                apr.ReassignableTopicResponse(
                    name=t.name,
                    partitions=[
                        apr.ReassignablePartitionResponse(
                            partition_index=p.partition_index, error_code=codes[p.partition_index]
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        )

    async with FakeKafka(brokers=3, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.move_controller(3)
        kafka.create_topic("t", 3)
        kafka.answer(ALTER_REASSIGN, handle)
        results = await admin.alter_partition_reassignments({
            ("t", 0): NewPartitionReassignment([2, 3]),
            ("t", 1): NewPartitionReassignment([9]),
            ("t", 2): None,
        })  # fmt: skip
    assert results.succeeded == {TopicPartition("t", 0): None}
    assert isinstance(results[TopicPartition("t", 1)], InvalidReplicaAssignmentError)
    assert isinstance(results[TopicPartition("t", 2)], NoReassignmentInProgressError)
    assert len(seen) == 2 and {node for node, _ in seen} == {3}
    (topic,) = seen[-1][1].topics
    assert [(p.partition_index, p.replicas) for p in topic.partitions] == [
        (0, [2, 3]),
        (1, [9]),
        (2, None),  # cancel
    ]


async def test_list_reassignments_all_or_some() -> None:
    asked: list[Any] = []

    def handle(call: Received) -> Any:
        req: lpr.ListPartitionReassignmentsRequest = call.request
        asked.append(
            None if req.topics is None else [(t.name, t.partition_indexes) for t in req.topics]
        )
        return lpr.ListPartitionReassignmentsResponse(
            topics=[
                lpr.OngoingTopicReassignment(
                    name="t",
                    partitions=[
                        lpr.OngoingPartitionReassignment(
                            partition_index=1,
                            replicas=[1, 2, 3],
                            adding_replicas=[3],
                            removing_replicas=[1],
                        )
                    ],
                )
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(LIST_REASSIGN, handle)
        every = await admin.list_partition_reassignments()
        await admin.list_partition_reassignments([("t", 1), ("t", 0), ("u", 4)])
    assert every == {TopicPartition("t", 1): PartitionReassignment([1, 2, 3], [3], [1])}
    assert asked == [None, [("t", [1, 0]), ("u", [4])]]


async def test_describe_metadata_quorum() -> None:
    def handle(call: Received) -> Any:
        req: dq.DescribeQuorumRequest = call.request
        ((topic, partition),) = [
            (t.topic_name, p.partition_index) for t in req.topics for p in t.partitions
        ]
        assert (topic, partition) == ("__cluster_metadata", 0)
        return dq.DescribeQuorumResponse(
            topics=[
                dq.DescribeQuorumResponseTopicData(
                    topic_name=topic,
                    partitions=[
                        dq.DescribeQuorumResponsePartitionData(
                            leader_id=3000,
                            leader_epoch=7,
                            high_watermark=1234,
                            current_voters=[
                                dq.ReplicaState(
                                    replica_id=3000,
                                    log_end_offset=1234,
                                    last_fetch_timestamp=10,
                                    last_caught_up_timestamp=11,
                                ),
                                dq.ReplicaState(replica_id=3001, log_end_offset=1200),
                            ],
                            observers=[dq.ReplicaState(replica_id=1, log_end_offset=1230)],
                        )
                    ],
                )
            ],
            nodes=[
                dq.Node(
                    node_id=3000,
                    listeners=[dq.Listener(name="CONTROLLER", host="127.0.0.1", port=9093)],
                )
            ],
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(DESCRIBE_QUORUM, handle)
        quorum = await admin.describe_metadata_quorum()
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (3000, 7, 1234)
    assert quorum.voters == [
        QuorumReplicaState(3000, 1234, 10, 11),
        QuorumReplicaState(3001, 1200, None, None),
    ]
    assert quorum.observers == [QuorumReplicaState(1, 1230, None, None)]
    assert quorum.nodes == {3000: [("CONTROLLER", "127.0.0.1", 9093)]}


async def test_client_metrics_resources_and_unregister_broker() -> None:
    def metrics(call: Received) -> Any:
        return lcr.ListConfigResourcesResponse(
            config_resources=[
                lcr.ConfigResource(resource_name="slow-apps"),
                lcr.ConfigResource(resource_name="all"),
            ]
        )

    unregistered: list[int] = []

    def unregister(call: Received) -> Any:
        req: ub.UnregisterBrokerRequest = call.request
        unregistered.append(req.broker_id)
        code = 0 if req.broker_id == 4 else BrokerIdNotRegisteredError.errno
        return ub.UnregisterBrokerResponse(error_code=code)

    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(LIST_METRICS, metrics)
        kafka.answer(UNREGISTER, unregister)
        assert await admin.list_client_metrics_resources() == ["all", "slow-apps"]
        await admin.unregister_broker(4)
        with pytest.raises(BrokerIdNotRegisteredError):
            await admin.unregister_broker(5)
    assert unregistered == [4, 5]


async def test_brokers_without_the_apis_name_the_operation() -> None:
    # FakeKafka models none of them: it advertises none unless a test scripts one.
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        assert not {ALTER_REASSIGN, LIST_REASSIGN, DESCRIBE_QUORUM, UNREGISTER, LIST_METRICS} & set(
            kafka.api_versions
        )
        with pytest.raises(UnsupportedVersionError, match="describe_metadata_quorum"):
            await admin.describe_metadata_quorum()
        with pytest.raises(UnsupportedVersionError, match="list_partition_reassignments"):
            await admin.list_partition_reassignments()
        with pytest.raises(UnsupportedVersionError, match="list_client_metrics_resources"):
            await admin.list_client_metrics_resources()
