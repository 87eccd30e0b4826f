"""A scripted :class:`~aiokafka_ng.cluster.ClusterClient` for tests that need a broker to
answer what no real broker can be made to answer on cue (an error code at a chosen request,
a coordinator that moves, a leader hint in a Produce response).

Answers are looked up per request, in this order: the answers queued with :meth:`script`
for that request type on that node, then those for that type on any node, then the handler
set with :meth:`on` for that type (node-specific first), then the fallback ``handler``.
Nothing found is an ``AssertionError`` naming the request: a test never gets an answer it
did not write. An answer is a response object, an exception (raised), or a callable
``(node_id, request, version)`` returning either (or an awaitable of one).

Everything a client does to the cluster is recorded: :attr:`sent` (every request, in the
order written), :attr:`updates` (``request_update``), :attr:`leader_updates`
(``update_leader``), :attr:`refreshes`, :attr:`lookups` / :attr:`invalidated` (coordinator
cache), :attr:`connected` (``connection``/``coordinator_connection`` node ids). Metadata is
plain state: :meth:`set_metadata` installs a snapshot and tells the listeners, as a refresh
does. No tasks, no sockets: every method completes after one checkpoint.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast

import anyio.lowlevel

from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.errors import NotControllerError, UnknownTopicOrPartitionError
from aiokafka_ng.protocol.limits import DecodeLimits
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

R = TypeVar("R", bound=ApiMessage)
T_co = TypeVar("T_co", covariant=True)

#: ``(node_id, request, version)`` -> a response, an exception, or an awaitable of either
Handler = Callable[[int, Any, int], Any]

__all__ = [
    "Handler",
    "LeaderUpdate",
    "ScriptedCluster",
    "ScriptedLink",
    "Sent",
    "make_metadata",
]


def make_metadata(
    topics: Mapping[str, int] | None = None,
    *,
    nodes: Iterable[int] = (1,),
    leader: int | None = None,
    leader_epoch: int = -1,
    controller_id: int | None = None,
) -> ClusterMetadata:
    """A snapshot with ``nodes`` on 127.0.0.1 (port = node id) and ``topics`` (name ->
    partition count), every partition led by ``leader`` (default: the first node)."""
    node_ids = tuple(nodes)
    lead = node_ids[0] if leader is None else leader
    return ClusterMetadata(
        brokers=MappingProxyType({n: BrokerMetadata(n, "127.0.0.1", n) for n in node_ids}),
        controller_id=controller_id,
        topics=MappingProxyType(
            {
                name: TopicMetadata(
                    name,
                    partitions=MappingProxyType(
                        {
                            p: PartitionMetadata(p, leader=lead, leader_epoch=leader_epoch)
                            for p in range(count)
                        }
                    ),
                )
                for name, count in (topics or {}).items()
            }
        ),
    )


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as a client wrote it."""

    node_id: int
    request: Any
    version: int
    timeout: float | None = None
    expect_response: bool = True

    @property
    def name(self) -> str:
        """The request's type without the ``Request`` suffix (``"Produce"``)."""
        return type(self.request).__name__.removesuffix("Request")


@dataclass(frozen=True, slots=True)
class LeaderUpdate:
    """One ``update_leader`` call (a KIP-951 hint)."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    broker: BrokerMetadata | None = None


class _Pending(Generic[T_co]):
    """A scripted request on the wire: ``wait()`` computes and returns its answer."""

    __slots__ = ("_answer",)

    def __init__(self, answer: Callable[[], Any]) -> None:
        self._answer = answer

    async def wait(self) -> T_co:
        return cast(T_co, await self._answer())


class ScriptedLink:
    """A connection to one scripted node (:class:`~aiokafka_ng.cluster.Link`)."""

    def __init__(self, cluster: ScriptedCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def version_for(self, request_type: type[ApiMessage]) -> int:
        return self.cluster.version_for(request_type)

    async def send(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the Connection.send signature)
        limits: DecodeLimits | None = None,
    ) -> R:
        pending = await self.submit(request, version=version, timeout=timeout, expect_response=True)
        response = await pending.wait()
        assert response is not None, "a scripted answer to a send() is a response"
        return response

    async def submit(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the Connection.submit signature)
        expect_response: bool,
        limits: DecodeLimits | None = None,
    ) -> _Pending[R | None]:
        await anyio.lowlevel.checkpoint()
        cluster = self.cluster
        v = self.version_for(type(request)) if version is None else version
        if cluster.codec_check:
            # The request must survive a round trip through the codec at this version.
            request = type(request).decode(request.encode(v), v)
        sent = Sent(self.node_id, request, v, timeout, expect_response)
        cluster.sent.append(sent)  # recorded when written, like Connection.submit
        if not expect_response:
            return _Pending(_none)
        return _Pending(lambda: cluster._answer(sent))


async def _none() -> None:
    return None


@dataclass(eq=False)
class ScriptedCluster:
    """A :class:`~aiokafka_ng.cluster.ClusterClient` whose answers a test writes.

    ``handler`` is the fallback answer for any request nothing more specific answers.
    ``versions`` pins the version ``version_for`` returns per request type (default: the
    type's highest stable version). ``codec_check`` round-trips each request through the
    codec at its version before it is recorded.
    """

    metadata: ClusterMetadata = field(default_factory=ClusterMetadata)
    handler: Handler | None = None
    versions: dict[type[ApiMessage], int] = field(default_factory=dict)
    codec_check: bool = False
    #: coordinator per ``(key, key_type)``; others are on ``default_node``
    coordinators: dict[tuple[str, int], int] = field(default_factory=dict)
    default_node: int = 1
    ready: bool = True

    sent: list[Sent] = field(default_factory=list)
    updates: list[tuple[str, ...]] = field(default_factory=list)
    leader_updates: list[LeaderUpdate] = field(default_factory=list)
    refreshes: list[tuple[str, ...] | None] = field(default_factory=list)
    lookups: list[tuple[str, int]] = field(default_factory=list)
    invalidated: list[tuple[str, int]] = field(default_factory=list)
    connected: list[int] = field(default_factory=list)

    _queues: dict[tuple[type[ApiMessage], int | None], deque[Any]] = field(
        default_factory=dict, repr=False
    )
    _handlers: dict[tuple[type[ApiMessage], int | None], Handler] = field(
        default_factory=dict, repr=False
    )
    _listeners: list[Callable[[ClusterMetadata], None]] = field(default_factory=list, repr=False)
    _cached: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)

    # ---------------------------------------------------------------- scripting

    def script(
        self, request_type: type[ApiMessage], *answers: Any, node: int | None = None
    ) -> None:
        """Queue ``answers`` (one per request, in order) for ``request_type`` (on ``node``)."""
        self._queues.setdefault((request_type, node), deque()).extend(answers)

    def on(
        self, request_type: type[ApiMessage], handler: Handler, *, node: int | None = None
    ) -> None:
        """Answer every ``request_type`` (on ``node``) with ``handler`` once no queued
        answer is left."""
        self._handlers[(request_type, node)] = handler

    def pending(self) -> int:
        """How many queued answers no request has taken yet."""
        return sum(len(q) for q in self._queues.values())

    def set_metadata(self, metadata: ClusterMetadata) -> None:
        """Install ``metadata`` and tell the listeners (as a metadata refresh does)."""
        self.metadata = metadata
        for callback in list(self._listeners):
            callback(metadata)

    def requests(self, request_type: type[ApiMessage] | None = None) -> list[Any]:
        """The requests sent (of ``request_type``), in order."""
        return [
            s.request for s in self.sent if request_type is None or type(s.request) is request_type
        ]

    def names(self) -> list[str]:
        """The request names sent, in order (``["InitProducerId", "EndTxn"]``)."""
        return [s.name for s in self.sent]

    def version_for(self, request_type: type[ApiMessage]) -> int:
        return self.versions.get(request_type, request_type.MAX_STABLE_VERSION)

    async def _answer(self, sent: Sent) -> Any:
        kind = type(sent.request)
        answer: Any = None
        found = False
        for node in (sent.node_id, None):
            queue = self._queues.get((kind, node))
            if queue:
                answer, found = queue.popleft(), True
                break
        if not found:
            handler = (
                self._handlers.get((kind, sent.node_id))
                or self._handlers.get((kind, None))
                or self.handler
            )
            if handler is None:
                raise AssertionError(f"no scripted answer for {sent.name} to node {sent.node_id}")
            answer = handler
        if callable(answer) and not isinstance(answer, BaseException):
            answer = answer(sent.node_id, sent.request, sent.version)
        if inspect.isawaitable(answer):  # a handler may hold the answer back
            answer = await answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

    # ---------------------------------------------------------------- ClusterClient

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await anyio.lowlevel.checkpoint()

    def add_listener(self, callback: Callable[[ClusterMetadata], None]) -> Callable[[], None]:
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    def request_update(self, topics: Iterable[str] = ()) -> None:
        self.updates.append(tuple(topics))

    def update_leader(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> None:
        self.leader_updates.append(LeaderUpdate(topic, partition, leader_id, leader_epoch, broker))

    async def refresh(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        await anyio.lowlevel.checkpoint()
        self.refreshes.append(None if topics is None else tuple(topics))
        return self.metadata

    async def wait_for_topics(
        self,
        topics: Iterable[str],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, TopicMetadata]:
        await anyio.lowlevel.checkpoint()
        found: dict[str, TopicMetadata] = {}
        for name in topics:
            t = self.metadata.topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(
                    f"topic {name!r} is not in the scripted metadata"
                )
            found[name] = t
        return found

    async def leader_for(self, topic: str, partition: int) -> int:
        await anyio.lowlevel.checkpoint()
        leader = self.metadata.leader_for(topic, partition)
        if leader is None or leader < 0:
            raise UnknownTopicOrPartitionError(f"no leader for {topic}-{partition} in the script")
        return leader

    async def controller(self) -> int:
        await anyio.lowlevel.checkpoint()
        if self.metadata.controller_id is None:
            raise NotControllerError("no controller in the scripted metadata")
        return self.metadata.controller_id

    async def coordinator(
        self,
        key: str,
        key_type: int = 0,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int:
        await anyio.lowlevel.checkpoint()
        cached = self._cached.get((key, key_type))
        if cached is not None:
            return cached
        self.lookups.append((key, key_type))
        node = self.coordinators.get((key, key_type), self.default_node)
        self._cached[(key, key_type)] = node
        return node

    def invalidate_coordinator(self, key: str, key_type: int = 0) -> None:
        self.invalidated.append((key, key_type))
        self._cached.pop((key, key_type), None)

    async def connection(self, node_id: int) -> ScriptedLink:
        await anyio.lowlevel.checkpoint()
        self.connected.append(node_id)
        return ScriptedLink(self, node_id)

    async def coordinator_connection(self, node_id: int) -> ScriptedLink:
        return await self.connection(node_id)

    async def any_connection(self) -> ScriptedLink:
        return await self.connection(min(self.metadata.brokers, default=self.default_node))

    async def request(
        self,
        node_id: int,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> R:
        conn = await self.connection(node_id)
        return await conn.send(request, version=version, timeout=timeout)

    async def request_any(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> R:
        conn = await self.any_connection()
        return await conn.send(request, version=version, timeout=timeout)
