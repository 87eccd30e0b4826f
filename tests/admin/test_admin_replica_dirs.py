"""Replica log directories (KIP-113) on the in-test fake broker: Tansu does not advertise
DescribeLogDirs nor AlterReplicaLogDirs (TANSU.md). The fake decodes our requests with the
codec's server side."""

from __future__ import annotations

from typing import Any

import pytest
from admin_fake_broker import FakeCluster

from aiokafka_ng.admin import AdminClient, ReplicaLogDirInfo, TopicPartitionReplica
from aiokafka_ng.errors import (
    ClusterAuthorizationFailedError,
    LogDirNotFoundError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import alter_replica_log_dirs as arl
from aiokafka_ng.protocol.messages import describe_log_dirs as dld

pytestmark = pytest.mark.anyio

ALTER, DESCRIBE = 34, 35


def admin_for(fake: FakeCluster) -> AdminClient:
    return AdminClient(
        bootstrap_servers=fake.bootstrap_servers, retry_backoff_ms=20, retry_backoff_max_ms=50
    )


async def test_describe_finds_current_and_future_replicas_per_broker() -> None:
    fake = FakeCluster(node_ids=(1, 2, 3))

    def handle(call: Received) -> Any:
        req: dld.DescribeLogDirsRequest = call.request
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

    fake.handlers[DESCRIBE] = handle
    r1, r2, r3 = (TopicPartitionReplica("t", 0, b) for b in (1, 2, 3))
    missing = TopicPartitionReplica("u", 7, 2)
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.describe_replica_log_dirs([r1, r2, r3, missing])
    assert results.result(r1) == ReplicaLogDirInfo("/a1", 0, "/b1", 5)  # moving to /b1
    assert results.result(r2) == ReplicaLogDirInfo("/a2", 0, None, -1)
    assert results.result(missing) == ReplicaLogDirInfo(None, -1, None, -1)
    assert isinstance(results[r3], ClusterAuthorizationFailedError)
    assert sorted({r.node_id for r in fake.requests(DESCRIBE)}) == [1, 2, 3]


async def test_alter_sends_each_broker_its_replicas() -> None:
    fake = FakeCluster(node_ids=(1, 2))
    seen: dict[int, arl.AlterReplicaLogDirsRequest] = {}

    def handle(call: Received) -> Any:
        req: arl.AlterReplicaLogDirsRequest = call.request
        seen[node] = req
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

    fake.handlers[ALTER] = handle
    a, b, c = (
        TopicPartitionReplica("t", 0, 1),
        TopicPartitionReplica("t", 1, 1),
        TopicPartitionReplica("t", 0, 2),
    )
    async with fake.running(), admin_for(fake) as admin:
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
    fake = FakeCluster(missing_apis={ALTER})
    async with fake.running(), admin_for(fake) as admin:
        with pytest.raises(UnsupportedVersionError, match="alter_replica_log_dirs"):
            await admin.alter_replica_log_dirs({("t", 0, 1): "/x"})
