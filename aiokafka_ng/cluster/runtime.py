"""ClientRuntime: the lifecycle, task hosting, supervision and status every client shares.

Theory of operation
-------------------
``Producer``, ``Consumer``, ``ShareConsumer`` and ``AdminClient`` each hold one
:class:`ClientRuntime`; it owns what is the same in all four, and the client keeps what is
its own (what its calls check, what it does while closing, its counters).

*States.* ``NEW`` until ``start()``; ``RUNNING`` once the cluster and the client's task
group are entered and its ``setup`` has started its tasks (which therefore run while the
state is still NEW: loops end on :attr:`ClientRuntime.closing`, not on "not RUNNING");
``CLOSING`` from the moment ``close()`` begins (the client finishes its
work: the producer delivers, the consumer commits and leaves the group); ``CLOSED`` once
the task group is cancelled. A failed ``start()`` leaves the client ``CLOSED``, as does
closing a client never started; a closed client cannot be started again. ``close()`` is
idempotent: a second call while ``CLOSING`` or after returns at once.

*Hosting.* The cluster and the task group are entered in a host task of their own (a
:class:`~aiokafka_ng.cluster.host.TaskHost`): ``start()`` and ``close()`` may run in
different tasks, as web frameworks' startup and shutdown hooks do.

*Supervision.* Every background task is started through the runtime's :class:`Supervisor`
(``tasks.start_soon``, handed to the producer's parts) or :meth:`~ClientRuntime.start_task`
(the consumers' fetcher, group member and heartbeat). An exception such a task does not
handle is a bug of ours -- the loops handle every error Kafka and the network produce --
and it must neither cancel the task group (whose tasks the application relies on) nor end
silently (awaiters would hang until ``close()``): it goes to :meth:`ClientRuntime.fail`,
which records the first failure, logs it and calls the client's ``on_failure`` (the
producer fails its pending records, the consumers wake their waiting polls). The client
stays ``RUNNING`` but stopped: its calls raise the failure until ``close()`` cleans up. A
task that fails before it reported itself started (``start_task``) fails ``start()``
instead.

*Telemetry.* :meth:`ClientRuntime.push_metrics` starts the client's KIP-714 metrics pusher
(:mod:`aiokafka_ng.cluster.telemetry`) as one more supervised task; the client's ``close()``
calls :meth:`ClientRuntime.stop_metrics` once its own work is done (so the last push counts
it) and before the tasks are cancelled: it sends the terminating push.

*Status.* :meth:`ClientRuntime.status` never waits: ``ready`` only while ``RUNNING``, not
failed, bootstrapped and the last metadata request succeeded -- so a health check answers
"not ready" once shutdown has begun (the FastAPI recipe in docs/fastapi.md) or a task has
failed. The cluster opened by ``start()`` is kept after ``close()`` so that ``status()`` and
``statistics()`` show its last view and counters.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from aiokafka_ng.cluster.host import TaskHost, enter_task_group
from aiokafka_ng.cluster.telemetry import TelemetryEngine, TelemetryPusher
from aiokafka_ng.errors import IllegalStateError

if TYPE_CHECKING:
    from aiokafka_ng.cluster.cluster import Cluster, ClusterStatistics

__all__ = [
    "ClientRuntime",
    "ClientState",
    "ClientStatistics",
    "ClientStatus",
    "Supervisor",
    "client_status",
]

log = logging.getLogger(__name__)

S = TypeVar("S", bound="ClientStatistics")


class ClientState(enum.Enum):
    """A client's lifecycle state; ``value`` is what ``status().state`` says."""

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ClientStatus:
    """A client's health at a glance, without waiting (``client.status()``): for health
    checks. ``ready``: the client is running (not new, closing or closed, no background
    task failed), a broker answered (bootstrap done) and the last metadata request
    succeeded; ``last_error`` says why not, when not."""

    state: str  # "new", "running", "closing", "closed"
    ready: bool
    bootstrap_servers: str
    brokers: tuple[int, ...]
    last_error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientStatistics:
    """What every client's ``statistics()`` snapshot holds; each client's own class
    (``ProducerStatistics``, ``ConsumerStatistics``, ``ShareConsumerStatistics``,
    ``AdminStatistics``) adds its fields.

    Keyword-only, so the subclasses' own fields keep their positions."""

    state: str  # as in ClientStatus: "new", "running", "closing", "closed"
    client_id: str | None
    #: The client's cluster (metadata, coordinators, connections); None before start().
    cluster: ClusterStatistics | None


def client_status(
    cluster: Cluster | None, state: str, bootstrap_servers: str | list[str]
) -> ClientStatus:
    """The :class:`ClientStatus` of a client in ``state`` with ``cluster`` (None: never
    started). Only a running client can be ready."""
    if cluster is not None:
        status = cluster.status(state)
        # A closing or closed client keeps its cluster's last view, but must not answer a
        # health check as ready: the FastAPI recipe answered 200 after shutdown (issue 49).
        return status if state == ClientState.RUNNING.value else replace(status, ready=False)
    servers = (
        bootstrap_servers if isinstance(bootstrap_servers, str) else ",".join(bootstrap_servers)
    )
    return ClientStatus(state, False, servers, (), None)


class Supervisor:
    """``start_soon`` for a client's background tasks (senders, their response waiters,
    timers): an exception one does not handle goes to ``on_failure`` instead of cancelling
    the task group (see the module docstring, Supervision)."""

    __slots__ = ("_on_failure", "_tg")

    def __init__(self, tg: TaskGroup, on_failure: Callable[[Exception], None]) -> None:
        self._tg = tg
        self._on_failure = on_failure

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._tg.start_soon(self._run, func, args)

    async def start(self, func: Callable[..., Awaitable[Any]]) -> None:
        """Run ``func(task_status=...)`` and wait until it reports itself started; what it
        raises before that is raised here (``start()`` fails with it), after that it goes
        to ``on_failure``."""
        await self._tg.start(self._run_started, func)

    async def _run(self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        try:
            await func(*args)
        except Exception as exc:  # not BaseException: cancellation passes through
            self._on_failure(_unwrap(exc))

    async def _run_started(
        self,
        func: Callable[..., Awaitable[Any]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        status = _Started(task_status)
        try:
            await func(task_status=status)
        except Exception as exc:
            if not status.done:
                raise  # during start(): start() raises it
            self._on_failure(_unwrap(exc))


def _unwrap(exc: Exception) -> Exception:
    """A task's own task group wraps its tasks' errors (the fetcher's does): the one inside
    is the failure to report."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class _Started:
    """A task status that remembers whether the task reported itself started."""

    __slots__ = ("_status", "done")

    def __init__(self, status: TaskStatus[None]) -> None:
        self._status = status
        self.done = False

    def started(self, value: None = None) -> None:
        self.done = True
        self._status.started(value)


Setup = Callable[["Cluster", AsyncExitStack], Awaitable[None]]


class ClientRuntime:
    """One client's lifecycle, hosted tasks, supervision and status; see the module
    docstring. ``kind`` names the client in logs ("producer", "consumer", ...);
    ``started_twice`` is the message of ``start()`` on a client not NEW (``{state}`` is
    replaced); ``on_failure(exc)`` is the client's own reaction to a failed task."""

    __slots__ = (
        "_bootstrap_servers",
        "_host",
        "_on_failure",
        "_started_twice",
        "_tasks",
        "_telemetry",
        "_tg",
        "client_id",
        "cluster",
        "failure",
        "kind",
        "state",
    )

    def __init__(
        self,
        kind: str,
        *,
        client_id: str | None,
        bootstrap_servers: str | list[str],
        started_twice: str,
        on_failure: Callable[[Exception], None] | None = None,
    ) -> None:
        self.kind = kind
        self.client_id = client_id
        self._bootstrap_servers = bootstrap_servers
        self._started_twice = started_twice
        self._on_failure = on_failure
        self.state = ClientState.NEW
        #: What stopped a background task (the first such failure), else None.
        self.failure: Exception | None = None
        #: The cluster ``start()`` opened: None before; kept after ``close()`` for the last
        #: view (``status()``) and counters (``statistics()``).
        self.cluster: Cluster | None = None
        self._host: TaskHost | None = None
        self._tg: TaskGroup | None = None
        self._tasks: Supervisor | None = None
        self._telemetry: TelemetryPusher | None = None

    def __repr__(self) -> str:
        failed = "" if self.failure is None else f" failed={self.failure!r}"
        return f"<ClientRuntime {self.kind} {self.client_id!r} {self.state.value}{failed}>"

    # ------------------------------------------------------------------ lifecycle

    @property
    def closing(self) -> bool:
        """CLOSING or CLOSED: background loops end (a task started during ``start()`` runs
        before the state is RUNNING)."""
        return self.state is ClientState.CLOSING or self.state is ClientState.CLOSED

    @property
    def open_cluster(self) -> Cluster | None:
        """The cluster while RUNNING (failed or not), else None."""
        return self.cluster if self.state is ClientState.RUNNING else None

    @property
    def has_tasks(self) -> bool:
        """Whether :attr:`tasks` is there (from ``setup`` on, until ``close()``)."""
        return self._tasks is not None

    @property
    def tasks(self) -> Supervisor:
        """Where background tasks are started (from ``setup`` on, until ``close()``)."""
        if self._tasks is None:
            raise IllegalStateError(f"the {self.kind} has no task group (not started)")
        return self._tasks

    def check_new(self) -> None:
        """Raise the client's ``started_twice`` error unless it is NEW and not starting."""
        if self.state is not ClientState.NEW or self._host is not None:
            raise IllegalStateError(self._started_twice.format(state=self.state.value))

    async def start(self, cluster: Cluster, setup: Setup | None = None) -> None:
        """Enter ``cluster`` and a task group in the host task, then run ``setup(cluster,
        stack)`` there (it starts the client's tasks; what it enters into ``stack`` is left
        when the client closes). RUNNING on success; on failure the host is taken down, the
        client is CLOSED and the error is raised."""
        self.check_new()

        async def open_(stack: AsyncExitStack) -> None:
            self.cluster = await stack.enter_async_context(cluster)
            self._tg = await enter_task_group(stack)
            self._tasks = Supervisor(self._tg, self.fail)
            if setup is not None:
                await setup(cluster, stack)

        host = self._host = TaskHost(f"{self.kind} {self.client_id}")
        try:
            await host.start(open_)
        except BaseException:
            self.state = ClientState.CLOSED
            self._tg = self._tasks = None
            self._host = None  # the host has ended (TaskHost.start takes it down)
            raise
        if self.state is not ClientState.NEW:
            # close() ran while the host was setting up: it found nothing to close.
            await self.finish_close()
            raise IllegalStateError(f"the {self.kind} was closed while it started")
        self.state = ClientState.RUNNING

    def begin_close(self) -> bool:
        """Enter CLOSING; False when there is nothing to close (NEW becomes CLOSED; CLOSING
        and CLOSED stay): the caller then returns at once."""
        if self.state is ClientState.NEW:
            self.state = ClientState.CLOSED
            return False
        if self.state is not ClientState.RUNNING:
            return False
        self.state = ClientState.CLOSING
        return True

    def cancel_tasks(self) -> None:
        """Cancel the background tasks now (they end at their next checkpoint)."""
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def finish_close(self) -> None:
        """CLOSED: cancel the background tasks and leave the task group and the cluster
        (in the host task). Raises what the host's teardown raised, if anything."""
        self.state = ClientState.CLOSED
        self.cancel_tasks()
        self._tg = self._tasks = None
        host, self._host = self._host, None
        if host is not None:
            await host.stop()

    # ------------------------------------------------------------------ supervision

    async def start_task(self, func: Callable[..., Awaitable[Any]]) -> None:
        """Start a supervised task that reports itself started (``task_status``) and wait
        for that; a failure before it is raised here (see :meth:`Supervisor.start`)."""
        await self.tasks.start(func)

    def fail(self, exc: Exception, why: str = "a background task failed") -> None:
        """A background task failed (or, ``why`` says, the client hit an error it cannot go
        on after): the client stops. The first failure is kept (``failure``) and handed to
        the client's ``on_failure``; every one is logged."""
        log.error(
            "%s %s: %s; the %s stops", self.kind, self.client_id, why, self.kind, exc_info=exc
        )
        if self.failure is not None:
            return
        self.failure = exc
        if self._on_failure is not None:
            self._on_failure(exc)

    # ------------------------------------------------------------------ telemetry

    def push_metrics(self, engine: TelemetryEngine, *, request_timeout: float) -> None:
        """Start pushing the client's metrics as the brokers subscribe (KIP-714), decided
        by ``engine``; each request is bounded by ``request_timeout`` seconds. From the
        client's ``setup`` on (the task group must exist)."""
        cluster = self.cluster
        assert cluster is not None
        pusher = self._telemetry = TelemetryPusher(
            engine,
            cluster,
            timeout=request_timeout,
            closing=lambda: self.closing,
        )
        self.tasks.start_soon(pusher.run)

    @property
    def telemetry(self) -> TelemetryEngine | None:
        """The metrics push's engine (its state, subscription, push count), if started."""
        return None if self._telemetry is None else self._telemetry.engine

    async def client_instance_id(self, timeout: float) -> uuid.UUID | None:  # noqa: ASYNC109
        """The id the brokers gave this client for its metrics (KIP-714; Java's
        ``clientInstanceId``), waiting up to ``timeout`` seconds for the first subscription;
        None if none came by then. IllegalStateError when the client pushes no metrics
        (``enable_metrics_push`` off, or not started)."""
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        pusher = self._telemetry
        if pusher is None:
            raise IllegalStateError(
                f"the {self.kind} pushes no metrics (not started, or enable_metrics_push=False)"
            )
        with anyio.move_on_after(timeout):
            await pusher.subscribed.wait()
        sub = pusher.engine.subscription
        return None if sub is None else sub.client_instance_id

    async def stop_metrics(self, timeout: float) -> None:  # noqa: ASYNC109 (close's budget)
        """Stop pushing metrics and send the terminating push (KIP-714), within ``timeout``
        seconds (0: none is sent). Once; from the client's ``close()``."""
        pusher = self._telemetry
        if pusher is None:
            return
        if timeout <= 0:
            pusher.engine.close()
            return
        await pusher.close(timeout)

    # ------------------------------------------------------------------ status

    def status(self) -> ClientStatus:
        """The client's :class:`ClientStatus`; not ready once a background task failed."""
        status = client_status(self.cluster, self.state.value, self._bootstrap_servers)
        exc = self.failure
        if exc is not None:
            return replace(status, ready=False, last_error=f"{type(exc).__name__}: {exc}")
        return status

    def statistics(self, cls: type[S], **own: Any) -> S:
        """The client's ``statistics()`` snapshot of class ``cls``: the common part (state,
        client id, the cluster's counters) and the client's ``own`` fields."""
        cluster = self.cluster
        return cls(
            state=self.state.value,
            client_id=self.client_id,
            cluster=None if cluster is None else cluster.statistics(),
            **own,
        )
