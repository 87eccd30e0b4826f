"""The waiting side of a request on the wire: its in-flight entry and PendingResponse."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

from aiokafka_ng.errors import KafkaError

__all__ = ["NO_RESPONSE", "Abandon", "InFlight", "OnSettled", "PendingResponse", "expire"]

T_co = TypeVar("T_co", covariant=True)

#: What :meth:`PendingResponse.on_settled` calls: ``(response, None)`` or ``(None, error)``.
OnSettled = Callable[[Any, "KafkaError | None"], None]


@dataclass(slots=True, eq=False)
class InFlight(Generic[T_co]):
    """The waiting side of one request on the wire (the ClientConnection's ``context``);
    it owns one permit until settled."""

    api_name: str
    # Given by the connection on the request path (net/events.py: made without a sniffio
    # lookup); the handshake's entries take the default.
    done: anyio.Event = field(default_factory=anyio.Event)
    correlation_id: int = -1  # -1 until registered (then the permit is the entry's)
    response: T_co = field(init=False)  # set when settled without error
    error: KafkaError | None = None
    #: answered or failed by the connection (``done`` alone can also be a response wait's
    #: deadline: see PendingResponse.wait)
    settled: bool = False
    #: the caller stopped waiting: the response is discarded, and the connection enforces
    #: the request's deadline (Connection._abandon)
    abandoned: bool = False
    holds_permit: bool = True  # False for the handshake's requests (net/connection.py)
    #: called by the connection when it settles the entry, instead of a task waiting on
    #: ``done`` (PendingResponse.on_settled)
    on_settled: OnSettled | None = None
    #: asyncio: the loop timer that enforces the deadline when no task waits for it (that
    #: callback's, or an abandoned request's); cancelled when the entry is settled
    timer: asyncio.TimerHandle | None = None


#: What the connection is told of a request abandoned on the wire: ``(entry, deadline,
#: limit)``; it times the request out at ``deadline`` unless answered by then.
Abandon = Callable[[InFlight[Any], float, float], None]


class PendingResponse(Generic[T_co]):
    """A request already written to its connection; :meth:`wait` returns its response."""

    __slots__ = ("_abandon", "_deadline", "_entry", "_limit", "_loop", "_timed_out")

    def __init__(
        self,
        entry: InFlight[T_co],
        deadline: float,
        limit: float,
        timed_out: Callable[[InFlight[T_co], float], KafkaError],
        abandon: Abandon,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._entry = entry
        self._deadline = deadline  # on ``loop``'s clock when a loop is given
        self._limit = limit
        self._timed_out = timed_out  # closes the connection; returns the error to raise
        self._abandon = abandon  # the connection keeps the deadline of a request let go
        self._loop = loop  # asyncio's running loop; None on trio

    async def wait(self) -> T_co:
        """The decoded response (``None`` for a request that expects none).

        A caller cancelled here leaves the request on the wire with its permit: the reader
        releases it and discards the response when it arrives, or the connection times the
        request out at its deadline (see net/connection.py).
        """
        entry = self._entry
        done = entry.done
        if not done.is_set():
            loop = self._loop
            try:
                if loop is None:
                    with anyio.move_on_at(self._deadline):
                        await done.wait()
                else:
                    # asyncio: the deadline is a loop timer that sets the event, which costs
                    # far less than a cancel scope (its own timer, task bookkeeping and
                    # backend lookups) on every request; set by the timer, the event is
                    # not a settlement, which ``settled`` tells apart.
                    timer = loop.call_at(self._deadline, done.set)
                    try:
                        await done.wait()
                    finally:
                        timer.cancel()
            except BaseException:
                # Cancelled: nobody waits for the answer now, yet the request still holds
                # its slot on the wire; the connection enforces its deadline instead.
                if not entry.settled:
                    entry.abandoned = True
                    self._abandon(entry, self._deadline, self._limit)
                raise
        if not entry.settled:
            entry.abandoned = True
            raise self._timed_out(entry, self._limit)
        if entry.error is not None:
            raise entry.error
        return entry.response

    def on_settled(self, callback: OnSettled) -> None:
        """Instead of :meth:`wait` (asyncio only): have the connection call
        ``callback(response, None)`` or ``callback(None, error)`` exactly once, from the task
        that settles the request -- the reader when the answer arrives (so a connection's
        callbacks run in wire order), the poisoning of the connection, or a loop timer at the
        deadline, which times the request out (``RequestTimeoutError``) and closes the
        connection as :meth:`wait` would. No task waits: an answer is acted on in the
        reader's own turn. ``callback`` must not raise (it runs in the reader task)."""
        entry = self._entry
        loop = self._loop
        assert loop is not None, "on_settled needs asyncio's loop timers"
        if entry.settled:  # settled already (not between submit and here; cheap to cover)
            if entry.error is not None:
                callback(None, entry.error)
            else:
                callback(entry.response, None)
            return
        entry.on_settled = callback
        entry.timer = loop.call_at(self._deadline, expire, entry, self._limit, self._timed_out)


def expire(
    entry: InFlight[Any], limit: float, timed_out: Callable[[InFlight[Any], float], KafkaError]
) -> None:
    """The deadline of a request no task waits on came (``on_settled``'s loop timer, or the
    connection's for an abandoned request): time it out unless answered by now. That closes
    the connection, which settles this entry (with the timeout error) and every later one,
    in wire order."""
    entry.timer = None
    if not entry.settled:
        timed_out(entry, limit)


class _NoResponse(PendingResponse[None]):
    """What ``submit(expect_response=False)`` returns: nothing to wait for (acks=0)."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    async def wait(self) -> None:
        return None

    def on_settled(self, callback: OnSettled) -> None:
        callback(None, None)


NO_RESPONSE = _NoResponse()
