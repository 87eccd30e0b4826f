"""A plain TCP stream for asyncio: anyio's ``ByteStream`` on an asyncio protocol of our own.

Why not anyio's own asyncio ``SocketStream``: it pays per call for guarantees a connection
does not need. Its ``send()`` is a checkpoint first (a cancel scope and one more trip through
the event loop before the bytes are written), and its ``receive()`` resumes reading on the
transport before each wait and pauses it after (two ``epoll_ctl`` calls and Python around
them per response). A producer sending one record at a time paid for that on every record:
by callgrind, 818k -> 702k instructions per lone record (``bench/bench_idle.py``).

Theory of operation
===================

Reading. The protocol appends what the transport reads to a queue; ``receive()`` returns the
queue's first chunk (split at ``max_bytes``) without waiting when there is one, and otherwise
waits on a future the protocol resolves when data, EOF or the connection's loss arrives. The
transport keeps reading while less than :data:`READ_AHEAD` bytes wait in the queue and is
paused above it (and resumed once ``receive()`` brings the queue under it), so a reader that
stops reading holds at most that much (asyncio reads at most 256 KiB per callback).

A reader that can act on bytes synchronously takes them without the queue: after
``deliver_to(receiver)`` each chunk goes to ``receiver`` inside the transport's callback, so
no task wakes for it (the connection's answers are matched and settled there; one loop turn
and one task step fewer per answer than a reader task woken by ``receive()``). ``receive()``
then waits only for the end of the stream. What the receiver does not take at once is its
own to bound (the connection's frame cap).

Writing. ``send()`` hands the bytes to the transport, which writes what the socket takes at
once and buffers the rest; with the write buffer's limits at 0 (as anyio sets them), any
rest pauses writing, and ``send()`` waits until the transport has handed everything to the
kernel (or the connection is lost). So, as with anyio, a ``send()`` that returned left no
bytes of ours in user space, and the connection's write deadline (net/connection.py) bounds
the wait for a slow peer. The two halves are also there on their own (``write_nowait``,
then ``drain`` only if it says so), so a connection can skip the cancel scope that bounds
a wait when there is nothing to wait for. One writer at a time is the caller's rule (the
connection's write lock), not checked here.

Errors are anyio's, so everything above (``_errors.IO_ERRORS``, ``describe``) reads them the
same: ``EndOfStream`` after the peer's EOF, ``BrokenResourceError`` (from the OS error) after
a lost connection, ``ClosedResourceError`` after our own ``aclose()``.

Connecting: a host name that resolves to one address is dialled with
``loop.create_connection`` (a failure is that address's ``OSError``, which ``describe``
reads); one with several addresses keeps ``anyio.connect_tcp`` and its stream, for its happy
eyeballs (asyncio's, on Python 3.11, can leave a connected socket unclosed when the connect
is cancelled). Only asyncio and plain TCP take this path: TLS, trio and custom transports
keep anyio's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc

__all__ = ["READ_AHEAD", "connect_plain"]

#: Bytes read ahead of the reader before the transport stops reading.
READ_AHEAD = 256 * 1024


class _Protocol(asyncio.Protocol):
    """The transport's side: a queue of chunks read and the futures of a waiting reader and
    writer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.queued = 0
        self.reading_paused = False
        self.at_eof = False
        self.lost = False
        self.exception: BaseException | None = None
        self.read_waiter: asyncio.Future[None] | None = None
        self.write_waiter: asyncio.Future[None] | None = None
        self.writing_paused = False
        #: set by PlainAsyncioStream.deliver_to: takes what is read, instead of the queue
        self.receiver: Callable[[bytes], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(0)  # see "Writing" in the module docstring

    def data_received(self, data: bytes) -> None:
        receiver = self.receiver
        if receiver is not None:
            receiver(bytes(data))  # (no copy of bytes, which is what selector loops read)
            return
        self.chunks.append(bytes(data))
        self.queued += len(data)
        if self.queued >= READ_AHEAD and not self.reading_paused:
            assert self.transport is not None
            self.reading_paused = True
            self.transport.pause_reading()
        _wake(self.read_waiter)

    def eof_received(self) -> bool:
        self.at_eof = True
        _wake(self.read_waiter)
        return True  # keep the transport: what we still write may be read (as anyio)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        # Nothing is read any more: let go of the receiver, a bound method of the stream's
        # owner, which holds the stream -- a cycle that left every closed connection to the
        # cyclic collector (~70 objects each; tests/producer/test_producer_gc_path found one).
        self.receiver = None
        if exc is not None:
            self.exception = exc
        _wake(self.read_waiter)
        _wake(self.write_waiter)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        _wake(self.write_waiter)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class PlainAsyncioStream(anyio.abc.ByteStream):
    """anyio's byte-stream interface over :class:`_Protocol` (see the module docstring)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if max_bytes < 1:
            raise ValueError("max_bytes must be a positive integer")
        protocol = self._protocol
        chunks = protocol.chunks
        while not chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if protocol.exception is not None:
                raise anyio.BrokenResourceError from protocol.exception
            if protocol.at_eof or protocol.lost:
                raise anyio.EndOfStream
            waiter = protocol.read_waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                protocol.read_waiter = None
        chunk = chunks.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            chunks.appendleft(rest)
        protocol.queued -= len(chunk)
        if protocol.reading_paused and protocol.queued < READ_AHEAD and not protocol.lost:
            protocol.reading_paused = False
            self._transport.resume_reading()
        return chunk

    def deliver_to(self, receiver: Callable[[bytes], None]) -> list[bytes]:
        """From now on, hand every chunk read to ``receiver`` as it arrives, in the
        transport's own callback, instead of queueing it for :meth:`receive`; return what
        was queued until now (for the caller to take first, before it awaits anything).
        ``receive()`` then only waits for the end: it raises as always once the peer's EOF,
        a lost connection or our ``aclose()`` comes. ``receiver`` must not raise (the
        transport would close the connection with a fatal error)."""
        protocol = self._protocol
        queued = list(protocol.chunks)
        protocol.chunks.clear()
        protocol.queued = 0
        protocol.receiver = receiver
        if protocol.reading_paused and not protocol.lost:
            protocol.reading_paused = False
            self._transport.resume_reading()
        return queued

    async def send(self, item: bytes) -> None:
        if not self.write_nowait(item):
            await self.drain()

    def write_nowait(self, item: bytes) -> bool:
        """Hand ``item`` to the transport without waiting: True if nothing of it is left
        in user space (what ``send()`` then returns at once), False if the rest waits in the
        transport's buffer -- then :meth:`drain` waits for it. Errors as ``send()``."""
        protocol = self._protocol
        if self._closed:
            raise anyio.ClosedResourceError
        if protocol.lost or self._transport.is_closing():
            raise anyio.BrokenResourceError from protocol.exception
        self._transport.write(item)
        return not protocol.writing_paused and not protocol.lost

    async def drain(self) -> None:
        """Wait until what :meth:`write_nowait` left in the transport's buffer is handed to
        the kernel (``BrokenResourceError`` if the connection is lost first)."""
        protocol = self._protocol
        while protocol.writing_paused and not protocol.lost:
            waiter = protocol.write_waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                protocol.write_waiter = None
        if protocol.lost:
            raise anyio.BrokenResourceError from protocol.exception

    async def send_eof(self) -> None:
        self._transport.write_eof()

    async def aclose(self) -> None:
        self._closed = True
        self._transport.abort()  # as anyio: nothing of a closed connection is worth sending
        _wake(self._protocol.read_waiter)
        _wake(self._protocol.write_waiter)
        await anyio.lowlevel.checkpoint()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        raw: socket.socket = self._transport.get_extra_info("socket")
        return {
            anyio.abc.SocketAttribute.family: lambda: raw.family,
            anyio.abc.SocketAttribute.local_address: raw.getsockname,
            anyio.abc.SocketAttribute.remote_address: raw.getpeername,
            anyio.abc.SocketAttribute.raw_socket: lambda: raw,
        }


async def connect_plain(host: str, port: int) -> anyio.abc.ByteStream:
    """A connected plain TCP stream on the running asyncio loop (see the module docstring)."""
    try:
        ip = str(ipaddress.ip_address(host))  # an address: nothing to resolve (as anyio)
    except ValueError:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = {str(info[4][0]) for info in infos}
        if len(addresses) != 1:
            # Several addresses: anyio's happy eyeballs (asyncio's own, staggered_race,
            # can leave a connected socket unclosed when cancelled on Python 3.11).
            return await anyio.connect_tcp(host, port)
        (ip,) = addresses
    transport, protocol = await asyncio.get_running_loop().create_connection(_Protocol, ip, port)
    assert isinstance(transport, asyncio.Transport)
    return PlainAsyncioStream(transport, protocol)
