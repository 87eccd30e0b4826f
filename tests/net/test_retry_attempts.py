"""retry_attempts: the one retry loop of what is not a Kafka request (token endpoints, the
schema registry): pauses by the backoff, stops at a budget of retries or of waiting, and
ends at once on any error but TryAgain. On virtual time."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from aiokafka_ng.net.backoff import ExponentialBackoff, RetryState, TryAgain, retry_attempts
from aiokafka_ng.testing import virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _flaky(fail: int, times: list[float]) -> Any:
    async def attempt() -> str:
        times.append(anyio.current_time())
        if len(times) <= fail:
            raise TryAgain(f"no {len(times)}")
        return "ok"

    return attempt


async def test_pauses_follow_the_backoff_until_an_attempt_succeeds() -> None:
    times: list[float] = []
    seen: list[tuple[str, float]] = []
    state = RetryState(ExponentialBackoff(100, 1000, jitter=0))
    result = await retry_attempts(
        _flaky(3, times), state, on_retry=lambda e, pause: seen.append((e.problem, pause))
    )
    assert result == "ok"
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(times)]
    assert gaps == [0.1, 0.2, 0.4]
    assert seen == [("no 1", 0.1), ("no 2", 0.2), ("no 3", 0.4)]


async def test_max_retries_raises_the_last_try_again() -> None:
    times: list[float] = []
    state = RetryState(ExponentialBackoff(100, 1000, jitter=0))
    with pytest.raises(TryAgain, match="no 3"):
        await retry_attempts(_flaky(10, times), state, max_retries=2)
    assert len(times) == 3 and state.failures == 3


async def test_max_wait_counts_the_pauses() -> None:
    # Pauses 0.1 + 0.2 = 0.3 fit in 0.5 s; the next, 0.4, would not: three attempts.
    times: list[float] = []
    state = RetryState(ExponentialBackoff(100, 1000, jitter=0))
    with pytest.raises(TryAgain, match="no 3"):
        await retry_attempts(_flaky(10, times), state, max_wait_s=0.5)
    assert len(times) == 3
    assert times[-1] - times[0] == pytest.approx(0.3)


async def test_any_other_error_ends_at_once() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("final")

    with pytest.raises(ValueError, match="final"):
        await retry_attempts(attempt, RetryState(ExponentialBackoff(100, 1000)))
    assert calls == 1
