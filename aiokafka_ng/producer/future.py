"""The producer's delivery futures -- :class:`DeliveryFuture` (one record),
:class:`BatchDelivery` (a ``send_many`` run) -- their :class:`RecordMetadata`, and
:func:`finish_all`, which decides a batch's futures at once.

Theory of operation
-------------------
A :class:`DeliveryFuture` is one slotted object per record and, under asyncio, an asyncio
future as far as asyncio can tell: the protocol, cancellation and waiters are what every
delivery shares (``delivery.py``); its done-callbacks run together, one ``call_soon`` per
completed batch (``callbacks.py``).

The outcome is stored by reference to the record's batch: completing a batch of N records
does not build N ``RecordMetadata`` objects -- :meth:`DeliveryFuture.result` builds one.

A :class:`BatchDelivery` (``Producer.send_many``) is one such future for a whole run of
records: the accumulator holds it once per record, with the record's position in the run
beside it (``ProducerBatch.positions``). A batch holds a run's records as stretches (one
per ``place_run`` call; a batch may hold several runs and single records between them):
:func:`finish_all` finds the stretches in one compiled pass (``runs.run_stretches``), counts
each in one step and keeps the batch's outcome with its positions -- each record's offset
or error is still there to read, with no object and no interpreted step per record.

A run is decided only when every one of its records is, so a record the run counts but
that never reaches the accumulator would leave it pending for good -- and ``flush()``, which
waits for the run as the last entry of each batch holding some of it, with it. That is what
a ``send_many`` cancelled (or stopped) between its chunks would leave behind: the records
it had not queued are *withdrawn* (:meth:`BatchDelivery._withdraw`, called by the bulk
path), decided at once with an error of their own. They were never sent, so they are not
part of a transaction either: :meth:`Delivery.queued_error`, what a commit checks, leaves
them out (in the Java client a record whose ``send()`` was interrupted before it was
appended is not part of the transaction).

The cyclic GC: every tracked object a ``send()`` leaves alive counts toward a collection,
and thousands of records in flight outlive the young collections and end in full ones
(20-30% of the per-record patterns' time, measured; and the full ones set the send->ack
tail). So a record in flight is one tracked object, its future, whatever one callback
waits on it: the callback sits in the future's slots (``_waiters``, its context in
``_ctx``), not in a list or a tuple; a callback registered from an empty context keeps the
one shared empty context rather than a copy of its own; the completion lists are flat,
not a tuple per future; a delivered future and its ``RecordMetadata`` leave the GC's lists
(``_C_UNTRACK``); and nothing on the path forms a reference cycle (the batch drops its
futures when it completes), so finished records are freed by reference counting.

Offsets: ``RecordMetadata.offset`` is the batch's base offset plus the record's offset delta.
When the broker did not return a base offset -- acks=0, or a DUPLICATE_SEQUENCE_NUMBER answer
(the batch was already written; Tansu answers base offset -1 there, Kafka the original
offset) -- the offset is -1: the record *is* delivered, its offset is unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

from aiokafka_ng.producer.callbacks import EMPTY_CONTEXT as _EMPTY_CONTEXT  # noqa: F401
from aiokafka_ng.producer.callbacks import callbacks_run
from aiokafka_ng.producer.callbacks import dispatch as _dispatch
from aiokafka_ng.producer.delivery import PENDING, Delivery, FutureNotDoneError
from aiokafka_ng.producer.delivery import PENDING as _PENDING
from aiokafka_ng.producer.delivery import Cancelled as _Cancelled
from aiokafka_ng.producer.delivery import listed as _listed  # noqa: F401
from aiokafka_ng.producer.delivery import take_waiters as _take_waiters
from aiokafka_ng.producer.runs import run_stretches
from aiokafka_ng.protocol import speedups
from aiokafka_ng.protocol.record_reader import TopicPartition

__all__ = [
    "PENDING",
    "BatchDelivery",
    "Delivery",
    "DeliveryFuture",
    "FutureNotDoneError",
    "RecordMetadata",
    "callbacks_run",
    "fail_position",
    "finish_all",
    "run_members",
    "withdraw",
]

# ``PENDING``, ``_EMPTY_CONTEXT``, ``_listed``, ``callbacks_run``, ``Delivery`` and
# ``FutureNotDoneError`` are imported from here (the C ``send_fast``'s setup, the producer,
# tests): they were defined here before ``delivery.py`` and ``callbacks.py``.


class RecordMetadata(NamedTuple):
    """Where a record landed. ``offset`` is -1 when the broker did not say (acks=0).
    Attribute names as aiokafka's (``topic_partition`` included); the field order is ours
    (aiokafka's has ``topic_partition`` third, so positional code ported from it needs a look).

    A named tuple, as aiokafka's is: immutable, hashable, compared by value. (It was a
    frozen dataclass; building one of those costs ~370 ns, a tuple ~100 ns, and every
    awaited future and every ``gather`` result builds one.)"""

    topic: str
    partition: int
    offset: int
    timestamp: int
    #: 0: ``timestamp`` is the record's create time (the producer's clock or the caller's);
    #: 1: the topic has ``message.timestamp.type=LogAppendTime`` and ``timestamp`` is the
    #: broker's append time. The consumer's ``ConsumerRecord.timestamp_type`` means the same.
    timestamp_type: int = 0
    #: The partition's log start offset when the broker wrote the batch (Produce v5+), or
    #: -1 when the broker did not say (acks=0, older brokers). aiokafka's field.
    log_start_offset: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        """``TopicPartition(topic, partition)`` (aiokafka's field; a property here so the
        hot path still builds a 4-tuple)."""
        return TopicPartition(self.topic, self.partition)


#: Builds a RecordMetadata without the generated ``__new__``'s argument handling.
_tuple_new = tuple.__new__

#: The C kernel's ``untrack`` (None without it): a record's future, once delivered, leaves
#: the cyclic GC's lists. Delivered, it refers only to its topic (a str), ints, the loop and
#: its batch, whose list of futures was dropped when the batch completed (so no cycle runs
#: through it: ``Accumulator._finish``); its waiters were taken, and nothing sets a field of
#: a decided future. Callers often keep every future (``flush()`` then check each): tracked,
#: 200k of them made each full collection walk them all (GC time in the flush pattern
#: 125-156 -> 66-71 ms per 200k records). A failed future keeps its exception (whose
#: traceback may reach back to it) and stays tracked.
_C_UNTRACK = speedups.kernel(__name__).untrack


class DeliveryFuture(Delivery[RecordMetadata]):
    """The outcome of one ``send()``: awaitable, with ``add_done_callback``; an asyncio
    future to asyncio (``gather``, ``wait``, ``wait_for``, ``as_completed``, ``shield``)."""

    __slots__ = ()

    def result(self) -> RecordMetadata:
        # The delivered case without Delivery.result's checks: gather calls result() on
        # every future, and every awaited send() ends here.
        if self._exc is None and self._waiters.__class__ is not _Cancelled:
            return self._value()
        return super().result()

    def _finish(self, exc: BaseException | None) -> None:
        finish_all((self,), exc, self._loop)

    def _value(self) -> RecordMetadata:
        batch = self._batch
        assert batch is not None
        base = batch.base_offset
        ts = batch.log_append_time
        topic = self.topic
        md = _tuple_new(
            RecordMetadata,
            (
                topic,
                batch.partition,
                base + self._delta if base >= 0 else -1,
                ts if ts >= 0 else self._timestamp,
                1 if ts >= 0 else 0,
                batch.log_start_offset,
            ),
        )
        if topic.__class__ is str and _C_UNTRACK is not None:
            # A str and three ints (the timestamp was checked to be an int in send()):
            # it can be in no cycle. The collector untracks plain tuples like this at its
            # first pass, but not a tuple subclass: every gather result would be walked
            # by every collection until dropped (10k per gather window).
            _C_UNTRACK(md)
        return md


class BatchDelivery(Delivery[Sequence[RecordMetadata]]):
    """The outcome of :meth:`Producer.send_many`: one future for a whole run of records.

    Done once every record of the run is decided. Awaited (or ``result()``), it gives the
    records' metadata in run order -- a sequence that builds each ``RecordMetadata`` when
    read -- or raises the first error if any record failed. Each record's own outcome
    stays readable: ``metadata(i)`` (raises that record's error), ``errors()`` (position
    -> error of every failed record), ``failed``.

    How it is cheap: the accumulator holds this one object once per record -- a batch's
    ``futures`` list still has one entry per record, which sequence numbers, counts and
    splits go by -- and ``batch.positions`` says which record of the run each entry is.
    :func:`finish_all` counts each stretch of a run's entries in one step and keeps the
    batch's outcome with those positions; no object per record (also for records that
    waited for their topic's metadata: they wait as one queue entry per chunk). Records a
    custom partitioner places one by one get a per-record future of their own
    (``_RunMember``) that counts into the run when decided.

    ``withdrawn``: records of the run that were never queued, because its ``send_many``
    was cancelled first (see the module's docstring); they count as failed.
    """

    __slots__ = (
        "_errors", "_final", "_first_exc", "_members", "_placed", "_remaining",
        "_withdrawn_exc", "count", "failed", "withdrawn",
    )  # fmt: skip

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
        self.withdrawn = 0
        self._remaining = count
        self._first_exc: BaseException | None = None  # of a record that was queued
        self._withdrawn_exc: BaseException | None = None
        # Where the records went: (positions, first entry, partition, base offset,
        # log-append time, log start offset, error) per stretch of a batch; records failed
        # on their own; member futures.
        self._placed: list[tuple[list[int], int, int, int, int, int, Any]] = []
        self._errors: dict[int, BaseException] = {}
        self._members: list[_RunMember] = []
        self._final: list[Any] | None = None  # _outcomes() once the run is decided
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
        if self._remaining > 0:
            return _PENDING
        return self._first_exc if self._first_exc is not None else self._withdrawn_exc

    def queued_error(self) -> BaseException | None:
        """The first error of a record that was queued (None: all of them delivered);
        withdrawn records -- never sent -- do not count. ``FutureNotDoneError`` while
        undecided."""
        if self._exc is _PENDING:
            raise FutureNotDoneError("delivery is not decided yet")
        return self._first_exc

    def _landed(self, batch: Any, start: int, stop: int, exc: BaseException | None) -> None:
        """A batch holding records of this run is decided: its entries ``start:stop`` are
        records of this run (their offset deltas, since a batch has one entry per record)."""
        positions: list[int] = batch.positions
        if start or stop != len(positions):
            positions = positions[start:stop]
        base, partition, ts = batch.base_offset, batch.partition, batch.log_append_time
        self._placed.append((positions, start, partition, base, ts, batch.log_start_offset, exc))

    def _outcomes(self) -> list[Any]:
        """Per position: an error, a (partition, offset, timestamp, timestamp type, log
        start offset) tuple, a member future, or None while undecided. Built once the run
        is decided, before that on each call."""
        if self._final is not None:
            return self._final
        out: list[Any] = [None] * self.count
        for positions, first, partition, base, ts, lso, exc in self._placed:
            stamp = ts if ts >= 0 else self._timestamp
            kind = 1 if ts >= 0 else 0
            for k, pos in enumerate(positions):
                if exc is not None:
                    out[pos] = exc
                else:
                    offset = base + first + k if base >= 0 else -1
                    out[pos] = (partition, offset, stamp, kind, lso)
        for member in self._members:
            out[member.position] = member
        for pos, exc in self._errors.items():
            out[pos] = exc
        if self._exc is not _PENDING:
            self._final = out
        return out

    def metadata(self, index: int) -> RecordMetadata:
        """Record ``index`` of the run: its metadata, or raises its error
        (``FutureNotDoneError`` while it is undecided)."""
        return self._metadata(self._outcomes(), index)

    def _metadata(self, outcomes: list[Any], index: int) -> RecordMetadata:
        outcome = outcomes[index]
        if outcome is None or (isinstance(outcome, _RunMember) and not outcome.done()):
            raise FutureNotDoneError(f"record #{index} of the run is not decided yet")
        if isinstance(outcome, _RunMember):
            return outcome.result()
        if isinstance(outcome, BaseException):
            raise outcome
        return _tuple_new(RecordMetadata, (self.topic, *outcome))

    def errors(self) -> dict[int, BaseException]:
        """The records that failed so far: position in the run -> error."""
        out: dict[int, BaseException] = {}
        if not self.failed:  # every failure is counted: nothing to look for
            return out
        for i, outcome in enumerate(self._outcomes()):
            if isinstance(outcome, _RunMember):
                outcome = outcome._exc if outcome._exc is not _PENDING else None
            if isinstance(outcome, BaseException):
                out[i] = outcome
        return out

    def _finish(self, exc: BaseException | None) -> None:
        finish_all((self,), exc, self._loop)

    def _value(self) -> Sequence[RecordMetadata]:
        return _Delivered(self)

    def __repr__(self) -> str:
        return (
            f"<BatchDelivery {self.topic} {self.count - self._remaining}/{self.count} decided,"
            f" {self.failed} failed>"
        )


class _RunMember(DeliveryFuture):
    """One record of a :class:`BatchDelivery` that goes through the per-record path; it
    counts into its run when decided (:func:`finish_all`)."""

    __slots__ = ("position", "run")

    def __init__(self, run: BatchDelivery, position: int) -> None:
        super().__init__(run.topic, run._timestamp, run._loop)
        self.run = run
        self.position = position
        run._members.append(self)


class _Delivered(Sequence[RecordMetadata]):
    """A delivered run's metadata in run order, each built when read. Where each record
    landed is worked out on the first read, not when the run is awaited: a caller that
    only needs to know that the run succeeded pays nothing per record."""

    __slots__ = ("_run",)

    def __init__(self, run: BatchDelivery) -> None:
        self._run = run

    def __len__(self) -> int:
        return self._run.count

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...
    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...
    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        run = self._run
        if isinstance(index, slice):
            outcomes = run._outcomes()
            return [run._metadata(outcomes, i) for i in range(run.count)[index]]
        return run._metadata(run._outcomes(), index)

    def __iter__(self) -> Iterator[RecordMetadata]:
        run = self._run
        outcomes = run._outcomes()
        for i in range(run.count):
            yield run._metadata(outcomes, i)


def finish_all(
    futures: Iterable[Delivery[Any]],
    exc: BaseException | None,
    loop: asyncio.AbstractEventLoop | None,
    batch: Any = None,
) -> None:
    """Decide the delivery of ``futures`` (a batch's records). Their waiters run together:
    under asyncio in one ``loop.call_soon``; under trio right away. ``batch``: the
    ``ProducerBatch`` they are, when they are a whole batch (a run learns where its
    records landed)."""
    todo: list[Any] | None = None  # future, its waiters, future, its waiters, ...
    untrack = _C_UNTRACK
    members: list[_RunMember] | None = None
    if batch is not None and batch.positions is not None and isinstance(futures, list):
        # Entries of runs (send_many): each stretch of one run is counted in one step --
        # a batch of many records from a few runs is a few steps, not one per record.
        # What is left to decide one by one are the futures of single records.
        entries = futures
        bounds, futures = run_stretches(entries, batch.positions)
        for i in range(0, len(bounds), 2):
            start, stop = bounds[i], bounds[i + 1]
            run: BatchDelivery = entries[start]
            if run._exc is not _PENDING:
                continue
            run._landed(batch, start, stop, exc)
            outcome = run._count(exc, stop - start)
            if outcome is _PENDING:
                continue  # records of the run in other batches are still undecided
            run._exc = outcome
            run_ctx = run._ctx
            run_waiters = _take_waiters(run)
            if run_waiters is not None:
                if todo is None:
                    todo = []
                todo.append(run)
                todo.append(run_waiters)
                todo.append(run_ctx)
    for fut in futures:
        if fut._exc is not _PENDING:
            continue
        if fut.__class__ is BatchDelivery:
            outcome = fut._count(exc)
            if outcome is _PENDING:
                continue  # records of the run are still undecided
            fut._exc = outcome
        else:
            fut._exc = exc
            if fut.__class__ is _RunMember:
                if members is None:
                    members = []
                members.append(fut)
        waiters = fut._waiters
        if waiters is not None:
            if waiters.__class__ is _Cancelled:
                _take_waiters(fut)  # releases the delivery waits
            else:
                fut._waiters = None
                if todo is None:
                    todo = []
                todo.append(fut)
                todo.append(waiters)
                todo.append(fut._ctx)
                fut._ctx = None
        if (
            exc is None
            and untrack is not None
            and fut.__class__ is DeliveryFuture
            and fut.topic.__class__ is str
        ):
            untrack(fut)  # see _C_UNTRACK
    if todo is not None:
        _dispatch(loop, todo)
    if members is not None:
        for member in members:
            finish_all((member.run,), member._exc, loop)  # one record of the run decided


# A run's side for the producer (``send_many``, the accumulator): module functions, so the
# BatchDelivery users hold shows none of it.


def fail_position(run: BatchDelivery, position: int, exc: BaseException) -> None:
    """Record ``position`` of ``run`` failed on its own (too large, no memory, no
    partition): kept by position; counting it is ``decide``'s (or ``finish_all``'s)."""
    run._errors[position] = exc


def run_members(run: BatchDelivery, positions: Iterable[int]) -> list[Delivery[Any]]:
    """Per-record futures for records ``positions`` of ``run`` (placed one by one by a
    custom partitioner); each counts into the run when decided."""
    return [_RunMember(run, pos) for pos in positions]


def withdraw(run: BatchDelivery, positions: Sequence[int], exc: BaseException) -> None:
    """Records ``positions`` of ``run`` were never queued (its ``send_many`` was cancelled
    or stopped first): decide them now with ``exc``. The run is then decided as soon as
    the records it did queue are."""
    if not positions or run._exc is not _PENDING:
        return
    errors = run._errors
    for pos in positions:
        errors[pos] = exc
    n = len(positions)
    run.withdrawn += n
    run.failed += n
    if run._withdrawn_exc is None:
        run._withdrawn_exc = exc
    run._remaining -= n
    if run._remaining > 0:
        return
    run._exc = run._first_exc if run._first_exc is not None else exc
    ctx = run._ctx
    waiters = _take_waiters(run)
    if waiters is not None:
        _dispatch(run._loop, [run, waiters, ctx])
