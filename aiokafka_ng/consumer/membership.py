"""A consumer's membership in its group, whichever protocol runs it: settings, states, the
rebalance listener, and :class:`GroupMembership`, the part that does not depend on the
protocol.

Theory of operation
-------------------
The consumer holds one :class:`GroupMembership` (the *core*) and talks to nothing else of
the group: the member task (:meth:`GroupMembership.run`), the poll timer, commits and
auto-commit, unsubscribing, closing. The core holds a *member*, the protocol's side
(:class:`MemberProtocol`): :class:`~.classic_member.ClassicMember` (JoinGroup, SyncGroup,
Heartbeat) or :class:`~.kip848_member.ConsumerGroupMember` (KIP-848's
ConsumerGroupHeartbeat). Each member is built on the core it is given and uses its
services: sleeping until the next round (:meth:`~GroupMembership.sleep_until_woken`, which
also runs the poll timer), revoking and losing partitions with the listener calls, the
identity the commits carry (``member_id``, ``generation``), announcing a settled
assignment. Neither member inherits the other or the core.

Why composition and not a base class: the two protocols share bookkeeping, not behaviour.
As subclasses of one base, the KIP-848 member inherited the classic one's join, sync and
heartbeat and used none of them, and every ``_name`` of the base was part of each
subclass's namespace. Here what a member must supply is the five names of
:class:`MemberProtocol` (its loop, its reaction to metadata, its commit, its leave, and
when it is settled), and what it may use of the core is the core's public surface.

*max_poll_interval_ms.* The consumer calls :meth:`~GroupMembership.notify_poll` on every
poll. If the application does not poll in time, the member task sends the protocol's leave
(so the group does not wait on a stuck member), drops the partitions as lost and waits for
the next poll to rejoin.

*Commits.* Auto-commit and commits on revocation commit the offsets as of the application's
previous poll (:meth:`~GroupMembership.mark_processed`), never records still being worked on.

Rebalance listener callbacks may be plain or ``async`` methods; they run in the member task,
so the assignment does not change under them.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
from anyio.abc import TaskStatus

from aiokafka_ng.cluster import (
    ONCE,
    ClusterClient,
    ClusterMetadata,
    Coordinator,
    Periodic,
    unchecked,
)
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.consumer.models import GroupMembershipOperation, OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.state import SubscriptionMode, SubscriptionState
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

if TYPE_CHECKING:
    from aiokafka_ng.consumer.offsets import OffsetsClient

__all__ = [
    "ConsumerRebalanceListener",
    "GroupMembership",
    "GroupSettings",
    "MemberProtocol",
    "MemberState",
]

# The group's logger: these lines were group.py's before this module was split out of it
# (log filters, e.g. tools/outage_timeline.py, select them by that name).
log = logging.getLogger("aiokafka_ng.consumer.group")

R = TypeVar("R", bound=ApiMessage)


class ConsumerRebalanceListener:
    """Override what you need; methods may be ``async``. Partitions come as sets."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Before partitions are taken away (commit their offsets here if you manage them)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """After a rebalance; ``assigned`` is what was added (all of it, with eager)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Partitions already owned by someone else (expelled member). Default: revoked."""
        return self.on_partitions_revoked(lost)


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Exactly what group membership reads of the consumer's settings; the consumer builds
    it once from its configuration (``ConsumerConfig.group_settings()``), whose defaults
    these are. Values sent to the broker (JoinGroup's timeouts) or logged under their Kafka
    names stay in ms; timers are in seconds.
    """

    group_id: str
    group_instance_id: str | None = None
    #: Assignor names or objects, in order of preference (``partition_assignment_strategy``).
    assignors: tuple[Any, ...] = ("range", "cooperative-sticky", "roundrobin")
    #: KIP-848's broker-side assignor (``group_remote_assignor``); None: the broker's default.
    remote_assignor: str | None = None
    client_rack: str | None = None  # None: no rack (``client_rack=""``)
    session_timeout_ms: int = 45000
    #: JoinGroup's (and KIP-848's) rebalance timeout: ``rebalance_timeout_ms`` or, unset,
    #: ``max_poll_interval_ms``.
    rebalance_timeout_ms: int = 300000
    max_poll_interval_ms: int = 300000
    heartbeat_interval_s: float = 3.0
    request_timeout_s: float = 30.0
    #: How often a pattern subscription looks for new matching topics.
    metadata_max_age_s: float = 300.0
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    enable_auto_commit: bool = True
    auto_commit_interval_s: float = 5.0
    exclude_internal_topics: bool = True


class MemberState(Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    STABLE = "stable"
    CLOSED = "closed"


class MemberProtocol(Protocol):
    """The protocol's side of a member, as the core (:class:`GroupMembership`) uses it."""

    @property
    def settled(self) -> bool:
        """In the group with nothing pending: what ``wait_for_assignment`` waits for."""
        ...

    async def life(self) -> None:
        """The protocol's membership loop (joins, heartbeats), run by the member task."""
        ...

    def on_metadata(self, snapshot: ClusterMetadata) -> None:
        """A new metadata snapshot (a cluster listener while the member task runs)."""
        ...

    async def commit(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the retries' budget)
    ) -> None:
        """Commit ``offsets`` with the member's identity (CommitFailedError if stale)."""
        ...

    async def leave(self, *, reason: str, force: bool = False, permanent: bool = False) -> None:
        """Leave the group the protocol's way: a dynamic member leaves; a static one only
        with ``force`` (classic; the poll timeout) or ``permanent`` (both protocols: it will
        not be back, KIP-1092's LEAVE_GROUP)."""
        ...


class GroupMembership:
    """A consumer's membership in its group: the core, holding the protocol's ``member``
    (module docstring). ``protocol`` builds the member on this core, e.g.
    :class:`~.classic_member.ClassicMember`.

    ``member_id`` and ``generation`` are the identity commits carry (KIP-848's member epoch
    is its ``generation``); the members keep them current.
    """

    def __init__(
        self,
        cluster: ClusterClient,
        settings: GroupSettings,
        subscription: SubscriptionState,
        offsets: OffsetsClient,
        *,
        protocol: Callable[[GroupMembership], MemberProtocol],
        on_assignment: Callable[[], object] | None = None,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.group_id = settings.group_id
        self.instance_id = settings.group_instance_id
        self.subscription = subscription
        self.offsets = offsets
        self._on_assignment = on_assignment
        self.backoff = ExponentialBackoff.retry(
            settings.retry_backoff_ms, settings.retry_backoff_max_ms
        )
        self.member_id = ""
        self.generation = -1
        self.state = MemberState.UNJOINED
        #: A rejoin (or, KIP-848, a heartbeat at once) was asked for and not started yet.
        self.rejoin_requested = True
        # The member task's rounds (heartbeats): an interval apart, the backoff after a
        # failure, at once when woken (a rejoin, an unsubscribe) outside a backoff.
        self.timer = Periodic(settings.heartbeat_interval_s, self.backoff)
        self._last_poll = anyio.current_time()
        #: The application did not poll in time; the member waits for its next poll.
        self.poll_expired = False
        self._joined = anyio.Event()  # set after each settled assignment (position waits)
        self.fatal: KafkaError | None = None
        self.rebalances = 0
        self._last_committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._processed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._run_scope = anyio.CancelScope()
        self._run_done = anyio.Event()
        self._started = False
        self._in_poll = 0
        self._unsubscribed: tuple[set[TopicPartition], Any] | None = None
        self.member = protocol(self)

    def __repr__(self) -> str:
        return (
            f"{type(self.member).__name__}({self.group_id!r}, state={self.state.value}, "
            f"member_id={self.member_id!r}, generation={self.generation})"
        )

    # ------------------------------------------------------------------ the consumer's side

    def request_rejoin(self) -> None:
        self.rejoin_requested = True
        self.timer.wake()

    def notify_poll(self) -> None:
        self._last_poll = anyio.current_time()
        if self.poll_expired:
            self.poll_expired = False
            self.request_rejoin()

    @property
    def settled(self) -> bool:
        """In the group with nothing pending (the protocol says what that is)."""
        return self.member.settled

    async def wait_joined(self) -> None:
        """Until the next settled assignment (or a fatal error)."""
        await self._joined.wait()

    def poll_started(self) -> None:
        self._in_poll += 1
        self.notify_poll()

    def poll_ended(self) -> None:
        self._in_poll -= 1
        self._last_poll = anyio.current_time()

    def note_unsubscribe(self, assignment: set[TopicPartition], listener: Any) -> None:
        """Called before the subscription is dropped: revoke and leave in the group task."""
        self._unsubscribed = (assignment, listener)
        self.timer.wake()

    # ------------------------------------------------------------------ main task

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The member task: the protocol's loop and the auto-commit loop."""
        self._started = True
        remove = self.cluster.add_listener(self.member.on_metadata)
        try:
            with self._run_scope:
                task_status.started()
                async with anyio.create_task_group() as tg:
                    if self.settings.enable_auto_commit:
                        tg.start_soon(self._auto_commit_loop)
                    try:
                        await self.member.life()
                    except KafkaError as exc:
                        log.error("group %s: fatal error %r", self.group_id, exc)
                        self.fatal = exc
                        self.state = MemberState.UNJOINED
                        self._joined.set()
                        if self._on_assignment is not None:
                            self._on_assignment()  # wakes a waiting poll, which raises it
                    tg.cancel_scope.cancel()
        finally:
            remove()
            self._run_done.set()

    # ------------------------------------------------------------------ the members' side

    async def standby(self) -> bool:
        """What neither protocol runs a round for: with no subscription (after unsubscribing:
        revoke and leave first) or with the poll timer expired, wait until woken and say
        True; otherwise False at once."""
        if self.subscription.mode not in (SubscriptionMode.TOPICS, SubscriptionMode.PATTERN):
            if self._unsubscribed is not None:
                await self._leave_after_unsubscribe()
            await self.sleep_until_woken(idle=True)
            return True
        if self.poll_expired:
            await self.sleep_until_woken(idle=True)
            return True
        return False

    async def sleep_until_woken(self, *, idle: bool = False, until: float | None = None) -> None:
        """Until the member timer's next round (``idle``: none is due, only a wake-up
        ends the wait), ``until``, or -- while STABLE and the application is not in a poll
        -- its poll deadline; then the poll timer is checked."""
        if self.rejoin_requested and self.state is MemberState.STABLE:
            return
        poll_deadline = self._last_poll + self.settings.max_poll_interval_ms / 1000
        limit = until if until is not None else float("inf")
        watch = self.state is MemberState.STABLE and not self._in_poll
        if watch:
            limit = min(limit, max(anyio.current_time(), poll_deadline))
        bound = None if limit == float("inf") else limit
        if idle:
            await self.timer.until_woken(until=bound)
        else:
            await self.timer.wait(until=bound)
        # A getmany() waiting for data is polling (as Java's poll() loop keeps resetting
        # its poll timer): only an application that does not call us at all times out.
        if (
            self.state is MemberState.STABLE
            and not self._in_poll
            and anyio.current_time() >= self._last_poll + self.settings.max_poll_interval_ms / 1000
        ):
            await self._poll_timeout()

    async def _poll_timeout(self) -> None:
        log.warning(
            "group %s: no poll for max_poll_interval_ms=%s; leaving the group",
            self.group_id, self.settings.max_poll_interval_ms,
        )  # fmt: skip
        self.poll_expired = True
        await self.member.leave(reason="consumer poll timeout expired", force=True)
        await self.lose()

    async def _leave_after_unsubscribe(self) -> None:
        assert self._unsubscribed is not None
        assignment, listener = self._unsubscribed
        self._unsubscribed = None
        if self.state is MemberState.STABLE and assignment:
            if self.settings.enable_auto_commit:
                await self.commit_positions(assignment, swallow=True)
            await self.call_listener("on_partitions_revoked", assignment, listener)
        self._forget(assignment)
        await self.member.leave(reason="the consumer unsubscribed")

    async def send(
        self,
        request: ApiRequest[R],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (this request's, as the connection's)
    ) -> R:
        """``request`` once to the group's coordinator over its own link (not behind a
        long-poll Fetch); the answer comes back unchecked and a failure as it is: each
        protocol gives every error code its own meaning (a rejoin, a lost assignment, a
        coordinator to find again)."""
        return await self.cluster.call(
            request,
            Coordinator(self.group_id, link=True),
            retry=ONCE,
            check=unchecked,
            request_timeout=timeout,
        )

    def became_stable(self) -> None:
        """The member is in the group: the poll timer starts from now."""
        self.state = MemberState.STABLE
        self._last_poll = anyio.current_time()

    def assignment_settled(self) -> None:
        """The member's assignment is what the group gave it: fetching goes on with it and
        whoever waits for an assignment hears of it."""
        if self._on_assignment is not None:
            self._on_assignment()
        self._joined.set()
        self._joined = anyio.Event()

    # ------------------------------------------------------------------ revoke / lose

    async def revoke(self, partitions: set[TopicPartition], *, commit: bool) -> None:
        """Give ``partitions`` up: their positions committed first (``commit``, with
        auto-commit), then ``on_partitions_revoked``."""
        if not partitions:
            return
        if commit and self.settings.enable_auto_commit:
            await self.commit_positions(partitions, swallow=True)
        await self.call_listener("on_partitions_revoked", partitions)
        self._forget(partitions)
        remaining = set(self.subscription.assignment) - partitions
        self.subscription.set_assignment(remaining, needs_committed=True)

    async def lose(self) -> None:
        """Drop every partition as lost (``on_partitions_lost``, nothing committed: they
        may already be someone else's); the member is out of the group."""
        lost = set(self.subscription.assignment)
        self.state = MemberState.UNJOINED
        if lost:
            self._forget(lost)
            await self.call_listener("on_partitions_lost", lost)
            self.subscription.set_assignment((), needs_committed=True)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._processed.pop(tp, None)
            self._last_committed.pop(tp, None)

    async def call_listener(
        self, method: str, partitions: set[TopicPartition], listener: Any = None
    ) -> None:
        """The rebalance listener's ``method`` (the subscription's listener unless given);
        what it raises is logged, not propagated: the membership goes on."""
        listener = listener if listener is not None else self.subscription.listener
        if listener is None:
            return
        fn = getattr(listener, method, None)
        if fn is None and method == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)
        if fn is None:
            return
        try:
            result = fn(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("rebalance listener %s.%s failed", type(listener).__name__, method)

    # ------------------------------------------------------------------ commits / leave

    def mark_processed(self) -> None:
        """The application polled again: what it was given before counts as processed.

        Auto-commit (and commits on revocation) commit these offsets, not the live
        positions, so records handed out but still being worked on are never committed
        behind the application's back (the Java client's at-least-once rule).
        """
        processed: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, state in self.subscription.assignment.items():
            if state.has_position and state.position is not None:
                processed[tp] = OffsetAndMetadata(state.position, "", state.leader_epoch)
        self._processed = processed

    def _positions(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: self._processed[tp] for tp in partitions if tp in self._processed}

    async def commit(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the retries' budget, as OffsetsClient's)
    ) -> None:
        """Commit ``offsets`` as this member (CommitFailedError if its identity is stale),
        retrying retriable errors for ``timeout`` seconds (None: ``request_timeout_ms``)."""
        if self.fatal is not None:
            raise self.fatal
        await self.member.commit(offsets, timeout=timeout)

    async def commit_positions(
        self, partitions: Iterable[TopicPartition] | None = None, *, swallow: bool = False
    ) -> None:
        """Commit the current positions (all assigned partitions by default)."""
        offsets = self._positions(
            self.subscription.assignment if partitions is None else partitions
        )
        offsets = {tp: om for tp, om in offsets.items() if self._last_committed.get(tp) != om}
        if not offsets:
            return
        try:
            await self.commit(offsets)
            self._last_committed.update(offsets)
        except (CommitFailedError, KafkaError) as exc:
            if not swallow:
                raise
            log.warning("group %s: auto-commit failed: %r", self.group_id, exc)

    async def _auto_commit_loop(self) -> None:
        # A failed auto-commit is logged and the next one goes at the usual interval (as
        # Java's): the offsets it missed are in the next one.
        timer = Periodic(self.settings.auto_commit_interval_s, self.backoff)
        timer.succeeded()  # the first commit one interval after joining, not at once
        while True:
            await timer.wait()
            manual = self.subscription.mode is SubscriptionMode.ASSIGNED
            if self.state is MemberState.STABLE or manual:
                await self.commit_positions(swallow=True)
            timer.succeeded()

    async def close(
        self, operation: GroupMembershipOperation = GroupMembershipOperation.DEFAULT
    ) -> None:
        """Stop heartbeats and auto-commit, then commit, revoke, and leave the group as
        ``operation`` says (KIP-1092, :class:`~.models.GroupMembershipOperation`)."""
        self._run_scope.cancel()
        if self._started:
            await self._run_done.wait()
        manual = self.subscription.mode is SubscriptionMode.ASSIGNED
        if self.state is MemberState.STABLE or manual:
            if self.settings.enable_auto_commit:
                self.mark_processed()  # closing: everything handed out was processed
                await self.commit_positions(swallow=True)
            if not manual:
                await self.call_listener("on_partitions_revoked", set(self.subscription.assignment))
        if operation is GroupMembershipOperation.LEAVE_GROUP:
            await self.member.leave(reason="the consumer is closing", permanent=True)
        elif operation is GroupMembershipOperation.DEFAULT or self.instance_id is not None:
            # A static member remaining in the group is what DEFAULT does for it (KIP-848
            # says so with epoch -2; classic sends nothing).
            await self.member.leave(reason="the consumer is closing")
        else:
            log.info(
                "group %s: closing without leaving (REMAIN_IN_GROUP): member %s stays until "
                "the session times out", self.group_id, self.member_id,
            )  # fmt: skip
        self.state = MemberState.CLOSED
