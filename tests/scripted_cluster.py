"""A scripted cluster client for the few tests that need a Fetch or ShareFetch answer no model
gives: a corrupt batch, a broker ignoring max_bytes, a preferred read replica, a chosen
partition order, acquired ranges far beyond the records sent, a Tansu log served with its
aborted-transaction list. Everything else runs on :class:`~aiokafka_ng.testing.FakeKafka`.

Kept until FakeKafka can script an answer per API key (``FakeKafka.answer``); then these
tests move there and this file goes. It implements the
:class:`~aiokafka_ng.cluster.ClusterClient` protocol the consumer parts take.

Answers are looked up per request: the answers queued with :meth:`ScriptedCluster.script`
for that request type, then the handler set with :meth:`ScriptedCluster.on`, then the
fallback ``handler``. Nothing found is an ``AssertionError`` naming the request: a test never
gets an answer it did not write. An answer is a response object, an exception (raised), or a
callable ``(node_id, request, version)`` returning either (or an awaitable of one).
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


def make_metadata(
    topics: Mapping[str, int] | None = None,
    *,
    nodes: Iterable[int] = (1,),
    leader: int | None = None,
    leader_epoch: int = -1,
) -> ClusterMetadata:
    """A snapshot with ``nodes`` on 127.0.0.1 (port = node id) and ``topics`` (name ->
    partition count), every partition led by ``leader`` (default: the first node)."""
    node_ids = tuple(nodes)
    lead = node_ids[0] if leader is None else leader
    return ClusterMetadata(
        brokers=MappingProxyType({n: BrokerMetadata(n, "127.0.0.1", n) for n in node_ids}),
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
        return self.cluster.versions.get(request_type, request_type.MAX_STABLE_VERSION)

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
        v = self.version_for(type(request)) if version is None else version
        sent = Sent(self.node_id, request, v)
        self.cluster.sent.append(sent)  # recorded when written, like Connection.submit
        return _Pending(lambda: self.cluster.answer(sent))


@dataclass(eq=False)
class ScriptedCluster:
    """A :class:`~aiokafka_ng.cluster.ClusterClient` whose answers a test writes.

    ``handler`` is the fallback answer for any request nothing more specific answers;
    ``versions`` pins the version ``version_for`` returns per request type (default: the
    type's highest stable version). Requests are recorded in :attr:`sent`, connections asked
    for in :attr:`connected`; metadata is plain state (``metadata``).
    """

    metadata: ClusterMetadata = field(default_factory=ClusterMetadata)
    handler: Handler | None = None
    versions: dict[type[ApiMessage], int] = field(default_factory=dict)
    ready: bool = True

    sent: list[Sent] = field(default_factory=list)
    connected: list[int] = field(default_factory=list)

    queues: dict[type[ApiMessage], deque[Any]] = field(default_factory=dict, repr=False)
    handlers: dict[type[ApiMessage], Handler] = field(default_factory=dict, repr=False)

    # ---------------------------------------------------------------- scripting

    def script(self, request_type: type[ApiMessage], *answers: Any) -> None:
        """Queue ``answers`` (one per request, in order) for ``request_type``."""
        self.queues.setdefault(request_type, deque()).extend(answers)

    def on(self, request_type: type[ApiMessage], handler: Handler) -> None:
        """Answer every ``request_type`` with ``handler`` once no queued answer is left."""
        self.handlers[request_type] = handler

    def pending(self) -> int:
        """How many queued answers no request has taken yet."""
        return sum(len(q) for q in self.queues.values())

    def requests(self, request_type: type[ApiMessage]) -> list[Any]:
        """The requests of ``request_type`` sent, in order."""
        return [s.request for s in self.sent if type(s.request) is request_type]

    async def answer(self, sent: Sent) -> Any:
        kind = type(sent.request)
        queue = self.queues.get(kind)
        if queue:
            answer = queue.popleft()
        else:
            answer = self.handlers.get(kind) or self.handler
            if answer is None:
                name = kind.__name__.removesuffix("Request")
                raise AssertionError(f"no scripted answer for {name} to node {sent.node_id}")
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
        return lambda: None  # the metadata never changes by itself

    def request_update(self, topics: Iterable[str] = ()) -> None:
        pass  # nothing to refresh: the metadata is the test's

    def update_leader(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> None:
        pass  # no canned answer here carries a leader hint

    async def refresh(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        await anyio.lowlevel.checkpoint()
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
        raise NotControllerError("no controller in the scripted metadata")

    async def coordinator(
        self,
        key: str,
        key_type: int = 0,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int:
        await anyio.lowlevel.checkpoint()
        return min(self.metadata.brokers, default=1)

    def invalidate_coordinator(self, key: str, key_type: int = 0) -> None:
        pass

    async def connection(self, node_id: int) -> ScriptedLink:
        await anyio.lowlevel.checkpoint()
        self.connected.append(node_id)
        return ScriptedLink(self, node_id)

    async def coordinator_connection(self, node_id: int) -> ScriptedLink:
        return await self.connection(node_id)

    async def any_connection(self) -> ScriptedLink:
        return await self.connection(min(self.metadata.brokers, default=1))

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
