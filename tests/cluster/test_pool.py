"""ConnectionPool on stub connections: shared connects, KIP-144 backoff, idle close, replace.

A unit test of the pool's bookkeeping, at its ``connector`` seam: the stub connections let a
test hold a connect (``connect_gate``), refuse an address, or set a connection's in-flight
count directly -- states FakeKafka (whose in-memory transport connects at once, through a
real Connection and its handshake) cannot be put in at the moment the test needs them.
Cluster behaviour above the pool runs on FakeKafka (test_cluster_unit.py).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiokafka_ng.cluster import ConnectionPool
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataResponse

pytestmark = pytest.mark.anyio


@dataclass
class _Stats:
    in_flight: int
    submitting: int = 0


class StubConnection:
    """What the pool reads of a Connection; a Metadata request gets an empty answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.in_flight = 0  # a test sets it: the pool reads it through statistics()
        self.close_reason = ""  # Connection.close_reason: the pool logs it on a drop
        self._closed = anyio.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def send(self, request: Any, **_kwargs: Any) -> Any:
        if self.closed:
            raise KafkaConnectionError(f"{self.host}:{self.port}: closed")
        assert isinstance(request, MetadataRequest)
        await anyio.lowlevel.checkpoint()
        return MetadataResponse()

    def statistics(self) -> _Stats:
        return _Stats(self.in_flight)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def aclose(self) -> None:
        self._closed.set()


class StubConnector:
    """The pool's ``connector``: counts connects, refuses addresses, can hold connects."""

    def __init__(self) -> None:
        self.connects = 0
        self.refuse: set[tuple[str, int]] = set()
        self.connect_gate: anyio.Event | None = None  # hold connects until set
        self.connections: list[StubConnection] = []

    @asynccontextmanager
    async def connector(self, host: str, port: int) -> AsyncIterator[StubConnection]:
        await anyio.lowlevel.checkpoint()
        if self.connect_gate is not None:
            await self.connect_gate.wait()
        if (host, port) in self.refuse:
            raise KafkaConnectionError(f"connecting to {host}:{port}: refused")
        self.connects += 1
        conn = StubConnection(host, port)
        self.connections.append(conn)
        try:
            yield conn
        finally:
            await conn.aclose()


def _pool(broker: StubConnector, **kwargs: object) -> ConnectionPool:
    return ConnectionPool(ConnectionConfig(), connector=broker.connector, **kwargs)  # type: ignore[arg-type]


async def test_concurrent_gets_share_one_connect() -> None:
    broker = StubConnector()
    async with _pool(broker) as pool:
        pool.set_address(1, "fake", 9092)
        conns = []

        async def get() -> None:
            conns.append(await pool.get(1))

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(get)
        assert broker.connects == 1
        assert len({id(c) for c in conns}) == 1
        stats = pool.statistics().nodes[1]
        assert stats.connected and stats.connects == 1 and stats.failures == 0


async def test_unknown_node_is_a_connection_error() -> None:
    async with _pool(StubConnector()) as pool:
        with pytest.raises(KafkaConnectionError, match="no address"):
            await pool.get(42)


async def test_reconnect_backoff_grows_and_resets() -> None:
    """KIP-144: consecutive failures space attempts by 20, 40, 80, 160, 160 ms (±20 %)."""
    broker = StubConnector()
    broker.refuse.add(("fake", 9092))
    backoff = ExponentialBackoff(20, 160)
    async with _pool(broker, reconnect_backoff=backoff) as pool:
        pool.set_address(1, "fake", 9092)
        for _ in range(6):
            with pytest.raises(KafkaConnectionError, match="refused"):
                await pool.get(1)
        stats = pool.statistics().nodes[1]
        assert stats.connect_failures == 6 and stats.failures == 6 and not stats.connected
        starts = [a.started_at for a in stats.attempts]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        for failures, gap in enumerate(gaps, start=1):
            # A sleep never ends early: the lower bound holds on any machine.
            assert gap >= backoff.base_ms(failures) / 1000 * 0.8 - 0.002, (failures, gaps)
        assert gaps[-1] < 1.0  # capped at 160 ms (generous bound for a loaded machine)
        assert all(not a.ok and "refused" in (a.error or "") for a in stats.attempts)

        broker.refuse.clear()
        conn = await pool.get(1)
        assert not conn.closed
        stats = pool.statistics().nodes[1]
        assert stats.failures == 0 and stats.connects == 1 and stats.attempts[-1].ok


async def test_dead_connection_is_replaced_after_initial_backoff() -> None:
    broker = StubConnector()
    backoff = ExponentialBackoff(30, 1000)
    async with _pool(broker, reconnect_backoff=backoff) as pool:
        pool.set_address(1, "fake", 9092)
        first = await pool.get(1)
        await first.aclose()  # the broker went away
        # The pool notices through wait_closed(); the next get() opens a new connection,
        # no sooner than the initial reconnect backoff after the drop.
        closed_at = anyio.current_time()
        second = await pool.get(1)
        assert second is not first and not second.closed
        assert broker.connects == 2
        stats = pool.statistics().nodes[1]
        assert stats.attempts[-1].started_at - closed_at >= 0.030 * 0.8 - 0.002
        assert stats.failures == 0


async def test_idle_connection_is_closed_and_not_counted_as_failure() -> None:
    broker = StubConnector()
    async with _pool(broker, connections_max_idle_ms=50) as pool:
        pool.set_address(1, "fake", 9092)
        conn = await pool.get(1)
        with anyio.fail_after(5):
            await conn.wait_closed()
        stats = pool.statistics().nodes[1]
        assert not stats.connected and stats.failures == 0
        again = await pool.get(1)  # no backoff after our own close
        assert again is not conn and broker.connects == 2


async def test_busy_connection_is_not_closed_for_idleness() -> None:
    broker = StubConnector()
    async with _pool(broker, connections_max_idle_ms=30) as pool:
        pool.set_address(1, "fake", 9092)
        conn = await pool.get(1)
        conn.in_flight = 1  # type: ignore[attr-defined]  # e.g. a long-poll Fetch
        with anyio.move_on_after(0.2):
            await conn.wait_closed()
        assert not conn.closed
        conn.in_flight = 0  # type: ignore[attr-defined]
        with anyio.fail_after(5):
            await conn.wait_closed()


async def test_least_loaded_prefers_idle_open_connections() -> None:
    broker = StubConnector()
    async with _pool(broker) as pool:
        for node in (1, 2, 3):
            pool.set_address(node, "fake", 9092 + node)
        broker.refuse.add(("fake", 9095))
        c1 = await pool.get(1)
        await pool.get(2)
        with pytest.raises(KafkaConnectionError):
            await pool.get(3)
        c1.in_flight = 3  # type: ignore[attr-defined]
        assert pool.least_loaded([1, 2, 3]) == 2  # open, nothing in flight
        assert pool.least_loaded([1, 3]) == 1  # open beats "in backoff"
        assert pool.least_loaded([3]) == 3  # only choice: the one whose backoff ends first
        assert pool.least_loaded([7]) is None


async def test_adopt_and_retire() -> None:
    broker = StubConnector()
    async with _pool(broker) as pool:
        pool.set_address(-1, "fake", 9092)
        boot = await pool.get(-1)
        pool.set_address(111, "fake", 9092)
        assert pool.adopt(-1, 111)
        assert await pool.get(111) is boot
        assert not pool.has_address(-1)
        pool.set_address(-2, "other", 1)
        other = await pool.get(-2)
        pool.retire(-2)
        with anyio.fail_after(5):
            await other.wait_closed()
        with pytest.raises(KafkaConnectionError):
            await pool.get(-2)
        assert broker.connects == 2


async def test_node_retired_while_connecting_is_kept_for_its_caller() -> None:
    """A bootstrap node retired (real broker ids arrived) while a caller waited for its
    connect: the connection was closed the moment it came up, before the caller ran, and a
    pattern subscription's topic listing failed with "connection closed by the client"."""
    broker = StubConnector()
    broker.connect_gate = anyio.Event()
    async with _pool(broker) as pool:
        pool.set_address(-3, "fake", 9092)
        got: list[object] = []
        waiting = anyio.Event()

        async def use() -> None:
            waiting.set()  # get() starts the connect and waits on it without yielding first
            conn = await pool.get(-3)
            got.append(await conn.send(MetadataRequest(topics=[])))

        async with anyio.create_task_group() as tg:
            tg.start_soon(use)
            await waiting.wait()  # the caller is now waiting on the connect attempt
            pool.retire(-3)
            broker.connect_gate.set()
        assert len(got) == 1  # the request went through
        # Unused now, the retired connection closes on its own.
        with anyio.fail_after(5):
            await broker.connections[0].wait_closed()
        assert pool.statistics().nodes.get(-3) is None or not pool.statistics().nodes[-3].connected


async def test_retired_connection_waits_for_a_caller_about_to_write() -> None:
    broker = StubConnector()
    async with _pool(broker) as pool:
        pool.set_address(-1, "fake", 9092)
        conn = await pool.get(-1)
        pool.retire(-1)
        for _ in range(20):  # loop turns: the caller handed the connection may run in any
            await anyio.lowlevel.checkpoint()
        assert not conn.closed
        await conn.send(MetadataRequest(topics=[]))
        with anyio.fail_after(5):
            await conn.wait_closed()
        assert pool.statistics().nodes.get(-1) is None or pool.statistics().nodes[-1].failures == 0


async def test_pool_closed_by_a_cancelled_scope_logs_no_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An application cancelling the scope its client lives in (a task group torn down, a
    # timeout around a consumer) cancels the connection tasks before the pool's own exit
    # runs: those closes are ours, not a broker lost.
    broker = StubConnector()
    with anyio.CancelScope() as scope:
        async with _pool(broker) as pool:
            pool.set_address(1, "fake", 9092)
            pool.set_address(2, "fake", 9093)
            await pool.get(1)
            await pool.get(2)
            with caplog.at_level("DEBUG", logger="aiokafka_ng"):
                scope.cancel()
                await anyio.sleep_forever()
    assert scope.cancelled_caught
    lost = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert lost == []
    assert broker.connects == 2


async def test_coordinator_link_is_a_second_connection_that_follows_its_broker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = StubConnector()
    async with _pool(broker) as pool:
        pool.set_address(1, "fake", 9092)
        shared = await pool.get(1)
        link = await pool.coordinator_link(1)
        assert link is not shared and broker.connects == 2
        assert await pool.coordinator_link(1) is link  # one link per broker, reused
        # The link going down is the broker's connection's to report, not a second warning.
        with caplog.at_level("DEBUG", logger="aiokafka_ng"):
            await link.aclose()
            again = await pool.coordinator_link(1)
        assert again is not link and not again.closed
        assert [r for r in caplog.records if r.levelname == "WARNING"] == []
        # The broker moves: the link follows its address.
        pool.set_address(1, "fake", 9093)
        moved = await pool.coordinator_link(1)
        assert moved is not again and pool.address(2**31 - 1 - 1) == ("fake", 9093)
        # The broker leaves the cluster: its link is retired with it.
        pool.retire(1)
        assert not pool.has_address(2**31 - 1 - 1)
        with pytest.raises(KafkaConnectionError, match="no address"):
            await pool.coordinator_link(1)
