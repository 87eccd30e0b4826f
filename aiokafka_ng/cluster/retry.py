"""The retry driver: one loop for every control-plane request, one state object for timing.

Theory of operation
-------------------
A control-plane operation (an offset commit, a coordinator lookup, InitProducerId, a join)
is an *attempt* that either returns its result or raises a :class:`KafkaError`.
:func:`retrying` runs attempts until one succeeds, an error is final, the retry budget is
spent or the deadline passes:

* *Which errors retry.* ``error.retriable`` (Kafka's own classification; every
  ``invalid_metadata`` error is retriable too), adjusted per call by :class:`Retry`:
  ``fatal`` lists retriable classes that must end the operation here (a commit refused for
  a stale generation), ``max_retries`` bounds the attempts (Spark's
  ``fetchOffset.numRetries``).
* *What a failure repairs before the next attempt* (:func:`repair`, applied by
  :meth:`Cluster.call <aiokafka_ng.cluster.Cluster.call>` for its route): an
  ``invalid_metadata`` error (NOT_LEADER, a fenced leader epoch, an unknown partition) or
  NOT_CONTROLLER waits for a metadata refresh, so the next attempt routes to the new
  leader or controller.
* *The coordinator route repairs itself, whatever the caller retries.* A coordinator that
  moved or is unavailable (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE: raised, or anywhere
  in an answer the caller's check let through, :func:`coordinator_error`), whose
  connection broke, or that left a request unanswered past its timeout (the connection's
  own, or the call's deadline: the connection times a request out at its deadline even
  when its caller has gone, and closes, so the next request does not queue behind the
  lost one) is forgotten at once, so whoever asks next -- this call's next attempt, or the
  caller of a ``retry=ONCE`` call with its own rules -- looks it up again. This is the Java clients'
  set: they count a request timeout as a disconnect. Any other error, retriable or not,
  keeps the coordinator: COORDINATOR_LOAD_IN_PROGRESS (the right one, still loading), a
  heartbeat's REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID... Callers therefore never
  invalidate a coordinator by hand: this is the one place that decides.
* *Timing.* A :class:`RetryState` per operation counts consecutive failures and asks the
  shared :class:`ExponentialBackoff` (KIP-580: growing, capped, jittered) for the pause;
  one success resets the count. The same object serves loops that cannot sleep inline
  (the fetcher, the pool, the metadata refresher): they call :meth:`RetryState.failed`
  and read :attr:`RetryState.retry_at` instead of sleeping. A call may name *steady*
  errors (``Retry.steady``: the peer answered and will be ready within moments, such as a
  transaction coordinator still writing markers): they are retried at the policy's first
  step, or ``Retry.steady_ms`` if shorter, and do not grow the count, so a failure that
  does grow it keeps its pace.
* *Periodic loops* (heartbeats, auto-commit, a pattern's re-check) run a round now and
  then rather than until success: :class:`Periodic` times them, an interval after a
  success, the same backoff after a failure, sooner when woken (but never inside a backoff).
* *Deadline.* The whole loop runs under one cancel scope at ``state.deadline``; when it
  fires the operation raises ``KafkaTimeoutError`` naming the last error it saw, never
  anyio's ``TimeoutError``. Each single request is bounded separately by the caller.

Cancellation from outside (a caller's own timeout) propagates unchanged: the driver keeps
no state between attempts except the :class:`RetryState` it was given, and routing state
it touches (the coordinator cache, the metadata refresher) is shared and consistent after
every await, so a cancelled call leaves nothing half-done.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel

from aiokafka_ng.errors import (
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    NotCoordinatorError,
    RequestTimeoutError,
    error_for_code,
)
from aiokafka_ng.net.backoff import ExponentialBackoff, RetryState
from aiokafka_ng.protocol.primitives import ApiMessage

if TYPE_CHECKING:
    from aiokafka_ng.cluster.client import ClusterClient, Link

__all__ = [
    "ANY",
    "CONTROLLER",
    "ONCE",
    "STALE_COORDINATOR",
    "AnyBroker",
    "Controller",
    "Coordinator",
    "Final",
    "Leader",
    "Node",
    "Periodic",
    "Retry",
    "RetryState",
    "Route",
    "connect",
    "coordinator_error",
    "forget_stale_coordinator",
    "raise_top_level_error",
    "repair",
    "retrying",
    "routed",
    "timeout_scope",
    "unchecked",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound=ApiMessage)

#: Errors after which a cached group/transaction coordinator must be looked up again: it
#: says it is not (or not available), or a request to it got no answer (the connection
#: broke, or the request timed out: the connection closes then).
STALE_COORDINATOR = (
    NotCoordinatorError,
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    RequestTimeoutError,
)
#: Their error codes, as they come in answers (connection errors have none).
_STALE_COORDINATOR_CODES = frozenset(
    {NotCoordinatorError.errno, CoordinatorNotAvailableError.errno}
)


# ---------------------------------------------------------------------- routes


@dataclass(frozen=True, slots=True)
class Leader:
    """The current leader of ``topic``/``partition`` (waits for metadata naming one)."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Coordinator:
    """The coordinator of a group (``key_type=0``) or transactional id (``1``).

    ``link``: over the coordinator's own connection (a consumer group's heartbeats and
    commits, which must not wait behind a long-poll Fetch; ``Cluster.coordinator_connection``)."""

    key: str
    key_type: int = 0
    link: bool = False


@dataclass(frozen=True, slots=True)
class Node:
    """One broker by id (no re-routing: a failure there is retried there)."""

    node_id: int


@dataclass(frozen=True, slots=True)
class Controller:
    """The cluster's controller (admin requests that must go to it)."""


@dataclass(frozen=True, slots=True)
class AnyBroker:
    """The least loaded reachable broker."""


CONTROLLER = Controller()
ANY = AnyBroker()

Route = Leader | Coordinator | Node | Controller | AnyBroker


# ---------------------------------------------------------------------- policy and state


@dataclass(frozen=True, slots=True)
class Retry:
    """Which failures a call retries. The default: every retriable ``KafkaError``, until the
    deadline."""

    #: Retriable error classes that end the operation anyway (raised as they are).
    fatal: tuple[type[KafkaError], ...] = ()
    #: At most this many retries after the first attempt (None: until the deadline).
    max_retries: int | None = None
    #: Retry every KafkaError, retriable or not (a background loop that must not die, such
    #: as the idempotent producer's InitProducerId: it keeps trying while the app runs).
    every_error: bool = False
    #: Retriable error classes the peer is expected to clear within moments: retried at
    #: the backoff's first step (or ``steady_ms``, if shorter) without growing the failure
    #: count (``RetryState.failed(steady_ms=...)``). They count toward ``max_retries``, and
    #: the deadline bounds them too.
    steady: tuple[type[KafkaError], ...] = ()
    #: The longest pause after a steady error (before jitter); the first step if shorter.
    steady_ms: float = math.inf

    def retries(self, error: KafkaError) -> bool:
        if isinstance(error, self.fatal):
            return False
        return error.retriable or self.every_error


class Final(Exception):
    """Raised by an attempt to end the operation with ``error`` even though its class is
    retriable (a caller's own rule: e.g. only some error codes of an API may be retried).
    The driver raises ``error`` itself; callers never see this class."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(error)
        self.error = error


# ---------------------------------------------------------------------- the loop


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    state: RetryState,
    *,
    what: str,
    retry: Retry | None = None,
    on_retry: Callable[[KafkaError], Awaitable[None]] | None = None,
    limit: str | None = None,
) -> T:
    """Run ``attempt`` until it returns; see the module docstring for the rules.

    ``on_retry(error)`` runs after a retriable failure, before the backoff pause (repairs
    such as forgetting a coordinator; :func:`repair` for a route). ``limit`` names the
    deadline in the timeout's message (default: its length in ms).
    """
    policy = retry if retry is not None else _DEFAULT
    # Retries of this call, steady or not (``state.failures`` counts only what paces).
    retries = 0
    with anyio.CancelScope(deadline=_inf(state.deadline)) as scope:
        while True:
            try:
                result = await attempt()
            except Final as final:
                raise final.error from None
            except KafkaError as exc:
                if not policy.retries(exc):
                    raise
                retries += 1
                state.failed(
                    exc, steady_ms=policy.steady_ms if isinstance(exc, policy.steady) else None
                )
                if policy.max_retries is not None and retries > policy.max_retries:
                    raise
                log.debug(
                    "%s failed (retry %d, %d failures pacing), retrying: %r",
                    what,
                    retries,
                    state.failures,
                    exc,
                )
                if on_retry is not None:
                    await on_retry(exc)
                await state.pause()
                continue
            state.succeeded()
            return result
    # Only our own deadline gets here (an outer cancellation propagates through the scope).
    assert scope.cancelled_caught
    raise state.timeout_error(what, limit)


_DEFAULT = Retry()

#: Send once on the route and raise what fails: for callers that give each error a meaning
#: of their own (a heartbeat's REBALANCE_IN_PROGRESS, a join's MEMBER_ID_REQUIRED). Nothing
#: is waited for; a coordinator route still forgets a stale coordinator (module docstring).
ONCE = Retry(max_retries=0)


def unchecked(response: M) -> M:
    """A check for :meth:`Cluster.call` that returns the response as it came (its error
    codes are the caller's to read)."""
    return response


def _inf(deadline: float | None) -> float:
    return float("inf") if deadline is None else deadline


def raise_top_level_error(response: M) -> M:
    """The default check of :meth:`Cluster.call`: a response whose top-level
    ``error_code`` is set raises that error; otherwise the response is the result."""
    code = getattr(response, "error_code", 0)
    if code:
        err = error_for_code(code)
        raise err(getattr(response, "error_message", None) or type(response).__name__)
    return response


def forget_stale_coordinator(
    cluster: ClusterClient, key: str, key_type: int, outcome: object
) -> bool:
    """Forget the cached coordinator of ``key`` when ``outcome`` (an error, a result,
    None) says it is stale (see the module docstring); True when it did. The coordinator
    route applies it to each of its failures and answers; a driver that batches several
    keys into one request per coordinator (the admin client's) applies it to each key's
    outcome."""
    if isinstance(outcome, STALE_COORDINATOR):
        cluster.invalidate_coordinator(key, key_type)
        return True
    return False


#: Per message class: the names of its ``error_code`` field (if any) and of its fields
#: holding structs, read from the generated schema once.
_ERROR_FIELDS: dict[type[Any], tuple[bool, tuple[str, ...]]] = {}


def _error_fields(cls: type[Any]) -> tuple[bool, tuple[str, ...]]:
    fields = _ERROR_FIELDS.get(cls)
    if fields is None:
        schema = getattr(cls, "_SCHEMA", ())
        has_code = any(f.name == "error_code" for f in schema)
        nested = tuple(f.name for f in schema if f.struct is not None)
        fields = _ERROR_FIELDS[cls] = (has_code, nested)
    return fields


def coordinator_error(message: object) -> KafkaError | None:
    """The first NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE in ``message``, at its top
    level or in any struct it holds (a partition of an OffsetCommit answer, a group of an
    OffsetFetch v8 one); None when it has none. Everything in an answer from a key's
    coordinator route was answered for that key, so any of them says its coordinator is
    stale (Java's consumer and admin handlers read them at each of these levels)."""
    has_code, nested = _error_fields(type(message))
    if has_code:
        code = getattr(message, "error_code", 0)
        if code in _STALE_COORDINATOR_CODES:
            return error_for_code(code)(f"{type(message).__name__}: coordinator moved")
    for name in nested:
        value = getattr(message, name, None)
        items = value if isinstance(value, list) else () if value is None else (value,)
        for item in items:
            err = coordinator_error(item)
            if err is not None:
                return err
    return None


async def repair(cluster: ClusterClient, route: Route, error: KafkaError) -> None:
    """Undo what ``error`` says is stale about ``route`` before the next attempt."""
    if isinstance(route, Coordinator):
        forget_stale_coordinator(cluster, route.key, route.key_type, error)
        return
    if error.invalid_metadata or isinstance(error, NotControllerError):
        # Wait for the refresh (bounded by the caller's deadline): routing reads the cache,
        # so retrying before it changes would go to the same stale leader or controller.
        topics = [route.topic] if isinstance(route, Leader) else None
        try:
            await cluster.refresh(topics)
        except KafkaError as exc:
            # Not this operation's failure: the next attempt fails on its own if the
            # cluster is still unreachable.
            log.debug("metadata refresh after %r failed: %r", error, exc)


async def connect(cluster: ClusterClient, route: Route) -> tuple[int, Link]:
    """The node ``route`` points to now (routing reads the caches) and a ready connection
    to it.

    The drivers take the same :class:`~aiokafka_ng.cluster.client.ClusterClient` protocol
    as the clients, so a test double of it serves both."""
    if isinstance(route, Coordinator):
        node = await cluster.coordinator(route.key, route.key_type)
        if route.link:
            return node, await cluster.coordinator_connection(node)
    elif isinstance(route, Node):
        node = route.node_id
    else:
        if isinstance(route, AnyBroker):
            return await cluster.least_loaded_connection()
        if isinstance(route, Leader):
            node = await cluster.leader_for(route.topic, route.partition)
        else:
            node = await cluster.controller()
    return node, await cluster.connection(node)


async def routed(
    cluster: ClusterClient,
    route: Route,
    send: Callable[[int, Any], Awaitable[T]],
    state: RetryState,
    *,
    what: str,
    retry: Retry | None = None,
    limit: str | None = None,
    on_retry: Callable[[KafkaError], Awaitable[None]] | None = None,
) -> T:
    """:func:`retrying` with each attempt routed afresh: ``send(node, connection)`` to
    where ``route`` points, :func:`repair` (then ``on_retry``) after a retriable failure.
    A coordinator route forgets a stale coordinator on every failure, retried or not,
    and when the call's deadline ends a request to it still unanswered."""
    coordinator = route if isinstance(route, Coordinator) else None
    # A coordinator request is in flight (False between attempts).
    waiting = False

    async def attempt() -> T:
        nonlocal waiting
        try:
            node, link = await connect(cluster, route)
            waiting = coordinator is not None
            result = await send(node, link)
        except Exception as exc:
            waiting = False
            if coordinator is not None and isinstance(exc, KafkaError):
                forget_stale_coordinator(cluster, coordinator.key, coordinator.key_type, exc)
            raise
        waiting = False
        return result

    async def after(error: KafkaError) -> None:
        await repair(cluster, route, error)
        if on_retry is not None:
            await on_retry(error)

    try:
        return await retrying(attempt, state, what=what, retry=retry, on_retry=after, limit=limit)
    except KafkaTimeoutError:
        if coordinator is not None and waiting:
            # Our deadline ended the request before its connection's own timeout could (a
            # caller whose deadline is its request timeout: the epoch heartbeat). The
            # connection still times the request out, closing (net/connection.py: an
            # abandoned request keeps its deadline), so the next requests do not queue
            # behind it at the broker -- at once when the request is due already, else
            # the microseconds later its deadline is (it was read off the clock a moment
            # after ours; a request written there meanwhile fails retriably). But that
            # timeout has nobody to tell now: forget the coordinator here, as after a
            # RequestTimeoutError.
            cluster.invalidate_coordinator(coordinator.key, coordinator.key_type)
        raise


# ---------------------------------------------------------------------- periodic loops


class Periodic:
    """The timing of a loop that runs a round now and then: a heartbeat, an auto-commit, a
    pattern subscription's look at the topic list.

    The loop asks :meth:`wait` for its next round and reports each round's outcome. After a
    success the next round is ``interval`` seconds on (:meth:`succeeded` may take a new
    interval: the broker's heartbeat interval); after a failure the shared backoff decides
    (:meth:`failed`, the failures counted in :attr:`pacing`, a :class:`RetryState`). A
    :meth:`wake` (a new subscription, a rejoin) cuts an *interval* short, never a *backoff*:
    whoever wakes the loop cannot make it hammer a broker that is failing; a wake-up that
    comes during a backoff is served by the round that ends it. Like :class:`RetryState` it holds
    no task: the loop's own task sleeps in :meth:`wait`.
    """

    __slots__ = ("_wake", "_woken", "due", "interval", "pacing")

    def __init__(self, interval: float, backoff: ExponentialBackoff, *, due: float = 0.0) -> None:
        self.interval = interval
        self.pacing = RetryState(backoff)
        #: anyio.current_time() of the next round (0: at once)
        self.due = due
        self._woken = False
        # Made on first wait: an anyio.Event needs a running event loop, a loop's owner
        # may be built before one runs.
        self._wake: anyio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"<Periodic interval={self.interval:g}s failures={self.pacing.failures} "
            f"due={self.due:.3f}{' woken' if self._woken else ''}>"
        )

    @property
    def failures(self) -> int:
        return self.pacing.failures

    @property
    def woken(self) -> bool:
        """A :meth:`wake` not yet served by a round."""
        return self._woken

    def succeeded(self, *, interval: float | None = None, now: float | None = None) -> None:
        """A round succeeded: the next one ``interval`` seconds on (and from now on)."""
        if interval is not None:
            self.interval = interval
        self.pacing.succeeded()
        self.due = (anyio.current_time() if now is None else now) + self.interval

    def failed(self, error: BaseException | None = None) -> float:
        """A round failed: the next one after the backoff; returns the pause (seconds)."""
        pause = self.pacing.failed(error)
        self.due = self.pacing.retry_at
        return pause

    def wake(self) -> None:
        """Run the next round now (or, during a backoff, as soon as it ends)."""
        self._woken = True
        if self._wake is not None:
            self._wake.set()

    def is_due(self, now: float | None = None) -> bool:
        """Whether the next round may go now (due, or woken outside a backoff)."""
        now = anyio.current_time() if now is None else now
        return now >= self.due or (self._woken and not self.pacing.failures)

    async def wait(self, *, until: float | None = None) -> bool:
        """Sleep until the next round is due, a wake-up (outside a backoff) or ``until``
        (the caller's own deadline, such as a poll timer), whichever comes first. True
        when the round is due (the wake-up is consumed), False at ``until``."""
        limit = self.due if until is None else min(self.due, until)
        if not self.pacing.failures:
            if self._woken:
                self._woken = False
                return True
            self._wake = anyio.Event()
            with anyio.CancelScope(deadline=limit):
                await self._wake.wait()
            self._wake = None
            if self._woken:
                self._woken = False
                return True
        else:
            with anyio.CancelScope(deadline=limit):
                await anyio.sleep_forever()
        if anyio.current_time() >= self.due:
            self._woken = False
            return True
        return False

    async def until_woken(self, *, until: float | None = None) -> bool:
        """Sleep until :meth:`wake` (an idle loop: no round is due until told) or ``until``;
        True when woken (the wake-up is consumed)."""
        if not self._woken:
            self._wake = anyio.Event()
            with anyio.CancelScope(deadline=float("inf") if until is None else until):
                await self._wake.wait()
            self._wake = None
        woken, self._woken = self._woken, False
        return woken


class timeout_scope:
    """``fail_after`` that raises KafkaTimeoutError with a message built when it fires."""

    __slots__ = ("_describe", "_scope")

    def __init__(self, seconds: float | None, describe: Callable[[], str]) -> None:
        self._scope = anyio.CancelScope(
            deadline=anyio.current_time() + seconds if seconds is not None else float("inf")
        )
        self._describe = describe

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        swallowed = self._scope.__exit__(exc_type, exc, tb)
        if self._scope.cancelled_caught:
            # Our deadline fired (not an outer cancellation): report what was missing.
            raise KafkaTimeoutError(f"timed out: {self._describe()}") from None
        return swallowed
