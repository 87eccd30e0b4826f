"""The pool alone paces reconnects: a producer whose leader refuses connections dials it
at the reconnect backoff's times (KIP-144), not at a slower rhythm of its own.

Measured before the fix (reconnect backoff 10 ms, retry backoff 100 ms, both capped at 1 s):
the sender slept the *retry* backoff on top of the pool's, so the gaps between dials were
81, 219, 460, 795, 918 ms... (the retry curve) instead of 20, 40, 80, 160, 320 ms...."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.helpers import assert_dialled_at_reconnect_backoff

pytestmark = pytest.mark.anyio

RECONNECT_MS, RECONNECT_MAX_MS = 10.0, 1000.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_refused_leader_is_dialled_at_the_reconnect_backoff_times() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("paced", 1, 1)
        leader = kafka.leader("paced", 0)
        async with Producer(
            **kafka.client_config(),
            reconnect_backoff_ms=RECONNECT_MS,
            reconnect_backoff_max_ms=RECONNECT_MAX_MS,
            # A retry backoff ten times longer: pacing by it shows in every gap.
            retry_backoff_ms=100,
            retry_backoff_max_ms=1000,
            delivery_timeout_ms=600_000,
        ) as producer:
            await (await producer.send("paced", b"before"))
            # Cuts the producer's connection (one failure for the pool) and refuses the
            # dials that follow, while the cluster still names it the leader.
            kafka.isolate(leader)
            before = len(kafka.connection_attempts(leader))
            fut = await producer.send("paced", b"during")
            await kafka.wait_until(
                lambda: len(kafka.connection_attempts(leader)) >= before + 10, within=None
            )
            attempts = kafka.connection_attempts(leader)[before : before + 10]
            kafka.isolate(leader, on=False)
            meta = await fut

    assert meta.partition == 0
    assert_dialled_at_reconnect_backoff(attempts, RECONNECT_MS, RECONNECT_MAX_MS)
