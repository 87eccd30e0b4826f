"""Tests for the fault proxy, against a tiny in-test upstream that speaks Kafka framing."""

from __future__ import annotations

import gc
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from fault_proxy import FaultProxy

pytestmark = pytest.mark.anyio

METADATA = 3
API_VERSIONS = 18
PRODUCE = 0
RESPONSE_BODY = b"resp"


def request_frame(api_key: int, correlation_id: int, version: int = 1, body: bytes = b"") -> bytes:
    client_id = b"test"
    payload = (
        struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body
    )
    return struct.pack(">i", len(payload)) + payload


async def read_frame(rx: BufferedByteReceiveStream) -> bytes:
    (size,) = struct.unpack(">i", await rx.receive_exactly(4))
    return await rx.receive_exactly(size)


class EchoUpstream:
    """Answers every request with ``correlation_id + b"resp"``, except for silent api keys."""

    def __init__(
        self, silent_api_keys: frozenset[int] = frozenset(), close_after: int | None = None
    ) -> None:
        self.silent_api_keys = silent_api_keys
        self.close_after = close_after  # close each connection after this many requests
        self.received: list[tuple[int, int]] = []  # (api_key, correlation_id)
        self.connections = 0
        self.closed = 0
        self.port = 0

    async def __aenter__(self) -> EchoUpstream:
        self._changed = anyio.Event()
        self._listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = self._listener.extra(anyio.abc.SocketAttribute.local_port)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._listener.serve, self._handle)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            await self._listener.aclose()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(5):
            while not predicate():
                await self._changed.wait()

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        self._notify()
        rx = BufferedByteReceiveStream(stream)
        count = 0
        try:
            async with stream:
                while self.close_after is None or count < self.close_after:
                    try:
                        payload = await read_frame(rx)
                    except (anyio.IncompleteRead, anyio.BrokenResourceError):
                        return
                    api_key, _, correlation_id = struct.unpack_from(">hhi", payload)
                    self.received.append((api_key, correlation_id))
                    count += 1
                    self._notify()
                    if api_key not in self.silent_api_keys:
                        body = struct.pack(">i", correlation_id) + RESPONSE_BODY
                        await stream.send(struct.pack(">i", len(body)) + body)
        finally:
            self.closed += 1
            self._notify()


class RawClient:
    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.rx = BufferedByteReceiveStream(stream)

    async def send(
        self, api_key: int, correlation_id: int, version: int = 1, body: bytes = b""
    ) -> None:
        await self.stream.send(request_frame(api_key, correlation_id, version, body))

    async def recv(self) -> tuple[int, bytes]:
        with anyio.fail_after(5):
            payload = await read_frame(self.rx)
        return struct.unpack_from(">i", payload)[0], payload[4:]

    async def call(self, api_key: int, correlation_id: int) -> tuple[int, bytes]:
        await self.send(api_key, correlation_id)
        return await self.recv()

    async def read_until_closed(self) -> bytes:
        """Everything the proxy still sends before closing; fails if it never closes."""
        data = bytearray(self.rx.buffer)
        with anyio.fail_after(5):
            while True:
                try:
                    data += await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return bytes(data)


@asynccontextmanager
async def client_of(proxy: FaultProxy) -> AsyncIterator[RawClient]:
    async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
        yield RawClient(stream)


@asynccontextmanager
async def setup(**upstream_kw: object) -> AsyncIterator[tuple[EchoUpstream, FaultProxy]]:
    async with (
        EchoUpstream(**upstream_kw) as upstream,  # type: ignore[arg-type]
        FaultProxy("127.0.0.1", upstream.port) as proxy,
    ):
        yield upstream, proxy


async def test_forwards_and_counts() -> None:
    async with setup() as (upstream, proxy), client_of(proxy) as client:
        assert proxy.address == f"127.0.0.1:{proxy.port}"
        for correlation_id in (7, 8, 9):
            assert await client.call(METADATA, correlation_id) == (correlation_id, RESPONSE_BODY)
        assert await client.call(API_VERSIONS, 10) == (10, RESPONSE_BODY)
        assert upstream.received == [(3, 7), (3, 8), (3, 9), (18, 10)]
        assert proxy.connections == 1 and len(proxy.connection_attempts) == 1
        assert proxy.requests_total == proxy.requests_forwarded == proxy.responses_total == 4
        assert proxy.requests_by_api == {METADATA: 3, API_VERSIONS: 1}
        assert proxy.max_in_flight == 1 and proxy.in_flight == 0
        (conn,) = proxy.open_connections
        assert (conn.requests, conn.responses, conn.max_in_flight) == (4, 4, 1)


async def test_upstream_must_be_loopback() -> None:
    for host in ("localhost", "10.0.0.1", "0.0.0.0"):
        with pytest.raises(ValueError):
            FaultProxy(host, 9092)


async def test_delay_builds_in_flight_and_release() -> None:
    async with setup() as (upstream, proxy), client_of(proxy) as client:
        proxy.delay_responses(30)
        for correlation_id in range(1, 6):  # pipelined: no waiting for answers
            await client.send(METADATA, correlation_id)
        await upstream.wait_until(lambda: len(upstream.received) == 5)
        await proxy.wait_until(lambda: proxy.in_flight == 5)
        assert proxy.responses_total == 0
        proxy.delay_responses(0)  # releases the responses already held
        assert [(await client.recv())[0] for _ in range(5)] == [1, 2, 3, 4, 5]
        assert proxy.max_in_flight == 5 and proxy.max_total_in_flight == 5
        assert proxy.in_flight == 0


async def test_delay_holds_for_the_given_time() -> None:
    async with setup() as (_, proxy), client_of(proxy) as client:
        proxy.delay_responses(0.2)
        start = anyio.current_time()
        assert (await client.call(METADATA, 1))[0] == 1
        assert anyio.current_time() - start >= 0.2


async def test_delay_api_only_delays_that_api() -> None:
    async with setup() as (_, proxy), client_of(proxy) as client:
        proxy.delay_api(METADATA, 30)
        assert await client.call(API_VERSIONS, 1) == (1, RESPONSE_BODY)
        await client.send(METADATA, 2)
        await proxy.wait_until(lambda: proxy.in_flight == 1)
        with anyio.move_on_after(0.1) as scope:
            await client.recv()
        assert scope.cancelled_caught
        proxy.delay_api(METADATA, 0)
        assert await client.recv() == (2, RESPONSE_BODY)


@pytest.mark.parametrize("forward_last", [True, False])
async def test_cut_after_requests(forward_last: bool) -> None:
    async with setup() as (upstream, proxy), client_of(proxy) as client:
        proxy.cut_after_requests(2, forward_last=forward_last)
        assert (await client.call(METADATA, 1))[0] == 1
        await client.send(METADATA, 2)
        assert await client.read_until_closed() == b""
        await upstream.wait_until(lambda: upstream.closed == 1)  # drained and closed
        assert [cid for _, cid in upstream.received] == ([1, 2] if forward_last else [1])
        (conn,) = proxy.history
        assert conn.closed and conn.close_reason == "cut by rule"
        assert proxy.requests_total == 2


async def test_cut_after_requests_counts_across_connections_once() -> None:
    async with setup() as (_, proxy), client_of(proxy) as a, client_of(proxy) as b:
        await proxy.wait_for_connections(2)
        proxy.cut_after_requests(3, forward_last=False)
        assert (await a.call(METADATA, 1))[0] == 1
        assert (await a.call(METADATA, 2))[0] == 2
        await b.send(METADATA, 3)
        assert await b.read_until_closed() == b""
        # The rule fired once and is gone: connection a and new requests flow.
        assert (await a.call(METADATA, 4))[0] == 4
        assert [conn.closed for conn in proxy.history] == [False, True]


async def test_cut_after_requests_per_connection() -> None:
    async with setup() as (upstream, proxy):
        proxy.cut_after_requests(1, forward_last=False, per_connection=True)
        for correlation_id in (1, 2):
            async with client_of(proxy) as client:
                await client.send(METADATA, correlation_id)
                assert await client.read_until_closed() == b""
        assert upstream.received == []
        proxy.reset()
        async with client_of(proxy) as client:
            assert (await client.call(METADATA, 3))[0] == 3


async def test_cut_after_bytes_truncates_a_response() -> None:
    async with setup() as (_, proxy), client_of(proxy) as client:
        proxy.cut_after_bytes(6)
        await client.send(METADATA, 0x01020304)
        # 4-byte size prefix, then only the first two bytes of the correlation id
        assert await client.read_until_closed() == struct.pack(">i", 8) + b"\x01\x02"


async def test_cut_after_bytes_truncates_a_request() -> None:
    async with setup() as (upstream, proxy), client_of(proxy) as client:
        proxy.cut_after_bytes(10, to_client=False)
        await client.send(METADATA, 1)
        assert await client.read_until_closed() == b""
        await upstream.wait_until(lambda: upstream.closed == 1)
        assert upstream.received == []  # it saw 10 bytes of a longer frame, then EOF
        assert proxy.history[0].bytes_to_upstream == 10


async def test_cut_all() -> None:
    async with setup() as (_, proxy), client_of(proxy) as a, client_of(proxy) as b:
        await proxy.wait_for_connections(2)
        proxy.cut_all()
        assert await a.read_until_closed() == b""
        assert await b.read_until_closed() == b""
        await proxy.wait_until(lambda: not proxy.open_connections)
        assert {conn.close_reason for conn in proxy.history} == {"cut_all"}


async def test_swap_next_responses() -> None:
    async with setup() as (_, proxy), client_of(proxy) as client:
        proxy.swap_next_responses()
        for correlation_id in (1, 2, 3):
            await client.send(METADATA, correlation_id)
        assert [(await client.recv())[0] for _ in range(3)] == [2, 1, 3]
        assert proxy.in_flight == 0


async def test_inject_garbage_response() -> None:
    async with setup() as (_, proxy), client_of(proxy) as client:
        proxy.inject_garbage_response()
        assert await client.call(METADATA, 5) == (5, b"\xff")
        assert await client.call(METADATA, 6) == (6, RESPONSE_BODY)
        proxy.history[0].inject_garbage_response(b"\x7f\xff\xff\xff")
        await client.send(METADATA, 7)
        with anyio.fail_after(5):
            assert await client.rx.receive_exactly(4) == b"\x7f\xff\xff\xff"


async def test_refuse_records_attempt_times() -> None:
    async with setup() as (upstream, proxy):
        proxy.refuse(True)
        for _ in range(3):
            async with client_of(proxy) as client:
                assert await client.read_until_closed() == b""
        await proxy.wait_for_attempts(3)
        attempts = proxy.connection_attempts
        assert attempts == sorted(attempts) and len(attempts) == 3
        assert (proxy.refused, proxy.connections, upstream.connections) == (3, 0, 0)
        proxy.refuse(False)
        async with client_of(proxy) as client:
            assert (await client.call(METADATA, 1))[0] == 1
        assert len(proxy.connection_attempts) == 4 and proxy.connections == 1


async def test_black_hole_never_answers() -> None:
    async with setup() as (upstream, proxy), client_of(proxy) as client:
        proxy.black_hole(True)
        await client.send(METADATA, 1)
        await proxy.wait_for_requests(1)
        with anyio.move_on_after(0.2) as scope:
            await client.recv()
        assert scope.cancelled_caught
        assert upstream.received == [] and proxy.in_flight == 1
        proxy.black_hole(False)
        assert (await client.call(METADATA, 2))[0] == 2


async def test_produce_acks_zero_is_not_in_flight() -> None:
    def produce_body(version: int, acks: int) -> bytes:
        if version >= 9:  # header tagged fields, compact null transactional id
            return b"\x00" + b"\x00" + struct.pack(">hi", acks, 1000) + b"\x01\x00"
        return struct.pack(">hhi", -1, acks, 1000) + struct.pack(">i", 0)

    silent = frozenset({PRODUCE})
    async with setup(silent_api_keys=silent) as (upstream, proxy), client_of(proxy) as client:
        for cid, version in enumerate((3, 8, 9, 11)):
            await client.send(PRODUCE, cid, version=version, body=produce_body(version, 0))
        await upstream.wait_until(lambda: len(upstream.received) == 4)
        assert proxy.requests_by_api[PRODUCE] == 4 and proxy.max_in_flight == 0
        await client.send(PRODUCE, 10, version=9, body=produce_body(9, -1))
        await client.send(PRODUCE, 11, version=3, body=produce_body(3, 1))
        await proxy.wait_until(lambda: proxy.in_flight == 2)


async def test_upstream_close_flushes_then_closes_client() -> None:
    async with setup(close_after=2) as (_, proxy), client_of(proxy) as client:
        proxy.delay_responses(0.05)  # responses are still queued when the upstream closes
        await client.send(METADATA, 1)
        await client.send(METADATA, 2)
        assert [(await client.recv())[0] for _ in range(2)] == [1, 2]
        assert await client.read_until_closed() == b""
        await proxy.wait_until(lambda: not proxy.open_connections)
        assert proxy.history[0].close_reason == "upstream closed"


async def test_limits_connections_and_frame_size() -> None:
    async with EchoUpstream() as upstream:
        proxy = FaultProxy("127.0.0.1", upstream.port, max_connections=1, max_frame_size=100)
        async with proxy, client_of(proxy) as first:
            await proxy.wait_for_connections(1)
            async with client_of(proxy) as second:
                assert await second.read_until_closed() == b""
            assert proxy.rejected == 1
            await first.stream.send(struct.pack(">i", 101) + b"x" * 101)
            assert await first.read_until_closed() == b""
            assert proxy.history[0].close_reason == "oversize request frame"


async def test_unreachable_upstream_closes_client() -> None:
    async with EchoUpstream() as upstream:
        port = upstream.port
    async with FaultProxy("127.0.0.1", port) as proxy, client_of(proxy) as client:
        assert await client.read_until_closed() == b""
        await proxy.wait_until(lambda: proxy.upstream_failures == 1)


async def test_exit_cancels_tasks_and_closes_sockets() -> None:
    async with EchoUpstream() as upstream, AsyncExitStack() as stack:
        async with FaultProxy("127.0.0.1", upstream.port) as proxy:
            stream = await anyio.connect_tcp("127.0.0.1", proxy.port)
            client = RawClient(await stack.enter_async_context(stream))
            proxy.delay_responses(30)
            for correlation_id in range(3):
                await client.send(METADATA, correlation_id)
            await proxy.wait_until(lambda: proxy.in_flight == 3)
            await upstream.wait_until(lambda: len(upstream.received) == 3)
        # The proxy has exited while its client still waits for three answers.
        assert await client.read_until_closed() == b""
        await upstream.wait_until(lambda: upstream.closed == 1)
        assert not proxy.open_connections
        assert proxy.history[0].close_reason == "proxy closed"
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", proxy.port)
    gc.collect()  # an unclosed socket or memory stream would warn here, and warnings are errors
