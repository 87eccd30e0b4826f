"""What every delivery future of the producer is: :class:`Delivery`, the state, waiters and
asyncio future protocol that :class:`~aiokafka_ng.producer.future.DeliveryFuture` (one
record) and :class:`~aiokafka_ng.producer.future.BatchDelivery` (a run of records) share.
How a batch decides them is ``future.finish_all``; how their callbacks run is ``callbacks``.

Theory of operation
-------------------
A ``DeliveryFuture`` is one slotted object per record. Under asyncio it *is* an asyncio
future as far as asyncio can tell (``asyncio.isfuture`` is true): it has the class attribute
``_asyncio_future_blocking``, ``get_loop()`` and ``add_done_callback(fn, *, context=None)``,
and its ``__await__`` yields itself to the Task, exactly as ``asyncio.Future`` does. So
``gather``/``wait``/``wait_for``/``as_completed``/``shield``/``ensure_future`` use it directly
-- no Task per record (a duck-typed future is what asyncio's ``isfuture`` and the Task's
step function were written to accept) -- and awaiting one allocates nothing.

Under trio there is no loop: awaiting waits on an ``anyio.Event`` created only when someone
awaits, and done-callbacks run when the batch completes, as before.

Cancellation: ``cancel()`` detaches the *waiters* (the future becomes cancelled, awaiting it
raises ``CancelledError``); the record itself is not taken back -- it may already be on the
wire -- and is delivered or fails as usual (aiokafka and the Java client behave the same).
The producer's own waits (flush, close, transaction abort) follow the delivery, not the
future, through waiters that cancellation leaves alone.

The cyclic GC (see ``future.py`` for the whole story): a record in flight is one tracked
object, its future, whatever one callback waits on it: the callback sits in the future's
slots (``_waiters``, its context in ``_ctx``), not in a list or a tuple.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Generator
from typing import Any, Generic, Protocol, TypeVar

import anyio

from aiokafka_ng.errors import IllegalStateError
from aiokafka_ng.producer.callbacks import Callback
from aiokafka_ng.producer.callbacks import caller_context as _caller_context
from aiokafka_ng.producer.callbacks import dispatch as _dispatch


class Placed(Protocol):
    """Where a record's batch was written, as its delivery reads it once done: the batch
    (``batch.ProducerBatch``, which imports this module through ``future``; a protocol here
    keeps the two from importing each other)."""

    @property
    def partition(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_time(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...


__all__ = [
    "PENDING",
    "Cancelled",
    "Delivery",
    "FutureNotDoneError",
    "bind_entries",
    "bind_entry",
    "decide",
    "listed",
    "take_waiters",
]

T = TypeVar("T")


class FutureNotDoneError(IllegalStateError, asyncio.InvalidStateError):
    """``result()``/``exception()`` of a pending future (asyncio's ``InvalidStateError``)."""


#: ``DeliveryFuture._exc`` while the outcome is unknown (None once delivered).
_PENDING: BaseException = Exception("pending")
#: The same, for the C ``send_fast`` (``intake.bind_send_fast``), which makes futures too.
PENDING = _PENDING

# A waiter is a user's done-callback with the context it runs in (asyncio's rule), or --
# an ``anyio.Event`` -- one of the producer's own waits for the *delivery*, which
# cancelling the future does not release. ``_waiters`` holds None; one callback as it is,
# its context in ``_ctx`` (the common case: a gather's, a Task's or a user's one callback);
# a list of waiters, each callback there as a (callback, context) tuple; or
# ``Cancelled``. So a pending future with one callback is one object for the cyclic GC,
# not three (no list, no tuple): see "The cyclic GC" above.


class Cancelled:
    """``DeliveryFuture._waiters`` once cancelled: the message and the producer's own
    delivery waits, which still wait for the record's real outcome."""

    __slots__ = ("events", "msg")

    def __init__(self, msg: Any, events: list[anyio.Event]) -> None:
        self.msg = msg
        self.events = events


class Delivery(Generic[T]):
    """What :class:`DeliveryFuture` (one record) and :class:`BatchDelivery` (a run of
    records) share: the delivery state, waiters and callbacks, and the asyncio future
    protocol. ``result()`` gives a ``T`` once delivered."""

    # Eight slots (96 bytes with the GC header): one lives per record in flight, and
    # buffer_memory accounts for it. ``_exc`` is the delivery state (``_PENDING`` until the
    # producer knows); ``_waiters`` holds callbacks and waits, or ``Cancelled``; ``_ctx``
    # the context of a lone callback in ``_waiters``.
    __slots__ = ("_batch", "_ctx", "_delta", "_exc", "_loop", "_timestamp", "_waiters", "topic")

    def __init__(
        self, topic: str, timestamp_ms: int, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.topic = topic
        self._timestamp = timestamp_ms
        self._loop = loop
        self._batch: Placed | None = None
        self._delta = 0
        self._exc: BaseException | None = _PENDING
        self._waiters: Any = None  # None, a callback, a list of waiters, or Cancelled
        self._ctx: contextvars.Context | None = None

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
        return asyncio.CancelledError(waiters.msg if isinstance(waiters, Cancelled) else None)

    # ------------------------------------------------------------------ consumer side

    def done(self) -> bool:
        return self._exc is not _PENDING or self._waiters.__class__ is Cancelled

    def cancelled(self) -> bool:
        return self._waiters.__class__ is Cancelled

    def result(self) -> T:
        """The delivered value; raises the delivery error, ``CancelledError`` if
        cancelled, ``FutureNotDoneError`` (an ``asyncio.InvalidStateError``) if pending."""
        if self._waiters.__class__ is Cancelled:
            raise self._make_cancelled_error()
        exc = self._exc
        if exc is not None:
            if exc is _PENDING:
                raise FutureNotDoneError("delivery future is not done yet")
            raise exc
        return self._value()

    def _value(self) -> T:
        raise NotImplementedError

    def exception(self) -> BaseException | None:
        if self._waiters.__class__ is Cancelled:
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
        waiters = self._waiters
        if self._exc is not _PENDING or waiters.__class__ is Cancelled:  # done()
            if loop is not None:
                _dispatch(loop, [self, fn, _caller_context() if context is None else context])
            else:
                fn(self)  # in the caller's own task: its exception is the caller's
            return
        if loop is not None and context is None:
            context = _caller_context()
        if waiters is None and fn is not None:
            self._waiters = fn
            self._ctx = context
        elif waiters is None:
            self._waiters = [(fn, context)]  # None is not a lone callback's mark
        elif waiters.__class__ is list:
            waiters.append((fn, context))
        else:
            self._waiters = [(waiters, self._ctx), (fn, context)]
            self._ctx = None

    def remove_done_callback(self, fn: Callback) -> int:
        """Remove every registration of ``fn``; return how many there were."""
        waiters = listed(self)
        keep = [w for w in waiters if w.__class__ is not tuple or w[0] != fn]
        removed = len(waiters) - len(keep)
        if removed:
            self._set_waiters(keep)
        return removed

    def _set_waiters(self, waiters: list[Any]) -> None:
        """Keep ``waiters`` (of a pending future) in their most compact form."""
        self._ctx = None
        if not waiters:
            self._waiters = None
        elif len(waiters) == 1 and waiters[0].__class__ is tuple and waiters[0][0] is not None:
            self._waiters, self._ctx = waiters[0]
        else:
            self._waiters = waiters

    def cancel(self, msg: Any = None) -> bool:
        """Detach the waiters: the future becomes cancelled. The record is *not* taken
        back -- it is delivered (or fails) as if nothing happened. False if already done."""
        if self.done():
            return False
        events: list[anyio.Event] = []
        callbacks: list[Any] = []
        for w in listed(self):
            (callbacks if w.__class__ is tuple else events).append(w)
        self._waiters = Cancelled(msg, events)
        self._ctx = None
        if callbacks:
            _dispatch(self._loop, [self, callbacks, None])
        return True

    def __await__(self) -> Generator[Any, None, T]:
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
            elif waiters.__class__ is Cancelled:
                waiters.events.append(event)
            elif waiters.__class__ is list:
                waiters.append(event)
            else:
                self._waiters = [(waiters, self._ctx), event]
                self._ctx = None
            await event.wait()

    async def wait(self) -> T:
        return await self

    def delivery_error(self) -> BaseException | None:
        """The record's own outcome (None: delivered), whether or not the future was
        cancelled; ``FutureNotDoneError`` while undecided."""
        if self._exc is _PENDING:
            raise FutureNotDoneError("delivery is not decided yet")
        return self._exc

    def queued_error(self) -> BaseException | None:
        """The outcome of what was queued (what a transaction's commit checks):
        ``delivery_error()``, except that a run leaves out its withdrawn records."""
        return self.delivery_error()

    def _finish(self, exc: BaseException | None) -> None:
        """Decide the delivery with ``exc`` (None: delivered): ``finish_all`` for this one
        future, which the subclasses call (it lives beside them, in ``future.py``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        if self.cancelled():
            state = "cancelled"
        else:
            exc = self._exc
            state = "pending" if exc is _PENDING else ("failed" if exc else "done")
        return f"<{type(self).__name__} {self.topic} {state}>"


def listed(fut: Delivery[Any]) -> list[Any]:
    """A future's waiters as a list, a callback as a (callback, context) tuple (empty for
    none or a cancelled future's)."""
    waiters = fut._waiters
    if waiters is None or waiters.__class__ is Cancelled:
        return []
    return waiters if waiters.__class__ is list else [(waiters, fut._ctx)]


def take_waiters(fut: Delivery[Any]) -> Any:
    """A just-decided future's callbacks and waits to run, taken off it (a lone callback's
    context is ``fut._ctx``, read before); a cancelled future's delivery waits are released
    here (its callbacks ran when it was cancelled)."""
    waiters = fut._waiters
    if waiters is None:
        return None
    if isinstance(waiters, Cancelled):
        for event in waiters.events:
            event.set()
        waiters.events = []
        return None
    fut._waiters = None
    fut._ctx = None
    return waiters


# The producer's side of a future, for the accumulator and ``send()``/``send_many``: module
# functions, not methods, so the futures users hold show none of it. ``bind_entry`` is called
# once per record on the Python send path; ``bind_entries`` keeps a run's loop in one call.


def bind_entry(fut: Delivery[Any], batch: Placed, delta: int) -> None:
    """``fut``'s record is entry ``delta`` of ``batch`` (read once the batch is decided)."""
    fut._batch = batch
    fut._delta = delta


def bind_entries(futures: list[Any], start: int, stop: int, batch: Placed, delta: int) -> None:
    """``futures[start:stop]`` are consecutive entries of ``batch`` from ``delta`` on."""
    for j in range(start, stop):
        fut = futures[j]
        fut._batch = batch
        fut._delta = delta
        delta += 1


def decide(fut: Delivery[Any], exc: BaseException | None) -> None:
    """Decide ``fut``'s delivery alone (``exc``; None: delivered) -- a record that failed
    before it reached a batch."""
    fut._finish(exc)
