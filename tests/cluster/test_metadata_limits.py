"""The metadata cache against answers no real broker sends: partitions numbered past the
per-topic limit, topics nobody asked for. FakeKafka (in memory) answers, its Metadata edited
by a script (Tansu and the model answer sanely; that is the point); everything from the
Connection up is production code. The decoder's own limits are in
tests/net/test_answer_limits.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from aiokafka_ng.cluster import Cluster, ClusterConfig, parse_metadata_response
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.protocol.limits import MAX_PARTITIONS_PER_TOPIC, ResponseLimitError
from aiokafka_ng.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

METADATA = 3


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@asynccontextmanager
async def fake_cluster(kafka: FakeKafka) -> AsyncIterator[Cluster]:
    config = ClusterConfig(
        bootstrap_servers=[("127.0.0.1", kafka.nodes[1].port)],
        retry_backoff_ms=10,
        retry_backoff_max_ms=20,
        reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=20,
        connection=ConnectionConfig(transport=kafka.transport),
    )
    async with Cluster(config) as cluster:
        yield cluster


def topic(name: str, partitions: int = 3) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        name=name,
        partitions=[
            MetadataResponsePartition(partition_index=i, leader_id=1) for i in range(partitions)
        ],
    )


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
    async def first_answer_broken(call: Received) -> Any:
        answer = await kafka.model_answer(call)
        assert isinstance(answer, MetadataResponse)
        answer.topics = [one_partition("a", 2**31 - 1)]
        return answer

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("a", 2)
        kafka.answer(
            METADATA, first_answer_broken, times=1, match=lambda call: bool(call.request.topics)
        )
        async with fake_cluster(kafka) as cluster:
            found = await cluster.wait_for_topics(["a"], timeout=5)
            stats = cluster.statistics()
        broken, fixed = [r for r in kafka.received(METADATA) if r.request.topics]
    assert sorted(found["a"].partitions) == [0, 1]
    assert stats.metadata_failures == 1
    # The connection that brought the broken answer was dropped; the retry used a new one.
    assert broken.connection != fixed.connection
    assert len(kafka.connection_attempts(1)) == 2


@pytest.mark.anyio
async def test_topics_not_asked_for_stay_out_of_the_cache() -> None:
    async def intruder(call: Received) -> Any:
        # Asked for "a" and "b", the broker answers "a" and, instead of "b", "intruder".
        answer = await kafka.model_answer(call)
        assert isinstance(answer, MetadataResponse)
        for t in answer.topics:
            if t.name == "b":
                t.name = "intruder"
        return answer

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("a")
        kafka.create_topic("b")
        kafka.answer(METADATA, intruder)
        async with fake_cluster(kafka) as cluster:
            await cluster.wait_for_topics(["a"], timeout=5)
            snapshot = await cluster.refresh(["a", "b"], timeout=5)
    assert "a" in snapshot.topics
    assert "intruder" not in snapshot.topics
    assert "b" not in snapshot.topics
