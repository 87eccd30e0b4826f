"""The plain TCP stream the connection uses on asyncio (net/asyncio_stream.py), against a
loopback peer: the bytes and errors anyio's own stream gives, without its per-call costs.

asyncio only: on trio (and for TLS) the connection keeps anyio's stream.
"""

from __future__ import annotations

import gc
import socket
import struct
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from aiokafka_ng.net.asyncio_stream import PlainAsyncioStream, connect_plain

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

Serve = Callable[[anyio.abc.SocketStream], Awaitable[None]]


@asynccontextmanager
async def peer(serve: Serve) -> AsyncIterator[PlainAsyncioStream]:
    """A loopback listener running ``serve`` on its one accepted connection, and our stream
    to it."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    # The peer runs in a scope of its own, cancelled at the end: cancelling the task
    # group's scope instead would turn a failing assertion of the test into a cancellation
    # that the group then swallows.
    serving = anyio.CancelScope()
    async with anyio.create_task_group() as tg, listener:

        async def accept_one() -> None:
            with serving:
                async with await listener.listeners[0].accept() as conn:
                    await serve(conn)

        tg.start_soon(accept_one)
        stream = await connect_plain("127.0.0.1", port)
        assert isinstance(stream, PlainAsyncioStream)
        try:
            yield stream
        finally:
            await stream.aclose()
            serving.cancel()  # a peer that waits for ever


async def test_bytes_arrive_whole_in_order_split_at_max_bytes_then_end() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: several reads, past the read-ahead

    async def serve(conn: anyio.abc.SocketStream) -> None:
        await conn.send(payload)

    async with peer(serve) as stream:
        got = bytearray()
        sizes = set()
        with pytest.raises(anyio.EndOfStream):
            while True:
                chunk = await stream.receive(1000)
                sizes.add(len(chunk))
                got += chunk
        assert bytes(got) == payload
        assert max(sizes) == 1000


async def test_a_cancelled_receive_loses_nothing() -> None:
    go = anyio.Event()

    async def serve(conn: anyio.abc.SocketStream) -> None:
        await go.wait()
        await conn.send(b"after")
        await anyio.sleep_forever()

    async with peer(serve) as stream:
        with anyio.move_on_after(0):
            await stream.receive()  # cancelled while waiting
        go.set()
        assert await stream.receive() == b"after"


async def test_after_aclose_receive_and_send_say_closed() -> None:
    async def serve(conn: anyio.abc.SocketStream) -> None:
        await anyio.sleep_forever()

    async with peer(serve) as stream:
        await stream.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await stream.receive()
        with pytest.raises(anyio.ClosedResourceError):
            await stream.send(b"x")


async def test_a_reset_connection_is_broken_with_the_os_error_as_cause() -> None:
    async def serve(conn: anyio.abc.SocketStream) -> None:
        raw = conn.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await conn.aclose()  # linger 0: an RST, not a FIN

    async with peer(serve) as stream:
        with pytest.raises(anyio.BrokenResourceError) as info:
            while True:
                await stream.receive()
        assert isinstance(info.value.__cause__, ConnectionResetError)
        with pytest.raises(anyio.BrokenResourceError):
            await stream.send(b"x")


async def test_send_returns_once_the_kernel_has_the_bytes_not_before() -> None:
    """A large send to a slow reader: ``send`` waits while the transport holds bytes (so the
    connection's write deadline bounds a stuck peer), as anyio's stream does."""
    size = 32 * 1024 * 1024
    read = 0
    read_when_sent = -1
    sent = anyio.Event()

    async def serve(conn: anyio.abc.SocketStream) -> None:
        nonlocal read
        while read < size:
            read += len(await conn.receive(65536))
            await anyio.lowlevel.checkpoint()  # the writer gets turns while we read

    async with peer(serve) as stream:
        await stream.send(b"\0" * size)
        read_when_sent = read
        sent.set()
        # Whatever the peer had not read when send returned sat in kernel buffers (send
        # and receive queues of loopback TCP: a few MiB each), not in ours.
        assert size - read_when_sent < 16 * 1024 * 1024, (size, read_when_sent)
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        assert raw.getpeername()[0] == "127.0.0.1"


async def test_write_nowait_says_when_a_rest_waits_and_drain_waits_for_it() -> None:
    """``write_nowait`` hands the bytes over without waiting: True when the kernel took
    them all (a small frame), False when a rest waits in the transport (a large one to a
    slow reader) -- then ``drain`` returns once that rest is with the kernel."""
    size = 32 * 1024 * 1024
    total = 4 + size
    read = 0
    done = anyio.Event()

    async def serve(conn: anyio.abc.SocketStream) -> None:
        nonlocal read
        while read < total:
            read += len(await conn.receive(65536))
            await anyio.lowlevel.checkpoint()
        done.set()

    async with peer(serve) as stream:
        assert stream.write_nowait(b"tiny") is True
        assert stream.write_nowait(b"\0" * size) is False
        await stream.drain()
        # What the peer has not read yet sits in kernel buffers, not in ours.
        assert total - read < 16 * 1024 * 1024, (total, read)
        await done.wait()
        assert read == total
        await stream.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            stream.write_nowait(b"late")


async def test_deliver_to_hands_over_what_was_queued_then_every_chunk_as_read() -> None:
    """After ``deliver_to`` the chunks go to the receiver in the transport's callback, in
    order, after those already queued (returned); ``receive()`` then only says the end."""
    first_read = anyio.Event()
    more = anyio.Event()

    async def serve(conn: anyio.abc.SocketStream) -> None:
        await conn.send(b"queued")
        await first_read.wait()
        await more.wait()
        await conn.send(b"delivered")
        await conn.send_eof()

    async with peer(serve) as stream:
        assert await stream.receive(1) == b"q"  # the rest of the chunk stays queued
        first_read.set()
        got: list[bytes] = []
        assert stream.deliver_to(got.append) == [b"ueued"]
        more.set()
        with pytest.raises(anyio.EndOfStream):
            await stream.receive()  # returns no bytes any more: they went to got
        assert b"".join(got) == b"delivered"


@pytest.mark.parametrize("ends", ["aclose", "peer resets"])
async def test_a_closed_stream_lets_go_of_its_receiver(ends: str) -> None:
    """The receiver is the owner's bound method, and the owner holds the stream: kept after
    the end, every closed connection was a cycle for the collector (ci38: 40 objects, a
    whole Connection). Released, the owner goes with its last reference."""

    class Owner:
        def received(self, data: bytes) -> None:
            pass

    async def serve(conn: anyio.abc.SocketStream) -> None:
        if ends == "peer resets":
            raw = conn.extra(anyio.abc.SocketAttribute.raw_socket)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await conn.aclose()
        await anyio.sleep_forever()

    async with peer(serve) as stream:
        owner = Owner()
        stream.deliver_to(owner.received)
        owner.stream = stream  # type: ignore[attr-defined]  # as a Connection holds its stream
        if ends == "aclose":
            await stream.aclose()
        else:
            with pytest.raises(anyio.BrokenResourceError):
                await stream.receive()  # returns once the transport has lost the connection
        gone = weakref.ref(owner)
        gc.disable()
        try:
            del owner
            assert gone() is None
        finally:
            gc.enable()
