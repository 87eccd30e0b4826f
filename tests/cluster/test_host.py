"""TaskHost: the work ``setup`` enters lives in a task of its own, so start() and stop() can
run in different tasks; errors and cancellations reach the right caller. No broker needed:
the host only runs task groups and context managers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest

from aiokafka_ng.cluster import TaskHost, enter_task_group

pytestmark = pytest.mark.anyio


class Work:
    """A stand-in for a client: a task group with one forever-running task."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.left = anyio.Event()
        self.task_cancelled = anyio.Event()

    async def forever(self) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            self.task_cancelled.set()

    @asynccontextmanager
    async def resource(self) -> AsyncIterator[None]:
        self.entered.set()
        try:
            yield
        finally:
            self.left.set()

    async def setup(self, stack: AsyncExitStack) -> None:
        await stack.enter_async_context(self.resource())
        tg = await enter_task_group(stack)
        tg.start_soon(self.forever)


async def test_start_and_stop_in_different_tasks(anyio_backend: str) -> None:
    host, work = TaskHost("test"), Work()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.start, work.setup)  # task A
        assert host.running and work.entered.is_set() and not work.left.is_set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.stop)  # task B
    assert not host.running
    assert work.left.is_set() and work.task_cancelled.is_set()
    await host.stop()  # idempotent


async def test_setup_error_is_raised_as_itself_and_unwinds(anyio_backend: str) -> None:
    host, work = TaskHost("test"), Work()

    async def setup(stack: AsyncExitStack) -> None:
        await work.setup(stack)
        raise ValueError("bad setup")

    with anyio.fail_after(5), pytest.raises(ValueError, match="bad setup"):
        await host.start(setup)
    assert not host.running and work.left.is_set() and work.task_cancelled.is_set()
    await host.stop()  # nothing left to raise


async def test_start_cancelled_takes_the_host_down(anyio_backend: str) -> None:
    host = TaskHost("test")
    left = anyio.Event()
    in_setup = anyio.Event()

    async def slow_setup(stack: AsyncExitStack) -> None:
        stack.callback(left.set)
        in_setup.set()
        await anyio.sleep_forever()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.start, slow_setup)
            await in_setup.wait()
            tg.cancel_scope.cancel()
    assert left.is_set() and not host.running


async def test_stop_cancelled_forces_the_teardown(anyio_backend: str) -> None:
    host = TaskHost("test")
    teardown_started = anyio.Event()
    teardown_cancelled = anyio.Event()

    @asynccontextmanager
    async def slow_exit() -> AsyncIterator[None]:
        yield
        teardown_started.set()
        try:
            await anyio.sleep_forever()
        finally:
            teardown_cancelled.set()

    async def setup(stack: AsyncExitStack) -> None:
        await stack.enter_async_context(slow_exit())

    with anyio.fail_after(5):
        await host.start(setup)
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.stop)
            await teardown_started.wait()
            tg.cancel_scope.cancel()  # the closer gives up: the host must not linger
    assert teardown_cancelled.is_set() and not host.running


class EventHandler(logging.Handler):
    """Sets ``seen`` when a record is logged (the host logs from its own task)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen = anyio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()


async def test_background_failure_is_logged_and_raised_by_stop(anyio_backend: str) -> None:
    host = TaskHost("test-host")

    async def boom() -> None:
        raise RuntimeError("a bug in a background task")

    async def setup(stack: AsyncExitStack) -> None:
        tg = await enter_task_group(stack)
        tg.start_soon(boom)

    handler = EventHandler()
    logger = logging.getLogger("aiokafka_ng.cluster.host")
    logger.addHandler(handler)
    try:
        with anyio.fail_after(5):
            await host.start(setup)
            await handler.seen.wait()  # the failure ends the host, not start()'s caller
            assert not host.running
            with pytest.raises(ExceptionGroup) as info:
                await host.stop()
    finally:
        logger.removeHandler(handler)
    assert info.group_contains(RuntimeError, match="a bug")
    assert handler.messages == ["test-host: background work failed"]


async def test_a_host_starts_once(anyio_backend: str) -> None:
    host, work = TaskHost("test"), Work()
    with anyio.fail_after(5):
        await host.start(work.setup)
        with pytest.raises(RuntimeError, match="already started"):
            await host.start(work.setup)
        await host.stop()
