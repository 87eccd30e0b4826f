"""Connection behaviour against an in-test fake Kafka server (tests/net/net_fake_kafka.py).

The fake answers ApiVersions itself and queues every other request, so each test decides
when and how responses come back: held (pipelining), out of order (correlation mismatch),
garbage, never (timeouts). All tests run on asyncio and trio.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import TaskStatus
from net_fake_kafka import FakeKafka

from aiokafka_ng.errors import (
    CorrelationIdMismatchError,
    KafkaConnectionError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from aiokafka_ng.net.connection import Connection, ConnectionConfig, ConnectionState, connect
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest
from aiokafka_ng.protocol.messages.describe_cluster import DescribeClusterRequest
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
)
from aiokafka_ng.protocol.messages.produce import ProduceRequest

pytestmark = pytest.mark.anyio

METADATA_KEY = MetadataRequest.API_KEY
PRODUCE_KEY = ProduceRequest.API_KEY


def metadata_response(node_id: int) -> MetadataResponse:
    # node_id tags which request a response was built for.
    return MetadataResponse(brokers=[MetadataResponseBroker(node_id, "127.0.0.1", 9092)])


def node_of(response: Any) -> int:
    assert isinstance(response, MetadataResponse)
    return response.brokers[0].node_id


async def collect(results: dict[int, object], key: int, call: Callable[[], Awaitable[Any]]) -> None:
    """Run ``call`` and store its result, or the exception it raised, under ``key``."""
    try:
        results[key] = await call()
    except Exception as exc:
        results[key] = exc


def config(**kwargs: Any) -> ConnectionConfig:
    kwargs.setdefault("request_timeout_s", 10.0)
    return ConnectionConfig(**kwargs)


async def test_handshake_negotiates_highest_common_version() -> None:
    versions = {18: (0, 4), METADATA_KEY: (1, 9)}
    async with FakeKafka(api_versions=versions).serve() as server:
        async with connect("127.0.0.1", server.port, config()) as conn:
            assert conn.state is ConnectionState.READY
            assert conn.api_versions == versions
            assert conn.version_for(MetadataRequest) == 9
            request = server.next_request()
            async with anyio.create_task_group() as tg:
                results: dict[int, object] = {}
                tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
                received = await request
                assert received.header.api_version == 9
                assert received.header.client_id == "aiokafka-ng"
                await received.reply(metadata_response(7))
            assert node_of(results[0]) == 7
        # ApiVersions went out once, in the newest version we know, naming the client in a
        # form Kafka's validation accepts (v3+ brokers reject other names with INVALID_REQUEST).
        assert server.connections[0].seen[0] == (18, ApiVersionsRequest.MAX_STABLE_VERSION)
        (api_versions_request,) = server.api_versions_requests
        assert isinstance(api_versions_request, ApiVersionsRequest)
        software = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
        assert api_versions_request.client_software_name == "aiokafka-ng"
        assert software.fullmatch(api_versions_request.client_software_version)


async def test_pipelining_holds_exactly_max_in_flight() -> None:
    n = 3
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config(max_in_flight=n)) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            for i in range(n + 1):
                tg.start_soon(collect, results, i, lambda: conn.send(MetadataRequest()))
            held = [await server.next_request() for _ in range(n)]
            await anyio.wait_all_tasks_blocked()
            stats = conn.statistics()
            # N on the wire, the N+1th send waits for a permit and has written nothing.
            assert stats.in_flight == n
            assert stats.permits_available == 0
            assert stats.tasks_waiting == 1
            assert stats.requests_sent == 1 + n  # ApiVersions + N
            assert server.pending_requests() == 0
            # Answering the oldest frees exactly one permit: the N+1th goes out.
            await held[0].reply(metadata_response(0))
            held.append(await server.next_request())
            for i, received in enumerate(held[1:], start=1):
                await received.reply(metadata_response(i))
        assert sorted(node_of(r) for r in results.values()) == list(range(n + 1))
        stats = conn.statistics()
        assert stats.max_in_flight_seen == n
        assert stats.in_flight == 0
        assert stats.permits_available == n


async def test_correlation_mismatch_fails_every_pending_request_once_and_closes() -> None:
    async with FakeKafka().serve() as server:
        async with connect("127.0.0.1", server.port, config()) as conn:
            results: dict[int, object] = {}
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(collect, results, i, lambda: conn.send(MetadataRequest()))
                held = [await server.next_request() for _ in range(3)]
                # Answer the second request first: out of order.
                await held[1].reply(metadata_response(1))
            assert len(results) == 3
            for outcome in results.values():
                assert isinstance(outcome, CorrelationIdMismatchError)
                assert isinstance(outcome, KafkaConnectionError)
                assert outcome.retriable
            assert conn.closed
            assert "correlation id" in conn.close_reason
            stats = conn.statistics()
            assert (stats.in_flight, stats.permits_available) == (0, stats.max_in_flight)
            with anyio.fail_after(5):
                await server.connections[0].closed.wait()  # the socket really closed
            with pytest.raises(KafkaConnectionError):
                await conn.send(MetadataRequest())
        # A fresh connection to the same server works.
        async with connect("127.0.0.1", server.port, config()) as again:
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect, results, 9, lambda: again.send(MetadataRequest()))
                await (await server.next_request()).reply(metadata_response(9))
            assert node_of(results[9]) == 9


async def test_unsolicited_response_poisons() -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config()) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
            received = await server.next_request()
            await received.reply(metadata_response(0))
        # A second answer to the same request: nothing is in flight any more.
        await received.reply(metadata_response(0))
        with anyio.fail_after(5):
            await conn.wait_closed()
        assert "unsolicited" in conn.close_reason


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\x00\x00\x00\x03abc", id="too-short-for-a-header"),
        pytest.param(b"\xff\xff\xff\xf0", id="negative-size"),
        pytest.param(None, id="undecodable-body"),
    ],
)
async def test_garbage_frame_drops_the_connection(garbage: bytes | None) -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config()) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(collect, results, i, lambda: conn.send(MetadataRequest()))
            held = [await server.next_request() for _ in range(2)]
            if garbage is None:
                # Right size and correlation id, then bytes no Metadata body can be.
                cid = held[0].header.correlation_id.to_bytes(4, "big")
                garbage = (9).to_bytes(4, "big") + cid + b"\xff" * 5
            await held[0].conn.send_raw(garbage)
        for outcome in results.values():
            assert type(outcome) is KafkaConnectionError
            assert outcome.retriable
        assert conn.closed
        with anyio.fail_after(5):
            await server.connections[0].closed.wait()


async def test_timeout_raises_and_closes_connection() -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config()) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
            await server.next_request()
            tg.start_soon(collect, results, 1, lambda: conn.send(MetadataRequest(), timeout=0.2))
            await server.next_request()  # written, never answered
        assert isinstance(results[1], RequestTimeoutError)
        assert results[1].retriable
        # The other pending request cannot be matched safely any more either.
        assert type(results[0]) is KafkaConnectionError
        assert conn.closed
        assert "timed out" in conn.close_reason


async def test_timeout_waiting_for_a_permit_leaves_connection_open() -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config(max_in_flight=1)) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
            held = await server.next_request()
            with pytest.raises(RequestTimeoutError, match="in-flight slot"):
                await conn.send(MetadataRequest(), timeout=0.1)
            assert not conn.closed  # nothing reached the wire
            await held.reply(metadata_response(0))
        assert node_of(results[0]) == 0
        assert server.pending_requests() == 0


async def test_cancelled_caller_keeps_permit_until_response_arrives() -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config(max_in_flight=1)) as conn,
    ):
        results: dict[int, object] = {}
        caller_scope = anyio.CancelScope()

        async def cancellable_caller(*, task_status: TaskStatus[None]) -> None:
            with caller_scope:
                task_status.started()
                results[0] = await conn.send(MetadataRequest())
            results.setdefault(0, "cancelled")

        async with anyio.create_task_group() as tg:
            await tg.start(cancellable_caller)
            abandoned = await server.next_request()  # on the wire
            caller_scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert results[0] == "cancelled"
            stats = conn.statistics()
            # The request is still on the wire, so its permit is still taken.
            assert (stats.in_flight, stats.permits_available) == (1, 0)

            tg.start_soon(collect, results, 1, lambda: conn.send(MetadataRequest()))
            await anyio.wait_all_tasks_blocked()
            assert conn.statistics().tasks_waiting == 1
            assert server.pending_requests() == 0
            # The late response releases the permit and is discarded...
            await abandoned.reply(metadata_response(0))
            second = await server.next_request()
            await second.reply(metadata_response(1))
        # ...so the next caller gets its own response, not the abandoned one's.
        assert node_of(results[1]) == 1
        stats = conn.statistics()
        assert stats.responses_discarded == 1
        assert stats.permits_available == 1
        assert not conn.closed


async def test_fire_and_forget_holds_no_permit() -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config(max_in_flight=1)) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
            held = await server.next_request()
            assert conn.statistics().permits_available == 0
            with anyio.fail_after(5):  # would block forever if it needed the permit
                result = await conn.send(ProduceRequest(acks=0), expect_response=False)
            assert result is None
            produce = await server.next_request()
            assert produce.header.api_key == PRODUCE_KEY
            assert produce.header.correlation_id == held.header.correlation_id + 1
            assert conn.statistics().in_flight == 1
            # The held request's response still matches: acks=0 is not in flight.
            await held.reply(metadata_response(5))
        assert node_of(results[0]) == 5
        assert not conn.closed


async def test_api_versions_falls_back_when_broker_answers_unsupported_version() -> None:
    async with FakeKafka(api_versions_max=2).serve() as server:
        async with connect("127.0.0.1", server.port, config()) as conn:
            assert conn.api_versions[METADATA_KEY] == (0, MetadataRequest.MAX_STABLE_VERSION)
        seen = server.connections[0].seen
        # Newest first; the broker's v0-format error 35 named its range (0-2): retry in v2.
        assert seen == [(18, ApiVersionsRequest.MAX_STABLE_VERSION), (18, 2)]


async def test_api_versions_falls_back_to_v0_without_a_range() -> None:
    async with FakeKafka(api_versions_max=0, advertise_on_unsupported=False).serve() as server:
        async with connect("127.0.0.1", server.port, config()) as conn:
            assert METADATA_KEY in conn.api_versions
        assert server.connections[0].seen == [(18, ApiVersionsRequest.MAX_STABLE_VERSION), (18, 0)]


async def test_no_common_version_raises_unsupported_version_naming_the_api() -> None:
    versions = {18: (0, 4), METADATA_KEY: (50, 60)}
    async with (
        FakeKafka(api_versions=versions).serve() as server,
        connect("127.0.0.1", server.port, config()) as conn,
    ):
        with pytest.raises(UnsupportedVersionError, match="Metadata"):
            conn.version_for(MetadataRequest)
        with pytest.raises(UnsupportedVersionError, match="Metadata"):
            await conn.send(MetadataRequest())
        with pytest.raises(UnsupportedVersionError, match="DescribeCluster"):
            await conn.send(DescribeClusterRequest())  # not advertised at all
        with pytest.raises(UnsupportedVersionError, match="ApiVersions v9"):
            await conn.send(ApiVersionsRequest(), version=9)
        assert not conn.closed
        assert server.pending_requests() == 0  # nothing broken was written
        assert conn.statistics().requests_sent == 1


async def test_aclose_is_idempotent_fails_pending_and_ends_the_run_task() -> None:
    async with FakeKafka().serve() as server:
        results: dict[int, object] = {}
        with anyio.fail_after(10):
            # The task group only exits once Connection.run has returned.
            async with anyio.create_task_group() as tg:
                conn = await tg.start(Connection.run, "127.0.0.1", server.port, config())
                assert isinstance(conn, Connection)
                tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
                await server.next_request()
                await conn.aclose()
                await conn.aclose()
                assert conn.closed
                await conn.wait_closed()
        assert type(results[0]) is KafkaConnectionError
        with anyio.fail_after(5):
            await server.connections[0].closed.wait()
        await conn.aclose()  # still fine after the task group is gone


async def test_broker_closing_the_socket_fails_pending_requests() -> None:
    async with (
        FakeKafka().serve() as server,
        connect("127.0.0.1", server.port, config()) as conn,
    ):
        results: dict[int, object] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, results, 0, lambda: conn.send(MetadataRequest()))
            received = await server.next_request()
            await received.conn.close()
        outcome = results[0]
        assert type(outcome) is KafkaConnectionError
        assert outcome.__cause__ is not None  # the anyio/OS error, chained
        with anyio.fail_after(5):
            await conn.wait_closed()


async def test_connection_refused_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: refused
        with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}") as info:
            async with connect("127.0.0.1", port, config()):
                pass
    assert isinstance(info.value.__cause__, OSError)


async def test_setup_times_out_when_the_broker_never_answers() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    accepted = anyio.Event()

    async def silent(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            accepted.set()
            await anyio.sleep_forever()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        with pytest.raises(KafkaConnectionError, match="ApiVersions") as info:
            await Connection.run("127.0.0.1", port, config(request_timeout_s=0.2))
        assert accepted.is_set()
        assert isinstance(info.value.__cause__, TimeoutError)
        tg.cancel_scope.cancel()


async def test_connect_reraises_the_body_exception_unwrapped() -> None:
    async with FakeKafka().serve() as server:
        with pytest.raises(LookupError, match="mine"):
            async with connect("127.0.0.1", server.port, config()) as conn:
                raise LookupError("mine")
        assert conn.closed


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        ConnectionConfig(max_in_flight=0)
    with pytest.raises(ValueError):
        ConnectionConfig(request_timeout_s=0)


async def test_cancelling_the_owner_of_connect_closes_cleanly() -> None:
    async with FakeKafka().serve() as server:
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                async with connect("127.0.0.1", server.port, config()) as conn:
                    scope.cancel()
                    await anyio.sleep_forever()
            assert scope.cancelled_caught
            assert conn.closed
            await server.connections[0].closed.wait()
