"""Periodic (aiokafka_ng.cluster.retry): the timing of heartbeats, auto-commit and other
loops that run a round now and then -- an interval after a success, the shared backoff after
a failure, sooner when woken but never inside a backoff -- and RetryState's throttle, the
broker-requested wait. On virtual time."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Periodic, RetryState
from aiokafka_ng.errors import NotCoordinatorError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.testing import virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _timer(interval: float = 3.0) -> Periodic:
    # No jitter: the pauses are exactly 0.1, 0.2, 0.4 ... 1.0 s.
    return Periodic(interval, ExponentialBackoff(100, 1000, jitter=0))


async def test_rounds_go_an_interval_apart_and_the_first_at_once() -> None:
    timer = _timer()
    start = anyio.current_time()
    assert await timer.wait()  # due at once
    assert anyio.current_time() == start
    timer.succeeded()
    assert await timer.wait()
    assert anyio.current_time() - start == pytest.approx(3.0)
    timer.succeeded(interval=5.0)  # the broker asked for another interval
    assert await timer.wait()
    assert anyio.current_time() - start == pytest.approx(8.0)
    assert timer.interval == 5.0


async def test_failures_back_off_and_one_success_resets_the_count() -> None:
    timer = _timer()
    start = anyio.current_time()
    pauses = []
    for _ in range(3):
        pauses.append(timer.failed(NotCoordinatorError("moved")))
        assert await timer.wait()
    assert pauses == pytest.approx([0.1, 0.2, 0.4])
    assert anyio.current_time() - start == pytest.approx(0.7)
    assert timer.failures == 3
    timer.succeeded()
    assert timer.failures == 0
    assert timer.failed() == pytest.approx(0.1)  # from the beginning again


async def test_a_wake_up_cuts_an_interval_short() -> None:
    timer = _timer()
    timer.succeeded()
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:

        async def wake_later() -> None:
            await anyio.sleep(1.0)
            timer.wake()

        tg.start_soon(wake_later)
        assert await timer.wait()
    assert anyio.current_time() - start == pytest.approx(1.0)
    assert not timer.woken  # served by that round
    # A wake-up that came before wait() is not lost.
    timer.succeeded()
    timer.wake()
    assert timer.is_due()
    assert await timer.wait()
    assert anyio.current_time() - start == pytest.approx(1.0)


async def test_a_wake_up_never_cuts_a_backoff_short() -> None:
    timer = _timer()
    for _ in range(4):
        timer.failed()  # the next pause: 0.8 s
    start = anyio.current_time()
    timer.wake()
    assert not timer.is_due()
    assert await timer.wait()
    assert anyio.current_time() - start == pytest.approx(0.8)
    assert not timer.woken  # the round that ends the backoff serves it


async def test_until_bounds_the_wait_without_running_a_round() -> None:
    timer = _timer()
    timer.succeeded()
    start = anyio.current_time()
    assert not await timer.wait(until=start + 1.0)  # the caller's deadline came first
    assert anyio.current_time() - start == pytest.approx(1.0)
    assert await timer.wait(until=start + 10.0)
    assert anyio.current_time() - start == pytest.approx(3.0)


async def test_an_idle_loop_waits_for_the_wake_up_alone() -> None:
    timer = _timer(interval=0.5)
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:

        async def wake_later() -> None:
            await anyio.sleep(7.0)
            timer.wake()

        tg.start_soon(wake_later)
        await timer.until_woken()  # no interval: only the wake-up ends it
    assert anyio.current_time() - start == pytest.approx(7.0)
    assert not timer.woken


def test_a_throttle_moves_retry_at_without_counting_a_failure() -> None:
    # KIP-219: the broker's throttle_time_ms holds the next request back; it is no failure,
    # so the backoff after a real one starts from the first step.
    state = RetryState(ExponentialBackoff(100, 1000, jitter=0))
    state.throttle(2.0, now=10.0)
    assert state.retry_at == 12.0 and state.failures == 0
    state.failed(now=10.0)
    assert state.retry_at == pytest.approx(10.1)  # the first step: nothing was counted before
    state.failed(now=10.0)
    state.failed(now=10.0)  # a backoff to 10.4 ...
    state.throttle(0.1, now=10.0)  # ... is not shortened by a shorter throttle
    assert state.retry_at == pytest.approx(10.4)


async def test_a_pause_may_be_cut_to_a_limit_of_the_callers() -> None:
    # A share fetch that failed backs off by the policy, but a poll(timeout_ms=...) waits
    # no longer than its own limit.
    state = RetryState(ExponentialBackoff(100, 1000, jitter=0))
    for _ in range(4):
        state.failed()  # the next pause: 0.8 s
    start = anyio.current_time()
    await state.pause(limit=0.3)
    assert anyio.current_time() - start == pytest.approx(0.3)
    await state.pause(limit=5.0)  # the backoff ends first: at retry_at
    assert anyio.current_time() - start == pytest.approx(0.8)
