"""Replica log directories (KIP-113) on FakeKafka in memory, both APIs scripted: neither
Tansu (TANSU.md) nor FakeKafka models DescribeLogDirs or AlterReplicaLogDirs. The fake
decodes our requests with the codec's server side."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.admin import AdminClient, ReplicaLogDirInfo, TopicPartitionReplica
from aiokafka_ng.errors import (
    ClusterAuthorizationFailedError,
    LogDirNotFoundError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import alter_replica_log_dirs as arl
from aiokafka_ng.protocol.messages import describe_log_dirs as dld
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

ALTER, DESCRIBE = 34, 35


def admin_for(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


async def test_describe_finds_current_and_future_replicas_per_broker() -> None:
    def handle(call: Received) -> Any:
        node = call.node
        if node == 3:
            return dld.DescribeLogDirsResponse(error_code=ClusterAuthorizationFailedError.errno)
        moving = dld.DescribeLogDirsTopic(
            name="t", partitions=[dld.DescribeLogDirsPartition(0, 100, 5, node == 1)]
        )
        settled = dld.DescribeLogDirsTopic(
            name="t", partitions=[dld.DescribeLogDirsPartition(0, 100, 0, False)]
        )
        return dld.DescribeLogDirsResponse(
            results=[
                dld.DescribeLogDirsResult(log_dir=f"/a{node}", topics=[settled]),
                dld.DescribeLogDirsResult(
                    log_dir=f"/b{node}", topics=[moving] if node == 1 else []
                ),
            ]
        )

    r1, r2, r3 = (TopicPartitionReplica("t", 0, b) for b in (1, 2, 3))
    missing = TopicPartitionReplica("u", 7, 2)
    async with FakeKafka(brokers=3, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(DESCRIBE, handle)
        results = await admin.describe_replica_log_dirs([r1, r2, r3, missing])
    assert results.result(r1) == ReplicaLogDirInfo("/a1", 0, "/b1", 5)  # moving to /b1
    assert results.result(r2) == ReplicaLogDirInfo("/a2", 0, None, -1)
    assert results.result(missing) == ReplicaLogDirInfo(None, -1, None, -1)
    assert isinstance(results[r3], ClusterAuthorizationFailedError)
    assert sorted({r.node for r in kafka.received(DESCRIBE)}) == [1, 2, 3]


async def test_alter_sends_each_broker_its_replicas() -> None:
    seen: dict[int, arl.AlterReplicaLogDirsRequest] = {}

    def handle(call: Received) -> Any:
        req: arl.AlterReplicaLogDirsRequest = call.request
        seen[call.node] = req
        return arl.AlterReplicaLogDirsResponse(
            results=[
                arl.AlterReplicaLogDirTopicResult(
                    topic_name=t.name,
                    partitions=[
                        arl.AlterReplicaLogDirPartitionResult(
                            partition_index=p,
                            error_code=LogDirNotFoundError.errno if d.path == "/nope" else 0,
                        )
                        for p in t.partitions
                    ],
                )
                for d in req.dirs
                for t in d.topics
            ]
        )

    a, b, c = (
        TopicPartitionReplica("t", 0, 1),
        TopicPartitionReplica("t", 1, 1),
        TopicPartitionReplica("t", 0, 2),
    )
    async with FakeKafka(brokers=2, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(ALTER, handle)
        results = await admin.alter_replica_log_dirs({a: "/b1", b: "/b1", c: "/nope"})
    assert results.succeeded == {a: None, b: None}
    assert isinstance(results[c], LogDirNotFoundError)
    assert [(d.path, [(t.name, t.partitions) for t in d.topics]) for d in seen[1].dirs] == [
        ("/b1", [("t", [0, 1])])
    ]
    assert [(d.path, [(t.name, t.partitions) for t in d.topics]) for d in seen[2].dirs] == [
        ("/nope", [("t", [0])])
    ]


async def test_a_broker_without_the_api_names_the_operation() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        assert ALTER not in kafka.api_versions  # not modelled, so not advertised
        with pytest.raises(UnsupportedVersionError, match="alter_replica_log_dirs"):
            await admin.alter_replica_log_dirs({("t", 0, 1): "/x"})
