"""MemoryPool: FIFO waiters, piecemeal accumulation, max_block timeout, statistics."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng.errors import BufferExhaustedError
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.signals import Signals


class Waits:
    """Counts the pool's wake-ups for a waiter (its ``wake_all`` signal); ``await
    waits.until(n)`` for the n-th waiter. ``waits.pool(total)``: a pool that signals here."""

    def __init__(self) -> None:
        self.count = 0
        self._event = anyio.Event()

    def pool(self, total: int) -> MemoryPool:
        return MemoryPool(total, signals=Signals(wake_all=self.memory_wanted))

    def memory_wanted(self) -> None:
        self.count += 1
        self._event.set()

    async def until(self, n: int) -> None:
        with anyio.fail_after(5):
            while self.count < n:
                self._event = anyio.Event()
                await self._event.wait()


def test_try_reserve_and_release() -> None:
    pool = MemoryPool(100)
    assert pool.try_reserve(60)
    assert not pool.try_reserve(50)
    assert pool.available == 40
    pool.release(60)
    assert pool.available == 100
    assert pool.statistics().peak_used == 60


@pytest.mark.anyio
async def test_waiters_are_served_fifo_and_piecemeal() -> None:
    waits = Waits()
    pool = waits.pool(100)
    assert pool.try_reserve(100)
    order: list[str] = []
    big_done = anyio.Event()

    async def want(name: str, n: int) -> None:
        await pool.reserve(n, timeout=5)
        order.append(name)
        if name == "big":
            big_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(want, "big", 80)
        await waits.until(1)
        tg.start_soon(want, "small", 10)
        await waits.until(2)
        # 30 bytes come back: the head (big) accumulates them; small must NOT jump ahead
        pool.release(30)
        stats = pool.statistics()
        assert stats.accumulating == 30 and stats.available == 0 and stats.waiters == 2
        pool.release(50)  # big now holds 80 -> served; small still waits
        with anyio.fail_after(5):
            await big_done.wait()
        assert order == ["big"] and pool.waiters == 1
        pool.release(10)
    assert order == ["big", "small"]
    assert pool.available == 0
    assert pool.statistics().waits == 2


@pytest.mark.anyio
async def test_timeout_raises_and_returns_partial_memory() -> None:
    pool = MemoryPool(100)
    assert pool.try_reserve(90)
    with pytest.raises(BufferExhaustedError):
        await pool.reserve(50, timeout=0.05)
    # the 10 bytes it had accumulated went back
    assert pool.available == 10
    stats = pool.statistics()
    assert stats.timeouts == 1 and stats.waiters == 0


@pytest.mark.anyio
async def test_timeout_hands_memory_to_next_waiter() -> None:
    waits = Waits()
    pool = waits.pool(100)
    assert pool.try_reserve(100)
    got: list[int] = []

    async def first() -> None:
        with pytest.raises(BufferExhaustedError):
            await pool.reserve(90, timeout=0.1)

    async def second() -> None:
        await pool.reserve(20, timeout=5)
        got.append(20)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await waits.until(1)
        tg.start_soon(second)
        await waits.until(2)
        pool.release(20)  # goes to first (head), which then times out and hands it on
    assert got == [20]
    assert pool.available == 0


@pytest.mark.anyio
async def test_cancelled_waiter_gives_memory_back() -> None:
    pool = MemoryPool(10)
    assert pool.try_reserve(10)
    with anyio.move_on_after(0.05):
        await pool.reserve(5, timeout=None)
    assert pool.waiters == 0
    pool.release(10)
    assert pool.available == 10


@pytest.mark.anyio
async def test_larger_than_pool_is_refused() -> None:
    pool = MemoryPool(10)
    with pytest.raises(ValueError):
        await pool.reserve(11, timeout=1)
