"""Delivery futures and RecordMetadata.

A :class:`DeliveryFuture` is our own small future rather than ``asyncio.Future`` so it works
on asyncio and trio alike (it waits on an ``anyio.Event``, created only if someone awaits).
The producer creates one per record; the hot path costs one slotted object. The outcome is
stored by reference to the record's batch: completing a batch of N records does not build N
``RecordMetadata`` objects -- :meth:`DeliveryFuture.result` builds one when asked.

Offsets: ``RecordMetadata.offset`` is the batch's base offset plus the record's offset delta.
When the broker did not return a base offset -- acks=0, or a DUPLICATE_SEQUENCE_NUMBER answer
(the batch was already written; Tansu answers base offset -1 there, Kafka the original
offset) -- the offset is -1: the record *is* delivered, its offset is unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.errors import IllegalStateError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from aiokafka_ng.producer.batch import ProducerBatch

__all__ = ["DeliveryFuture", "RecordMetadata"]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed. ``offset`` is -1 when the broker did not say (acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


#: ``DeliveryFuture._exc`` while the outcome is unknown (None once delivered).
_PENDING: BaseException = Exception("pending")


class DeliveryFuture:
    """The outcome of one ``send()``: awaitable, with ``add_done_callback``."""

    # Six slots (80 bytes with the GC header): one lives per record in flight, and
    # buffer_memory has to account for it. ``_exc`` doubles as the state (``_PENDING``
    # until done) and ``_waiters`` holds both awaiting events and done-callbacks.
    __slots__ = ("_batch", "_delta", "_exc", "_timestamp", "_waiters", "topic")

    def __init__(self, topic: str, timestamp_ms: int) -> None:
        self.topic = topic
        self._timestamp = timestamp_ms
        self._batch: ProducerBatch | None = None
        self._delta = 0
        self._exc: BaseException | None = _PENDING
        self._waiters: list[anyio.Event | Callable[[DeliveryFuture], Any]] | None = None

    # ------------------------------------------------------------------ consumer side

    def done(self) -> bool:
        return self._exc is not _PENDING

    def result(self) -> RecordMetadata:
        """The record's metadata; raises the delivery error. ``IllegalStateError`` if pending."""
        exc = self._exc
        if exc is not None:
            if exc is _PENDING:
                raise IllegalStateError("delivery future is not done yet")
            raise exc
        batch = self._batch
        assert batch is not None
        base = batch.base_offset
        ts = batch.log_append_time
        return RecordMetadata(
            self.topic,
            batch.partition,
            base + self._delta if base >= 0 else -1,
            ts if ts >= 0 else self._timestamp,
        )

    def exception(self) -> BaseException | None:
        if self._exc is _PENDING:
            raise IllegalStateError("delivery future is not done yet")
        return self._exc

    def add_done_callback(self, fn: Callable[[DeliveryFuture], Any]) -> None:
        """Call ``fn(future)`` once done (at once if already done). It runs in a producer
        task: keep it short; an exception it raises is logged, not propagated."""
        if self._exc is not _PENDING:
            fn(self)  # in the caller's own task: its exception is the caller's
            return
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(fn)

    async def wait_done(self) -> None:
        """Wait until done without raising the delivery error."""
        if self._exc is _PENDING:
            event = anyio.Event()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(event)
            await event.wait()

    async def wait(self) -> RecordMetadata:
        await self.wait_done()
        return self.result()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self.wait().__await__()

    # ------------------------------------------------------------------ producer side

    def _finish(self, exc: BaseException | None) -> None:
        if self._exc is not _PENDING:
            return
        self._exc = exc
        if self._waiters is not None:
            waiters, self._waiters = self._waiters, None
            for w in waiters:
                if isinstance(w, anyio.Event):
                    w.set()
                else:
                    try:
                        w(self)
                    except Exception:
                        # A user callback must not take the producer down (asyncio logs
                        # callback errors the same way).
                        log.exception("delivery callback %r failed", w)

    def __repr__(self) -> str:
        exc = self._exc
        state = "pending" if exc is _PENDING else ("failed" if exc else "done")
        return f"<DeliveryFuture {self.topic} {state}>"
