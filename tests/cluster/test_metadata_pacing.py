"""The refresher spaces the rounds that leave a tracked topic unusable by the retry backoff,
growing with each such round (RetryState, as every other retry timing), and one round that
leaves nothing unusable starts the curve again. On FakeKafka, virtual time."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from aiokafka_ng.cluster import Cluster, ClusterConfig, parse_bootstrap_servers
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

METADATA = 3
BACKOFF_MS, BACKOFF_MAX_MS = 20.0, 200.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _pause(rounds: int) -> float:
    return min(BACKOFF_MAX_MS, BACKOFF_MS * 2 ** (rounds - 1)) / 1000


async def test_rounds_leaving_a_topic_leaderless_are_spaced_by_the_growing_backoff() -> None:
    async with FakeKafka(2, tcp=False) as kafka:
        kafka.create_topic("lone", 1, replication_factor=1)
        config = ClusterConfig(
            bootstrap_servers=parse_bootstrap_servers(kafka.bootstrap_servers),
            connection=ConnectionConfig(transport=kafka.transport),
            retry_backoff_ms=BACKOFF_MS,
            retry_backoff_max_ms=BACKOFF_MAX_MS,
        )
        async with Cluster(config) as cluster:
            await cluster.wait_for_topics(["lone"], timeout=20)
            leader = kafka.leader("lone", 0)
            kafka.kill(leader)  # its only replica: the partition has no leader now
            before = len(kafka.request_times(METADATA))
            cluster.request_update(["lone"])
            await kafka.wait_until(
                lambda: len(kafka.request_times(METADATA)) >= before + 8, within=None
            )
            stale = kafka.request_times(METADATA)[before : before + 8]
            kafka.restart(leader)
            await cluster.wait_for_topics(["lone"], timeout=20)

    # Round n (the n-th answer naming no leader) is followed by the next after the
    # backoff for n such rounds, within its ±20% jitter.
    gaps = [b - a for a, b in itertools.pairwise(stale)]
    for n, gap in enumerate(gaps, start=1):
        assert 0.8 * _pause(n) - 1e-9 <= gap <= 1.2 * _pause(n) + 1e-9, (n, gaps)
