"""MemoryPool: the producer's ``buffer_memory`` bound, shared first come, first served.

Theory of operation (the Java ``BufferPool`` idea, counting bytes instead of pooling
buffers, since Python allocates anyway):

* ``try_reserve(n)`` is the hot path: with no one waiting and ``n`` bytes free it takes them
  at once, synchronously.
* Otherwise the caller joins a FIFO queue. Memory released by completed batches goes to the
  *head* waiter only, piecemeal: the head accumulates what it can until it holds its full
  size, then leaves the queue and the next waiter starts accumulating. A small request
  arriving behind a large one waits its turn, so large records cannot starve.
* A waiter gives up after ``max_block_ms``: what it had accumulated is handed back (to the
  next waiter first) and ``BufferExhaustedError`` is raised.
* Requests larger than the whole pool fail at once (``MessageSizeTooLargeError`` is raised by
  the producer before it gets here; the pool itself refuses with ``ValueError``).

While anyone waits, the accumulator treats every batch as ready (``waiters > 0``) so memory
is freed as fast as the brokers allow; the pool signals each new waiter (the engine's ``wake_all``
signal), which wakes the senders to drain.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import anyio

from aiokafka_ng.errors import BufferExhaustedError
from aiokafka_ng.producer.signals import QUIET, Signals

__all__ = ["MemoryPool", "MemoryPoolStatistics"]


@dataclass(frozen=True, slots=True)
class MemoryPoolStatistics:
    total: int
    available: int
    waiters: int
    #: bytes currently accumulated by waiters that are not yet satisfied
    accumulating: int
    waits: int
    timeouts: int
    peak_used: int


class _Waiter:
    __slots__ = ("event", "got", "need")

    def __init__(self, need: int) -> None:
        self.need = need
        self.got = 0
        self.event = anyio.Event()


class MemoryPool:
    """A byte budget with FIFO, piecemeal waiters and a deadline. (Slotted: the C
    ``send_fast``, see :mod:`aiokafka_ng.producer.intake`, does ``try_reserve`` by offset.)"""

    __slots__ = ("_available", "_peak_used", "_timeouts", "_total", "_waiters", "_waits", "signals")

    def __init__(self, total: int, signals: Signals = QUIET) -> None:
        if total <= 0:
            raise ValueError("total must be > 0")
        self._total = total
        self._available = total
        self._waiters: deque[_Waiter] = deque()
        self._waits = 0
        self._timeouts = 0
        self._peak_used = 0
        self.signals = signals

    @property
    def total(self) -> int:
        return self._total

    @property
    def available(self) -> int:
        return self._available

    @property
    def waiters(self) -> int:
        return len(self._waiters)

    def try_reserve(self, n: int) -> bool:
        """Take ``n`` bytes now if nobody is queued and they are free (``send_fast``, C,
        does the same by slot)."""
        if n <= self._available and not self._waiters:
            self._available -= n
            return True
        return False

    async def reserve(self, n: int, timeout: float | None) -> None:  # noqa: ASYNC109
        """Take ``n`` bytes, waiting FIFO for at most ``timeout`` seconds.

        Raises ``BufferExhaustedError`` when the deadline passes (nothing is kept) and
        ``ValueError`` when ``n`` exceeds the whole pool.
        """
        if n > self._total:
            raise ValueError(f"{n} bytes exceed the pool of {self._total}")
        if self.try_reserve(n):
            return
        waiter = _Waiter(n)
        self._waiters.append(waiter)
        self._waits += 1
        # Anything already free goes to the head (which may be us).
        self._distribute()
        self.signals.wake_all()  # every batch is ready while someone waits
        try:
            with anyio.move_on_after(timeout):
                await waiter.event.wait()
        except BaseException:
            # Cancelled from outside: whatever we were granted goes back.
            if waiter.event.is_set():
                self.release(n)
            else:
                self._give_up(waiter)
            raise
        if not waiter.event.is_set():
            self._give_up(waiter)
        if not waiter.event.is_set():
            self._timeouts += 1
            raise BufferExhaustedError(
                f"could not reserve {n} bytes of buffer_memory within "
                f"{(timeout or 0) * 1000:.0f} ms (max_block_ms)"
            )
        used = self._total - self._available
        if used > self._peak_used:
            self._peak_used = used

    def _give_up(self, waiter: _Waiter) -> None:
        # Timed out or cancelled: leave the queue and hand back what we held, to the next
        # waiter first.
        self._waiters.remove(waiter)
        self._available += waiter.got
        waiter.got = 0
        self._distribute()

    def release(self, n: int) -> None:
        """Give ``n`` bytes back; the head waiter gets them first."""
        # Peak usage is sampled here rather than on every reservation (the hot path): the
        # use just before a release is a local maximum.
        used = self._total - self._available
        if used > self._peak_used:
            self._peak_used = used
        self._available += n
        if self._waiters:
            self._distribute()

    def _distribute(self) -> None:
        waiters = self._waiters
        while waiters and self._available:
            head = waiters[0]
            take = min(self._available, head.need - head.got)
            head.got += take
            self._available -= take
            if head.got < head.need:
                return
            waiters.popleft()
            head.event.set()

    def statistics(self) -> MemoryPoolStatistics:
        return MemoryPoolStatistics(
            total=self._total,
            available=self._available,
            waiters=len(self._waiters),
            accumulating=sum(w.got for w in self._waiters),
            waits=self._waits,
            timeouts=self._timeouts,
            peak_used=max(self._peak_used, self._total - self._available),
        )

    def __repr__(self) -> str:
        return (
            f"<MemoryPool available={self._available}/{self._total} waiters={len(self._waiters)}>"
        )
