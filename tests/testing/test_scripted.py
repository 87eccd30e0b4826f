"""ScriptedCluster: the scripted ClusterClient that canned-response tests use.

It is itself a test double, so these tests pin what the others rely on: the lookup order
of answers, that an unscripted request fails loudly, what is recorded, and that it works
where the real Cluster is expected (the routed retry driver, a client constructor).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import ClusterClient, Coordinator, Leader, RetryState
from aiokafka_ng.cluster.retry import routed
from aiokafka_ng.errors import KafkaConnectionError, UnknownTopicOrPartitionError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.txn_coordinator import TxnCoordinatorClient
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokafka_ng.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokafka_ng.testing import ScriptedCluster, make_metadata
from aiokafka_ng.testing.scripted import LeaderUpdate

pytestmark = pytest.mark.anyio


def test_is_a_cluster_client() -> None:
    # The annotation is the check: mypy --strict runs on this file.
    cluster: ClusterClient = ScriptedCluster()
    assert cluster.ready


def test_make_metadata_leads_every_partition() -> None:
    md = make_metadata({"t": 3}, nodes=(1, 2), leader=2, leader_epoch=4, controller_id=1)
    assert sorted(md.brokers) == [1, 2]
    assert [md.leader_for("t", p) for p in range(3)] == [2, 2, 2]
    assert md.topics["t"].partitions[0].leader_epoch == 4
    assert md.controller_id == 1


async def test_answers_in_lookup_order(anyio_backend: str) -> None:
    fallback = ApiVersionsResponse(error_code=1)
    on_any = ApiVersionsResponse(error_code=2)
    queued_any = ApiVersionsResponse(error_code=3)
    queued_node = ApiVersionsResponse(error_code=4)
    on_node = ApiVersionsResponse(error_code=5)
    cluster = ScriptedCluster(handler=lambda n, r, v: fallback)
    req = ApiVersionsRequest()
    assert (await cluster.request(1, req)).error_code == 1
    cluster.on(ApiVersionsRequest, lambda n, r, v: on_any)
    assert (await cluster.request(1, req)).error_code == 2
    cluster.on(ApiVersionsRequest, lambda n, r, v: on_node, node=2)
    assert (await cluster.request(2, req)).error_code == 5
    cluster.script(ApiVersionsRequest, queued_any)
    cluster.script(ApiVersionsRequest, queued_node, node=2)
    assert (await cluster.request(2, req)).error_code == 4  # node queue first
    assert (await cluster.request(2, req)).error_code == 3  # then the any-node queue
    assert (await cluster.request(2, req)).error_code == 5  # queues empty: handlers
    assert cluster.pending() == 0
    assert [s.node_id for s in cluster.sent] == [1, 1, 2, 2, 2, 2]
    assert cluster.names() == ["ApiVersions"] * 6


async def test_unscripted_request_fails_loudly(anyio_backend: str) -> None:
    cluster = ScriptedCluster()
    with pytest.raises(AssertionError, match="no scripted answer for ApiVersions to node 3"):
        await cluster.request(3, ApiVersionsRequest())


async def test_exceptions_callables_and_held_answers(anyio_backend: str) -> None:
    cluster = ScriptedCluster(versions={ApiVersionsRequest: 2}, codec_check=True)
    release = anyio.Event()

    async def held(node: int, request: Any, version: int) -> Any:
        await release.wait()
        return ApiVersionsResponse(error_code=version)

    cluster.script(ApiVersionsRequest, KafkaConnectionError("gone"), held)
    with pytest.raises(KafkaConnectionError, match="gone"):
        await cluster.request(1, ApiVersionsRequest())
    results: list[int] = []

    async def ask() -> None:
        results.append((await cluster.request(1, ApiVersionsRequest())).error_code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert results == []  # held until released
        release.set()
    assert results == [2]  # the pinned version reached the handler
    assert [s.version for s in cluster.sent] == [2, 2]


async def test_submit_records_when_written_and_answers_on_wait(anyio_backend: str) -> None:
    cluster = ScriptedCluster()
    cluster.script(ApiVersionsRequest, ApiVersionsResponse(error_code=7))
    conn = await cluster.connection(1)
    pending = await conn.submit(ApiVersionsRequest(), version=3, expect_response=True)
    assert [s.version for s in cluster.sent] == [3]
    assert cluster.pending() == 1  # not answered yet
    answer = await pending.wait()
    assert answer is not None and answer.error_code == 7
    silent = await conn.submit(ApiVersionsRequest(), expect_response=False)
    assert await silent.wait() is None
    assert [s.expect_response for s in cluster.sent] == [True, False]


async def test_metadata_routing_and_records(anyio_backend: str) -> None:
    cluster = ScriptedCluster(metadata=make_metadata({"t": 2}, nodes=(1, 2), leader=2))
    seen: list[int] = []
    remove = cluster.add_listener(lambda md: seen.append(len(md.topics)))
    assert await cluster.leader_for("t", 1) == 2
    with pytest.raises(UnknownTopicOrPartitionError):
        await cluster.leader_for("t", 5)
    with pytest.raises(UnknownTopicOrPartitionError):
        await cluster.wait_for_topics(["missing"])
    cluster.set_metadata(make_metadata({"t": 2, "u": 1}))
    remove()
    cluster.set_metadata(make_metadata({}))
    assert seen == [2]  # the listener heard one snapshot before it was removed
    cluster.request_update(["t"])
    cluster.update_leader("t", 0, 2, 5)
    await cluster.refresh(["t"])
    assert cluster.updates == [("t",)]
    assert cluster.leader_updates == [LeaderUpdate("t", 0, 2, 5)]
    assert cluster.refreshes == [("t",)]


async def test_coordinator_cache_and_routed_driver(anyio_backend: str) -> None:
    cluster = ScriptedCluster(metadata=make_metadata({"t": 1}, nodes=(1, 2)))
    cluster.coordinators[("g", 0)] = 2
    assert await cluster.coordinator("g") == 2
    assert await cluster.coordinator("g") == 2
    assert cluster.lookups == [("g", 0)]  # the second answer came from the cache
    cluster.invalidate_coordinator("g")
    cluster.coordinators[("g", 0)] = 1
    assert await cluster.coordinator("g") == 1
    assert cluster.invalidated == [("g", 0)]

    async def send(conn: Any) -> int:
        return int(conn.node_id)

    state = RetryState(ExponentialBackoff(1, 5), timeout=5)
    assert await routed(cluster, Coordinator("g"), send, state, what="x") == 1
    assert await routed(cluster, Leader("t", 0), send, state, what="x") == 1
    assert cluster.connected == [1, 1]


async def test_drives_a_real_client(anyio_backend: str) -> None:
    cluster = ScriptedCluster(codec_check=True)
    cluster.coordinators[("txn", 1)] = 3
    cluster.script(InitProducerIdRequest, InitProducerIdResponse(producer_id=9, producer_epoch=2))
    client = TxnCoordinatorClient(
        cluster,
        "txn",
        transaction_timeout_ms=60000,
        retry_backoff=ExponentialBackoff(1, 5),
        request_timeout_s=1.0,
        max_block_s=5.0,
    )
    assert await client.init_producer_id() == (9, 2)
    assert [(s.node_id, s.name) for s in cluster.sent] == [(3, "InitProducerId")]
