"""Connection pool by node id: lazy connect, reconnect backoff (KIP-144), idle close.

Theory of operation
-------------------
The pool keeps one :class:`_Node` per node id it has an address for: brokers from metadata,
coordinators learnt from FindCoordinator, and the bootstrap servers (negative pseudo ids
-1, -2, ... as in the Java client). At most one connection per node is open.

*Who owns which task.* Every connection lives in a task of the pool's own task group
(:meth:`_run_node`), started on demand by the first :meth:`get` that finds no usable
connection. That task sleeps out the node's reconnect backoff, connects (TCP, ApiVersions,
SASL -- all inside :func:`aiokafka_ng.net.connect`), publishes the result, then holds the
connection open until it closes or sits idle. Callers of :meth:`get` never connect
themselves; they wait on the node's current :class:`_Attempt`, so

* concurrent callers for one node share one connect attempt (no connection storms), and
* a caller that is cancelled or times out does not abort an attempt others are waiting on.

*Backoff (KIP-144).* ``failures`` counts consecutive failed connects of a node; the next
attempt may start ``reconnect_backoff.backoff_s(failures)`` after the last failure. A
successful connect resets it to 0. A connection that was up and then dropped counts as one
failure, so a restarting broker is retried after ``reconnect_backoff_ms`` and then less and
less often (50 ms, 100 ms, ... capped at ``reconnect_backoff_max_ms``), each pause jittered.
A connection we closed ourselves (idle, retired) is not a failure. Every attempt is recorded
with its monotonic timestamps in :meth:`statistics` so the growth is observable.

*Dead connections* are noticed through ``Connection.wait_closed()`` and dropped; the next
:meth:`get` opens a new one. Requests already failed by the connection are the callers'
to retry -- the pool never resends anything.

*Logging an outage.* A broker that was reachable and stops being so (its connection drops,
or a connect to it fails) is logged once at WARNING, naming the client (``log_name``: its
kind and client id), the node id and the address; the reconnect attempts that follow log
at DEBUG only, and the first connect that succeeds again is logged once at INFO with how
long the broker was away. A node never reached yet logs at DEBUG (bootstrap failures are
the cluster's to report).

*Is it the node we meant? (KIP-1242)* An address learned from metadata may since have gone to
another broker or another cluster (a pod's IP reused, a cluster rebuilt behind the same
names). When the cluster passes ``cluster_id``, a connect to a broker node sends that id and
the node's in ApiVersions v5 (once a broker has shown that it offers v5), and a broker that
is not that node answers REBOOTSTRAP_REQUIRED: the attempt fails as a refused connect would
(callers get a retriable error) and ``on_rebootstrap_required`` tells the cluster its
metadata is stale. Bootstrap addresses (negative ids) are not checked: nothing is expected
of them.

*Idle close.* A connection not handed out by :meth:`get` for ``connections_max_idle_ms``
and with nothing in flight is closed (a long-poll Fetch keeps it alive).

*Coordinator links.* A Kafka broker answers the requests of one connection in order, so a
heartbeat or commit written behind a long-poll Fetch waits up to ``fetch_max_wait_ms`` when the
group coordinator also leads fetched partitions (a KIP-848 member's acknowledgement of a
revocation came ~500 ms late, and a third member's rebalance took two heartbeat intervals
instead of one). As the Java consumer does (a node id of ``Integer.MAX_VALUE - broker id``),
:meth:`coordinator_link` gives group coordination a connection of its own to the same
broker: a pseudo node (``2**31 - 1 - broker id``) that follows the broker's address and is
retired with it. Its outages are logged at DEBUG only: the broker's own connection reports
them.

*Retired nodes* (gone from metadata; the bootstrap servers once real broker ids are known)
close once unused, and "unused" must cover the caller that has just been handed the
connection but has not written yet. ``get()`` returns the connection to a task that may run
only on a later loop turn (trio shuffles the run queue), so nothing-in-flight alone closed a
bootstrap connection between a pattern subscription's ``get()`` and its Metadata request,
and the group joined with an empty subscription. So a retired connection closes only when
nothing is in flight or being submitted (``ConnectionStatistics.submitting``) and no
``get()`` has handed it out for ``_RETIRE_GRACE_S``.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from aiokafka_ng.cluster.retry import RetryState
from aiokafka_ng.errors import KafkaConnectionError, KafkaError, RebootstrapRequiredError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.handshake import ExpectedNode

if TYPE_CHECKING:
    from aiokafka_ng.net.connection import Connection, ConnectionConfig

__all__ = ["ConnectAttempt", "ConnectionPool", "Connector", "NodeStatistics", "PoolStatistics"]

log = logging.getLogger(__name__)

#: ``connector(host, port)`` -> async context manager yielding a ready Connection. The
#: default wraps :func:`aiokafka_ng.net.connection.connect`; tests inject fakes here.
Connector = Callable[[str, int], AbstractAsyncContextManager["Connection"]]

_API_VERSIONS = 18
_ATTEMPT_HISTORY = 64  # connect attempts remembered per node for statistics()
# A retired connection handed out this recently is kept: its caller may not have run yet.
_RETIRE_GRACE_S = 1.0
# Coordinator link of broker N: pseudo node _LINK_BASE - N (Java: Integer.MAX_VALUE - N).
_LINK_BASE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConnectAttempt:
    """One connect attempt; times are ``anyio.current_time()`` (monotonic seconds)."""

    started_at: float
    finished_at: float
    ok: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class NodeStatistics:
    node_id: int
    host: str
    port: int
    connected: bool
    connecting: bool
    in_flight: int
    failures: int  # consecutive failures driving the current backoff
    next_attempt_at: float  # earliest start of the next connect attempt
    connects: int  # successful connects, ever
    connect_failures: int  # failed connects, ever
    attempts: tuple[ConnectAttempt, ...]  # the most recent attempts, oldest first


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    nodes: dict[int, NodeStatistics]
    open_connections: int


class _Attempt:
    """The outcome of one connect attempt, shared by every caller waiting for it."""

    __slots__ = ("conn", "done", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.conn: Connection | None = None
        self.error: BaseException | None = None


class _Node:
    __slots__ = (
        "attempt",
        "attempts",
        "closed_by_us",
        "conn",
        "connect_failures",
        "connects",
        "down_since",
        "host",
        "last_used",
        "link_of",
        "node_id",
        "pacing",
        "port",
        "retired",
    )

    def __init__(self, node_id: int, host: str, port: int, backoff: ExponentialBackoff) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.conn: Connection | None = None
        self.attempt: _Attempt | None = None
        # Consecutive failed connects and the earliest next attempt (the retry driver's
        # timing object, scheduled by retry_at: the node's task sleeps until then).
        self.pacing = RetryState(backoff)
        self.last_used = 0.0
        self.connects = 0
        self.connect_failures = 0
        self.attempts: deque[ConnectAttempt] = deque(maxlen=_ATTEMPT_HISTORY)
        self.retired = False
        self.closed_by_us = False
        #: When the node, reachable before, became unreachable (None: not down, or never up).
        self.down_since: float | None = None
        #: The broker this pseudo node is the coordinator link of (None: a node of its own).
        self.link_of: int | None = None

    def live(self) -> Connection | None:
        conn = self.conn
        return conn if conn is not None and not conn.closed else None


class ConnectionPool:
    """Connections by node id. An async context manager owning the connection tasks."""

    def __init__(
        self,
        config: ConnectionConfig,
        *,
        reconnect_backoff: ExponentialBackoff | None = None,
        connections_max_idle_ms: float | None = 540_000,
        connector: Connector | None = None,
        on_node_failure: Callable[[int], None] | None = None,
        log_name: str | None = None,
        cluster_id: Callable[[], str | None] | None = None,
        on_rebootstrap_required: Callable[[], None] | None = None,
    ) -> None:
        self._config = config
        # KIP-1242: the cluster id of the metadata the nodes' addresses came from (None: do
        # not check), sent with the node id when connecting to a node; a broker that is not
        # that node answers REBOOTSTRAP_REQUIRED, which fails the attempt like a refused
        # connect and calls on_rebootstrap_required (the metadata is stale).
        self._cluster_id = cluster_id
        self._on_rebootstrap_required = on_rebootstrap_required
        # The newest ApiVersions version the last broker we connected to offers. The node's
        # identity is sent only to brokers that offer v5: Kafka answers a version it does
        # not know with UNSUPPORTED_VERSION (and we fall back), but Tansu closes a
        # connection whose ApiVersions v4 parse finds a cluster id after the v4 fields.
        self._peer_api_versions = -1
        # Called with the node id when a connect attempt fails or an open connection drops
        # without us closing it: the cluster asks for fresh metadata then, as Java's
        # NetworkClient does on a disconnect, since a dead node's partitions (or its
        # controller/coordinator role) have probably moved elsewhere.
        self._on_node_failure = on_node_failure
        self._backoff = reconnect_backoff or ExponentialBackoff.reconnect()
        self._max_idle_s = (
            None if connections_max_idle_ms is None else connections_max_idle_ms / 1000
        )
        self._connector = connector
        self._nodes: dict[int, _Node] = {}
        self._tg: TaskGroup | None = None
        # Seeded from the global generator: random.seed() in a test replays the choices.
        self._rng = random.Random(random.getrandbits(64))
        # Names the client in the outage log lines ("producer web-1: lost broker ...").
        self._client = log_name or config.client_id or "aiokafka-ng"
        self._closing = False

    def _open(self, node: _Node) -> AbstractAsyncContextManager[Connection]:
        if self._connector is not None:
            return self._connector(node.host, node.port)
        from aiokafka_ng.net.connection import connect

        return connect(node.host, node.port, self._config, expected=self._expected(node))

    def _expected(self, node: _Node) -> ExpectedNode | None:
        """Who ``node``'s address should reach (KIP-1242); None for a bootstrap address."""
        cluster_id = None if self._cluster_id is None else self._cluster_id()
        node_id = node.node_id if node.link_of is None else node.link_of
        if cluster_id is None or node_id < 0 or self._peer_api_versions < 5:
            return None
        return ExpectedNode(cluster_id, node_id)

    async def __aenter__(self) -> ConnectionPool:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        self._closing = True  # connections ending now are not outages
        # Connection tasks run until their connection closes: cancel them. Each closes its
        # socket on the way out (net shields that cleanup). The body's exception is not
        # passed in: anyio would wrap it in an ExceptionGroup; it propagates as itself.
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)

    def __repr__(self) -> str:
        open_ = sorted(n for n, node in self._nodes.items() if node.live() is not None)
        return f"<ConnectionPool nodes={sorted(self._nodes)} open={open_}>"

    # ------------------------------------------------------------------ addresses

    def set_address(self, node_id: int, host: str, port: int) -> None:
        """Learn (or change) a node's address. A changed address drops the old connection."""
        node = self._nodes.get(node_id)
        if node is None:
            self._nodes[node_id] = _Node(node_id, host, port, self._backoff)
            return
        node.retired = False
        if (node.host, node.port) != (host, port):
            node.host, node.port = host, port
            self._close_soon(node)

    def has_address(self, node_id: int) -> bool:
        node = self._nodes.get(node_id)
        return node is not None and not node.retired

    def address(self, node_id: int) -> tuple[str, int] | None:
        node = self._nodes.get(node_id)
        return None if node is None else (node.host, node.port)

    def adopt(self, old_id: int, new_id: int) -> bool:
        """Re-label ``old_id``'s open connection as ``new_id`` if both name one address.

        Used after bootstrap: the connection opened to bootstrap server -1 *is* the
        connection to the broker the metadata calls, say, 111; keeping it avoids a second
        socket to the same broker. Returns True when adopted.
        """
        old = self._nodes.get(old_id)
        new = self._nodes.get(new_id)
        if old is None or old.live() is None or new is None or new.live() is not None:
            return False
        if new.attempt is not None or (old.host, old.port) != (new.host, new.port):
            return False
        old.node_id = new_id
        self._nodes[new_id] = old
        del self._nodes[old_id]
        return True

    async def coordinator_link(self, node_id: int) -> Connection:
        """A connection to broker ``node_id`` for group coordination only, apart from the
        one fetches and produces use (see "Coordinator links" above)."""
        node = self._nodes.get(node_id)
        if node is None or node.retired:
            raise KafkaConnectionError(f"no address known for node {node_id}")
        link_id = _LINK_BASE - node_id
        link = self._nodes.get(link_id)
        if link is None or link.retired or (link.host, link.port) != (node.host, node.port):
            self.set_address(link_id, node.host, node.port)
            self._nodes[link_id].link_of = node_id
        return await self.get(link_id)

    def retire(self, node_id: int) -> None:
        """Stop using a node (gone from metadata, bootstrap done): close it once idle."""
        link = self._nodes.get(_LINK_BASE - node_id)
        if link is not None and link.link_of == node_id:
            self.retire(link.node_id)
        node = self._nodes.get(node_id)
        if node is None:
            return
        if node.retired:
            return
        node.retired = True
        conn = node.live()
        if conn is None:
            if node.attempt is None:
                del self._nodes[node_id]
        elif self._tg is not None:
            # An attempt still connecting is handled by its own task (``_hold``).
            self._tg.start_soon(self._close_when_unused, node, conn)

    def _close_soon(self, node: _Node) -> None:
        conn = node.live()
        if conn is not None and self._tg is not None:
            node.closed_by_us = True
            self._tg.start_soon(conn.aclose)
            # Detached now: a get() before that task runs must not be handed the connection
            # to the old address. Its own task's _drop() then finds another (or none) here.
            node.conn = None

    async def _close_when_unused(self, node: _Node, conn: Connection) -> None:
        """Close a retired node's connection once nobody is using or about to use it."""
        while not conn.closed and node.retired:  # set_address() may bring the node back
            quiet_for = anyio.current_time() - node.last_used
            if quiet_for >= _RETIRE_GRACE_S and _busy(conn) == 0:
                node.closed_by_us = True
                log.debug("closing connection to retired node %d", node.node_id)
                await conn.aclose()
                return
            # Busy or just handed out: look again once the grace (or a request) has passed.
            with anyio.move_on_after(max(_RETIRE_GRACE_S - quiet_for, _RETIRE_GRACE_S / 4)):
                await conn.wait_closed()

    # ------------------------------------------------------------------ connections

    async def get(self, node_id: int) -> Connection:
        """A ready connection to ``node_id``, connecting (after its backoff) if needed.

        Raises :class:`KafkaConnectionError` (retriable) when the connect attempt fails or
        no address is known, or the non-retriable error of a failed handshake (e.g. SASL).
        """
        node = self._nodes.get(node_id)
        if node is None or node.retired:
            raise KafkaConnectionError(f"no address known for node {node_id}")
        conn = node.conn
        if conn is not None and conn.closed:
            # Closed under us; the connection task may not have run yet to notice.
            self._drop(node, conn)
            conn = None
        if conn is None:
            attempt = node.attempt
            if attempt is None:
                if self._tg is None:
                    raise KafkaConnectionError("connection pool is closed")
                attempt = node.attempt = _Attempt()
                self._tg.start_soon(self._run_node, node, attempt)
            await attempt.done.wait()
            if attempt.error is not None:
                err = attempt.error
                if (
                    isinstance(err, KafkaError)
                    and not err.retriable
                    and not isinstance(err, RebootstrapRequiredError)  # stale metadata: retry
                ):
                    raise err  # e.g. SASL failure: the same object for every waiter, like a Future
                raise KafkaConnectionError(
                    f"cannot connect to node {node_id} at {node.host}:{node.port}: {err}"
                ) from err
            conn = attempt.conn
            assert conn is not None
        node.last_used = anyio.current_time()
        return conn

    def connection_if_open(self, node_id: int) -> Connection | None:
        node = self._nodes.get(node_id)
        return None if node is None else node.live()

    async def _run_node(self, node: _Node, attempt: _Attempt) -> None:
        """Connect after the node's backoff, publish the result, hold the connection."""
        established: Connection | None = None
        try:
            await node.pacing.pause()  # until the node's backoff allows the attempt
            host, port = node.host, node.port
            started = anyio.current_time()
            try:
                async with self._open(node) as conn:
                    established = conn
                    if self._connector is None:  # (an injected connector checks nothing)
                        offered = conn.api_versions.get(_API_VERSIONS, (0, -1))
                        self._peer_api_versions = offered[1]
                    now = anyio.current_time()
                    node.attempts.append(ConnectAttempt(started, now, True))
                    node.connects += 1
                    node.pacing.succeeded()
                    node.closed_by_us = False
                    node.conn = conn
                    node.last_used = now
                    attempt.conn = conn
                    node.attempt = None
                    attempt.done.set()
                    log.debug("connected to node %d at %s:%d", node.node_id, host, port)
                    if node.down_since is not None:
                        log.log(
                            logging.DEBUG if node.link_of is not None else logging.INFO,
                            "%s: %s is reachable again (away %.1f s)",
                            self._client, _describe(node), now - node.down_since,
                        )  # fmt: skip
                        node.down_since = None
                    await self._hold(node, conn)
            except Exception as exc:
                if established is None:
                    now = anyio.current_time()
                    node.attempts.append(ConnectAttempt(started, now, False, repr(exc)))
                    node.connect_failures += 1
                    node.pacing.failed(exc, now=now)
                    attempt.error = exc
                    log.debug(
                        "connect to node %d at %s:%d failed: %r", node.node_id, host, port, exc
                    )
                    if node.connects and node.down_since is None and not self._closing:
                        self._went_down(node, f"cannot connect: {exc}")
                    if isinstance(exc, RebootstrapRequiredError):
                        log.info("%s: %s", self._client, exc)
                        if self._on_rebootstrap_required is not None:
                            self._on_rebootstrap_required()
                    self._node_failed(node.node_id)
                else:
                    # The connection broke while held; its pending requests already failed.
                    log.debug("connection to node %d ended: %r", node.node_id, exc)
        except anyio.get_cancelled_exc_class():
            # Only the pool's task group cancels this task: the pool is closing, possibly
            # before __aexit__ runs (the application cancelled the scope the client lives
            # in). The close that follows is ours, not an outage to warn about.
            node.closed_by_us = True
            raise
        finally:
            if established is not None:
                self._drop(node, established)
                if node.retired and node.attempt is None and self._nodes.get(node.node_id) is node:
                    del self._nodes[node.node_id]
            if node.attempt is attempt:
                node.attempt = None
            if not attempt.done.is_set():
                # Cancelled (pool closing) before an outcome: release the waiters.
                if attempt.error is None:
                    attempt.error = KafkaConnectionError("connection pool closed")
                attempt.done.set()

    def _drop(self, node: _Node, conn: Connection) -> None:
        """Forget ``node``'s connection ``conn`` once it has closed (idempotent)."""
        if node.conn is not conn:
            return
        node.conn = None
        if not node.closed_by_us:
            if node.down_since is None and not self._closing:
                self._went_down(node, conn.close_reason or "connection closed")
            # KIP-144: a dropped connection is retried after the initial backoff (growing
            # if the reconnects fail too), so a restarting broker is not hammered.
            node.pacing.succeeded()
            node.pacing.failed()
            self._node_failed(node.node_id)

    def _went_down(self, node: _Node, reason: str) -> None:
        node.down_since = anyio.current_time()
        log.log(
            logging.DEBUG if node.link_of is not None else logging.WARNING,
            "%s: lost %s: %s; reconnecting in the background (logged again once it is back)",
            self._client, _describe(node), reason,
        )  # fmt: skip

    def _node_failed(self, node_id: int) -> None:
        if self._on_node_failure is not None:
            node = self._nodes.get(node_id)
            link_of = None if node is None else node.link_of
            self._on_node_failure(node_id if link_of is None else link_of)

    async def _hold(self, node: _Node, conn: Connection) -> None:
        """Wait until the connection closes, closing it ourselves once idle."""
        if node.retired:  # retired while connecting
            await self._close_when_unused(node, conn)
            return
        max_idle = self._max_idle_s
        while True:
            if max_idle is None:
                await conn.wait_closed()
                return
            idle_for = anyio.current_time() - node.last_used
            wait = max_idle - idle_for
            if wait > 0:
                with anyio.move_on_after(wait):
                    await conn.wait_closed()
                    return
                continue
            if _busy(conn) == 0:
                node.closed_by_us = True
                log.debug("closing idle connection to node %d", node.node_id)
                await conn.aclose()
                return
            # Busy (e.g. a long-poll Fetch): look again after another idle period.
            with anyio.move_on_after(max_idle):
                await conn.wait_closed()
                return

    # ------------------------------------------------------------------ routing help

    def features(self) -> dict[str, int]:
        """The cluster's finalized feature levels (KIP-584) from the newest ApiVersions answer
        among the open connections: the highest features epoch wins, as in Java's
        ``ApiVersions``. Empty when no connection is open or no broker sent features."""
        newest: Connection | None = None
        for node in self._nodes.values():
            conn = node.live()
            if conn is not None and (newest is None or conn.features_epoch > newest.features_epoch):
                newest = conn
        return dict(newest.features) if newest is not None else {}

    def least_loaded(self, candidates: Iterable[int]) -> int | None:
        """The candidate best placed to take a request now (Java's ``leastLoadedNode``).

        Preference: an open connection with the fewest requests in flight; then a node that
        may connect now; then the node whose backoff ends first. Ties are broken at random
        so load spreads over equal brokers.
        """
        now = anyio.current_time()
        ids = [n for n in candidates if n in self._nodes and not self._nodes[n].retired]
        self._rng.shuffle(ids)
        best: int | None = None
        best_key: tuple[int, float] | None = None
        for node_id in ids:
            node = self._nodes[node_id]
            conn = node.live()
            if conn is not None:
                key: tuple[int, float] = (0, float(_in_flight(conn)))
            elif node.attempt is not None or node.pacing.retry_at <= now:
                key = (1, 0.0)
            else:
                key = (2, node.pacing.retry_at)
            if best_key is None or key < best_key:
                best, best_key = node_id, key
                if key == (0, 0.0):
                    break
        return best

    def statistics(self) -> PoolStatistics:
        nodes = {}
        for node_id, node in self._nodes.items():
            conn = node.live()
            nodes[node_id] = NodeStatistics(
                node_id=node_id,
                host=node.host,
                port=node.port,
                connected=conn is not None,
                connecting=node.attempt is not None,
                in_flight=0 if conn is None else _in_flight(conn),
                failures=node.pacing.failures,
                next_attempt_at=node.pacing.retry_at,
                connects=node.connects,
                connect_failures=node.connect_failures,
                attempts=tuple(node.attempts),
            )
        return PoolStatistics(nodes, sum(1 for s in nodes.values() if s.connected))


def _describe(node: _Node) -> str:
    if node.link_of is not None:
        return f"coordinator link to broker {node.link_of} at {node.host}:{node.port}"
    if node.node_id < 0:
        return f"bootstrap server {node.host}:{node.port}"
    return f"broker {node.node_id} at {node.host}:{node.port}"


def _in_flight(conn: Connection) -> int:
    return int(conn.statistics().in_flight)


def _busy(conn: Connection) -> int:
    stats = conn.statistics()
    return int(stats.in_flight + stats.submitting)
