"""What the producer, consumer and transaction parts use of a cluster, as protocols.

:class:`ClusterClient` names exactly the members of :class:`~aiokafka_ng.cluster.Cluster`
that the parts which *take* a cluster (sender, fetcher, offsets, group membership, the
transaction coordinator client, the share fetcher) call. Those parts are typed against
it, so ``mypy --strict`` checks that the real :class:`Cluster` satisfies it wherever a client
hands its cluster down; tests run those parts on a real :class:`Cluster` too (against
:class:`aiokafka_ng.testing.FakeKafka`, or never started where only a taker of metadata
requests is needed). The clients that *own* a cluster (``Producer``,
``Consumer``, ``AdminClient``) keep the concrete type: they build it, enter it and read its
status.

:class:`Link` is the part of :class:`~aiokafka_ng.net.connection.Connection` those parts use
(a connection handed out by ``connection()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

if TYPE_CHECKING:
    from aiokafka_ng.cluster.metadata import BrokerMetadata, ClusterMetadata, TopicMetadata
    from aiokafka_ng.cluster.retry import Retry, RetryState, Route
    from aiokafka_ng.errors import KafkaError
    from aiokafka_ng.protocol.limits import DecodeLimits

R = TypeVar("R", bound=ApiMessage)
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

__all__ = ["ClusterClient", "Link", "Pending"]


class Pending(Protocol[T_co]):
    """A request on the wire (``Connection.submit``); ``wait()`` returns its response."""

    async def wait(self) -> T_co: ...

    def on_settled(self, callback: Callable[[Any, KafkaError | None], None]) -> None:
        """Instead of ``wait()``, on asyncio: ``callback(response, None)`` or
        ``callback(None, error)`` once, from the task that settles the request (the
        connection's reader, in wire order)."""


class Link(Protocol):
    """The part of a connection the clients use: version negotiation (or a pinned version's
    check), ``send`` (always answered) and ``submit`` (acks=0 Produce expects no response,
    so it says)."""

    def version_for(self, request_type: type[ApiMessage]) -> int: ...

    def check_version(self, request_type: type[ApiMessage], version: int) -> int: ...

    async def send(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        limits: DecodeLimits | None = None,
    ) -> R: ...

    async def submit(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: bool,
        limits: DecodeLimits | None = None,
    ) -> Pending[R | None]: ...


class ClusterClient(Protocol):
    """The cluster as the producer, consumer and transaction parts use it."""

    # -- bootstrap and metadata
    @property
    def ready(self) -> bool: ...

    async def wait_ready(self, timeout: float | None = None) -> None: ...  # noqa: ASYNC109

    @property
    def metadata(self) -> ClusterMetadata: ...

    def add_listener(self, callback: Callable[[ClusterMetadata], None]) -> Callable[[], None]: ...

    def request_update(self, topics: Iterable[str] = ()) -> None: ...

    def update_leader(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> None: ...

    async def refresh(self, topics: Iterable[str] | None = None) -> ClusterMetadata: ...

    async def wait_for_topics(
        self,
        topics: Iterable[str],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, TopicMetadata]: ...

    # -- routing
    async def leader_for(self, topic: str, partition: int) -> int: ...

    async def controller(self) -> int: ...

    async def coordinator(
        self,
        key: str,
        key_type: int = 0,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int: ...

    def invalidate_coordinator(self, key: str, key_type: int = 0) -> None: ...

    # -- the control-plane path (Cluster.call: routed, retried, checked)
    @overload
    async def call(
        self,
        request: ApiRequest[R],
        route: Route = ...,
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
        route: Route = ...,
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

    # -- connections and requests
    async def connection(self, node_id: int) -> Link: ...

    def can_dial(self, node_id: int) -> bool: ...

    async def coordinator_connection(self, node_id: int) -> Link: ...

    async def any_connection(self) -> Link: ...

    async def least_loaded_connection(self) -> tuple[int, Link]: ...

    async def request(
        self,
        node_id: int,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> R: ...

    async def all_topics(
        self,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, TopicMetadata]: ...

    async def request_any(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> R: ...
