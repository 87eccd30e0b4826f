"""Routing and retrying shared by every admin operation.

Theory of operation
-------------------
An admin operation acts on a set of *items* (topics, partitions, groups, resources, ...).
``_AdminCore._run`` drives it in rounds on the cluster's retry driver
(:func:`aiokafka_ng.cluster.retry.retrying`): each round calls the operation's ``attempt``
coroutine with the items still pending; ``attempt`` routes them (to the controller, to
each partition's leader, to each group's coordinator, or to any broker), batches them into
one request per node where the protocol allows, and returns one outcome per item: a result
or an exception. An exception raised by ``attempt`` itself (the connection broke, the
request timed out) is the outcome of every pending item.

After a round, items whose outcome is a *retriable* Kafka error stay pending; every other
outcome is final. Before the next round the driver sleeps ``ExponentialBackoff`` for the
number of consecutive failed rounds (the shared KIP-580 policy, configured by
``retry_backoff_ms``/``retry_backoff_max_ms``), and when a failure says the client's view
of the cluster is stale (``invalid_metadata``, or NOT_CONTROLLER which Kafka does not
flag that way) it first waits for a metadata refresh, so the next round routes to the new
controller or leader. Coordinator errors are handled where the request is routed: a
request for one group goes to the cluster's ``Coordinator`` route, which forgets a stale
coordinator itself; a batch of keys per coordinator (``_at_coordinators``) forgets each
key's by the same rule (``forget_stale_coordinator``). Either way the next round looks it
up again.

Every request goes out once per round on :meth:`Cluster.call` (``retry=ONCE``): the
cluster's one request path picks the version, names the operation in an unsupported
version's error, bounds the request and reports its round trip for ``statistics()``; the
rounds above are the admin client's own retry, per item.

The whole loop runs under one cancel scope set to the operation's deadline
(``timeout_ms``, default ``default_api_timeout_ms``): items still pending when it expires
get a ``KafkaTimeoutError`` that names the last error they saw. Each request is also
bounded by ``request_timeout_ms`` and by what is left of the deadline.

``UnsupportedVersionError`` is never per item: a broker that does not offer the API (or
not a version that can express the request) fails the whole operation, naming it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import TypeVar

import anyio

from aiokafka_ng.admin.config import AdminConfig
from aiokafka_ng.admin.models import Node, TopicPartition
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.cluster import ClientRuntime, Cluster, RetryState
from aiokafka_ng.cluster import retry as routes
from aiokafka_ng.cluster.metadata import ClusterMetadata, parse_metadata_response
from aiokafka_ng.cluster.retry import Route, retrying
from aiokafka_ng.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    UnsupportedVersionError,
    error_for_code,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.latency import LatencyRecorder
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")
Resp = TypeVar("Resp", bound=ApiMessage)  # a request's response


_NO_RESULT = "the broker's response did not mention this item"


class Final(Exception):
    """Wraps an error an ``attempt`` wants final even though its class is retriable.

    (E.g. UNKNOWN_TOPIC_OR_PARTITION when describing a topic: retrying will not create it.)
    The driver unwraps it; callers never see this class.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def broker_error(code: int, message: str | None = None) -> KafkaError | None:
    """The exception instance for a response's error code; None for 0 (success)."""
    if code == 0:
        return None
    return error_for_code(code)(message)


def group_by(items: Iterable[tuple[int, K]]) -> dict[int, list[K]]:
    """``[(node, item), ...]`` -> ``{node: [item, ...]}`` keeping the items' order."""
    out: dict[int, list[K]] = {}
    for node, item in items:
        out.setdefault(node, []).append(item)
    return out


def by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, as request messages lay them out (order kept)."""
    out: dict[str, list[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


class _AdminCore:
    """State and helpers every operation mixin uses; AdminClient owns the lifecycle."""

    _config: AdminConfig
    _backoff: ExponentialBackoff
    _runtime: ClientRuntime
    _next_any: int  # rotation counter of _any_node
    _request_latency: dict[int, LatencyRecorder]  # by broker node id (statistics())

    @property
    def _cluster(self) -> Cluster:
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise IllegalStateError(
                "the AdminClient is not open: use `async with AdminClient(...)`"
            )
        return cluster

    # ------------------------------------------------------------------ the retry driver

    def _timeout_s(self, timeout_ms: int | None) -> float:
        ms = self._config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return max(ms, 0) / 1000

    async def _run(
        self,
        operation: str,
        items: Iterable[K],
        attempt: Callable[[list[K], float], Awaitable[Mapping[K, V | BaseException]]],
        timeout_ms: int | None,
    ) -> ItemResults[K, V]:
        """Drive ``attempt`` in rounds until every item has a final outcome or time is up."""
        order = list(dict.fromkeys(items))
        final: dict[K, V | BaseException] = {}
        pending = list(order)
        last: dict[K, BaseException] = {}
        timeout_s = self._timeout_s(timeout_ms)
        state = RetryState(self._backoff, timeout=timeout_s)
        deadline = anyio.current_time() + timeout_s if state.deadline is None else state.deadline
        stale = False

        async def round_() -> None:
            # One round over the pending items; the ones that failed retriably stay pending
            # and make the round fail (retriably), so the driver backs off and runs another.
            nonlocal pending, stale
            try:
                outcome: Mapping[K, V | BaseException] = await attempt(pending, deadline)
            except UnsupportedVersionError:
                raise
            except KafkaError as exc:
                outcome = dict.fromkeys(pending, exc)
            retry: list[K] = []
            stale = False
            for key in pending:
                value = outcome.get(key, KafkaError(f"{operation}: {_NO_RESULT}"))
                if isinstance(value, UnsupportedVersionError):
                    raise value
                if isinstance(value, Final):
                    final[key] = value.error
                elif isinstance(value, KafkaError) and value.retriable:
                    retry.append(key)
                    # Keep the more telling error over "the deadline came".
                    if key not in last or not isinstance(value, KafkaTimeoutError):
                        last[key] = value
                    stale = stale or value.invalid_metadata
                    stale = stale or isinstance(value, NotControllerError)
                else:
                    final[key] = value
            pending = retry
            if pending:
                first = last[pending[0]]
                assert isinstance(first, KafkaError)
                raise first

        async def refresh_if_stale(_error: KafkaError) -> None:
            if stale:
                await self._refresh_metadata()

        try:
            await retrying(round_, state, what=operation, on_retry=refresh_if_stale)
        except KafkaTimeoutError:
            if not pending:
                raise
        cluster = self._runtime.open_cluster
        unreachable = ""
        if pending and cluster is not None and not cluster.ready:
            # Started without the cluster and it never answered: say where we looked.
            status = cluster.status("running")
            unreachable = f"; no broker of {cluster.bootstrap_summary} has answered" + (
                f" ({status.last_error})" if status.last_error else ""
            )
        for key in pending:
            cause = last.get(key)
            err = KafkaTimeoutError(
                f"{operation} did not complete within {timeout_s * 1000:.0f} ms"
                + unreachable
                + (f"; last error: {type(cause).__name__}: {cause}" if cause else "")
            )
            err.__cause__ = cause
            final[key] = err
        return ItemResults(operation, {key: final[key] for key in order})

    async def _run_one(
        self,
        operation: str,
        attempt: Callable[[float], Awaitable[R]],
        timeout_ms: int | None,
    ) -> R:
        """``_run`` for an operation with a single outcome: returns it or raises its error."""

        async def one(_keys: list[int], deadline: float) -> dict[int, R | BaseException]:
            return {0: await attempt(deadline)}

        results: ItemResults[int, R] = await self._run(operation, [0], one, timeout_ms)
        return results.result(0)

    def _server_timeout_ms(self, deadline: float) -> int:
        """``timeout_ms`` for the broker's side of a request: what is left of the
        operation, capped at one request timeout (we stop waiting for the answer then)."""
        left_ms = int((deadline - anyio.current_time()) * 1000)
        return max(0, min(left_ms, self._config.request_timeout_ms))

    async def _refresh_metadata(self) -> None:
        # A failed refresh is not this operation's failure: the next round fails (and is
        # retried) on its own if the cluster is still unreachable.
        try:
            await self._cluster.refresh()
        except KafkaError:
            pass

    # ------------------------------------------------------------------ sending

    async def _send(
        self,
        operation: str,
        to: int | Route,
        request: ApiRequest[Resp],
        deadline: float,
        *,
        min_version: int | None = None,
        pinned_version: int | None = None,
    ) -> Resp:
        """Send ``request`` once to ``to`` (a node id, or a route: a group's coordinator)
        at the highest common version, on the cluster's one request path
        (:meth:`Cluster.call`); return the response as it came (its error codes are the
        operation's to read: the driver's rounds retry them).

        Requests carry the fields of every version (the codec writes only those of the
        version it encodes). ``min_version`` is the lowest version that can express what
        the caller asks for (e.g. ListOffsets v7 for max-timestamp). ``pinned_version``
        sends exactly that version, for an API whose only version in the schemas is still
        marked unstable (negotiation never picks those): the broker must advertise it.
        A coordinator route forgets a coordinator that answers it is not one (or is not
        available), so the next round looks it up again.
        """
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            raise KafkaTimeoutError(f"{operation}: no time left to send the request")
        return await self._cluster.call(
            request,
            routes.Node(to) if isinstance(to, int) else to,
            retry=routes.ONCE,
            check=routes.unchecked,
            min_version=min_version,
            version=pinned_version,
            request_timeout=min(remaining, self._config.request_timeout_ms / 1000),
            what=operation,
            on_answer=self._answered,
        )

    def _answered(self, node_id: int, seconds: float) -> None:
        # Per broker, answered requests only, as Java's admin client measures its
        # request-latency (the telemetry push and statistics() report it).
        latency = self._request_latency.get(node_id)
        if latency is None:
            latency = self._request_latency[node_id] = LatencyRecorder()
        latency.record(seconds)

    async def _metadata(
        self, operation: str, topics: list[str] | None, deadline: float, *, authorized: bool
    ) -> tuple[MetadataResponse, ClusterMetadata]:
        """Ask any broker for metadata ourselves: admin answers must be the broker's, not
        the cache's (and routing needs to know when a topic does not exist)."""
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=authorized,
        )
        node = await self._any_node()
        # v1+: v0 cannot ask for "all topics" (an empty list means all there).
        resp = await self._send(operation, node, req, deadline, min_version=1)
        return resp, parse_metadata_response(resp)

    async def _per_node(
        self,
        batches: Mapping[int, list[K]],
        call: Callable[[int, list[K]], Awaitable[Mapping[K, V | BaseException]]],
    ) -> dict[K, V | BaseException]:
        """Run ``call(node, items)`` for every node concurrently; merge the outcomes.

        A Kafka error raised for one node (its connection broke, say) becomes the outcome
        of that node's items only; the other nodes' answers are kept. (Errors are kept as
        outcomes rather than raised: a task group would wrap them in an ExceptionGroup;
        the driver re-raises an UnsupportedVersionError outcome as such.)
        """
        out: dict[K, V | BaseException] = {}

        async def one(node: int, items: list[K]) -> None:
            try:
                out.update(await call(node, items))
            except KafkaError as exc:
                out.update(dict.fromkeys(items, exc))

        async with anyio.create_task_group() as tg:
            for node, items in batches.items():
                tg.start_soon(one, node, items)
        return out

    async def _each_broker(
        self,
        operation: str,
        call: Callable[[int, float], Awaitable[V | BaseException]],
        timeout_ms: int | None,
        brokers: Iterable[int] | None = None,
    ) -> ItemResults[int, V]:
        """``call(node, deadline)`` on every broker (or ``brokers``); one outcome per node.

        For APIs each broker answers only for itself (ListGroups, ListTransactions,
        DescribeLogDirs). ``call`` returns the node's result or its top-level error.
        """
        if brokers is None:
            await self._any_node()  # makes sure metadata has the broker list
            brokers = sorted(self._cluster.metadata.brokers)

        async def on_node(
            node: int, _items: list[int], deadline: float
        ) -> dict[int, V | BaseException]:
            return {node: await call(node, deadline)}

        async def attempt(pending: list[int], deadline: float) -> dict[int, V | BaseException]:
            return await self._per_node(
                {n: [n] for n in pending}, lambda n, items: on_node(n, items, deadline)
            )

        return await self._run(operation, brokers, attempt, timeout_ms)

    # ------------------------------------------------------------------ routing

    async def _at_coordinators(
        self,
        operation: str,
        keys: Iterable[str],
        on_coordinator: Callable[
            [int, list[str], float], Awaitable[Mapping[str, V | BaseException]]
        ],
        timeout_ms: int | None,
        key_type: int = 0,
    ) -> ItemResults[str, V]:
        """Run ``operation`` with each key's batch sent to its coordinator (``key_type`` 0:
        group, 1: transaction), one request per coordinator; stale coordinators are
        forgotten before the driver retries. (An operation on one group sends to the
        ``Coordinator`` route instead: see ``_send``.)"""

        async def attempt(pending: list[str], deadline: float) -> dict[str, V | BaseException]:
            try:
                coordinators = await self._cluster.coordinators(pending, key_type)
            except KafkaError as exc:
                return dict.fromkeys(pending, exc)
            out = await self._per_node(
                group_by((coordinators[k], k) for k in pending),
                lambda node, batch: on_coordinator(node, batch, deadline),
            )
            # One request carries the keys of one coordinator: each key's own outcome says
            # whether its coordinator is stale, by the coordinator route's rule.
            for k, v in out.items():
                routes.forget_stale_coordinator(self._cluster, k, key_type, v)
            return out

        return await self._run(operation, keys, attempt, timeout_ms)

    async def _any_node(self) -> int:
        """A broker for a "to any broker" request, taking the known brokers in turn.

        Rotating means a retry after a failure goes to the next broker rather than
        hammering the one that just failed.
        """
        brokers = sorted(self._cluster.metadata.brokers)
        if not brokers:
            await self._cluster.refresh()
            brokers = sorted(self._cluster.metadata.brokers)
        if not brokers:
            raise KafkaError("no broker is known yet")
        self._next_any += 1
        return brokers[self._next_any % len(brokers)]

    async def _controller(self) -> int:
        return await self._cluster.controller()

    def _node(self, node_id: int) -> Node | None:
        b = self._cluster.metadata.brokers.get(node_id)
        return None if b is None else Node(b.node_id, b.host, b.port, b.rack)
