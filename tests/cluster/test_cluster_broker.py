"""Cluster against the real local broker (Tansu: one node, id 111, auto-creates topics)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster, ClusterConfig, ClusterMetadata, parse_bootstrap_servers
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest
from aiokafka_ng.protocol.messages.metadata import MetadataRequest
from aiokafka_ng.testing import LocalBroker
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

TANSU_NODE = 111


def _closed_port() -> int:
    """A port nothing listens on (bound then released), for a bootstrap server that fails."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def broker_cluster(broker: LocalBroker, **overrides: Any) -> AsyncIterator[Cluster]:
    settings: dict[str, Any] = {
        "bootstrap_servers": parse_bootstrap_servers(broker.bootstrap_servers),
        "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
        "reconnect_backoff_ms": 20,
        "reconnect_backoff_max_ms": 200,
    }
    settings.update(overrides)
    async with Cluster(ClusterConfig(**settings)) as cluster:
        yield cluster


async def test_bootstrap_with_one_bad_and_one_good_server(kafka_broker: LocalBroker) -> None:
    servers = [("127.0.0.1", _closed_port()), (kafka_broker.host, kafka_broker.port)]
    async with broker_cluster(kafka_broker, bootstrap_servers=servers) as c:
        assert set(c.metadata.brokers) == {TANSU_NODE}
        assert c.metadata.brokers[TANSU_NODE].port == kafka_broker.advertised_port
        assert c.metadata.controller_id == TANSU_NODE
        stats = c.statistics()
        # The refused server was tried (and dropped); the good one's connection was kept
        # as node 111's instead of opening a second socket.
        assert stats.metadata_failures >= 1
        assert set(stats.pool.nodes) == {TANSU_NODE}
        assert stats.pool.nodes[TANSU_NODE].connects == 1


async def test_auto_created_topic_metadata(kafka_broker: LocalBroker) -> None:
    name = topic_name("cluster")
    async with broker_cluster(kafka_broker) as c:
        t = (await c.wait_for_topics([name], timeout=20))[name]
        assert t.error is None and not t.is_internal
        assert t.topic_id != uuid.UUID(int=0)  # Metadata v10+ carries topic ids
        assert sorted(t.partitions) == [0, 1, 2, 3]  # Tansu auto-creates with 4
        assert {p.leader for p in t.partitions.values()} == {TANSU_NODE}
        assert all(p.leader_epoch >= 0 for p in t.partitions.values())
        assert await c.leader_for(name, 3, timeout=20) == TANSU_NODE
        assert c.metadata.partitions_for_topic(name) == (0, 1, 2, 3)
        conn = await c.connection(TANSU_NODE)
        assert conn.version_for(MetadataRequest) == 12  # highest both sides support


async def test_fifty_concurrent_waiters_cost_one_metadata_request(
    kafka_broker: LocalBroker,
) -> None:
    same = topic_name("cluster")
    distinct = [topic_name("cluster") for _ in range(50)]
    async with broker_cluster(kafka_broker) as c:
        before = c.statistics().metadata_requests
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(c.wait_for_topics, [same])
        assert c.statistics().metadata_requests - before == 1

        before = c.statistics().metadata_requests
        async with anyio.create_task_group() as tg:
            for name in distinct:
                tg.start_soon(c.wait_for_topics, [name])
        # One request, or two when the scheduler (trio randomises) lets the refresher send
        # before every caller has registered; never one per caller.
        assert c.statistics().metadata_requests - before <= 2
        assert all(c.metadata.topics[n].ready for n in distinct)


async def test_broker_restart_is_reconnected_without_user_action(
    fresh_kafka_broker: LocalBroker,
) -> None:
    broker = fresh_kafka_broker
    async with broker_cluster(broker, metadata_max_age_ms=300) as c:
        conn = await c.connection(TANSU_NODE)
        await broker.stop()
        with anyio.fail_after(10):
            await conn.wait_closed()
        await broker.start()  # same port, fresh process

        # Nobody calls anything: the refresher's periodic refresh (and its retries with
        # backoff while the broker was down) reconnects by itself.
        refreshed = anyio.Event()
        remove = c.add_listener(lambda md: refreshed.set())
        with anyio.fail_after(20):
            await refreshed.wait()
        remove()
        stats = c.statistics().pool.nodes[TANSU_NODE]
        assert stats.connected and stats.connects == 2 and stats.failures == 0
        response = await c.request(TANSU_NODE, ApiVersionsRequest())
        assert response.error_code == 0


async def test_coordinator_lookup_is_cached(kafka_broker: LocalBroker) -> None:
    async with broker_cluster(kafka_broker) as c:
        group = f"group-{uuid.uuid4().hex[:8]}"
        assert await c.coordinator(group, timeout=20) == TANSU_NODE
        sent = c.statistics().coordinator_requests
        assert sent >= 1
        assert await c.coordinator(group) == TANSU_NODE
        assert c.statistics().coordinator_requests == sent  # served from the cache
        assert await c.coordinator(f"txn-{group}", key_type=1, timeout=20) == TANSU_NODE
        c.invalidate_coordinator(group)
        assert await c.coordinator(group, timeout=20) == TANSU_NODE
        assert c.statistics().coordinator_requests == sent + 2


async def test_request_any_and_controller(kafka_broker: LocalBroker) -> None:
    async with broker_cluster(kafka_broker) as c:
        response = await c.request_any(ApiVersionsRequest())
        assert response.error_code == 0
        assert await c.controller(timeout=20) == TANSU_NODE
        snapshot: ClusterMetadata = await c.refresh(timeout=20)
        assert snapshot.generation >= 2 and snapshot.cluster_id
