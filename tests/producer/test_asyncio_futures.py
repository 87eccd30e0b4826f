"""Delivery futures are asyncio futures to asyncio: gather, wait, wait_for, as_completed,
shield and ensure_future use them directly (no Task per record), against the real broker.
Under trio, awaiting and done-callbacks keep working."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiokafka_ng.errors import KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka_ng.producer import Producer, RecordMetadata
from aiokafka_ng.producer.future import DeliveryFuture, FutureNotDoneError
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


class TaskCounter:
    """Counts the Tasks the loop creates while installed: gather/wait make one per
    awaitable that is not a future (2,000 here); the producer may start a sender or two."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.count = 0
        self._old = self.loop.get_task_factory()

    def __enter__(self) -> TaskCounter:
        def factory(loop: Any, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            self.count += 1
            return asyncio.Task(coro, loop=loop, **kw)

        self.loop.set_task_factory(factory)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.set_task_factory(self._old)


@asyncio_only
async def test_gather_uses_the_futures_directly(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        futs = [await producer.send(topic, b"v%d" % i, key=b"k") for i in range(2000)]
        assert all(asyncio.isfuture(f) for f in futs)
        assert futs[0].get_loop() is asyncio.get_running_loop()
        assert asyncio.ensure_future(futs[0]) is futs[0]
        with TaskCounter() as tasks:
            results = await asyncio.gather(*futs)
        # Wrapping each future would make 2000 tasks; the few there are belong to the
        # producer itself (a connection per broker: 3 on Apache Kafka, metadata, ...).
        assert tasks.count < 50
        assert [r.offset for r in results] == list(range(2000))
        assert all(isinstance(r, RecordMetadata) and r.topic == topic for r in results)


@asyncio_only
async def test_wait_first_exception_and_gather_return_exceptions(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, max_request_size=10_000
    ) as producer:
        good = [await producer.send(topic, b"x", partition=0) for _ in range(50)]
        bad = await producer.send(topic, b"y" * 20_000, partition=0)  # fails alone
        with TaskCounter() as tasks:
            done, _ = await asyncio.wait([*good, bad], return_when=asyncio.FIRST_EXCEPTION)
            assert bad in done
            assert isinstance(bad.exception(), MessageSizeTooLargeError)
            out = await asyncio.gather(*good, bad, return_exceptions=True)
        # Wrapping each future would make 2000 tasks; the few there are belong to the
        # producer itself (a connection per broker: 3 on Apache Kafka, metadata, ...).
        assert tasks.count < 50
        assert isinstance(out[-1], MessageSizeTooLargeError)
        assert [m.offset for m in out[:-1]] == list(range(50))  # type: ignore[union-attr]
        with pytest.raises(MessageSizeTooLargeError):
            await asyncio.gather(*good, bad)


@asyncio_only
async def test_wait_for_as_completed_and_shield(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        fut = await producer.send(topic, b"a")
        md = await asyncio.wait_for(fut, timeout=10)
        assert md.offset == 0
        futs = [await producer.send(topic, b"b", partition=md.partition) for _ in range(20)]
        with TaskCounter() as tasks:
            offsets = sorted([(await f).offset for f in asyncio.as_completed(futs)])
        # Wrapping each future would make 2000 tasks; the few there are belong to the
        # producer itself (a connection per broker: 3 on Apache Kafka, metadata, ...).
        assert tasks.count < 50
        assert offsets == list(range(1, 21))
        fut = await producer.send(topic, b"c", partition=md.partition)
        assert (await asyncio.shield(fut)).offset == 21


@asyncio_only
async def test_cancelling_a_waiter_detaches_it_and_the_record_still_goes(
    kafka_broker: Any,
) -> None:
    topic = topic_name()
    # A long linger keeps the records queued while the waiters are cancelled.
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=60_000
    ) as producer:
        first = await producer.send(topic, b"first", partition=0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(first, timeout=0.05)  # wait_for cancels the future
        assert first.cancelled() and first.done()
        with pytest.raises(asyncio.CancelledError):
            first.result()

        second = await producer.send(topic, b"second", partition=0)
        waiter = asyncio.ensure_future(asyncio.gather(second))
        await asyncio.sleep(0)  # let gather attach its callback
        waiter.cancel()  # cancels gather, which cancels `second`
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert second.cancelled()
        assert second.cancel() is False  # already done

        third = await producer.send(topic, b"third", partition=0)
        seen: list[RecordMetadata] = []
        third.add_done_callback(lambda f: seen.append(f.result()))
        await producer.flush()  # follows the records, not the cancelled futures
        assert first.cancelled() and second.cancelled()
        assert seen and seen[0].offset == 2  # first and second were written before it
        await asyncio.sleep(0)


@asyncio_only
async def test_callbacks_run_from_the_loop_in_their_context(kafka_broker: Any) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        fut = await producer.send(topic, b"v")
        seen: list[tuple[str, bool]] = []
        var.set("mine")

        def cb(f: DeliveryFuture) -> None:
            seen.append((var.get(), f.done()))

        fut.add_done_callback(cb)
        fut.add_done_callback(cb)
        assert fut.remove_done_callback(cb) == 2
        fut.add_done_callback(cb)
        other = contextvars.Context()
        fut.add_done_callback(cb, context=other)
        await fut
        await asyncio.sleep(0)  # callbacks run in the same loop turn as the Task's wake-up
        assert seen == [("mine", True), ("unset", True)]
        fut.add_done_callback(cb)  # done already: scheduled, not called inline
        assert len(seen) == 2
        await asyncio.sleep(0)
        assert seen[-1] == ("mine", True)


async def test_await_and_callbacks_work_on_both_backends(
    kafka_broker: Any, anyio_backend: str
) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        futs = [await producer.send(topic, b"v%d" % i, partition=1) for i in range(100)]
        got = anyio.Event()
        seen: list[int] = []

        def cb(f: DeliveryFuture) -> None:
            seen.append(f.result().offset)
            if len(seen) == 100:
                got.set()

        for f in futs:
            f.add_done_callback(cb)
        assert [(await f).offset for f in futs] == list(range(100))
        with anyio.fail_after(10):
            await got.wait()
        assert seen == list(range(100))
        assert asyncio.isfuture(futs[0]) is (anyio_backend == "asyncio")


def test_pending_future_states_follow_asyncio() -> None:
    fut = DeliveryFuture("t", 1)
    with pytest.raises(asyncio.InvalidStateError):
        fut.result()
    with pytest.raises(FutureNotDoneError):
        fut.exception()
    assert fut.cancel("bye") is True
    with pytest.raises(asyncio.CancelledError, match="bye"):
        fut.exception()
    fut._finish(KafkaTimeoutError("late"))  # the record's outcome arrives later
    assert fut.cancelled() and "cancelled" in repr(fut)
    with pytest.raises(RuntimeError):
        fut.get_loop()


@asyncio_only
async def test_flush_returns_after_every_done_callback_ran(kafka_broker: Any) -> None:
    # A batch finished before flush() was called has its callbacks queued for the next loop
    # turn; flush() must not return before they ran (the bench/soak harness caught it).
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        for _ in range(5):
            seen: list[int] = []
            futs = [await producer.send(topic, b"v", partition=0) for _ in range(200)]
            for f in futs:
                f.add_done_callback(lambda f, seen=seen: seen.append(1))
            # done() turns true when the batch completes; its callbacks then wait for the
            # next loop turn. Yield turn by turn (no timing) and flush the moment it is done.
            while not futs[-1].done():
                await anyio.lowlevel.checkpoint()
            await producer.flush()
            assert len(seen) == 200


@asyncio_only
async def test_callbacks_run_waits_for_queued_callbacks() -> None:
    from aiokafka_ng.producer.future import callbacks_run, finish_all

    loop = asyncio.get_running_loop()
    fut = DeliveryFuture("t", 1, loop)
    fut._batch = type(  # type: ignore[assignment]
        "B", (), {"partition": 0, "base_offset": 5, "log_append_time": -1, "log_start_offset": -1}
    )()
    ran: list[int] = []
    fut.add_done_callback(lambda f: ran.append(f.result().offset))
    finish_all([fut], None, loop)
    assert ran == []  # queued for the loop, as asyncio does
    await callbacks_run(loop)
    assert ran == [5]
    await callbacks_run(loop)  # nothing queued: returns at once
