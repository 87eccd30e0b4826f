"""The running event loop's clock as a plain callable.

``anyio.current_time()`` finds the running backend on every call (a sniffio lookup and a
dispatch): a few microseconds, paid several times per request on the producer's hot path.
:func:`loop_clock`, called once from inside the loop, returns the backend's own clock --
``loop.time`` on asyncio, ``trio.current_time`` on trio -- which gives the same values,
virtual ones included (trio's ``MockClock``, asyncio's ``VirtualTimeLoop``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["loop_clock", "running_asyncio_loop"]


def loop_clock() -> Callable[[], float]:
    """The running loop's clock (call it from inside the loop; the result stays valid for
    that loop only)."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # not asyncio: trio, anyio's other backend
        import trio

        return trio.current_time


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """asyncio's running loop, or None under another backend (trio): hot paths arm loop
    timers on asyncio where a cancel scope would cost more (net/_pending.py), and the
    producer's delivery futures belong to it (producer/future.py)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
