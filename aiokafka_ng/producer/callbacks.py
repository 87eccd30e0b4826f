"""Running delivery futures' done-callbacks: one ``call_soon`` per loop turn, not per callback.

asyncio never runs a future's callbacks inside the code that completed it: they go through
``loop.call_soon``. The producer's futures (``future.py``) keep that rule (a Task's wake-up
must not run inside the sender's task; gather counts on it too), but a whole batch's
futures are completed together with *one* ``call_soon`` (:func:`dispatch`), not one per
callback: that is where asyncio.Future spends most of its time when thousands of records
complete at once. Under trio there is no loop: callbacks run when the batch completes.

What is queued here is a flat list -- a future (or None), its waiters (a lone callback or a
list of waiters), that callback's context (None with a list), a future, ... -- built by
whoever decided the futures; a waiter in a list is a (callback, context) tuple or an
``anyio.Event`` to set.

Contexts: a callback registered from an empty context keeps the one shared empty context
(:data:`EMPTY_CONTEXT`, see :func:`caller_context`) rather than a copy of its own: one
Context object per pending record would be one more object for the cyclic GC to walk
(``future.py``, "The cyclic GC").
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["EMPTY_CONTEXT", "Callback", "callbacks_run", "caller_context", "dispatch"]

#: The logger a failed callback has always been reported on (its future's module).
log = logging.getLogger("aiokafka_ng.producer.future")

Callback = Callable[[Any], Any]

#: The context a callback registered from an empty context runs in (a copy of it: see
#: ``caller_context``). ``copy_context()`` makes a new Context object per call, and one
#: kept per pending record is one more object for the collector to walk.
EMPTY_CONTEXT = contextvars.Context()
_copy_context = contextvars.copy_context
_new_context = contextvars.Context


def caller_context() -> contextvars.Context:
    """What ``add_done_callback`` keeps for a callback given no context: a copy of the
    caller's context, as asyncio keeps -- or, when that is empty (no context variable set:
    asyncio and anyio set none), the one shared empty context. That one is never entered:
    each callback kept with it runs in a fresh empty context (``_call``), so sharing it
    changes nothing a callback can see -- what one callback sets stays in its own."""
    ctx = _copy_context()
    return ctx if len(ctx) else EMPTY_CONTEXT


#: Per loop, the waiters due to run at its next turn. One ``call_soon`` runs them all:
#: ``gather`` over 10k futures that are mostly done already would otherwise cost 10k
#: loop handles. The lists are flat (see the module docstring), not a tuple per future:
#: every tuple would be one more allocation the cyclic GC counts, in a burst of thousands
#: that outlives the young collections it triggers.
_due: dict[asyncio.AbstractEventLoop, list[Any]] = {}


def dispatch(loop: asyncio.AbstractEventLoop | None, todo: list[Any]) -> None:
    """Run the waiters in ``todo`` (flat, as above): under asyncio at ``loop``'s next turn,
    together with any already due there; under trio (``loop`` None) right away."""
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
        due += (None, [event], None)  # no future: runs after the queued ones
        await event.wait()


def _run_due(loop: asyncio.AbstractEventLoop) -> None:
    _run_waiters(_due.pop(loop, []))


def _run_waiters(todo: list[Any]) -> None:
    for i in range(0, len(todo), 3):
        fut = todo[i]
        waiters = todo[i + 1]
        if waiters.__class__ is not list:
            _call(waiters, todo[i + 2], fut)
            continue
        for w in waiters:
            if w.__class__ is tuple:
                _call(w[0], w[1], fut)
            else:
                w.set()


def _call(fn: Callback, ctx: contextvars.Context | None, fut: Any) -> None:
    try:
        if ctx is None:  # trio: in the producer's task
            fn(fut)
        elif ctx is EMPTY_CONTEXT:
            # The shared one is never entered itself: a fresh empty context per callback
            # (made and freed here, nothing for the collector to keep counting), so no
            # callback sees what another set.
            _new_context().run(fn, fut)
        else:
            # The caller's copy, or the context given (a Task's own: its wake-up must run
            # in it, not in a copy, or what the task sets after resuming would be lost).
            ctx.run(fn, fut)
    except Exception:
        # A user callback must not take the producer (or the other callbacks of this
        # batch) down; asyncio logs callback errors the same way.
        log.exception("delivery callback %r failed", fn)
