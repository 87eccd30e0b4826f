"""Cluster: the object the clients hold -- lifecycle, request routing and entry points.

Theory of operation
-------------------
*Tasks.* ``async with Cluster(config)`` enters a :class:`ConnectionPool` (which owns one task
per connection) and a task group owning exactly one more task, the **refresher**
(:mod:`.refresher`: bootstrap, the metadata cache, its pacing, re-bootstrap and per-topic
waiters). The refresher is the only code that sends Metadata requests for the cache;
everything else asks it for work and waits for the result. Coordinator lookups
(:mod:`.coordinators`) and ``request*`` calls run in the caller's task.

*Bootstrap.* ``__aenter__`` bootstraps before it returns, or with ``wait_for_bootstrap=False``
leaves it to the refresher's first request (see :mod:`.refresher`).

*Routing.* ``request``/``request_any`` send once; ``call``/``run`` go through the retry
driver (:mod:`.retry`), which routes each attempt afresh by ``leader_for``, ``controller``,
``coordinator`` or the least loaded broker, all read from the caches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TypeVar, overload

import anyio
from anyio.abc import TaskGroup

from aiokafka_ng.cluster.config import ClusterConfig, describe_servers, parse_bootstrap_servers
from aiokafka_ng.cluster.coordinators import CoordinatorCache
from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    TopicMetadata,
    parse_metadata_response,
)
from aiokafka_ng.cluster.pool import ConnectionPool, Connector, PoolStatistics
from aiokafka_ng.cluster.refresher import MetadataRefresher
from aiokafka_ng.cluster.retry import (
    ANY,
    ONCE,
    Coordinator,
    Retry,
    RetryState,
    Route,
    coordinator_error,
    forget_stale_coordinator,
    raise_top_level_error,
    retrying,
    routed,
    timeout_scope,
    unchecked,
)
from aiokafka_ng.cluster.runtime import ClientStatus
from aiokafka_ng.errors import (
    KafkaConnectionError,
    KafkaError,
    NotControllerError,
    RebootstrapRequiredError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

if TYPE_CHECKING:
    from aiokafka_ng.net.connection import Connection

__all__ = [
    "Cluster",
    "ClusterConfig",
    "ClusterStatistics",
    "describe_servers",
    "parse_bootstrap_servers",
]

R = TypeVar("R", bound=ApiMessage)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ClusterStatistics:
    metadata_requests: int  # Metadata requests sent by the refresher and bootstrap
    metadata_failures: int  # refresh attempts that failed (no connection, error, timeout)
    metadata_generation: int
    last_refresh_at: float | None  # anyio.current_time() of the last successful refresh
    tracked_topics: tuple[str, ...]
    coordinator_requests: int  # FindCoordinator requests sent
    pool: PoolStatistics
    rebootstraps: int = 0  # times the cluster went back to bootstrap_servers (KIP-1102)


class Cluster:
    """Metadata, connections and routing for one client. See the module docstring."""

    def __init__(self, config: ClusterConfig, *, connector: Connector | None = None) -> None:
        self._config = config
        self._pool = ConnectionPool(
            config.connection,
            reconnect_backoff=ExponentialBackoff.reconnect(
                config.reconnect_backoff_ms, config.reconnect_backoff_max_ms
            ),
            connections_max_idle_ms=config.connections_max_idle_ms,
            connector=connector,
            on_node_failure=self._on_node_failure,
            log_name=f"{config.role} {config.client_id or config.connection.client_id}",
            # KIP-1242, as Java: only when re-bootstrapping is what the answer can lead to.
            cluster_id=(
                self._cluster_id
                if config.metadata_cluster_check_enable
                and config.metadata_recovery_strategy == "rebootstrap"
                else None
            ),
            on_rebootstrap_required=self._on_rebootstrap_required,
        )
        self._retry = ExponentialBackoff.retry(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._refresher = MetadataRefresher(config, self._pool, self._retry)
        self._tg: TaskGroup | None = None
        self._coordinators = CoordinatorCache(
            ask_any=self._find_coordinator,
            learn_address=self._learn_address,
            retry_backoff=self._retry,
        )

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Cluster:
        # The task groups are entered and left by hand, and never handed the body's
        # exception: anyio would wrap it in an ExceptionGroup, and a user's error (or our
        # bootstrap failure) must reach the user as itself.
        await self._pool.__aenter__()
        try:
            tg = anyio.create_task_group()
            await tg.__aenter__()
            try:
                if self._config.wait_for_bootstrap:
                    await self._refresher.bootstrap()
                else:
                    self._refresher.defer_bootstrap()
            except BaseException:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
                raise
            tg.start_soon(self._refresher.run)
            self._tg = tg
        except BaseException:
            await self._pool.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        try:
            if tg is not None:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
        finally:
            await self._pool.__aexit__(None, None, None)

    def __repr__(self) -> str:
        md = self._refresher.metadata
        state = "open" if self._tg is not None else "closed"
        return (
            f"<Cluster {state} brokers={sorted(md.brokers)} "
            f"tracked={len(self._refresher.tracked_topics)} generation={md.generation}>"
        )

    @property
    def metadata(self) -> ClusterMetadata:
        """The current snapshot (immutable; a refresh replaces it)."""
        return self._refresher.metadata

    @property
    def config(self) -> ClusterConfig:
        return self._config

    def add_listener(self, callback: Callable[[ClusterMetadata], None]) -> Callable[[], None]:
        """Call ``callback(snapshot)`` after every metadata change; returns the remover."""
        return self._refresher.add_listener(callback)

    def add_error_listener(self, callback: Callable[[KafkaError], None]) -> Callable[[], None]:
        """Call ``callback(error)`` when a metadata refresh fails with an error retrying
        cannot fix (authentication, authorization); returns the remover. Topic waiters get
        the error anyway; this is for clients whose records wait without a waiter."""
        return self._refresher.add_error_listener(callback)

    def statistics(self) -> ClusterStatistics:
        refresher = self._refresher
        return ClusterStatistics(
            metadata_requests=refresher.requests,
            metadata_failures=refresher.failures,
            metadata_generation=refresher.metadata.generation,
            last_refresh_at=refresher.last_ok_at,
            tracked_topics=refresher.tracked_topics,
            coordinator_requests=self._coordinators.requests,
            pool=self._pool.statistics(),
            rebootstraps=refresher.rebootstraps,
        )

    @property
    def bootstrap_summary(self) -> str:
        """The bootstrap servers for a message: the first few and how many more."""
        return self._refresher.bootstrap_summary

    @property
    def ready(self) -> bool:
        """True once a broker answered a metadata request (bootstrap done)."""
        return self._refresher.ready

    @property
    def last_error(self) -> KafkaError | None:
        """The error of the last failed metadata request, None after a success."""
        return self._refresher.last_error

    def status(self, state: str) -> ClientStatus:
        err = self.last_error
        return ClientStatus(
            state=state,
            ready=self.ready and err is None,
            bootstrap_servers=", ".join(f"{h}:{p}" for h, p in self._config.bootstrap_servers),
            brokers=tuple(sorted(self.metadata.brokers)),
            last_error=None if err is None else f"{type(err).__name__}: {err}",
        )

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until bootstrap is done. ``KafkaTimeoutError`` naming the bootstrap servers
        (and the last error) after ``timeout`` seconds; a non-retriable bootstrap failure
        (authentication, say) is raised as itself."""
        await self._refresher.wait_ready(timeout)

    # ------------------------------------------------------------------ routing

    async def connection(self, node_id: int) -> Connection:
        """A ready connection to ``node_id`` (lazy connect, reconnect after backoff)."""
        return await self._pool.get(node_id)

    def can_dial(self, node_id: int) -> bool:
        """Whether :meth:`connection` dials ``node_id``: the pool has an address for it (a
        broker the metadata names, a coordinator FindCoordinator named, a bootstrap server).

        A node the metadata no longer names has none: ``connection()`` fails at once,
        without a dial, so the reconnect backoff (KIP-144) does not pace asking again --
        the caller paces itself until a refresh moves the node's work elsewhere. A
        failed ``connection()`` to a node that can be dialed is the pool's to pace: the
        next one waits for its next dial."""
        return self._pool.has_address(node_id)

    async def coordinator_connection(self, node_id: int) -> Connection:
        """A connection to ``node_id`` of its own for group coordination (heartbeats,
        commits), so they never wait behind a long-poll Fetch on the broker's shared one
        (see ``ConnectionPool.coordinator_link``)."""
        return await self._pool.coordinator_link(node_id)

    def feature_level(self, name: str) -> int:
        """A finalized feature's level (KIP-584), e.g. ``transaction.version``, from the
        newest ApiVersions answer of the open connections; 0 when unknown."""
        return self._pool.features().get(name, 0)

    @overload
    async def request(
        self,
        node_id: int,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: Literal[True] = True,
    ) -> R: ...
    @overload
    async def request(
        self,
        node_id: int,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: bool,
    ) -> R | None: ...
    async def request(
        self,
        node_id: int,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: bool = True,
    ) -> R | None:
        """Send ``request`` to ``node_id``. Errors as ``Connection.send``; never resent."""
        conn = await self._pool.get(node_id)
        return await conn.send(
            request, version=version, timeout=timeout, expect_response=expect_response
        )

    async def request_any(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> R:
        """Send ``request`` to the least loaded broker.

        Brokers that cannot be connected to are skipped (the request was never written);
        once written, a failure is the caller's to retry.
        """
        conn = await self._any_connection()
        return await conn.send(request, version=version, timeout=timeout)

    async def all_topics(self, *, timeout: float | None = None) -> dict[str, TopicMetadata]:  # noqa: ASYNC109
        """Every topic in the cluster (internal ones included), asked of the least loaded
        broker now (the cache holds only the tracked topics). A top-level error of the answer
        (Metadata v13+) is raised rather than read as "no topics" -- a pattern subscription
        would drop every partition -- and REBOOTSTRAP_REQUIRED also has the refresher ask
        again, so it hears the signal itself."""
        from aiokafka_ng.protocol.messages.metadata import MetadataRequest

        # Once, unchecked: parse_metadata_response reads the top-level error.
        response = await self.call(
            MetadataRequest(topics=None, allow_auto_topic_creation=False),
            ANY,
            retry=ONCE,
            check=unchecked,
            request_timeout=timeout,
        )
        try:
            return dict(parse_metadata_response(response).topics)
        except RebootstrapRequiredError:
            self._refresher.request_update()
            raise

    @overload
    async def call(
        self,
        request: ApiRequest[R],
        route: Route = ANY,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        retry: Retry | None = None,
        check: None = None,
        max_version: int | None = None,
        min_version: int | None = None,
        version: int | None = None,
        request_timeout: float | None = None,
        state: RetryState | None = None,
        what: str | None = None,
        limit: str | None = None,
        on_answer: Callable[[int, float], None] | None = None,
    ) -> R: ...
    @overload
    async def call(
        self,
        request: ApiRequest[R],
        route: Route = ANY,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        retry: Retry | None = None,
        check: Callable[[R], T],
        max_version: int | None = None,
        min_version: int | None = None,
        version: int | None = None,
        request_timeout: float | None = None,
        state: RetryState | None = None,
        what: str | None = None,
        limit: str | None = None,
        on_answer: Callable[[int, float], None] | None = None,
    ) -> T: ...
    async def call(
        self,
        request: ApiRequest[R],
        route: Route = ANY,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the whole operation's deadline)
        retry: Retry | None = None,
        check: Callable[[R], T] | None = None,
        max_version: int | None = None,
        min_version: int | None = None,
        version: int | None = None,
        request_timeout: float | None = None,
        state: RetryState | None = None,
        what: str | None = None,
        limit: str | None = None,
        on_answer: Callable[[int, float], None] | None = None,
    ) -> R | T:
        """Send ``request`` where ``route`` points, retrying until it succeeds; the answer
        is the request's response type (``ApiRequest[R]`` names it), or what ``check``
        makes of it.

        ``check(response)`` turns the response's error codes into exceptions (and may
        return what the caller wants instead of the response); retriable ones retry. The
        default check raises a top-level ``error_code`` and returns the response
        (:func:`~aiokafka_ng.cluster.retry.unchecked` returns it as it came, for callers
        that read the error code themselves). See :mod:`aiokafka_ng.cluster.retry` for
        routing, repairs, backoff and the deadline (``timeout`` seconds for the whole call;
        None: until cancelled). ``state`` is the caller's own :class:`RetryState` (its
        backoff and deadline) instead of one made from ``timeout`` and this cluster's retry
        backoff. ``max_version`` caps the version negotiated; a broker below ``min_version``
        is not sent to (UnsupportedVersionError). ``version`` sends exactly that version
        instead of negotiating one, for an API whose only versions are still marked
        unstable (negotiation never picks those): the broker must offer it. ``retry=ONCE``
        sends once on the route and raises what fails, for callers with their own rules
        for each error (group membership, the admin client's rounds over many items).
        Each request is bounded by ``request_timeout`` (default: the connection's) and the
        time left. ``what`` and ``limit`` name the operation and its deadline in the
        timeout's and the unsupported version's messages (defaults: the API, the deadline
        in ms). ``on_answer(node, seconds)`` is told the round trip of each answered
        request (the admin client's request latency by broker).
        """
        if version is not None and (max_version is not None or min_version is not None):
            raise ValueError("a pinned version excludes max_version and min_version")
        if state is None:
            state = self.retry_state(timeout=timeout)
        pacing = state
        checked: Callable[[R], R | T] = raise_top_level_error if check is None else check
        name = what or type(request).__name__.removesuffix("Request")
        api = type(request).__name__
        coordinator = route if isinstance(route, Coordinator) else None

        async def send(node: int, conn: Connection) -> R | T:
            try:
                if version is not None:
                    chosen = conn.check_version(type(request), version)
                else:
                    chosen = conn.version_for(type(request))
            except UnsupportedVersionError as exc:
                raise UnsupportedVersionError(
                    f"{name} is not supported by broker {node}: {exc.detail or exc}"
                ) from exc
            if max_version is not None:
                chosen = min(chosen, max_version)
            if min_version is not None and chosen < min_version:
                raise UnsupportedVersionError(
                    f"{name}: {api} v{min_version}+ is needed, broker {node} offers up to v{chosen}"
                )
            # One request waits its own timeout, never the whole operation's deadline: a
            # commit retried for 60 s whose request went to a node just cut off waited for
            # the node, where Java's gives up after request.timeout.ms and asks again.
            each = self._config.connection.request_timeout_s
            limit = min(pacing.remaining(), each if request_timeout is None else request_timeout)
            started = anyio.current_time()
            response = await conn.send(request, version=chosen, timeout=limit)
            if on_answer is not None:
                on_answer(node, anyio.current_time() - started)
            if coordinator is not None:
                # Whatever the check makes of it: a coordinator that says it is not the
                # one is forgotten now (see the retry module's docstring).
                forget_stale_coordinator(
                    self, coordinator.key, coordinator.key_type, coordinator_error(response)
                )
            return checked(response)

        return await routed(self, route, send, state, what=name, retry=retry, limit=limit)

    async def run(
        self,
        route: Route,
        send: Callable[[Connection], Awaitable[T]],
        state: RetryState,
        *,
        what: str,
        retry: Retry | None = None,
        limit: str | None = None,
        on_retry: Callable[[KafkaError], Awaitable[None]] | None = None,
    ) -> T:
        """The retry driver with routing for callers that build the request themselves
        (per version, say): ``send(connection)`` once per attempt."""

        async def send_to(_node: int, conn: Connection) -> T:
            return await send(conn)

        return await routed(
            self, route, send_to, state, what=what, retry=retry, limit=limit, on_retry=on_retry
        )

    def retry_state(
        self,
        *,
        timeout: float | None = None,
        backoff: ExponentialBackoff | None = None,
    ) -> RetryState:
        """A :class:`RetryState` paced by this cluster's retry backoff (or ``backoff``)."""
        return RetryState(backoff or self._retry, timeout=timeout)

    async def _find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        # Once, unchecked: the coordinator cache reads each key's error and retries.
        return await self.call(request, ANY, retry=ONCE, check=unchecked)

    async def any_connection(self) -> Connection:
        """A ready connection to the least loaded reachable broker (see ``request_any``)."""
        return (await self.least_loaded_connection())[1]

    async def _any_connection(self) -> Connection:
        return (await self.least_loaded_connection())[1]

    async def least_loaded_connection(self) -> tuple[int, Connection]:
        """The least loaded reachable broker's node id and a ready connection to it."""
        tried: set[int] = set()
        last: KafkaError | None = None
        while True:
            candidates = [n for n in self._refresher.broker_candidates() if n not in tried]
            node_id = self._pool.least_loaded(candidates)
            if node_id is None:
                raise last or KafkaConnectionError("no broker address known")
            tried.add(node_id)
            try:
                return node_id, await self._pool.get(node_id)
            except KafkaConnectionError as exc:
                last = exc

    async def leader_for(
        self,
        topic: str,
        partition: int,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int:
        """The leader of ``topic``/``partition``, waiting for metadata that names one.

        Raises UnknownTopicOrPartitionError when the partition does not exist in freshly
        fetched metadata, KafkaTimeoutError after ``timeout`` seconds.
        """
        with timeout_scope(timeout, lambda: f"no leader for {topic}-{partition}"):
            fresh = False
            while True:
                t = (await self.wait_for_topics([topic]))[topic]
                p = t.partitions.get(partition)
                if p is None:
                    if fresh:
                        raise UnknownTopicOrPartitionError(
                            f"topic {topic!r} has no partition {partition}"
                        )
                    await self.refresh([topic])
                    fresh = True
                    continue
                if p.leader >= 0:
                    return p.leader
                event = self._refresher.topic_event(topic)
                self.request_update([topic])
                await event.wait()

    async def controller(
        self,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int:
        """The controller's node id (admin requests that must go to it)."""

        def known() -> int | None:
            md = self.metadata
            c = md.controller_id
            return c if c is not None and c in md.brokers else None

        async def attempt() -> int:
            c = known()
            if c is None:
                await self.refresh()
                c = known()
            if c is None:
                raise NotControllerError("no controller in the metadata yet")
            return c

        with timeout_scope(timeout, lambda: "controller unknown"):
            return await retrying(attempt, RetryState(self._retry), what="controller lookup")

    # ------------------------------------------------------------------ metadata

    def _cluster_id(self) -> str | None:
        return self._refresher.metadata.cluster_id

    def _on_rebootstrap_required(self) -> None:
        # A broker the metadata named is not who it named (KIP-1242): the metadata is
        # stale as a whole, so the refresher starts over from bootstrap_servers now.
        self._refresher.rebootstrap_required()

    def _on_node_failure(self, node_id: int) -> None:
        # A broker we route to could not be reached or dropped us: its leaderships,
        # controller or coordinator roles may have moved (Java: handleServerDisconnect ->
        # requestUpdate). Bootstrap pseudo-nodes (negative ids) say nothing about that. The
        # refresher paces these with the retry backoff, so a dead node cannot cause a storm.
        if node_id >= 0 and self._tg is not None:
            self.request_update()

    def request_update(self, topics: Iterable[str] = ()) -> None:
        """Ask for a metadata refresh soon (non-blocking; coalesced; paced by backoff).

        Call it after an error whose ``invalid_metadata`` is true. ``topics`` are added to
        the tracked set.
        """
        self._refresher.request_update(topics)

    def forget_topics(self, topics: Iterable[str]) -> None:
        """Stop tracking ``topics`` (and drop them from the snapshot)."""
        self._refresher.forget_topics(topics)

    async def refresh(
        self,
        topics: Iterable[str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> ClusterMetadata:
        """Fetch metadata now (joining a request not yet sent) and return the new snapshot.

        Waits for a *successful* request started after this call; requests are retried with
        backoff meanwhile. Raises a non-retriable error from the refresh (e.g. SASL), or
        KafkaTimeoutError after ``timeout`` seconds.
        """
        return await self._refresher.refresh(topics, timeout=timeout)

    async def wait_for_topics(
        self,
        topics: Iterable[str],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, TopicMetadata]:
        """Metadata for each of ``topics`` once usable (no error, at least one partition).

        Each topic is waited for on its own event (see :mod:`.refresher`). A topic error
        that retrying cannot fix is raised; KafkaTimeoutError after ``timeout`` seconds
        names the topics still missing and their last error.
        """
        return await self._refresher.wait_for_topics(topics, timeout)

    def update_leader(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> None:
        """Apply a KIP-951 new-leader hint from a Produce/Fetch error response.

        Only a newer leader epoch is taken. ``broker`` is the hint's node endpoint, needed
        when the leader is a broker our metadata does not know yet.
        """
        self._refresher.update_leader(topic, partition, leader_id, leader_epoch, broker)

    # ------------------------------------------------------------------ coordinators

    async def coordinator(
        self,
        key: str,
        key_type: int = 0,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int:
        """Node id of the group (``key_type=0``) or transaction (1) coordinator of ``key``.

        Cached until :meth:`invalidate_coordinator`; concurrent askers share one request.
        See :mod:`aiokafka_ng.cluster.coordinators` for the retry rules.
        """
        cached = self._coordinators.cached(key, key_type)
        if cached is not None:
            return cached
        return (await self.coordinators([key], key_type, timeout=timeout))[key]

    async def coordinators(
        self,
        keys: Sequence[str],
        key_type: int = 0,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, int]:
        """Coordinators of several keys; FindCoordinator v4+ asks for them in one request."""
        with timeout_scope(timeout, lambda: f"coordinator lookup for {list(keys)}"):
            return await self._coordinators.lookup(keys, key_type)

    def coordinator_cached(self, key: str, key_type: int = 0) -> int | None:
        """The cached coordinator of ``key``, None when it must be looked up."""
        return self._coordinators.cached(key, key_type)

    def invalidate_coordinator(self, key: str, key_type: int = 0) -> None:
        """Forget a cached coordinator. A ``Coordinator`` route of :meth:`call` does this
        itself after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken connection or a
        request timeout (:mod:`~aiokafka_ng.cluster.retry`), so clients never call it."""
        self._coordinators.invalidate(key, key_type)

    def _learn_address(self, node_id: int, host: str, port: int) -> None:
        if node_id not in self.metadata.brokers:
            self._pool.set_address(node_id, host, port)
