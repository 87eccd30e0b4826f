"""Reconnects follow the KIP-144 backoff curve, measured exactly on virtual time against a
FakeKafka node that refuses connections (it was measured on the wall clock through a proxy,
with a bound a loaded machine broke: a 338 ms gap against 292)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from aiokafka_ng.cluster import ConnectionPool
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


class _RecordedBackoff(ExponentialBackoff):
    """The reconnect policy, remembering every pause it hands out (in seconds)."""

    __slots__ = ("chosen",)

    def __init__(self, initial_ms: float, max_ms: float) -> None:
        super().__init__(initial_ms, max_ms)
        self.chosen: list[float] = []

    def backoff_s(self, failures: int) -> float:
        pause = super().backoff_s(failures)
        self.chosen.append(pause)
        return pause


async def test_reconnect_attempts_follow_the_backoff_curve() -> None:
    initial_ms, max_ms = 50.0, 1000.0
    backoff = _RecordedBackoff(initial_ms, max_ms)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.kill(1)  # every attempt is refused, and stamped by the fake
        host, port = kafka.bootstrap_servers.split(":")
        config = ConnectionConfig(connect_timeout_s=5, transport=kafka.transport)
        async with ConnectionPool(config, reconnect_backoff=backoff) as pool:
            pool.set_address(111, host, int(port))
            while len(kafka.connection_attempts(1)) < 8:
                with pytest.raises(KafkaConnectionError):
                    await pool.get(111)
        attempts = kafka.connection_attempts(1)[:8]

    # The pool asked the policy once per failure, and the policy drew each pause from the
    # KIP-144 curve: ~2x growth from 50 ms to the 1 s cap, within its ±20% jitter.
    chosen = backoff.chosen[:7]
    assert len(chosen) == 7, backoff.chosen
    for n, pause in enumerate(chosen, start=1):
        expected = min(max_ms, initial_ms * 2 ** (n - 1)) / 1000
        assert 0.8 * expected <= pause <= 1.2 * expected, (n, chosen)
    # On the wire, each attempt came exactly its pause after the one before: a refused
    # connect costs no virtual time, so nothing but the pause lies between two attempts.
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps == pytest.approx(chosen, abs=1e-9)
