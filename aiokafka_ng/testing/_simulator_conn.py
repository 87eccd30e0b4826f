"""One client connection of the cluster simulator: request pump, upstream reader, writer.

Theory of operation
-------------------
Every client connection to a simulated node gets its own upstream connection to the real
broker. Kafka answers requests in order per connection, so the simulator never needs to
rewrite correlation ids: each request is either *forwarded* (possibly a reduced copy with the
same correlation id) or *answered locally*, and both kinds become a :class:`Slot` queued in
request order.

* The *pump* reads whole frames from the client, asks the simulator for a :class:`Plan`, and
  queues a slot. A forwarded slot also goes on the ``fifo`` *before* its bytes are written
  upstream, so the reader can always match the answer.
* The *upstream reader* pops the oldest forwarded slot for each response frame (checking the
  correlation id) and marks it done.
* The *writer* takes slots in request order, waits for forwarded ones, applies the response
  transform (Metadata rewrite, merge of split Produce/Fetch answers) and the node's response
  faults (delay, black hole, garbage, swap, byte cut: see
  :mod:`aiokafka_ng.testing._simulator_faults`), and writes to the client.

Closing the client side (cut, kill, client EOF) cancels pump and writer at once. The upstream
side stays open until every forwarded request has been answered (or ``linger`` passes), so a
request forwarded just before a cut really reaches the broker: closing a socket with unread
input resets it, and the broker could drop the request.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import RequestHeader, decode_request_header, peek_correlation_id

if TYPE_CHECKING:
    from aiokafka_ng.testing.simulator import ClusterSimulator

__all__ = ["Cut", "Node", "Plan", "SimConnection", "Slot"]

_SIZE = struct.Struct(">i")
MAX_FRAME = 100 * 1024 * 1024
MAX_QUEUED = 1024
STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


class _BadFrame(Exception):
    pass


async def read_frame(rx: BufferedByteReceiveStream) -> bytes:
    """One frame including its 4-byte size prefix."""
    prefix = await rx.receive_exactly(4)
    (size,) = _SIZE.unpack(prefix)
    if size < 0 or size > MAX_FRAME:
        raise _BadFrame(size)
    return prefix + await rx.receive_exactly(size)


@dataclass(slots=True)
class Plan:
    """What to do with one request.

    ``forward``: the frame (size prefix included) to send upstream, or None to answer
    locally with ``local``. ``transform`` turns the upstream payload (no prefix) into the
    client-bound frame; None relays it unchanged. ``close``: drop the connection instead.
    """

    forward: bytes | None = None
    local: bytes | None = None
    transform: Callable[[bytes], bytes] | None = None
    expects_response: bool = True
    close: bool = False


@dataclass(slots=True, eq=False)
class Slot:
    header: RequestHeader
    arrived: float  # anyio.current_time() of the request, then of the upstream response
    frame: bytes | None = None  # client-bound frame (size prefix included), once known
    transform: Callable[[bytes], bytes] | None = None
    done: anyio.Event | None = None  # forwarded: set when the upstream answer is in
    payload: bytes = field(default=b"")
    discard: bool = False  # acks=0 Produce: swallow an answer if the broker sends one


@dataclass(slots=True)
class Cut:
    remaining: int
    every: int | None  # re-arm with this count after firing (repeat=True)
    forward_last: bool
    scope: str = "node"  # "node": close all the node's connections; "connection": one

    def fresh(self) -> Cut:
        return Cut(self.remaining, self.every, self.forward_last, self.scope)


@dataclass(slots=True, eq=False)
class Node:
    node_id: int
    port: int = 0
    alive: bool = True
    delay: float = 0.0  # seconds each response is held after it is ready
    api_delays: dict[int, float] = field(default_factory=dict)  # the same, per API key
    cut: Cut | None = None  # counts the node's requests
    each_cut: Cut | None = None  # template of every connection's own cut rule
    byte_cut: int | None = None  # response bytes left before a connection is cut
    black_hole: bool = False
    swaps: int = 0  # response pairs still to deliver swapped
    garbage: deque[int | None] = field(default_factory=deque)  # api key filter per shot
    conns: set[SimConnection] = field(default_factory=set)


class SimConnection:
    """One accepted client connection of one simulated node."""

    def __init__(
        self,
        sim: ClusterSimulator,
        node: Node,
        conn_id: int,
        client: anyio.abc.SocketStream,
        upstream: anyio.abc.SocketStream,
    ) -> None:
        self.sim = sim
        self.node = node
        self.id = conn_id
        self.requests = 0
        self.responses = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False
        self.close_reason: str | None = None
        self.cut_rule = None if node.each_cut is None else node.each_cut.fresh()
        self._client = client
        self._upstream = upstream
        self._fifo: deque[Slot] = deque()
        self._client_scope = anyio.CancelScope()
        self._upstream_scope: anyio.CancelScope | None = None

    def __repr__(self) -> str:
        state = f"closed ({self.close_reason})" if self.closed else "open"
        return (
            f"<SimConnection #{self.id} node={self.node.node_id} {state} "
            f"requests={self.requests} in_flight={self.in_flight} max={self.max_in_flight}>"
        )

    def cut(self, reason: str) -> None:
        """Close the client side now (the upstream side drains, see the module docstring)."""
        if self.close_reason is None:
            self.close_reason = reason
        self._client_scope.cancel()

    async def run(self) -> None:
        send, recv = anyio.create_memory_object_stream[Slot](MAX_QUEUED)
        # Both ends are closed here too: a task cancelled before it first runs (asyncio)
        # would otherwise leave its end open.
        with send, recv:
            async with anyio.create_task_group() as tg:
                self._upstream_scope = tg.cancel_scope
                tg.start_soon(self._read_upstream)
                with self._client_scope:
                    async with anyio.create_task_group() as ctg:
                        ctg.start_soon(self._pump, send)
                        ctg.start_soon(self._write, recv)
                self.closed = True
                self.in_flight = 0
                # Counted as closed from now on, even while the upstream side drains.
                self.node.conns.discard(self)
                self.sim._notify()
                if not self._awaiting():
                    tg.cancel_scope.cancel()
                else:
                    try:
                        await self._upstream.send_eof()
                    except STREAM_ERRORS:
                        pass
                    tg.cancel_scope.deadline = anyio.current_time() + self.sim.upstream_linger

    def _awaiting(self) -> bool:
        """True while a forwarded request still waits for its answer."""
        return any(not slot.discard for slot in self._fifo)

    async def _pump(self, send: MemoryObjectSendStream[Slot]) -> None:
        try:
            await self._pump_inner(send)
        finally:
            self._client_scope.cancel()

    async def _pump_inner(self, send: MemoryObjectSendStream[Slot]) -> None:
        sim, node = self.sim, self.node
        rx = BufferedByteReceiveStream(self._client)
        while True:
            try:
                frame = await read_frame(rx)
                header, _ = decode_request_header(memoryview(frame)[4:])
            except STREAM_ERRORS:
                self.close_reason = self.close_reason or "client closed"
                return
            except (_BadFrame, ProtocolError):
                # A broker drops a connection that sends bytes it cannot frame.
                self.close_reason = self.close_reason or "bad request frame"
                return
            self.requests += 1
            sim._count_request(node, header.api_key)
            if node.black_hole:
                self._count_in_flight()  # as the client sees it: never answered
                continue
            cut = sim._take_cut(self)
            if cut is not None and not cut[0]:
                self._cut_after(cut[1], "cut_after (request dropped)")
                return
            plan = await sim._plan(node, header, frame)
            if plan.close:
                self.close_reason = "closed by the broker (acks=0 request failed)"
                return
            slot: Slot | None = None
            if plan.forward is not None:
                if plan.expects_response:
                    slot = Slot(header, anyio.current_time(), transform=plan.transform)
                    slot.done = anyio.Event()
                    self._fifo.append(slot)
                else:
                    # Kafka sends nothing for acks=0, but Tansu 0.6.0 does answer: a marker
                    # lets the reader swallow such an answer and skip it when none comes.
                    self._fifo.append(Slot(header, 0.0, discard=True))
                try:
                    await self._upstream.send(plan.forward)
                except STREAM_ERRORS:
                    self.close_reason = self.close_reason or "upstream closed"
                    return
            else:
                slot = Slot(header, anyio.current_time(), frame=plan.local)
            if slot is not None:
                self._count_in_flight()
                await send.send(slot)
            if cut is not None:
                self._cut_after(cut[1], "cut_after")
                return

    def _count_in_flight(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.sim._note_in_flight(self.node, self.in_flight)
        self.sim._notify()

    def _cut_after(self, whole_node: bool, reason: str) -> None:
        if whole_node:
            self.sim._cut_node(self.node, reason)
        else:
            self.cut(reason)
            self.sim._notify()

    async def _read_upstream(self) -> None:
        rx = BufferedByteReceiveStream(self._upstream)
        try:
            while True:
                try:
                    frame = await read_frame(rx)
                except (*STREAM_ERRORS, _BadFrame):
                    self.cut("upstream closed")
                    return
                payload = frame[4:]
                cid = peek_correlation_id(payload)
                fifo = self._fifo
                while fifo and fifo[0].discard and fifo[0].header.correlation_id != cid:
                    fifo.popleft()  # an acks=0 request that got no answer, as Kafka does
                if not fifo:
                    self.cut("unexpected response from the broker")
                    return
                slot = fifo.popleft()
                if cid != slot.header.correlation_id:
                    self.cut("correlation id mismatch from the broker")
                    return
                if not slot.discard:
                    slot.payload = payload
                    slot.arrived = anyio.current_time()
                    assert slot.done is not None
                    slot.done.set()
                if self.closed and not self._awaiting():
                    return  # drained after a cut: let the upstream close cleanly
        finally:
            if self.closed and self._upstream_scope is not None:
                self._upstream_scope.cancel()

    async def _write(self, recv: MemoryObjectReceiveStream[Slot]) -> None:
        held: bytes | None = None  # the first response of a swapped pair
        try:
            async for slot in recv:
                frame = await self._ready(slot)
                if self.node.black_hole:
                    continue  # dropped: its request stays in flight, as the client sees it
                frame = self.sim._maybe_garbage(self.node, slot.header, frame)
                if held is None and self.node.swaps:
                    self.node.swaps -= 1
                    held = frame
                    continue
                for out in (frame,) if held is None else (frame, held):
                    if not await self._deliver(out):
                        return
                held = None
        finally:
            self._client_scope.cancel()

    async def _ready(self, slot: Slot) -> bytes:
        """The client-bound frame of ``slot``, once its answer is in and its delay passed."""
        if slot.done is not None:
            await slot.done.wait()
            slot.frame = self._finish(slot)
        assert slot.frame is not None
        while True:
            node = self.node
            delay = max(node.delay, node.api_delays.get(slot.header.api_key, 0.0))
            wait = slot.arrived + delay - anyio.current_time()
            if wait <= 0:
                return slot.frame
            changed = self.sim._changed  # a delay set lower releases held responses early
            with anyio.move_on_after(wait):
                await changed.wait()

    async def _deliver(self, frame: bytes) -> bool:
        """Write one response; False once the connection is finished."""
        left = self.node.byte_cut
        cut = left is not None and len(frame) >= left
        if left is not None:
            self.node.byte_cut = None if cut else left - len(frame)
            frame = frame[:left]
        try:
            await self._client.send(frame)
        except STREAM_ERRORS:
            self.close_reason = self.close_reason or "client closed"
            return False
        if cut:
            self.cut("cut_after_bytes")
            return False
        self.in_flight -= 1
        self.responses += 1
        self.sim._notify()
        return True

    def _finish(self, slot: Slot) -> bytes:
        if slot.transform is not None:
            try:
                return slot.transform(slot.payload)
            except ProtocolError:
                pass  # the broker's answer is not decodable: relay it as it came
        return _SIZE.pack(len(slot.payload)) + slot.payload
