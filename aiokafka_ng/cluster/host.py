"""TaskHost: a client's background machinery in a task of its own (the host of every
client's :class:`~aiokafka_ng.cluster.runtime.ClientRuntime`).

Theory of operation
-------------------
A client's background work (the cluster's connection and refresher tasks, the producer's
senders, the consumer's fetcher) lives in anyio task groups. A task group's cancel scope
must be left by the task that entered it. If ``start()`` entered them in the caller's task,
``close()`` would have to run in that same task -- but web frameworks run startup and
shutdown hooks in different tasks (aiohttp's ``on_startup``/``on_cleanup``, Starlette's
old ``startup``/``shutdown`` events, ``await asyncio.create_task(client.start())``), and
anyio then fails with "Attempted to exit cancel scope in a different task".

So ``start()`` spawns one **host task** that is nobody's child: under asyncio a task of the
running loop (``loop.create_task``), under trio a system task
(``trio.lowlevel.spawn_system_task``; KeyboardInterrupt is never delivered to it, and trio
cancels it if the program ends without closing the client). anyio has no portable call for
this: its task groups are always some task's children, and ``from_thread`` would run the
work on another event loop, where the delivery futures and events of the client's callers
cannot be used. The host task:

1. runs ``setup(stack)`` -- the runtime enters the client's cluster and task group into
   ``stack``, so they are entered in the host task -- and reports success or the error to
   ``start()``;
2. waits until ``stop()`` asks it to leave;
3. leaves ``stack`` (in the host task, as anyio requires) and reports to ``stop()``.

Any task may call ``start()`` and ``stop()``; ``async with client`` works as before. A
caller cancelled while waiting is not left with a half-open client: ``start()`` then stops
the host before re-raising, and ``stop()`` cancels the host's teardown and waits for it
(cleanup is shielded; sockets are closed either way).

The host catches ``Exception`` from its work: a system task that raised would crash the
whole trio run, and an asyncio task's unretrieved exception is only a warning at exit. The
error goes to whoever waits (``start()`` or ``stop()``), or is logged if the host died on its
own (a bug: the runtime supervises the clients' tasks).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

__all__ = ["TaskHost", "enter_task_group"]

log = logging.getLogger(__name__)

Setup = Callable[[AsyncExitStack], Awaitable[None]]


class TaskHost:
    """Runs a client's task groups in a dedicated task; see the module docstring."""

    __slots__ = ("_done", "_error", "_name", "_ready", "_scope", "_stop", "_stopping", "_task")

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: Any = None  # strong reference: asyncio keeps only weak ones to tasks
        self._scope: anyio.CancelScope | None = None
        self._ready: anyio.Event | None = None
        self._stop: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._error: Exception | None = None
        self._stopping = False

    def __repr__(self) -> str:
        if self._done is None:
            state = "new"
        elif self._done.is_set():
            state = "stopped"
        else:
            state = "stopping" if self._stopping else "running"
        return f"<TaskHost {self._name!r} {state}>"

    @property
    def running(self) -> bool:
        """True from a successful ``start()`` until the host task has ended."""
        return self._done is not None and not self._done.is_set()

    async def start(self, setup: Setup) -> None:
        """Spawn the host task, run ``setup(stack)`` in it and wait for the outcome.

        What ``setup`` enters into ``stack`` stays entered, in the host task, until
        :meth:`stop`. Raises what ``setup`` raised (the host has then ended).
        """
        if self._done is not None:
            raise RuntimeError(f"{self!r} was already started")
        self._ready = anyio.Event()
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._task = _spawn(self._main, setup, self._name)
        try:
            await self._ready.wait()
        except BaseException:
            # Cancelled while the host was setting up: take it down, then re-raise.
            await self._force_stop()
            raise
        if self._done.is_set():
            err, self._error = self._error, None
            if err is not None:
                raise err
            raise RuntimeError(f"{self!r} ended during setup")  # cancelled from outside

    async def stop(self) -> None:
        """Ask the host to leave what ``setup`` entered, and wait until it has.

        Idempotent. Raises the error the host's work or teardown raised, if any (once).
        If the caller is cancelled meanwhile, the teardown is cancelled and waited for.
        """
        if self._done is None:
            return
        assert self._stop is not None
        self._stopping = True
        self._stop.set()
        try:
            await self._done.wait()
        except BaseException:
            await self._force_stop()
            raise
        err, self._error = self._error, None
        if err is not None:
            raise err

    async def _force_stop(self) -> None:
        assert self._done is not None
        if self._scope is not None:
            self._scope.cancel()
        if self._stop is not None:
            self._stop.set()
        with anyio.CancelScope(shield=True):
            await self._done.wait()

    async def _main(self, setup: Setup) -> None:
        assert self._ready is not None and self._stop is not None and self._done is not None
        ready = False
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with AsyncExitStack() as stack:
                    await setup(stack)
                    ready = True
                    self._ready.set()
                    await self._stop.wait()
        except Exception as exc:
            self._error = exc
            if ready and not self._stopping:
                log.error("%s: background work failed", self._name, exc_info=exc)
        except anyio.get_cancelled_exc_class():
            # Cancelled from outside (the event loop shutting down, trio ending the run):
            # the stack has been left. Nobody awaits this task, and a trio system task must
            # not raise, so it ends quietly.
            pass
        finally:
            self._scope = None
            self._ready.set()
            self._done.set()


async def enter_task_group(stack: AsyncExitStack) -> TaskGroup:
    """A task group entered now and left with ``stack``: leaving cancels its tasks.

    The body's exception is not handed to the group (anyio would wrap it in an
    ExceptionGroup; it must propagate as itself, as the clients promise) -- except a
    cancellation, which may be the group's own (the client cancelled the group's scope
    while the host waited inside it) and must reach the scope to be caught there.
    """
    tg = anyio.create_task_group()
    await tg.__aenter__()

    async def leave(
        exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        tg.cancel_scope.cancel()
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            return bool(await tg.__aexit__(exc_type, exc, tb))
        await tg.__aexit__(None, None, None)
        return False

    stack.push_async_exit(leave)
    return tg


def _spawn(main: Callable[[Setup], Coroutine[Any, Any, None]], setup: Setup, name: str) -> Any:
    """Start ``main(setup)`` as a task that belongs to no caller's task group."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        # A task of the loop itself; it copies the caller's context, as task groups do.
        return loop.create_task(main(setup), name=name)
    import trio.lowlevel  # not asyncio: the only other backend anyio supports

    return trio.lowlevel.spawn_system_task(
        main, setup, name=name, context=contextvars.copy_context()
    )
