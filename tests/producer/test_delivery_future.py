"""DeliveryFuture: awaitable on asyncio and trio, callbacks, errors, states."""

from __future__ import annotations

import contextvars
import gc
import logging

import anyio
import pytest

from aiokafka_ng.errors import IllegalStateError, KafkaTimeoutError
from aiokafka_ng.producer.delivery import bind_entry
from aiokafka_ng.producer.future import DeliveryFuture, RecordMetadata, finish_all, withdraw

# The futures are driven through the producer's side of them -- ``bind_entry`` (where a record
# landed) and ``finish_all`` (a batch decided) -- the calls the accumulator makes, not
# their slots.


class FakeBatch:
    partition = 3
    base_offset = 100
    log_append_time = -1
    log_start_offset = -1


class UnknownOffsetBatch:
    """A batch the broker gave no base offset for, written at log-append time 9."""

    partition = 1
    base_offset = -1
    log_append_time = 9
    log_start_offset = 4


def deliver(fut: DeliveryFuture, exc: BaseException | None = None) -> None:
    """Decide ``fut`` as its batch's completion does (None: delivered)."""
    finish_all([fut], exc, None)


def containers(fut: DeliveryFuture) -> list[type]:
    """The lists, tuples and dicts ``fut`` refers to: each one more object for the GC."""
    return [type(o) for o in gc.get_referents(fut) if isinstance(o, (list, tuple, dict))]


def test_pending_state_raises() -> None:
    fut = DeliveryFuture("t", 7)
    assert not fut.done()
    with pytest.raises(IllegalStateError):
        fut.result()
    with pytest.raises(IllegalStateError):
        fut.exception()
    assert "pending" in repr(fut)


@pytest.mark.anyio
async def test_await_and_callbacks_in_order() -> None:
    fut = DeliveryFuture("t", 7)
    bind_entry(fut, FakeBatch(), 2)
    seen: list[str] = []
    fut.add_done_callback(lambda f: seen.append("cb1"))
    results: list[RecordMetadata] = []

    async def waiter() -> None:
        results.append(await fut)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        fut.add_done_callback(lambda f: seen.append("cb2"))
        deliver(fut)
        deliver(fut, KafkaTimeoutError("late"))  # a second outcome is ignored
    assert results == [RecordMetadata("t", 3, 102, 7)]
    assert seen == ["cb1", "cb2"]
    fut.add_done_callback(lambda f: seen.append("cb3"))  # already done: called at once
    assert seen[-1] == "cb3" and fut.exception() is None and "done" in repr(fut)


def test_result_is_an_immutable_record_metadata() -> None:
    fut = DeliveryFuture("t", 7)
    bind_entry(fut, FakeBatch(), 5)
    deliver(fut)
    meta = fut.result()
    # Built by the fast path, it is the same value as one built by its constructor.
    assert type(meta) is RecordMetadata
    assert meta == RecordMetadata(topic="t", partition=3, offset=105, timestamp=7)
    assert (meta.topic, meta.partition, meta.offset, meta.timestamp) == ("t", 3, 105, 7)
    assert hash(meta) == hash(RecordMetadata("t", 3, 105, 7))
    assert repr(meta) == (
        "RecordMetadata(topic='t', partition=3, offset=105, timestamp=7, timestamp_type=0,"
        " log_start_offset=-1)"
    )
    assert meta._asdict() == {
        "topic": "t",
        "partition": 3,
        "offset": 105,
        "timestamp": 7,
        "timestamp_type": 0,
        "log_start_offset": -1,
    }
    with pytest.raises(AttributeError):
        meta.offset = 1  # type: ignore[misc]
    unknown = DeliveryFuture("t", 7)
    bind_entry(unknown, UnknownOffsetBatch(), 0)
    deliver(unknown)  # no offset from the broker; log-append time wins, and says so
    assert unknown.result() == RecordMetadata("t", 1, -1, 9, timestamp_type=1, log_start_offset=4)


@pytest.mark.anyio
async def test_failure_and_wait_done() -> None:
    fut = DeliveryFuture("t", 7)
    deliver(fut, KafkaTimeoutError("expired"))
    await fut.wait_done()  # does not raise
    with pytest.raises(KafkaTimeoutError):
        await fut
    assert isinstance(fut.exception(), KafkaTimeoutError) and "failed" in repr(fut)


def test_callback_error_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    fut = DeliveryFuture("t", 7)
    fut.add_done_callback(lambda f: 1 / 0)
    later: list[bool] = []
    fut.add_done_callback(lambda f: later.append(True))
    bind_entry(fut, FakeBatch(), 0)
    with caplog.at_level(logging.ERROR):
        deliver(fut)
    assert later == [True]  # the next callback still ran
    assert "delivery callback" in caplog.text


def test_finish_all_counts_a_runs_entries_in_one_step_or_one_by_one() -> None:
    from aiokafka_ng.producer.future import BatchDelivery, finish_all

    # A batch holding only one run's entries is counted at once (the fast path); a batch
    # mixing them with other futures entry by entry. The outcome must be the same.
    boom = KafkaTimeoutError("batch failed")
    for mixed in (False, True):
        run = BatchDelivery("t", 1, None, 5)
        other = DeliveryFuture("t", 1)
        seen: list[BaseException | None] = []
        run.add_done_callback(lambda f, seen=seen: seen.append(f.exception()))
        first = [run, run, other] if mixed else [run, run]
        finish_all(first, boom, None)
        assert not run.done() and run.failed == 2
        assert other.done() == mixed
        finish_all([run, run, run], None, None)
        assert run.done() and (run.failed, run.count) == (2, 5)
        assert run.exception() is boom and seen == [boom]
        finish_all([run], None, None)  # a late outcome for a decided run changes nothing
        assert run.failed == 2 and seen == [boom]


def test_withdrawn_records_decide_a_run_without_counting_for_a_commit() -> None:
    from aiokafka_ng.errors import KafkaError
    from aiokafka_ng.producer.future import BatchDelivery, FutureNotDoneError, finish_all

    # What a cancelled send_many leaves: records 2-4 never queued. The run is decided once
    # the queued ones are -- or at once if they already were -- and its callbacks run once.
    gone = KafkaError("not queued")
    boom = KafkaTimeoutError("batch failed")
    for queued_outcome in (None, boom):
        run = BatchDelivery("t", 1, None, 5)
        seen: list[BaseException | None] = []
        run.add_done_callback(lambda f, seen=seen: seen.append(f.exception()))
        withdraw(run, range(2, 5), gone)
        assert not run.done() and (run.withdrawn, run.failed) == (3, 3) and seen == []
        with pytest.raises(FutureNotDoneError):
            run.queued_error()
        finish_all([run, run], queued_outcome, None)
        first = gone if queued_outcome is None else boom  # a queued record's error first
        assert run.done() and run.exception() is first and seen == [first]
        assert run.queued_error() is queued_outcome  # what a transaction's commit checks
        assert {i: e for i, e in run.errors().items() if i >= 2} == {2: gone, 3: gone, 4: gone}
    late = BatchDelivery("t", 1, None, 3)
    finish_all([late], None, None)
    seen = []
    late.add_done_callback(lambda f: seen.append(f.exception()))
    withdraw(late, [1, 2], gone)  # the queued record was already delivered: decided now
    assert late.done() and seen == [gone] and late.queued_error() is None


@pytest.mark.anyio
async def test_one_waiter_is_kept_as_is_and_several_as_a_list(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One callback costs the future no list and no tuple for the GC to count (a record in
    # flight stays one tracked object: see future.py); several take one list. Every path --
    # a second callback, a delivery wait, removal, cancellation, delivery -- sees all of
    # them. Seen through the GC's own view of the future (gc.get_referents), not its slots.
    fut = DeliveryFuture("t", 7)
    seen: list[str] = []

    def first(f: DeliveryFuture) -> None:
        seen.append("first")

    def second(f: DeliveryFuture) -> None:
        seen.append("second")

    fut.add_done_callback(first)
    assert containers(fut) == [] and first in gc.get_referents(fut)
    assert fut.remove_done_callback(first) == 1 and first not in gc.get_referents(fut)
    fut.add_done_callback(first)
    fut.add_done_callback(second)
    assert containers(fut) == [list]
    assert fut.remove_done_callback(first) == 1
    assert containers(fut) == [] and second in gc.get_referents(fut)  # one left: as is
    woke: list[bool] = []

    async def wait_done(f: DeliveryFuture) -> None:
        await f.wait_done()
        woke.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_done, fut)
        await anyio.wait_all_tasks_blocked()
        assert containers(fut) == [list]  # the callback and the delivery wait
        bind_entry(fut, FakeBatch(), 0)
        deliver(fut)
        await anyio.wait_all_tasks_blocked()
        assert woke == [True]
    assert seen == ["second"]
    # Delivered, the future lets go of its waiters and their context (nothing on it can
    # lead back to it any more).
    refs = gc.get_referents(fut)
    assert containers(fut) == [] and second not in refs
    assert not any(isinstance(o, contextvars.Context) for o in refs)
    # A lone delivery wait, then cancellation: the wait still follows the delivery.
    fut2 = DeliveryFuture("t", 7)
    woke.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_done, fut2)
        await anyio.wait_all_tasks_blocked()
        fut2.add_done_callback(lambda f: seen.append("cancelled"))
        assert fut2.cancel()
        await anyio.wait_all_tasks_blocked()
        assert woke == []  # cancelled, not delivered: the wait goes on
        bind_entry(fut2, FakeBatch(), 0)
        deliver(fut2)
        await anyio.wait_all_tasks_blocked()
        assert woke == [True]
    assert seen == ["second", "cancelled"] and fut2.delivery_error() is None
    # None is no callback's mark: registered, it is kept beside the next callback (and
    # fails when called, as asyncio's would; the failure is logged, the delivery goes on).
    fut3 = DeliveryFuture("t", 7)
    fut3.add_done_callback(None)  # type: ignore[arg-type]
    fut3.add_done_callback(lambda f: seen.append("after None"))
    assert not fut3.done()
    bind_entry(fut3, FakeBatch(), 0)
    with caplog.at_level(logging.ERROR):
        deliver(fut3)
    assert fut3.done() and fut3.result().offset == 100
    assert seen[-1] == "after None" and "delivery callback" in caplog.text


def test_a_delivered_future_leaves_the_gc_lists_a_failed_one_stays() -> None:
    # Delivered, a future refers to nothing that could lead back to it (see
    # future._C_UNTRACK): untracked where the C kernel is built. Pending or failed (its
    # exception's traceback may reach it), it stays tracked.
    import gc

    from aiokafka_ng.protocol import speedups

    delivered, failed = DeliveryFuture("t", 7), DeliveryFuture("t", 8)
    assert gc.is_tracked(delivered) and gc.is_tracked(failed)
    bind_entry(delivered, FakeBatch(), 0)
    bind_entry(failed, FakeBatch(), 0)
    deliver(delivered)
    deliver(failed, KafkaTimeoutError("expired"))
    assert gc.is_tracked(delivered) is not speedups.AVAILABLE
    assert gc.is_tracked(failed)
    assert delivered.result().offset == 100
