"""Cluster against a real broker: Tansu (one node, id 111) or the 3-node Kafka cluster.

Both auto-create topics with 4 partitions (the Kafka fixture sets num.partitions=4); Kafka
answers LEADER_NOT_AVAILABLE until the new topic's leaders are elected, and each node applies
new metadata on its own, a moment apart.
"""

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
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import LocalBroker
from aiokafka_ng.testing.pytest_plugin import KafkaClusterBroker
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

TANSU_NODE = 111
Broker = LocalBroker | KafkaClusterBroker
# Kafka checks the v3+ software name and version (INVALID_REQUEST when empty).
API_VERSIONS = ApiVersionsRequest(client_software_name="test", client_software_version="1")


def node_ids(broker: Broker) -> set[int]:
    if isinstance(broker, LocalBroker):
        return {TANSU_NODE}
    return {node.node_id for node in broker.cluster.brokers}


def bootstrap_node(broker: Broker) -> tuple[int, int]:
    """(node id, advertised port) of the node at ``broker.host:broker.port``."""
    if isinstance(broker, LocalBroker):
        return TANSU_NODE, broker.advertised_port
    first = broker.cluster.brokers[0]
    return first.node_id, first.port


async def known_everywhere(broker: Broker, names: list[str]) -> None:
    """Create ``names`` and wait until every node answers Metadata for them with leaders."""
    async with broker_cluster(broker) as warm:
        await warm.wait_for_topics(names, timeout=30)
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name=name) for name in names],
            allow_auto_topic_creation=False,
        )
        for node in list(warm.metadata.brokers):
            with anyio.fail_after(30):
                while True:
                    answer = await warm.request(node, request, timeout=20)
                    if all(
                        t.error_code == 0
                        and t.partitions
                        and min(p.leader_id for p in t.partitions) >= 0
                        for t in answer.topics
                    ):
                        break
                    await anyio.sleep(0.05)  # polling that node's metadata, not a timing guess


def _closed_port() -> int:
    """A port nothing listens on (bound then released), for a bootstrap server that fails."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def broker_cluster(broker: Broker, **overrides: Any) -> AsyncIterator[Cluster]:
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


async def test_bootstrap_with_one_bad_and_one_good_server(kafka_broker: Broker) -> None:
    servers = [("127.0.0.1", _closed_port()), (kafka_broker.host, kafka_broker.port)]
    good, advertised_port = bootstrap_node(kafka_broker)
    async with broker_cluster(kafka_broker, bootstrap_servers=servers) as c:
        assert set(c.metadata.brokers) == node_ids(kafka_broker)
        assert c.metadata.brokers[good].port == advertised_port
        assert c.metadata.controller_id in node_ids(kafka_broker)
        stats = c.statistics()
        # The refused server was tried (and dropped); the good one's connection was kept
        # as its node's instead of opening a second socket.
        assert stats.metadata_failures >= 1
        assert stats.pool.open_connections == 1
        assert stats.pool.nodes[good].connects == 1
        assert all(n.connects == 0 for node, n in stats.pool.nodes.items() if node != good)


async def test_auto_created_topic_metadata(kafka_broker: Broker) -> None:
    name = topic_name("cluster")
    async with broker_cluster(kafka_broker) as c:
        t = (await c.wait_for_topics([name], timeout=20))[name]
        assert t.error is None and not t.is_internal
        assert t.topic_id != uuid.UUID(int=0)  # Metadata v10+ carries topic ids
        assert sorted(t.partitions) == [0, 1, 2, 3]  # auto-created with 4
        assert {p.leader for p in t.partitions.values()} <= node_ids(kafka_broker)
        assert all(p.leader_epoch >= 0 for p in t.partitions.values())
        assert await c.leader_for(name, 3, timeout=20) == t.partitions[3].leader
        assert c.metadata.partitions_for_topic(name) == (0, 1, 2, 3)
        conn = await c.connection(t.partitions[3].leader)
        # The highest both sides support: 13 on Kafka 4 (KIP-1102's top-level error code),
        # 12 on Tansu.
        expected = 13 if isinstance(kafka_broker, KafkaClusterBroker) else 12
        assert conn.version_for(MetadataRequest) == expected


async def test_fifty_concurrent_waiters_cost_one_metadata_request(
    kafka_broker: Broker,
) -> None:
    same = topic_name("cluster")
    distinct = [topic_name("cluster") for _ in range(50)]
    # Existing topics, so that one answer makes them ready: a topic being created takes as
    # many rounds as Kafka needs to elect its leaders, whatever the number of waiters.
    await known_everywhere(kafka_broker, [same, *distinct])
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


async def test_coordinator_lookup_is_cached(kafka_broker: Broker) -> None:
    async with broker_cluster(kafka_broker) as c:
        group = f"group-{uuid.uuid4().hex[:8]}"
        coordinator = await c.coordinator(group, timeout=20)
        assert coordinator in node_ids(kafka_broker)
        sent = c.statistics().coordinator_requests
        assert sent >= 1
        assert await c.coordinator(group) == coordinator
        assert c.statistics().coordinator_requests == sent  # served from the cache
        # Kafka may answer COORDINATOR_NOT_AVAILABLE (retried) while it creates the
        # transaction state topic on first use: this lookup's count is not fixed.
        txn = await c.coordinator(f"txn-{group}", key_type=1, timeout=20)
        assert txn in node_ids(kafka_broker)
        sent = c.statistics().coordinator_requests
        c.invalidate_coordinator(group)
        # Asked again: the group's coordinator follows its hash, so the same node.
        assert await c.coordinator(group, timeout=20) == coordinator
        assert c.statistics().coordinator_requests == sent + 1


async def test_request_any_and_controller(kafka_broker: Broker) -> None:
    async with broker_cluster(kafka_broker) as c:
        response = await c.request_any(API_VERSIONS)
        assert response.error_code == 0
        # KRaft brokers name a live broker as the controller (the quorum is not reachable).
        assert await c.controller(timeout=20) in node_ids(kafka_broker)
        snapshot: ClusterMetadata = await c.refresh(timeout=20)
        assert snapshot.generation >= 2 and snapshot.cluster_id
