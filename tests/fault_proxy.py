"""A Kafka-aware TCP fault proxy for tests: delay, cut, black-hole, refuse, reorder, corrupt.

Usage::

    from fault_proxy import FaultProxy          # tests/ is on sys.path under pytest

    async with FaultProxy("127.0.0.1", broker_port) as proxy:
        client = make_client(bootstrap_servers=proxy.address)   # "127.0.0.1:<port>"
        proxy.delay_responses(0.5)                # hold every response 0.5 s
        await proxy.wait_for_requests(5)          # await, never sleep
        assert proxy.max_in_flight == 5
        proxy.delay_responses(0)                  # held responses are released at once
        proxy.cut_after_requests(1, forward_last=True)   # next request reaches the broker,
                                                         # then its connection dies
        proxy.refuse(True)                        # accept-and-close; attempts are timestamped
        await proxy.wait_for_attempts(3)
        gaps = [b - a for a, b in itertools.pairwise(proxy.connection_attempts)]

Theory of operation
-------------------
The proxy listens on 127.0.0.1 and forwards each accepted connection to one upstream on
127.0.0.1. Every task lives in a task group owned by the ``async with`` block, so leaving it
cancels everything and closes every socket (asyncio and trio alike).

A connection runs three tasks. The *request pump* reads whole size-prefixed frames from the
client (``int32 size`` then ``int16 api_key, int16 api_version, int32 correlation_id, ...``),
counts them, and forwards them upstream. The *response reader* reads whole frames from the
upstream, matches each to the oldest forwarded request with the same correlation id (brokers
answer in order) to learn its api key, stamps its arrival time and queues it. The *response
writer* takes queued responses in order, holds each until ``arrival + delay`` (the delay is
re-read whenever a control changes, so ``delay_responses(0)`` releases held responses at
once), applies one-shot faults (swap, garbage, byte cut) and writes it to the client.
Responses stay in order: a response delayed by ``delay_api`` also holds back the ones behind
it, as a slow broker would.

A request is *in flight* from the moment its whole frame has been read from the client until
its response has been written to the client. Produce requests with ``acks=0`` (parsed from the
request) get no response and are never in flight. Requests swallowed by ``black_hole`` stay in
flight forever, as the client sees them.

Cutting a connection closes the client side at once. The upstream side is half-closed and
drained for at most ``upstream_linger`` seconds before it is closed, so a request forwarded
just before the cut really reaches the broker (closing a socket with unread input would reset
it and could drop the request).
"""

from __future__ import annotations

import struct
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

if TYPE_CHECKING:
    from aiokafka_ng.testing import LocalBroker

__all__ = ["FaultProxy", "ProxyConnection"]

LOOPBACK = "127.0.0.1"
PRODUCE = 0
# The default garbage body: a truncated varint / int16, which no response schema can decode.
_GARBAGE_BODY = b"\xff"
# Errors that mean "this socket is finished"; anything else is a proxy bug and propagates.
_STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


class _FrameTooLarge(Exception):
    pass


@dataclass(slots=True)
class _Countdown:
    """Units (requests or bytes) left before a cut; ``forward_last`` only matters for requests."""

    remaining: int
    forward_last: bool = True

    def take(self, amount: int) -> int | None:
        """Consume ``amount``; return how much of it may pass if this fires the cut, else None."""
        if amount >= self.remaining:
            return self.remaining
        self.remaining -= amount
        return None


@dataclass(slots=True)
class _Response:
    frame: bytes  # size prefix included
    api_key: int | None  # None: matched no forwarded request
    arrived: float  # anyio.current_time()


async def _read_frame(rx: BufferedByteReceiveStream, max_size: int) -> bytes:
    prefix = await rx.receive_exactly(4)
    (size,) = struct.unpack(">i", prefix)
    if size < 0 or size > max_size:
        raise _FrameTooLarge(size)
    return prefix + await rx.receive_exactly(size)


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _expects_response(frame: bytes) -> bool:
    """False only for Produce with acks=0; unparsable input is assumed to expect a response."""
    api_key, api_version = struct.unpack_from(">hh", frame, 4)
    if api_key != PRODUCE:
        return True
    try:
        flexible = api_version >= 9
        (client_id_len,) = struct.unpack_from(">h", frame, 12)  # header v1/v2: int16 string
        pos = 14 + max(client_id_len, 0)
        if flexible:  # request header v2 ends with tagged fields
            count, pos = _uvarint(frame, pos)
            for _ in range(count):
                _, pos = _uvarint(frame, pos)
                size, pos = _uvarint(frame, pos)
                pos += size
        if api_version >= 3:  # transactional_id, nullable
            if flexible:
                length, pos = _uvarint(frame, pos)
                pos += max(length - 1, 0)
            else:
                (length,) = struct.unpack_from(">h", frame, pos)
                pos += 2 + max(length, 0)
        (acks,) = struct.unpack_from(">h", frame, pos)
    except (struct.error, IndexError):
        return True
    return bool(acks != 0)


class ProxyConnection:
    """One proxied client connection: its statistics and per-connection one-shot faults."""

    def __init__(self, proxy: FaultProxy, conn_id: int, client: anyio.abc.SocketStream) -> None:
        self.proxy = proxy
        self.id = conn_id
        self.opened_at = time.monotonic()
        self.closed_at: float | None = None
        self.close_reason: str | None = None
        self.requests = 0  # whole request frames read from the client
        self.requests_forwarded = 0
        self.responses = 0  # responses (or their garbage replacements) written to the client
        self.responses_dropped = 0  # swallowed by black_hole
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests_by_api: Counter[int] = Counter()
        self.bytes_to_upstream = 0
        self.bytes_to_client = 0
        self._client = client
        self._upstream: anyio.abc.SocketStream | None = None
        self._pending: deque[tuple[int, int]] = deque()  # (correlation_id, api_key) forwarded
        self._cuts: dict[str, _Countdown] = {
            kind: _Countdown(rule.remaining, rule.forward_last)
            for kind, rule in proxy._each_cuts.items()
        }
        self._swaps = 0
        self._garbage: deque[bytes | None] = deque()
        self._client_scope = anyio.CancelScope()

    def __repr__(self) -> str:
        state = f"closed ({self.close_reason})" if self.closed else "open"
        return (
            f"<ProxyConnection #{self.id} {state} requests={self.requests} "
            f"responses={self.responses} in_flight={self.in_flight} max={self.max_in_flight}>"
        )

    @property
    def closed(self) -> bool:
        """True once the client side is closed (the upstream side may still be draining)."""
        return self.closed_at is not None

    # ---- controls -------------------------------------------------------------------------

    def cut(self, reason: str = "cut") -> None:
        """Close the client side now; half-close and drain the upstream side."""
        if self.close_reason is None:
            self.close_reason = reason
        self._client_scope.cancel()

    def cut_after_requests(self, n: int, *, forward_last: bool = True) -> None:
        """Cut this connection when its nth request from now has been read."""
        if n < 1:
            raise ValueError("n must be >= 1")
        self._cuts["requests"] = _Countdown(n, forward_last)

    def cut_after_bytes(self, n: int, *, to_client: bool = True) -> None:
        """Cut after n more bytes written to the client (or to the upstream)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        self._cuts["bytes_to_client" if to_client else "bytes_to_upstream"] = _Countdown(n)

    def swap_next_responses(self) -> None:
        """Deliver this connection's next two responses in swapped order."""
        self._swaps += 1

    def inject_garbage_response(self, data: bytes | None = None) -> None:
        """Replace this connection's next response (see FaultProxy.inject_garbage_response)."""
        self._garbage.append(data)

    # ---- the three tasks ------------------------------------------------------------------

    async def _run(self, upstream: anyio.abc.SocketStream) -> None:
        self._upstream = upstream
        send, recv = anyio.create_memory_object_stream[_Response](self.proxy.max_queued_responses)
        # The parent closes both ends too: a task cancelled before it first runs (asyncio)
        # would otherwise leave its end unclosed.
        with send, recv:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_responses, send)
                async with self._client:
                    with self._client_scope:
                        async with anyio.create_task_group() as client_tg:
                            client_tg.start_soon(self._pump_requests)
                            client_tg.start_soon(self._write_responses, recv)
                self.closed_at = time.monotonic()
                self.in_flight = 0
                self.proxy._notify()
                try:
                    await upstream.send_eof()
                except _STREAM_ERRORS:
                    pass
                tg.cancel_scope.deadline = anyio.current_time() + self.proxy.upstream_linger

    async def _pump_requests(self) -> None:
        assert self._upstream is not None
        proxy = self.proxy
        rx = BufferedByteReceiveStream(self._client)
        while True:
            try:
                frame = await _read_frame(rx, proxy.max_frame_size)
            except _FrameTooLarge:
                self.cut("oversize request frame")
                return
            except _STREAM_ERRORS:
                self.cut("client closed")
                return
            api_key: int | None = None
            correlation_id = 0
            expects_response = False
            if len(frame) >= 12:
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
                expects_response = _expects_response(frame)
            # A frame too short for a header is still forwarded; it matches no response.
            self._count_request(api_key, expects_response)
            if proxy._black_hole:
                continue
            allowed = len(frame)
            forward_last = True
            fired = False
            for rules in (self._cuts, proxy._shared_cuts):
                for kind, amount in (("requests", 1), ("bytes_to_upstream", len(frame))):
                    rule = rules.get(kind)
                    if rule is None:
                        continue
                    passing = rule.take(amount)
                    if passing is not None:
                        del rules[kind]
                        fired = True
                        if kind == "requests":
                            forward_last = forward_last and rule.forward_last
                        else:
                            allowed = min(allowed, passing)
            if not forward_last:
                allowed = 0
            if api_key is not None and allowed == len(frame) and expects_response:
                self._pending.append((correlation_id, api_key))
            if allowed:
                try:
                    await self._upstream.send(frame[:allowed])
                except _STREAM_ERRORS:
                    self.cut("upstream closed")
                    return
                self.bytes_to_upstream += allowed
                if allowed == len(frame):
                    self.requests_forwarded += 1
                    proxy.requests_forwarded += 1
            if fired:
                self.cut("cut by rule")
                return

    def _count_request(self, api_key: int | None, expects_response: bool) -> None:
        proxy = self.proxy
        self.requests += 1
        proxy.requests_total += 1
        key = -1 if api_key is None else api_key
        self.requests_by_api[key] += 1
        proxy.requests_by_api[key] += 1
        if expects_response:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            proxy.max_in_flight = max(proxy.max_in_flight, self.in_flight)
            total = proxy.in_flight
            proxy.max_total_in_flight = max(proxy.max_total_in_flight, total)
        proxy._notify()

    async def _read_responses(self, send: MemoryObjectSendStream[_Response]) -> None:
        assert self._upstream is not None
        rx = BufferedByteReceiveStream(self._upstream)
        async with send:
            while True:
                try:
                    frame = await _read_frame(rx, self.proxy.max_frame_size)
                except (*_STREAM_ERRORS, _FrameTooLarge):
                    return  # closing `send` lets the writer flush what is queued, then close
                item = _Response(frame, self._match(frame), anyio.current_time())
                try:
                    await send.send(item)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass  # client side gone: keep draining so the upstream close is clean

    def _match(self, frame: bytes) -> int | None:
        if len(frame) < 8 or not self._pending:
            return None
        (correlation_id,) = struct.unpack_from(">i", frame, 4)
        for index, (pending_id, api_key) in enumerate(self._pending):
            if pending_id == correlation_id:
                del self._pending[index]
                return api_key
        # An id we never forwarded: brokers answer in order, so charge it to the oldest.
        return self._pending.popleft()[1]

    async def _write_responses(self, recv: MemoryObjectReceiveStream[_Response]) -> None:
        held: _Response | None = None
        async with recv:
            async for item in recv:
                await self._hold(item)
                if self.proxy._black_hole:
                    self.responses_dropped += 1
                    continue
                if held is None and self._claim_swap():
                    held = item  # wait for the next one, deliver it first
                    continue
                if not await self._deliver(item):
                    return
                if held is not None:
                    if not await self._deliver(held):
                        return
                    held = None
            if held is not None:  # upstream ended before a partner arrived
                await self._deliver(held)
        self.cut("upstream closed")

    async def _hold(self, item: _Response) -> None:
        while True:
            due = item.arrived + self.proxy._delay_for(item.api_key)
            now = anyio.current_time()
            if now >= due:
                return
            changed = self.proxy._settings_changed
            with anyio.move_on_after(due - now):
                await changed.wait()

    def _claim_swap(self) -> bool:
        if self._swaps:
            self._swaps -= 1
            return True
        if self.proxy._swaps:
            self.proxy._swaps -= 1
            return True
        return False

    async def _deliver(self, item: _Response) -> bool:
        """Write one response; False when the connection was cut meanwhile."""
        proxy = self.proxy
        data = item.frame
        garbage = self._garbage or proxy._garbage
        if garbage:
            replacement = garbage.popleft()
            if replacement is None:
                body = item.frame[4:8] + _GARBAGE_BODY
                replacement = struct.pack(">i", len(body)) + body
            data = replacement
        allowed = len(data)
        fired = False
        for rules in (self._cuts, proxy._shared_cuts):
            rule = rules.get("bytes_to_client")
            if rule is not None and (passing := rule.take(len(data))) is not None:
                del rules["bytes_to_client"]
                fired = True
                allowed = min(allowed, passing)
        try:
            if allowed:
                await self._client.send(data[:allowed])
        except _STREAM_ERRORS:
            self.cut("client closed")
            return False
        self.bytes_to_client += allowed
        if allowed == len(data):
            self.responses += 1
            proxy.responses_total += 1
            if item.api_key is not None:
                self.in_flight -= 1
        proxy._notify()
        if fired:
            self.cut("cut by rule")
            return False
        return True


class FaultProxy:
    """Kafka-aware TCP proxy between a client and one upstream broker, all on 127.0.0.1.

    Controls are plain methods, safe to call from any task while the proxy runs. Unless noted,
    they act at once on current connections and on future ones.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        listen_port: int = 0,
        max_connections: int = 64,
        max_frame_size: int = 64 * 1024 * 1024,
        max_queued_responses: int = 1024,
        upstream_linger: float = 1.0,
        connect_timeout: float = 5.0,
    ) -> None:
        if upstream_host != LOOPBACK:
            raise ValueError(f"FaultProxy only forwards to {LOOPBACK}, not {upstream_host!r}")
        self.upstream = (upstream_host, upstream_port)
        self.max_connections = max_connections
        self.max_frame_size = max_frame_size
        self.max_queued_responses = max_queued_responses
        self.upstream_linger = upstream_linger
        self.connect_timeout = connect_timeout
        self._listen_port = listen_port
        self.port = 0
        # statistics
        self.connection_attempts: list[float] = []  # time.monotonic() of every accept
        self.connections = 0  # accepted and connected upstream
        self.refused = 0  # closed at once because of refuse(True)
        self.rejected = 0  # closed at once because max_connections were open
        self.upstream_failures = 0  # accepted, but the upstream could not be reached
        self.requests_total = 0
        self.requests_forwarded = 0
        self.responses_total = 0
        self.requests_by_api: Counter[int] = Counter()
        self.max_in_flight = 0  # the most any single connection had
        self.max_total_in_flight = 0  # the most summed over all connections at one moment
        self.history: list[ProxyConnection] = []  # every connection, in accept order
        # fault settings
        self._delay = 0.0
        self._api_delays: dict[int, float] = {}
        self._black_hole = False
        self._refuse = False
        self._shared_cuts: dict[str, _Countdown] = {}
        self._each_cuts: dict[str, _Countdown] = {}
        self._swaps = 0
        self._garbage: deque[bytes | None] = deque()
        self._open: set[ProxyConnection] = set()
        self._active = 0
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    def __repr__(self) -> str:
        return (
            f"<FaultProxy {self.address} -> {self.upstream[0]}:{self.upstream[1]} "
            f"open={len(self._open)} requests={self.requests_total} "
            f"responses={self.responses_total} max_in_flight={self.max_in_flight}>"
        )

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"``, ready for ``bootstrap_servers``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def open_connections(self) -> list[ProxyConnection]:
        return sorted(self._open, key=lambda conn: conn.id)

    @property
    def in_flight(self) -> int:
        return sum(conn.in_flight for conn in self._open)

    # ---- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> FaultProxy:
        self._settings_changed = anyio.Event()
        self._stats_changed = anyio.Event()
        async with AsyncExitStack() as stack:
            multi = await anyio.create_tcp_listener(
                local_host=LOOPBACK, local_port=self._listen_port
            )
            await stack.enter_async_context(multi)
            (listener,) = multi.listeners
            assert isinstance(listener, anyio.abc.SocketListener)
            self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg.start_soon(self._accept_loop, listener)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None and self._tg is not None
        self._tg.cancel_scope.cancel()
        stack, self._stack = self._stack, None
        return await stack.__aexit__(exc_type, exc, tb)

    async def _accept_loop(self, listener: anyio.abc.SocketListener) -> None:
        assert self._tg is not None
        while True:
            client = await listener.accept()
            self.connection_attempts.append(time.monotonic())
            if self._refuse or self._active >= self.max_connections:
                if self._refuse:
                    self.refused += 1
                else:
                    self.rejected += 1
                await client.aclose()
                self._notify()
                continue
            self._active += 1
            try:
                await self._tg.start(self._serve, client)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await client.aclose()  # idempotent: maybe the task already owns it
                raise

    async def _serve(
        self,
        client: anyio.abc.SocketStream,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with client:
                task_status.started()
                upstream: anyio.abc.SocketStream | None = None
                with anyio.move_on_after(self.connect_timeout):
                    try:
                        upstream = await anyio.connect_tcp(*self.upstream)
                    except OSError:
                        pass
                if upstream is None:
                    self.upstream_failures += 1
                    self._notify()
                    return
                async with upstream:
                    self.connections += 1
                    conn = ProxyConnection(self, len(self.history) + 1, client)
                    self.history.append(conn)
                    self._open.add(conn)
                    self._notify()
                    try:
                        await conn._run(upstream)
                    finally:
                        if conn.closed_at is None:
                            conn.closed_at = time.monotonic()
                            conn.close_reason = conn.close_reason or "proxy closed"
                        self._open.discard(conn)
                        self._notify()
        finally:
            self._active -= 1

    # ---- controls -------------------------------------------------------------------------

    def delay_responses(self, seconds: float) -> None:
        """Hold every response ``seconds`` after it arrives from upstream; 0 stops.

        Requests keep flowing meanwhile, so a pipelining client builds up in-flight requests.
        Applies to responses already held, too.
        """
        self._delay = max(0.0, seconds)
        self._settings_changed_now()

    def delay_api(self, api_key: int, seconds: float) -> None:
        """Hold responses to requests of one API (e.g. Metadata = 3); 0 removes the override.

        The effective delay is the larger of this and ``delay_responses``. Responses behind a
        held one wait for it (Kafka responses are ordered per connection).
        """
        if seconds > 0:
            self._api_delays[api_key] = seconds
        else:
            self._api_delays.pop(api_key, None)
        self._settings_changed_now()

    def cut_after_requests(
        self, n: int, *, forward_last: bool = True, per_connection: bool = False
    ) -> None:
        """Close a connection when the nth request (counted from now) has been read from it.

        ``forward_last``: the nth request is sent upstream before the cut (the broker may act
        on it, the client never sees the answer) or dropped (it never reaches the broker).
        Default (one-shot): counts requests over all connections; the connection carrying
        the nth is cut, then the rule is gone. ``per_connection=True``: every current
        connection (counting from now) and every future one (counting from its start) is
        cut after its own nth request, until ``reset()``.
        """
        if n < 1:
            raise ValueError("n must be >= 1")
        self._set_cut("requests", _Countdown(n, forward_last), per_connection)

    def cut_after_bytes(
        self, n: int, *, to_client: bool = True, per_connection: bool = False
    ) -> None:
        """Close a connection once n more bytes were written to the client (a truncated
        response), or with ``to_client=False`` forwarded upstream (a truncated request).

        Exactly n bytes pass. One-shot over all connections or ``per_connection`` as in
        ``cut_after_requests``.
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        kind = "bytes_to_client" if to_client else "bytes_to_upstream"
        self._set_cut(kind, _Countdown(n), per_connection)

    def _set_cut(self, kind: str, rule: _Countdown, per_connection: bool) -> None:
        if not per_connection:
            self._shared_cuts[kind] = rule
            return
        self._each_cuts[kind] = rule
        for conn in self._open:
            conn._cuts[kind] = _Countdown(rule.remaining, rule.forward_last)

    def cut_all(self) -> None:
        """Close every current connection now (the client side at once)."""
        for conn in list(self._open):
            conn.cut("cut_all")

    def black_hole(self, on: bool = True) -> None:
        """While on, read requests but forward none, and drop every response."""
        self._black_hole = on
        self._settings_changed_now()

    def refuse(self, on: bool = True) -> None:
        """While on, accept new connections and close them at once (still timestamped in
        ``connection_attempts``). Current connections are not touched."""
        self._refuse = on

    def swap_next_responses(self) -> None:
        """The next two responses on one connection (the first to deliver one) are swapped.

        The first is held until the second arrives: a client that waits for the first
        response before sending again will stall until it times out.
        """
        self._swaps += 1

    def inject_garbage_response(self, data: bytes | None = None) -> None:
        """Replace the next response (on whichever connection delivers one first).

        Default: a well-framed response carrying the right correlation id and a 1-byte body
        (0xFF) that no response schema decodes. ``data`` is written raw instead (no framing
        added), e.g. a bad size prefix. The real response is dropped; its request counts as
        answered.
        """
        self._garbage.append(data)

    def reset(self) -> None:
        """Turn every fault off (delays, black hole, refuse, cuts, swaps, garbage)."""
        self._delay = 0.0
        self._api_delays.clear()
        self._black_hole = self._refuse = False
        self._shared_cuts.clear()
        self._each_cuts.clear()
        self._swaps = 0
        self._garbage.clear()
        for conn in self._open:
            conn._cuts.clear()
            conn._swaps = 0
            conn._garbage.clear()
        self._settings_changed_now()

    def reset_stats(self) -> None:
        """Zero the counters (not ``history``); maxima restart from the current in-flight."""
        self.connection_attempts.clear()
        self.connections = 0
        self.requests_total = self.requests_forwarded = self.responses_total = 0
        self.requests_by_api.clear()
        self.refused = self.rejected = self.upstream_failures = 0
        for conn in self._open:
            conn.max_in_flight = conn.in_flight
        self.max_in_flight = max((conn.in_flight for conn in self._open), default=0)
        self.max_total_in_flight = self.in_flight

    def _delay_for(self, api_key: int | None) -> float:
        if api_key is None:
            return self._delay
        return max(self._delay, self._api_delays.get(api_key, 0.0))

    def _settings_changed_now(self) -> None:
        self._settings_changed.set()
        self._settings_changed = anyio.Event()

    def _notify(self) -> None:
        self._stats_changed.set()
        self._stats_changed = anyio.Event()

    # ---- waiting --------------------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], bool], within: float | None = 10.0) -> None:
        """Return once ``predicate()`` holds, re-checked on every statistics change.

        Raises TimeoutError after ``within`` seconds (None: wait forever).
        """
        with anyio.fail_after(within):
            while not predicate():
                await self._stats_changed.wait()

    async def wait_for_requests(self, n: int, within: float | None = 10.0) -> None:
        """Wait until ``requests_total >= n``."""
        await self.wait_until(lambda: self.requests_total >= n, within)

    async def wait_for_responses(self, n: int, within: float | None = 10.0) -> None:
        """Wait until ``responses_total >= n``."""
        await self.wait_until(lambda: self.responses_total >= n, within)

    async def wait_for_connections(self, n: int, within: float | None = 10.0) -> None:
        """Wait until ``connections >= n`` (accepted and connected upstream)."""
        await self.wait_until(lambda: self.connections >= n, within)

    async def wait_for_attempts(self, n: int, within: float | None = 10.0) -> None:
        """Wait until ``len(connection_attempts) >= n`` (refused ones included)."""
        await self.wait_until(lambda: len(self.connection_attempts) >= n, within)


def free_port() -> int:
    """A loopback port that was free a moment ago (for a broker's advertised address)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def proxied_broker() -> AsyncIterator[tuple[LocalBroker, FaultProxy]]:
    """A fresh LocalBroker whose advertised address is a FaultProxy in front of it, so every
    client connection (bootstrap and metadata-routed alike) goes through the proxy."""
    from aiokafka_ng.testing import LocalBroker

    port = free_port()
    async with LocalBroker(advertised_port=port) as broker:  # noqa: SIM117 (proxy needs broker.port)
        async with FaultProxy("127.0.0.1", broker.port, listen_port=port) as proxy:
            yield broker, proxy
