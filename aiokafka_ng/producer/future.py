"""Delivery futures and RecordMetadata.

Theory of operation
-------------------
A :class:`DeliveryFuture` is one slotted object per record. Under asyncio it *is* an asyncio
future as far as asyncio can tell (``asyncio.isfuture`` is true): it has the class attribute
``_asyncio_future_blocking``, ``get_loop()`` and ``add_done_callback(fn, *, context=None)``,
and its ``__await__`` yields itself to the Task, exactly as ``asyncio.Future`` does. So
``gather``/``wait``/``wait_for``/``as_completed``/``shield``/``ensure_future`` use it directly
-- no Task per record (a duck-typed future is what asyncio's ``isfuture`` and the Task's
step function were written to accept) -- and awaiting one allocates nothing.

asyncio never runs a future's callbacks inside the code that completed it: they go through
``loop.call_soon``. We keep that rule (a Task's wake-up must not run inside the sender's
task; gather counts on it too), but a whole batch's futures are completed together with
*one* ``call_soon`` (:func:`finish_all`), not one per callback: that is where asyncio.Future
spends most of its time when thousands of records complete at once.

Under trio there is no loop: awaiting waits on an ``anyio.Event`` created only when someone
awaits, and done-callbacks run when the batch completes, as before.

Cancellation: ``cancel()`` detaches the *waiters* (the future becomes cancelled, awaiting it
raises ``CancelledError``); the record itself is not taken back -- it may already be on the
wire -- and is delivered or fails as usual (aiokafka and the Java client behave the same).
The producer's own waits (flush, close, transaction abort) follow the delivery, not the
future, through waiters that cancellation leaves alone.

The outcome is stored by reference to the record's batch: completing a batch of N records
does not build N ``RecordMetadata`` objects -- :meth:`DeliveryFuture.result` builds one.

Offsets: ``RecordMetadata.offset`` is the batch's base offset plus the record's offset delta.
When the broker did not return a base offset -- acks=0, or a DUPLICATE_SEQUENCE_NUMBER answer
(the batch was already written; Tansu answers base offset -1 there, Kafka the original
offset) -- the offset is -1: the record *is* delivered, its offset is unknown.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.errors import IllegalStateError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from aiokafka_ng.producer.batch import ProducerBatch

__all__ = ["DeliveryFuture", "FutureNotDoneError", "RecordMetadata", "RunDelivery", "finish_all"]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed. ``offset`` is -1 when the broker did not say (acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class FutureNotDoneError(IllegalStateError, asyncio.InvalidStateError):
    """``result()``/``exception()`` of a pending future (asyncio's ``InvalidStateError``)."""


#: ``DeliveryFuture._exc`` while the outcome is unknown (None once delivered).
_PENDING: BaseException = Exception("pending")

Callback = Callable[["DeliveryFuture"], Any]
# A waiter is a user's done-callback with the context it runs in (asyncio's rule) as a
# tuple, or -- a bare ``anyio.Event`` -- one of the producer's own waits for the *delivery*,
# which cancelling the future does not release.


class _Cancelled:
    """``DeliveryFuture._waiters`` once cancelled: the message and the producer's own
    delivery waits, which still wait for the record's real outcome."""

    __slots__ = ("events", "msg")

    def __init__(self, msg: Any, events: list[anyio.Event]) -> None:
        self.msg = msg
        self.events = events


class DeliveryFuture:
    """The outcome of one ``send()``: awaitable, with ``add_done_callback``; an asyncio
    future to asyncio (``gather``, ``wait``, ``wait_for``, ``as_completed``, ``shield``)."""

    # Seven slots (88 bytes with the GC header): one lives per record in flight, and
    # buffer_memory accounts for it. ``_exc`` is the delivery state (``_PENDING`` until the
    # producer knows); ``_waiters`` holds callbacks and waits, or ``_Cancelled``.
    __slots__ = ("_batch", "_delta", "_exc", "_loop", "_timestamp", "_waiters", "topic")

    def __init__(
        self, topic: str, timestamp_ms: int, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.topic = topic
        self._timestamp = timestamp_ms
        self._loop = loop
        self._batch: ProducerBatch | None = None
        self._delta = 0
        self._exc: BaseException | None = _PENDING
        self._waiters: list[Any] | _Cancelled | None = None

    # ------------------------------------------------------------------ asyncio protocol

    @property
    def _asyncio_future_blocking(self) -> bool | None:
        # asyncio.isfuture() wants "not None"; a Task wants it true when the future is
        # yielded to it and then resets it to False -- a no-op here, since __await__ only
        # ever yields a pending future to a Task.
        return True if self._loop is not None else None

    @_asyncio_future_blocking.setter
    def _asyncio_future_blocking(self, value: bool) -> None:
        pass

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The asyncio loop the producer runs on (``RuntimeError`` under trio)."""
        if self._loop is None:
            raise RuntimeError("this delivery future belongs to a producer not on asyncio")
        return self._loop

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        # asyncio.gather asks a cancelled child for the error to propagate.
        waiters = self._waiters
        return asyncio.CancelledError(waiters.msg if isinstance(waiters, _Cancelled) else None)

    # ------------------------------------------------------------------ consumer side

    def done(self) -> bool:
        return self._exc is not _PENDING or self._waiters.__class__ is _Cancelled

    def cancelled(self) -> bool:
        return self._waiters.__class__ is _Cancelled

    def result(self) -> RecordMetadata:
        """The record's metadata; raises the delivery error, ``CancelledError`` if
        cancelled, ``FutureNotDoneError`` (an ``asyncio.InvalidStateError``) if pending."""
        if self._waiters.__class__ is _Cancelled:
            raise self._make_cancelled_error()
        exc = self._exc
        if exc is not None:
            if exc is _PENDING:
                raise FutureNotDoneError("delivery future is not done yet")
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
        if self._waiters.__class__ is _Cancelled:
            raise self._make_cancelled_error()
        if self._exc is _PENDING:
            raise FutureNotDoneError("delivery future is not done yet")
        return self._exc

    def add_done_callback(
        self, fn: Callback, *, context: contextvars.Context | None = None
    ) -> None:
        """Call ``fn(future)`` once done. Under asyncio it runs from the event loop, in
        ``context`` (default: the current one), as asyncio.Future's callbacks do; under
        trio in the producer's task. Keep it short; an exception it raises is logged."""
        loop = self._loop
        if self.done():
            if loop is not None:
                _dispatch(loop, [(self, [(fn, context)])])
            else:
                fn(self)  # in the caller's own task: its exception is the caller's
            return
        if loop is not None and context is None:
            context = contextvars.copy_context()
        waiters = self._waiters
        if waiters is None:
            self._waiters = [(fn, context)]
        else:
            waiters.append((fn, context))  # type: ignore[union-attr]

    def remove_done_callback(self, fn: Callback) -> int:
        """Remove every registration of ``fn``; return how many there were."""
        waiters = self._waiters
        if not isinstance(waiters, list):
            return 0
        keep = [w for w in waiters if w.__class__ is not tuple or w[0] != fn]
        removed = len(waiters) - len(keep)
        if removed:
            self._waiters = keep or None
        return removed

    def cancel(self, msg: Any = None) -> bool:
        """Detach the waiters: the future becomes cancelled. The record is *not* taken
        back -- it is delivered (or fails) as if nothing happened. False if already done."""
        if self.done():
            return False
        waiters = self._waiters
        events: list[anyio.Event] = []
        callbacks: list[Any] = []
        if waiters is not None:
            for w in waiters:  # type: ignore[union-attr]
                (callbacks if w.__class__ is tuple else events).append(w)
        self._waiters = _Cancelled(msg, events)
        if callbacks:
            _dispatch(self._loop, [(self, callbacks)])
        return True

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            if self._loop is not None:
                # asyncio's Future protocol: the Task sees _asyncio_future_blocking, adds
                # its wake-up as a done-callback and resumes us once we are done.
                yield self
                if not self.done():
                    raise RuntimeError("await wasn't used with future")
            else:
                yield from self._wait_event().__await__()
        return self.result()

    __iter__ = __await__  # ``yield from fut`` in old-style coroutines, like asyncio.Future

    async def _wait_event(self) -> None:
        event = anyio.Event()
        self.add_done_callback(lambda _f: event.set())
        await event.wait()

    # ------------------------------------------------------------------ producer side

    async def wait_done(self) -> None:
        """Wait until the record's delivery is decided, without raising its error. Unlike
        awaiting the future, this follows the record even if the future was cancelled."""
        if self._exc is _PENDING:
            event = anyio.Event()
            waiters = self._waiters
            if waiters is None:
                self._waiters = [event]
            elif isinstance(waiters, _Cancelled):
                waiters.events.append(event)
            else:
                waiters.append(event)
            await event.wait()

    async def wait(self) -> RecordMetadata:
        return await self

    def delivery_error(self) -> BaseException | None:
        """The record's own outcome (None: delivered), whether or not the future was
        cancelled; ``FutureNotDoneError`` while undecided."""
        if self._exc is _PENDING:
            raise FutureNotDoneError("delivery is not decided yet")
        return self._exc

    def _finish(self, exc: BaseException | None) -> None:
        finish_all((self,), exc, self._loop)

    def __repr__(self) -> str:
        if self.cancelled():
            state = "cancelled"
        else:
            exc = self._exc
            state = "pending" if exc is _PENDING else ("failed" if exc else "done")
        return f"<DeliveryFuture {self.topic} {state}>"


class RunDelivery(DeliveryFuture):
    """One future for a whole run of records (internal: the bulk path of the Spark sink,
    which needs to know whether a run was delivered, not where each record landed).

    The accumulator holds this one object once per record -- a batch's ``futures`` list
    still has one entry per record, which is what sequence numbers, counts and splitting
    go by -- and :func:`finish_all` counts each entry: the future is done when every
    record is decided, failed with the first error if any record failed. Saves creating a
    future per record, the largest per-record cost of ``send_batch``.
    """

    __slots__ = ("_first_exc", "_remaining", "count", "failed", "first_failed")

    def __init__(
        self,
        topic: str,
        timestamp_ms: int,
        loop: asyncio.AbstractEventLoop | None,
        count: int,
    ) -> None:
        super().__init__(topic, timestamp_ms, loop)
        self.count = count
        self.failed = 0
        #: Index in the run of the first record that failed on its own (too large, no
        #: buffer memory); None when none did or a whole batch failed at the broker.
        self.first_failed: int | None = None
        self._remaining = count
        self._first_exc: BaseException | None = None
        if count == 0:
            self._exc = None

    def _count(self, exc: BaseException | None, records: int = 1) -> BaseException | None:
        """``records`` records decided with ``exc``; the run's outcome once none is left,
        else ``_PENDING``."""
        if exc is not None:
            self.failed += records
            if self._first_exc is None:
                self._first_exc = exc
        self._remaining -= records
        return _PENDING if self._remaining > 0 else self._first_exc

    def result(self) -> RecordMetadata:
        raise TypeError("a RunDelivery has no single record's metadata; see exception()")

    def __repr__(self) -> str:
        return (
            f"<RunDelivery {self.topic} {self.count - self._remaining}/{self.count} decided, "
            f"{self.failed} failed>"
        )


def finish_all(
    futures: Iterable[DeliveryFuture],
    exc: BaseException | None,
    loop: asyncio.AbstractEventLoop | None,
) -> None:
    """Decide the delivery of ``futures`` (a batch's records). Their waiters run together:
    under asyncio in one ``loop.call_soon``; under trio right away."""
    todo: list[tuple[DeliveryFuture | None, list[Any]]] | None = None
    counted = False
    if isinstance(futures, list) and futures:
        first = futures[0]
        if first.__class__ is RunDelivery and futures.count(first) == len(futures):
            # The bulk path's usual batch: entries of one run only, counted in one step
            # (list.count compares identities in C) rather than one call per record.
            if first._exc is not _PENDING:
                return
            exc = first._count(exc, len(futures))
            if exc is _PENDING:
                return  # records of the run in other batches are still undecided
            futures, counted = (first,), True
    for fut in futures:
        if fut._exc is not _PENDING:
            continue
        if fut.__class__ is RunDelivery and not counted:
            outcome = fut._count(exc)
            if outcome is _PENDING:
                continue  # records of the run are still undecided
            fut._exc = outcome
        else:
            fut._exc = exc
        waiters = fut._waiters
        if waiters is None:
            continue
        if isinstance(waiters, _Cancelled):
            for event in waiters.events:
                event.set()
            waiters.events = []
            continue
        fut._waiters = None
        if todo is None:
            todo = []
        todo.append((fut, waiters))
    if todo is not None:
        _dispatch(loop, todo)


#: Per loop, the waiters due to run at its next turn. One ``call_soon`` runs them all:
#: ``gather`` over 10k futures that are mostly done already would otherwise cost 10k
#: loop handles.
_due: dict[asyncio.AbstractEventLoop, list[tuple[DeliveryFuture | None, list[Any]]]] = {}


def _dispatch(
    loop: asyncio.AbstractEventLoop | None, todo: list[tuple[DeliveryFuture | None, list[Any]]]
) -> None:
    if loop is None:
        _run_waiters(todo)
        return
    due = _due.get(loop)
    if due is None:
        loop.call_soon(_run_due, loop)  # first: a closed loop raises, nothing is left behind
        _due[loop] = todo
    else:
        due.extend(todo)


async def callbacks_run(loop: asyncio.AbstractEventLoop | None) -> None:
    """Return once every done-callback already due on ``loop`` has run: ``flush()`` must not
    return while a finished batch's callbacks still wait for their loop turn (the Java
    client runs them before the record's future completes)."""
    due = None if loop is None else _due.get(loop)
    if due is not None:
        event = anyio.Event()
        due.append((None, [event]))  # no future: runs after the queued ones
        await event.wait()


def _run_due(loop: asyncio.AbstractEventLoop) -> None:
    _run_waiters(_due.pop(loop, []))


def _run_waiters(todo: list[tuple[DeliveryFuture | None, list[Any]]]) -> None:
    for fut, waiters in todo:
        for w in waiters:
            if w.__class__ is tuple:
                fn, ctx = w
                try:
                    if ctx is None:
                        fn(fut)
                    else:
                        ctx.run(fn, fut)
                except Exception:
                    # A user callback must not take the producer (or the other callbacks
                    # of this batch) down; asyncio logs callback errors the same way.
                    log.exception("delivery callback %r failed", fn)
            else:
                w.set()
