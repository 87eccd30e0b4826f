"""The producer's expiry timer: fails what outlived ``delivery_timeout_ms``, on time.

Theory of operation
-------------------
One task per producer. It does not tick: it asks the engine to fail what is due
(:meth:`~aiokafka_ng.producer.engine.ProducerEngine.expire`, which answers the earliest
delivery deadline of what is left), tells it how long it sleeps
(:meth:`~aiokafka_ng.producer.engine.ProducerEngine.expiry_sleeps`), sleeps until then, and
looks again. With nothing held it sleeps until :meth:`ExpiryTimer.wake`, which the
accumulator signals (the engine's ``wake_expiry``) when a record or batch enters while the
timer sleeps without a deadline.

Why one flag is (almost) enough: a batch's deadline is its creation time plus the same
``delivery_timeout_ms``, so a batch entering later never has an earlier deadline than one
the timer already sleeps for. A record waiting for its topic's metadata is bounded by the
shorter ``max_block_ms``: the accumulator wakes the timer when a topic's first waiting
record is due before ``expiry_at``, the deadline the timer sleeps for. A deadline the
timer slept for may have gone (the batch was delivered); waking for it finds the next one.
So an idle producer's timer sleeps for good, and a busy one's wakes about once per
``delivery_timeout_ms`` instead of ten times a second.

No await lies between ``expiry_sleeps`` and waiting on a fresh event, and the accumulator
notes that the timer is armed before it signals: a record that enters in between is never
missed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from aiokafka_ng.producer.engine import ProducerEngine

__all__ = ["ExpiryTimer"]


class ExpiryTimer:
    """Sleeps until the engine's next delivery deadline (see the module docstring)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def wake(self) -> None:
        """Something with a deadline entered while the timer was idle."""
        self._event.set()

    async def run(self, engine: ProducerEngine) -> None:
        """Until cancelled: expire what is due, sleep until the next deadline."""
        clock = engine.clock
        while True:
            at = engine.expire(clock())
            if at is None:
                self._event = anyio.Event()
                engine.expiry_sleeps(None)
                await self._event.wait()
            else:
                engine.expiry_sleeps(at)
                # Woken early by a waiting record due before ``at`` (its limit, max_block_ms,
                # may be the shorter: see the accumulator's "Expiry"). The loop's clock may
                # fire a timer up to its resolution early; expire() then finds nothing due
                # and the same deadline comes back, slept again.
                self._event = anyio.Event()
                with anyio.move_on_after(max(0.0, at - clock())):
                    await self._event.wait()
