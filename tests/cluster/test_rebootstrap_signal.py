"""KIP-1102's server signal: a Metadata answer (v13+) whose top-level error is
REBOOTSTRAP_REQUIRED sends the client back to ``bootstrap_servers`` at once.

Kafka 4.4 never sends the code in Metadata (only in ApiVersions v5 answers, KIP-1242), so
the signal is shown on FakeKafka: ``FakeKafka.require_rebootstrap()`` answers Metadata as
such a broker would. tests/kafka/test_kafka_metadata_v13.py shows on Apache Kafka that
Metadata v13 is the version spoken; tests/cluster/test_rebootstrap.py has the other half of
KIP-1102 (every known broker unreachable).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng import Consumer
from aiokafka_ng.cluster import Cluster, ClusterConfig
from aiokafka_ng.errors import RebootstrapRequiredError
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

METADATA = 3
TRIGGER_MS = 300_000  # Java's default: the signal must not wait for it


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@asynccontextmanager
async def cluster_on(kafka: FakeKafka, **overrides: Any) -> AsyncIterator[Cluster]:
    settings: dict[str, Any] = {
        "bootstrap_servers": [("127.0.0.1", kafka.nodes[1].port)],
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 100,
        "metadata_recovery_rebootstrap_trigger_ms": TRIGGER_MS,
        "connection": ConnectionConfig(transport=kafka.transport),
    }
    settings.update(overrides)
    async with Cluster(ClusterConfig(**settings)) as cluster:
        yield cluster


async def test_the_signal_rebootstraps_at_once(caplog: pytest.LogCaptureFixture) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, cluster_on(kafka) as cluster:
        kafka.create_topic("t", 2)
        await cluster.wait_for_topics(["t"])
        assert len(kafka.connection_attempts(1)) == 1  # the bootstrap connection, kept
        signal = kafka.require_rebootstrap()
        started = anyio.current_time()
        with caplog.at_level(logging.WARNING):
            snapshot = await cluster.refresh(["t"])
        assert signal.hits == 1
        told = [r for r in kafka.received(METADATA) if r.version == 13][-2]
        assert told.request.topics is not None  # the refresh the signal answered
        # Back to the bootstrap address: a new connection there, no trigger time waited.
        assert len(kafka.connection_attempts(1)) == 2
        assert anyio.current_time() - started < TRIGGER_MS / 1000
        assert cluster.statistics().rebootstraps == 1
        assert set(snapshot.brokers) == {1} and len(snapshot.topics["t"].partitions) == 2
    assert any("REBOOTSTRAP_REQUIRED" in r.getMessage() for r in caplog.records)


async def test_strategy_none_retries_the_known_brokers() -> None:
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        cluster_on(kafka, metadata_recovery_strategy="none") as cluster,
    ):
        kafka.create_topic("t", 1)
        await cluster.wait_for_topics(["t"])
        signal = kafka.require_rebootstrap(times=2)
        snapshot = await cluster.refresh(["t"])  # answered once the rule has run out
        assert signal.hits == 2
        assert "t" in snapshot.topics
        assert cluster.statistics().rebootstraps == 0
        assert len(kafka.connection_attempts(1)) == 1  # never back to the bootstrap server


async def test_waiters_are_not_failed_by_the_signal() -> None:
    # REBOOTSTRAP_REQUIRED is not retriable as an error, yet it must not be raised to the
    # callers waiting for metadata: the refresher acts on it and asks again.
    async with FakeKafka(brokers=1, tcp=False) as kafka, cluster_on(kafka) as cluster:
        kafka.require_rebootstrap(times=3)
        kafka.create_topic("new", 3)
        topics = await cluster.wait_for_topics(["new"], timeout=30)
        assert len(topics["new"].partitions) == 3


async def test_listing_topics_raises_the_signal_instead_of_answering_none() -> None:
    # An error answer names no topics: read as an answer, a pattern subscription would drop
    # every partition and Consumer.topics() would say the cluster is empty.
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 1)
        async with Consumer(**kafka.client_config()) as consumer:
            assert "t" in await consumer.topics()
            kafka.require_rebootstrap()
            with pytest.raises(RebootstrapRequiredError):
                await consumer.topics()
            assert "t" in await consumer.topics()
