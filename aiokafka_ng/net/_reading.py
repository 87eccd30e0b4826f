"""Reading a connection: the bytes read go to the sans-IO
:class:`~aiokafka_ng.protocol.connection.ClientConnection`, and its events are acted on.

One loop for both readers of a connection: the opening task during setup (before the reader
task exists, until its one exchange is settled) and the reader task (until the connection
closes). A :class:`~aiokafka_ng.protocol.connection.Response` settles its in-flight entry;
a :class:`~aiokafka_ng.protocol.connection.Poisoned` goes to the connection, which closes
and settles every pending entry with an error; I/O errors are the caller's to translate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio.abc

from aiokafka_ng.net._pending import InFlight
from aiokafka_ng.protocol.connection import ClientConnection, NeedData, Poisoned, Response
from aiokafka_ng.protocol.primitives import ApiMessage

__all__ = ["READ_CHUNK", "Settle", "read_until"]

#: The most one ``receive`` asks the socket for.
READ_CHUNK = 256 * 1024


class Settle(Protocol):
    """Hands an in-flight entry its response (Connection._settle)."""

    def __call__(
        self, entry: InFlight[ApiMessage], *, response: ApiMessage | None = ...
    ) -> None: ...


async def read_until(
    done: Callable[[], bool],
    proto: ClientConnection[InFlight[ApiMessage]],
    stream: anyio.abc.ByteStream,
    settle: Settle,
    on_poisoned: Callable[[Poisoned], None],
) -> None:
    """Read and act on ``proto``'s events until ``done()``."""
    while not done():
        event = proto.next_event()
        if isinstance(event, Response):
            settle(event.request.context, response=event.response)
        elif isinstance(event, NeedData):
            proto.receive_data(await stream.receive(READ_CHUNK))
        else:
            on_poisoned(event)
