"""The running backend's ``Event`` class, looked up once.

``anyio.Event()`` asks sniffio which library runs on every call (about ten Python calls)
before it makes the backend's event. The producer makes three per record on its lone-record
path (the sender's wake-up, its answer queue, the request's in-flight entry), so the hot
paths look the class up once, from inside the loop, and call it: the same object
``anyio.Event()`` returns, for the backend that was running when it was looked up.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

__all__ = ["event_factory"]


def event_factory() -> Callable[[], anyio.Event]:
    """The running backend's Event class (call it from inside the loop; the result is valid
    for that backend only)."""
    return type(anyio.Event())
