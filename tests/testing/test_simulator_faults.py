"""ClusterSimulator's fault controls, byte for byte, in pass-through mode in front of a tiny
in-test upstream that speaks Kafka framing (tests/testing/test_simulator.py has the
simulator against the real broker)."""

from __future__ import annotations

import gc
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from aiokafka_ng.testing.simulator import ClusterSimulator

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

    def __init__(self, silent_api_keys: frozenset[int] = frozenset()) -> None:
        self.silent_api_keys = silent_api_keys
        self.received: list[tuple[int, int]] = []  # (api_key, correlation_id)
        self.connections = 0
        self.closed = 0
        self.host = "127.0.0.1"
        self.port = 0  # set by echo_upstream(), which serves it
        self._changed = anyio.Event()

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
        try:
            async with stream:
                while True:
                    try:
                        payload = await read_frame(rx)
                    except (anyio.IncompleteRead, anyio.BrokenResourceError):
                        return
                    api_key, _, correlation_id = struct.unpack_from(">hhi", payload)
                    self.received.append((api_key, correlation_id))
                    self._notify()
                    if api_key not in self.silent_api_keys:
                        body = struct.pack(">i", correlation_id) + RESPONSE_BODY
                        await stream.send(struct.pack(">i", len(body)) + body)
        finally:
            self.closed += 1
            self._notify()


@asynccontextmanager
async def echo_upstream(
    silent_api_keys: frozenset[int] = frozenset(),
) -> AsyncIterator[EchoUpstream]:
    upstream = EchoUpstream(silent_api_keys)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        upstream.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(listener.serve, upstream._handle)
        yield upstream
        tg.cancel_scope.cancel()


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
        """Everything the simulator still sends before closing; fails if it never closes."""
        data = bytearray(self.rx.buffer)
        with anyio.fail_after(5):
            while True:
                try:
                    data += await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return bytes(data)


@asynccontextmanager
async def client_of(sim: ClusterSimulator) -> AsyncIterator[RawClient]:
    async with await anyio.connect_tcp("127.0.0.1", sim.ports[0]) as stream:
        yield RawClient(stream)


@asynccontextmanager
async def setup(
    silent_api_keys: frozenset[int] = frozenset(),
) -> AsyncIterator[tuple[EchoUpstream, ClusterSimulator]]:
    async with (
        echo_upstream(silent_api_keys) as upstream,
        ClusterSimulator(upstream, brokers=1, passthrough=True) as sim,
    ):
        yield upstream, sim


def in_flight(sim: ClusterSimulator) -> int:
    return sum(conn.in_flight for conn in sim.connection_list())


async def test_passthrough_forwards_untouched_and_counts() -> None:
    async with setup() as (upstream, sim), client_of(sim) as client:
        for correlation_id in (7, 8, 9):
            # A Metadata answer the rewriting mode would try (and fail) to decode.
            assert await client.call(METADATA, correlation_id) == (correlation_id, RESPONSE_BODY)
        assert await client.call(API_VERSIONS, 10) == (10, RESPONSE_BODY)
        assert upstream.received == [(3, 7), (3, 8), (3, 9), (18, 10)]
        assert sim.connections[0] == 1 and len(sim.connection_attempts[0]) == 1
        assert sim.requests[0] == {METADATA: 3, API_VERSIONS: 1}
        assert sim.max_in_flight == 1 and in_flight(sim) == 0
        (conn,) = sim.connection_list()
        assert (conn.requests, conn.responses, conn.max_in_flight) == (4, 4, 1)


async def test_delay_builds_in_flight_and_setting_it_lower_releases() -> None:
    async with setup() as (upstream, sim), client_of(sim) as client:
        sim.delay(0, 30_000)
        for correlation_id in range(1, 6):  # pipelined: no waiting for answers
            await client.send(METADATA, correlation_id)
        await upstream.wait_until(lambda: len(upstream.received) == 5)
        await sim.wait_until(lambda: in_flight(sim) == 5)
        assert sim.connection_list()[0].responses == 0
        sim.delay(0, 0)  # releases the responses already held
        assert [(await client.recv())[0] for _ in range(5)] == [1, 2, 3, 4, 5]
        assert sim.max_in_flight == 5 and in_flight(sim) == 0


async def test_delay_holds_for_the_given_time() -> None:
    async with setup() as (_, sim), client_of(sim) as client:
        sim.delay(0, 200)
        start = anyio.current_time()
        assert (await client.call(METADATA, 1))[0] == 1
        assert anyio.current_time() - start >= 0.2


async def test_delay_of_one_api_only_delays_that_api() -> None:
    async with setup() as (_, sim), client_of(sim) as client:
        sim.delay(0, 30_000, api_key=METADATA)
        assert await client.call(API_VERSIONS, 1) == (1, RESPONSE_BODY)
        await client.send(METADATA, 2)
        await sim.wait_until(lambda: in_flight(sim) == 1)
        with anyio.move_on_after(0.1) as scope:
            await client.recv()
        assert scope.cancelled_caught
        sim.delay(0, 0, api_key=METADATA)
        assert await client.recv() == (2, RESPONSE_BODY)


@pytest.mark.parametrize("forward_last", [True, False])
async def test_cut_after_one_connection(forward_last: bool) -> None:
    async with setup() as (upstream, sim), client_of(sim) as client:
        sim.cut_after(0, 2, forward_last=forward_last, scope="connection")
        assert (await client.call(METADATA, 1))[0] == 1
        await client.send(METADATA, 2)
        assert await client.read_until_closed() == b""
        await upstream.wait_until(lambda: upstream.closed == 1)  # drained and closed
        assert [cid for _, cid in upstream.received] == ([1, 2] if forward_last else [1])
        assert sim.requests[0][METADATA] == 2


async def test_cut_after_one_connection_counts_across_connections_once() -> None:
    async with setup() as (_, sim), client_of(sim) as a, client_of(sim) as b:
        await sim.wait_until(lambda: sim.open_connections() == 2)
        first, second = sim.connection_list()
        sim.cut_after(0, 3, forward_last=False, scope="connection")
        assert (await a.call(METADATA, 1))[0] == 1
        assert (await a.call(METADATA, 2))[0] == 2
        await b.send(METADATA, 3)
        assert await b.read_until_closed() == b""
        # The rule fired once, on the connection that carried the 3rd request, and is gone.
        assert (await a.call(METADATA, 4))[0] == 4
        assert (first.closed, second.closed) == (False, True)
        assert second.close_reason == "cut_after (request dropped)"


async def test_cut_after_each_connection_until_clear_faults() -> None:
    async with setup() as (upstream, sim), client_of(sim) as old:
        await sim.wait_until(lambda: sim.open_connections() == 1)
        sim.cut_after(0, 2, forward_last=False, scope="each")
        for correlation_id in (1, 2):  # a new connection counts from its start
            async with client_of(sim) as client:
                assert (await client.call(METADATA, 10 * correlation_id))[0] == 10 * correlation_id
                await client.send(METADATA, 10 * correlation_id + 1)
                assert await client.read_until_closed() == b""
        assert (await old.call(METADATA, 5))[0] == 5  # the open one counts from the call
        await old.send(METADATA, 6)
        assert await old.read_until_closed() == b""
        assert [cid for _, cid in upstream.received] == [10, 20, 5]
        sim.clear_faults()
        async with client_of(sim) as client:
            for correlation_id in (7, 8, 9):
                assert (await client.call(METADATA, correlation_id))[0] == correlation_id


async def test_cut_after_bytes_truncates_a_response() -> None:
    async with setup() as (_, sim), client_of(sim) as client:
        sim.cut_after_bytes(0, 6)
        await client.send(METADATA, 0x01020304)
        # 4-byte size prefix, then only the first two bytes of the correlation id
        assert await client.read_until_closed() == struct.pack(">i", 8) + b"\x01\x02"
        async with client_of(sim) as again:  # one shot: the next connection is whole
            assert await again.call(METADATA, 5) == (5, RESPONSE_BODY)


async def test_cut_after_bytes_counts_over_responses() -> None:
    async with setup() as (_, sim), client_of(sim) as client:
        sim.cut_after_bytes(0, 12 + 3)  # one whole 12-byte response, then 3 bytes
        assert await client.call(METADATA, 1) == (1, RESPONSE_BODY)
        await client.send(METADATA, 2)
        assert await client.read_until_closed() == struct.pack(">i", 8)[:3]
        assert sim.connection_list() == []


async def test_swap_next_responses() -> None:
    async with setup() as (_, sim), client_of(sim) as client:
        sim.swap_next_responses(0)
        for correlation_id in (1, 2, 3):
            await client.send(METADATA, correlation_id)
        assert [(await client.recv())[0] for _ in range(3)] == [2, 1, 3]
        await sim.wait_until(lambda: in_flight(sim) == 0)


async def test_kill_records_attempt_times_until_restart() -> None:
    async with setup() as (upstream, sim):
        sim.kill(0)
        for _ in range(3):
            async with client_of(sim) as client:
                assert await client.read_until_closed() == b""
        await sim.wait_until(lambda: sim.refused[0] == 3)
        attempts = list(sim.connection_attempts[0])
        assert attempts == sorted(attempts) and len(attempts) == 3
        assert (sim.connections[0], upstream.connections) == (0, 0)
        sim.restart(0)
        async with client_of(sim) as client:
            assert (await client.call(METADATA, 1))[0] == 1
        assert len(sim.connection_attempts[0]) == 4 and sim.connections[0] == 1
        sim.reset_counters()
        assert not sim.connection_attempts[0]


async def test_black_hole_never_answers() -> None:
    async with setup() as (upstream, sim), client_of(sim) as client:
        sim.black_hole(0)
        await client.send(METADATA, 1)
        await sim.wait_until(lambda: sim.requests[0][METADATA] == 1)
        with anyio.move_on_after(0.2) as scope:
            await client.recv()
        assert scope.cancelled_caught
        assert upstream.received == [] and in_flight(sim) == 1
        sim.black_hole(0, False)
        assert (await client.call(METADATA, 2))[0] == 2


async def test_black_hole_drops_answers_of_requests_already_forwarded() -> None:
    async with setup() as (upstream, sim), client_of(sim) as client:
        sim.delay(0, 30_000)
        await client.send(METADATA, 1)
        await upstream.wait_until(lambda: len(upstream.received) == 1)
        sim.black_hole(0)
        sim.delay(0, 0)
        with anyio.move_on_after(0.2) as scope:
            await client.recv()
        assert scope.cancelled_caught and in_flight(sim) == 1


async def test_passthrough_produce_acks_zero_is_not_in_flight() -> None:
    def produce_body(version: int, acks: int) -> bytes:
        if version >= 9:  # header tagged fields, compact null transactional id
            return b"\x00" + b"\x00" + struct.pack(">hi", acks, 1000) + b"\x01\x00"
        return struct.pack(">hhi", -1, acks, 1000) + struct.pack(">i", 0)

    silent = frozenset({PRODUCE})
    async with setup(silent) as (upstream, sim), client_of(sim) as client:
        for cid, version in enumerate((3, 8, 9, 11)):
            await client.send(PRODUCE, cid, version=version, body=produce_body(version, 0))
        await upstream.wait_until(lambda: len(upstream.received) == 4)
        assert sim.requests[0][PRODUCE] == 4 and sim.max_in_flight == 0
        await client.send(PRODUCE, 10, version=9, body=produce_body(9, -1))
        await client.send(PRODUCE, 11, version=3, body=produce_body(3, 1))
        await sim.wait_until(lambda: in_flight(sim) == 2)


async def test_set_upstream_sends_new_connections_elsewhere() -> None:
    async with (
        echo_upstream() as first,
        echo_upstream() as second,
        ClusterSimulator(first, brokers=1, passthrough=True) as sim,
        client_of(sim) as old,
    ):
        assert (await old.call(METADATA, 1))[0] == 1
        sim.set_upstream(second)
        async with client_of(sim) as new:
            assert (await new.call(METADATA, 2))[0] == 2
        assert (await old.call(METADATA, 3))[0] == 3  # open connections stay where they were
        assert (first.received, second.received) == ([(3, 1), (3, 3)], [(3, 2)])
        second.host = "10.0.0.1"
        with pytest.raises(ValueError):
            sim.set_upstream(second)


async def test_unreachable_upstream_closes_client() -> None:
    async with echo_upstream() as upstream:
        pass
    async with ClusterSimulator(upstream, brokers=1) as sim, client_of(sim) as client:
        assert await client.read_until_closed() == b""
        await sim.wait_until(lambda: sim.upstream_failures == 1)


async def test_exit_cancels_tasks_and_closes_sockets() -> None:
    async with echo_upstream() as upstream, AsyncExitStack() as stack:
        async with ClusterSimulator(upstream, brokers=1, passthrough=True) as sim:
            stream = await anyio.connect_tcp("127.0.0.1", sim.ports[0])
            client = RawClient(await stack.enter_async_context(stream))
            sim.delay(0, 30_000)
            for correlation_id in range(3):
                await client.send(METADATA, correlation_id)
            await sim.wait_until(lambda: in_flight(sim) == 3)
            await upstream.wait_until(lambda: len(upstream.received) == 3)
        # The simulator has exited while its client still waits for three answers.
        assert await client.read_until_closed() == b""
        await upstream.wait_until(lambda: upstream.closed == 1)
        assert sim.open_connections() == 0
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", sim.ports[0])
    gc.collect()  # an unclosed socket or memory stream would warn here, and warnings are errors
