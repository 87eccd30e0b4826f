"""Virtual time for tests: the real client code on a clock that jumps when nothing is ready.

On trio this is trio's own ``MockClock(autojump_threshold=0)``. On asyncio it is
:class:`VirtualTimeLoop`, an event loop whose ``time()`` is virtual: whenever the loop would
block waiting for its next timer with no I/O ready, the clock jumps to that timer instead.
Linger, retry backoff, request, session and delivery timeouts then cost no wall time, and a
test can assert timings exactly (``== 30.0``), not within a bound a busy machine breaks.

Both need every byte the test waits for to come from inside the process: connect clients
to :class:`~aiokafka_ng.testing.FakeKafka` in memory (``**kafka.client_config()``), since the
clock would jump past a socket's data still in flight.

With anyio::

    anyio.run(main, backend="asyncio", backend_options=asyncio_options())
    anyio.run(main, backend="trio", backend_options=trio_options())

and in pytest, an ``anyio_backend`` fixture returning :func:`backend`'s answer.

:func:`count_loop_turns` counts how often the event loop goes round (each turn runs what
woke it: a timer, I/O, a task made ready): with the clock jumping, an idle client that
sleeps until its next deadline costs a handful of turns per virtual minute, and one that
polls costs one per poll, so a test can tell them apart without a wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "LoopTurns",
    "VirtualTimeLoop",
    "asyncio_options",
    "backend",
    "count_loop_turns",
    "trio_options",
]


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that never sleeps for a timer: it advances its loop's clock instead.

    ``select(timeout)`` polls without waiting; if nothing is ready and the loop has a timer
    due in ``timeout`` seconds, the clock moves forward by that much and the loop runs the
    timer. With no timer at all (``timeout is None``) it waits for real I/O, which is how
    another thread's ``call_soon_threadsafe`` still wakes the loop.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        #: select() calls: the loop calls it once per turn.
        self.turns = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.turns += 1
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            return super().select(None)
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on virtual time; see the module docstring."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now

    @property
    def turns(self) -> int:
        """How many times the loop has gone round (waited for I/O or a timer) so far."""
        return self._jumping.turns


def asyncio_options() -> dict[str, Any]:
    """anyio ``backend_options`` that run asyncio on :class:`VirtualTimeLoop`."""
    return {"loop_factory": VirtualTimeLoop}


def trio_options() -> dict[str, Any]:
    """anyio ``backend_options`` that run trio on a fresh autojumping ``MockClock``."""
    import trio.testing

    return {"clock": trio.testing.MockClock(autojump_threshold=0)}


def backend(name: str) -> tuple[str, dict[str, Any]]:
    """``(name, options)`` running anyio backend ``name`` ("asyncio" or "trio") on virtual
    time: what an ``anyio_backend`` fixture returns. Call it per test (a fresh trio clock)::

        @pytest.fixture(params=["asyncio", "trio"])
        def anyio_backend(request):
            return virtual_time.backend(request.param)
    """
    if name == "asyncio":
        return name, asyncio_options()
    if name == "trio":
        return name, trio_options()
    raise ValueError(f"no virtual time for backend {name!r}")


class LoopTurns:
    """The event-loop turns counted since :func:`count_loop_turns` began (``count``)."""

    __slots__ = ("_read", "_start")

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self._start = read()

    @property
    def count(self) -> int:
        return self._read() - self._start


@contextlib.contextmanager
def count_loop_turns() -> Iterator[LoopTurns]:
    """Count the running event loop's turns inside the ``with`` block.

    On trio (any clock) a turn is one scheduler round (trio's ``before_io_wait``
    instrument hook); on asyncio the loop must be a :class:`VirtualTimeLoop`, where a turn
    is one ``select()``. Use it from inside the loop::

        with virtual_time.count_loop_turns() as turns:
            await anyio.sleep(60)
        assert turns.count <= 3
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio
        loop = None
    if loop is None:
        import trio

        class _Counter(trio.abc.Instrument):
            def __init__(self) -> None:
                self.turns = 0

            def before_io_wait(self, timeout: float) -> None:
                self.turns += 1

        counter = _Counter()
        trio.lowlevel.add_instrument(counter)
        try:
            yield LoopTurns(lambda: counter.turns)
        finally:
            trio.lowlevel.remove_instrument(counter)
        return
    if not isinstance(loop, VirtualTimeLoop):
        raise TypeError("count_loop_turns() on asyncio needs a VirtualTimeLoop (asyncio_options())")
    yield LoopTurns(lambda: loop.turns)
