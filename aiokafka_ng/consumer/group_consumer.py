"""Group membership with the consumer group protocol (KIP-848, ``group_protocol="consumer"``).

Theory of operation
-------------------
KIP-848 moves the assignment into the broker. A member does one thing, over and over: it
sends ConsumerGroupHeartbeat to the group coordinator, saying what it subscribes to and
which partitions it owns, and the answer carries its *member epoch*, the interval until the
next heartbeat (``heartbeat_interval_ms``, the broker's ``group.consumer.heartbeat.interval.ms``),
and, when the broker's target for it changed, the full assignment it should converge to.
There is no JoinGroup/SyncGroup barrier: each member converges on its own.

*Joining.* The first heartbeat has epoch 0, the subscription (topic names, or the pattern
string as ``SubscribedTopicRegex``, which the broker evaluates with RE2J), the rebalance
timeout, the server-side assignor (``group_remote_assignor``; None = the broker's default)
and an empty owned list. Since KIP-1082 (heartbeat v1) the member id is generated here, a
UUID kept for the consumer's life. Every heartbeat here repeats the full state: the schema
lets unchanged fields be null, but a full request is always valid and keeps this side free
of "what did the broker already see" bookkeeping.

*Reconciling* (:meth:`_reconcile`). The assignment names topics by id. Ids are mapped to
names through the cluster's metadata (Metadata v10+ carries topic ids); an id not known yet
is looked up with an all-topics Metadata request, and its partitions wait until it resolves
(the broker keeps them for us: it only counts what we report as owned). Then, as in KIP-429's
cooperative protocol, only what moves is touched: partitions no longer in the target are
revoked (auto-commit, then ``on_partitions_revoked``), new ones are added
(``on_partitions_assigned``), and the next heartbeat -- sent at once -- reports the new owned
set, which is the acknowledgement the broker waits for before it gives revoked partitions to
their next owner.

*Errors.* UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH mean the broker dropped this member:
its partitions are *lost* (``on_partitions_lost``, nothing committed) and it rejoins with
epoch 0 and the same member id. Coordinator errors find the coordinator again; other
retriable errors back off; the rest (FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID,
UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, authorization, GROUP_MAX_SIZE_REACHED) are fatal and
raised by the next poll.

*Commits* carry the member id and the member epoch (OffsetCommit v9's
``generation_id_or_member_epoch``). STALE_MEMBER_EPOCH means the epoch moved under the
commit: as Java's CommitRequestManager does, a commit from the application is retried with
the epoch of the next heartbeat answer, until its deadline; a commit made while revoking
(in this task) fails instead, since the heartbeat that would refresh the epoch is ours.

*Leaving.* ``close()`` commits (auto-commit), revokes, and heartbeats with epoch -1; a static
member (``group_instance_id``) sends -2 instead, so the broker keeps its assignment for its
return within the session timeout. KIP-1092's close options change that: LEAVE_GROUP sends -1
for a static member too, REMAIN_IN_GROUP sends nothing for a dynamic one.

This class reuses, through the classic :class:`~.group.GroupCoordinator`, what the two
protocols share (:class:`~.membership.GroupMembership`: commit bookkeeping, auto-commit, the
poll timer, listener calls) and replaces the membership itself.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.cluster import ClusterClient, ClusterMetadata
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.consumer.group import GroupCoordinator
from aiokafka_ng.consumer.membership import GroupSettings, MemberState
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.state import SubscriptionMode, SubscriptionState
from aiokafka_ng.errors import (
    FencedMemberEpochError,
    KafkaError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    error_for_code,
)
from aiokafka_ng.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)

if TYPE_CHECKING:
    from aiokafka_ng.consumer.offsets import OffsetsClient

__all__ = ["ConsumerGroupMember"]

log = logging.getLogger(__name__)

_LEAVE_EPOCH = -1  # a dynamic member leaves
_STATIC_LEAVE_EPOCH = -2  # a static member leaves for now and will be back
_FIRST_INTERVAL_S = 5.0  # until the broker names its interval (Java's default)


class ConsumerGroupMember(GroupCoordinator):
    """One consumer's membership in a KIP-848 group. See the module docstring.

    ``generation`` is the member epoch (what ``statistics()`` and ``group_metadata()``
    show, and what commits carry).
    """

    def __init__(
        self,
        cluster: ClusterClient,
        settings: GroupSettings,
        subscription: SubscriptionState,
        offsets: OffsetsClient,
        *,
        on_assignment: Any = None,
    ) -> None:
        super().__init__(cluster, settings, subscription, offsets, on_assignment=on_assignment)
        # KIP-1082: the member names itself. A version-4 UUID from the global generator, so a
        # test's random.seed() replays a group's assignments (which order members by id).
        self.member_id = str(uuid.UUID(int=random.getrandbits(128), version=4))
        self.generation = 0
        self._timer.interval = _FIRST_INTERVAL_S  # until the broker names its own
        # The broker's latest target, by topic id; None when it has not sent one since
        # (re)joining. Partitions of ids not resolved to names yet wait in it.
        self._target: dict[uuid.UUID, frozenset[int]] | None = None
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._unresolved: frozenset[uuid.UUID] = frozenset()
        self._heartbeat_done = anyio.Event()
        self._reconciling = False  # the member task is revoking (and may commit)

    def __repr__(self) -> str:
        return (
            f"ConsumerGroupMember({self._group_id!r}, state={self.state.value}, "
            f"member_id={self.member_id!r}, epoch={self.generation})"
        )

    @property
    def settled(self) -> bool:
        """In the group, with the broker's target fully reconciled."""
        return (
            self.state is MemberState.STABLE
            and self._target is not None
            and not self._unresolved
            and self._resolved_target() == set(self._subs.assignment)
        )

    def _on_metadata(self, snapshot: ClusterMetadata) -> None:
        """Metadata may name a topic id the assignment is waiting for: reconcile again."""
        if self._unresolved and any(
            t.topic_id in self._unresolved for t in snapshot.topics.values()
        ):
            self.request_rejoin()

    # ------------------------------------------------------------------ main loop

    async def _life(self) -> None:
        while True:
            if self._subs.mode not in (SubscriptionMode.TOPICS, SubscriptionMode.PATTERN):
                if self._unsubscribed is not None:
                    await self._leave_after_unsubscribe()
                await self._sleep_until_woken(idle=True)
                continue
            if self._poll_expired:
                await self._sleep_until_woken(idle=True)
                continue
            self._rejoin = False
            changed = await self._heartbeat()
            if changed or self._unresolved:
                await self._reconcile()
            await self._sleep_until_woken()  # the interval, or the backoff after a failure

    def _request(self) -> ConsumerGroupHeartbeatRequest:
        cfg = self._settings
        pattern = self._subs.mode is SubscriptionMode.PATTERN and self._subs.pattern is not None
        owned: dict[uuid.UUID, list[int]] = {}
        for tp in self._subs.assignment:
            topic_id = self._ids.get(tp.topic)
            if topic_id is not None:  # owned partitions came by id: always known
                owned.setdefault(topic_id, []).append(tp.partition)
        return ConsumerGroupHeartbeatRequest(
            group_id=self._group_id,
            member_id=self.member_id,
            member_epoch=self.generation,
            instance_id=self._instance_id,
            rack_id=cfg.client_rack,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms,
            subscribed_topic_names=None if pattern else sorted(self._subs.topics),
            subscribed_topic_regex=(
                self._subs.pattern.pattern if pattern and self._subs.pattern else None
            ),
            server_assignor=cfg.remote_assignor,
            topic_partitions=[
                TopicPartitions(topic_id=t, partitions=sorted(p)) for t, p in owned.items()
            ],
        )

    async def _heartbeat(self) -> bool:
        """One heartbeat; True when the answer carried a new target assignment."""
        if self.generation == 0 and self.state is not MemberState.STABLE:
            self.state = MemberState.JOINING
        request = self._request()
        try:
            response: ConsumerGroupHeartbeatResponse = await self._send(
                request, timeout=self._settings.request_timeout_s
            )
            if response.error_code:
                raise error_for_code(response.error_code)(
                    f"ConsumerGroupHeartbeat {self._group_id}: {response.error_message}"
                )
        except (UnknownMemberIdError, FencedMemberEpochError) as exc:
            log.info("group %s: member fenced (%r); rejoining", self._group_id, exc)
            await self._fenced()
            return False
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.debug("group %s: heartbeat failed (%r)", self._group_id, exc)
            self._cluster.invalidate_coordinator(self._group_id)
            self._timer.failed(exc)
            return False
        finally:
            self._heartbeat_done.set()
            self._heartbeat_done = anyio.Event()
        interval = response.heartbeat_interval_ms / 1000
        self._timer.succeeded(interval=interval if interval > 0 else None)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "group %s: heartbeat (epoch %d, owned %d) answered epoch %d, %s",
                self._group_id, request.member_epoch, len(self._subs.assignment),
                response.member_epoch,
                "no new assignment" if response.assignment is None else "assignment "
                + str({str(t.topic_id)[:8]: t.partitions
                       for t in response.assignment.topic_partitions}),
            )  # fmt: skip
        if response.member_id:
            self.member_id = response.member_id
        self.generation = response.member_epoch
        if self.state is not MemberState.STABLE:
            self.state = MemberState.STABLE
            self._last_poll = anyio.current_time()
        if response.assignment is None:
            return False
        target: dict[uuid.UUID, frozenset[int]] = {}
        for tps in response.assignment.topic_partitions:
            target[tps.topic_id] = target.get(tps.topic_id, frozenset()) | frozenset(tps.partitions)
        self._target = target
        return True

    async def _fenced(self) -> None:
        self.generation = 0
        self._target = None
        self._unresolved = frozenset()
        await self._lose()
        self.request_rejoin()

    # ------------------------------------------------------------------ reconciliation

    def _resolved_target(self) -> set[TopicPartition]:
        assert self._target is not None
        return {
            TopicPartition(self._names[t], p)
            for t, parts in self._target.items()
            if t in self._names
            for p in parts
        }

    async def _resolve(self, ids: set[uuid.UUID]) -> None:
        """Learn the names of topic ids: from the cached metadata, else ask the cluster."""
        for meta in self._cluster.metadata.topics.values():
            self._learn(meta.topic_id, meta.name)
        missing = ids - self._names.keys()
        if not missing:
            return
        try:
            topics = await self._cluster.all_topics()
        except KafkaError as exc:
            log.debug("group %s: topic id lookup failed (%r)", self._group_id, exc)
            return
        for t in topics.values():
            if t.error is None:
                self._learn(t.topic_id, t.name)

    def _learn(self, topic_id: uuid.UUID, name: str) -> None:
        if topic_id.int:
            self._names[topic_id] = name
            self._ids[name] = topic_id

    async def _reconcile(self) -> None:
        if self._target is None:
            return
        await self._resolve(set(self._target))
        self._unresolved = frozenset(t for t in self._target if t not in self._names)
        if self._unresolved:
            log.info(
                "group %s: assigned topic ids %s not in metadata yet; their partitions wait",
                self._group_id, sorted(map(str, self._unresolved)),
            )  # fmt: skip
        target = self._resolved_target()
        self._cluster.request_update({tp.topic for tp in target})
        owned = set(self._subs.assignment)
        revoked, added = owned - target, target - owned
        if not revoked and not added:
            self._settle()
            return
        if revoked:
            await self._revoke(revoked, commit=True)
        if added:
            self._subs.set_assignment(owned - revoked | added, needs_committed=True)
        if self._subs.mode is SubscriptionMode.PATTERN:
            self._subs.topics = frozenset(tp.topic for tp in target)
        self.rebalances += 1
        log.info(
            "group %s: epoch %s member %s revoked %s, assigned %s",
            self._group_id, self.generation, self.member_id, sorted(revoked), sorted(added),
        )  # fmt: skip
        if added:
            await self._call("on_partitions_assigned", added)
        self._settle()
        self.request_rejoin()  # acknowledge with the next heartbeat, now

    def _settle(self) -> None:
        if self._on_assignment is not None:
            self._on_assignment()
        self._joined.set()
        self._joined = anyio.Event()

    # ------------------------------------------------------------------ commits / leave

    async def commit(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the retries' budget, as OffsetsClient's)
    ) -> None:
        """Commit with the member id and epoch, retrying retriable errors until ``timeout``
        seconds (None: ``request_timeout_ms``) have passed. On STALE_MEMBER_EPOCH a commit
        from the application is retried with the epoch of each next heartbeat until that
        deadline (Java retries until the commit's deadline); one from the member task (while
        revoking) fails at once."""
        if self.fatal is not None:
            raise self.fatal
        budget = self._settings.request_timeout_s if timeout is None else timeout
        deadline = anyio.current_time() + budget
        stale = 0
        while True:
            joined = self.state is MemberState.STABLE
            try:
                await self._offsets.commit(
                    offsets,
                    # A consumer that only assigns partitions by hand is no member: it
                    # commits as a "simple" consumer (no id, epoch -1), as Java does.
                    generation=self.generation if joined else -1,
                    member_id=self.member_id if joined else "",
                    group_instance_id=self._instance_id if joined else None,
                    timeout=max(deadline - anyio.current_time(), 0.001),
                )
                return
            except StaleMemberEpochError as exc:
                # Not in _GENERATION_ERRORS of offsets.py: it arrives as itself.
                # A commit made while revoking runs in the member task: it cannot wait for
                # the heartbeat that task would send.
                left = deadline - anyio.current_time()
                if self._reconciling or left <= 0:
                    raise CommitFailedError(f"commit refused: {exc!r}") from exc
                stale += 1
                log.info(
                    "group %s: commit answered STALE_MEMBER_EPOCH (member epoch %d, %d time(s));"
                    " retrying with the epoch of the next heartbeat",
                    self._group_id, self.generation, stale,
                )  # fmt: skip
                done = self._heartbeat_done
                if stale == 1:
                    # Heartbeat now; later retries wait for the member's own pacing, so a
                    # failing coordinator is not hammered by this loop.
                    self.request_rejoin()
                with anyio.move_on_after(left):
                    await done.wait()

    async def _revoke(self, partitions: set[TopicPartition], *, commit: bool) -> None:
        self._reconciling = True
        try:
            await super()._revoke(partitions, commit=commit)
        finally:
            self._reconciling = False

    async def leave(
        self,
        *,
        reason: str = "the consumer is closing",
        force: bool = False,
        permanent: bool = False,
    ) -> None:
        """Heartbeat with epoch -1 (-2 for a static member, which will be back; -1 for it
        too when ``permanent``, KIP-1092's LEAVE_GROUP, as Java: the broker has no other
        way to let a static member go for good); the member keeps its id."""
        if self.generation <= 0 and self.state is not MemberState.STABLE:
            self.state = MemberState.UNJOINED
            return
        request = self._request()
        static = self._instance_id is not None and not permanent
        request.member_epoch = _STATIC_LEAVE_EPOCH if static else _LEAVE_EPOCH
        request.topic_partitions = None
        try:
            with anyio.fail_after(self._settings.request_timeout_s):
                response = await self._send(request)
            if response.error_code:
                log.info("group %s: leave error %s", self._group_id, response.error_code)
        except (KafkaError, TimeoutError) as exc:
            log.info("group %s: leaving failed (%r, %s)", self._group_id, exc, reason)
        self.generation = 0
        self._target = None
        self.state = MemberState.UNJOINED
