"""The metadata cache against answers no real broker sends: partitions numbered past the
per-topic limit, topics nobody asked for. The canned answers come from ``cluster_fakes``
(Tansu answers sanely; that is the point), everything above the Connection is production
code. The decoder's own limits are in tests/net/test_answer_limits.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from cluster_fakes import FakeBroker, topic

from aiokafka_ng.cluster import Cluster, ClusterConfig, parse_metadata_response
from aiokafka_ng.protocol.limits import MAX_PARTITIONS_PER_TOPIC, ResponseLimitError
from aiokafka_ng.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


@asynccontextmanager
async def fake_cluster(broker: FakeBroker) -> AsyncIterator[Cluster]:
    config = ClusterConfig(
        bootstrap_servers=[(broker.host, broker.port)],
        retry_backoff_ms=10,
        retry_backoff_max_ms=20,
        reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=20,
    )
    async with Cluster(config, connector=broker.connector) as cluster:  # type: ignore[arg-type]
        yield cluster


def one_partition(name: str, index: int) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        name=name, partitions=[MetadataResponsePartition(partition_index=index, leader_id=1)]
    )


@pytest.mark.parametrize("index", [-1, MAX_PARTITIONS_PER_TOPIC, 2**31 - 1])
def test_a_partition_index_past_the_limit_is_refused(index: int) -> None:
    # The producer keeps a queue per index up to the highest: 2**31 - 1 would be 2e9 queues.
    response = MetadataResponse(topics=[topic("ok"), one_partition("t", index)])
    with pytest.raises(ResponseLimitError, match=rf"partition_index {index} of topic 't'"):
        parse_metadata_response(response)


def test_the_highest_index_within_the_limit_is_kept() -> None:
    top = MAX_PARTITIONS_PER_TOPIC - 1
    parsed = parse_metadata_response(MetadataResponse(topics=[one_partition("t", top)]))
    assert list(parsed.topics["t"].partitions) == [top]


@pytest.mark.anyio
async def test_a_refresh_with_a_bad_index_fails_drops_the_connection_and_retries() -> None:
    broker = FakeBroker()
    broker.topics["a"] = lambda n: one_partition("a", 2**31 - 1) if n == 1 else topic("a", 2)
    async with fake_cluster(broker) as cluster:
        found = await cluster.wait_for_topics(["a"], timeout=5)
        stats = cluster.statistics()
    assert sorted(found["a"].partitions) == [0, 1]
    assert stats.metadata_failures == 1
    assert broker.connections[0].closed and len(broker.connections) == 2


@pytest.mark.anyio
async def test_topics_not_asked_for_stay_out_of_the_cache() -> None:
    broker = FakeBroker()
    # Asked for "a", the broker answers "a" and, instead of "b", "intruder".
    broker.topics["a"] = lambda n: topic("a")
    broker.topics["b"] = lambda n: topic("intruder")
    async with fake_cluster(broker) as cluster:
        await cluster.wait_for_topics(["a"], timeout=5)
        snapshot = await cluster.refresh(["a", "b"], timeout=5)
    assert "a" in snapshot.topics
    assert "intruder" not in snapshot.topics
    assert "b" not in snapshot.topics
