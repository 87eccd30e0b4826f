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

*Errors* are read by the epoch heartbeat this member shares with the share consumer
(:class:`~.epoch_heartbeat.EpochHeartbeat`). UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH mean
the broker dropped this member: its partitions are *lost* (``on_partitions_lost``, nothing
committed) and it rejoins at once with epoch 0 and the same member id. Coordinator errors
find the coordinator again; other retriable errors back off; the rest (FENCED_INSTANCE_ID,
UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, authorization,
GROUP_MAX_SIZE_REACHED) are fatal and raised by the next poll.

*Commits* carry the member id and the member epoch (OffsetCommit v9's
``generation_id_or_member_epoch``). STALE_MEMBER_EPOCH means the epoch moved under the
commit: as Java's CommitRequestManager does, a commit from the application is retried with
the epoch of the next heartbeat answer, until its deadline; a commit made while revoking
(in this task) fails instead, since the heartbeat that would refresh the epoch is ours.

*Leaving.* ``close()`` commits (auto-commit), revokes, and heartbeats with epoch -1; a static
member (``group_instance_id``) sends -2 instead, so the broker keeps its assignment for its
return within the session timeout. KIP-1092's close options change that: LEAVE_GROUP sends -1
for a static member too, REMAIN_IN_GROUP sends nothing for a dynamic one.

:class:`ConsumerGroupMember` runs on the membership core
(:class:`~.membership.GroupMembership`: the member task, commit bookkeeping, auto-commit, the
poll timer, listener calls), which the consumer holds; this module is only what KIP-848 does.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import TYPE_CHECKING

import anyio

from aiokafka_ng.cluster import ClusterMetadata
from aiokafka_ng.cluster.topics import resolve_topic_ids
from aiokafka_ng.consumer.epoch_heartbeat import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, EpochHeartbeat
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.consumer.membership import MemberState
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.state import SubscriptionMode
from aiokafka_ng.errors import KafkaError, StaleMemberEpochError
from aiokafka_ng.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)

if TYPE_CHECKING:
    from aiokafka_ng.consumer.membership import GroupMembership

__all__ = ["ConsumerGroupMember"]

# Under the group's logger (membership.py's), which log filters select the group by.
log = logging.getLogger("aiokafka_ng.consumer.group.kip848")

_FIRST_INTERVAL_S = 5.0  # until the broker names its interval (Java's default)


class ConsumerGroupMember:
    """One consumer's membership in a KIP-848 group, on the core ``core``
    (:class:`~.membership.GroupMembership`). See the module docstring.

    The core's ``generation`` is the member epoch (what ``statistics()`` and
    ``group_metadata()`` show, and what commits carry).
    """

    def __init__(self, core: GroupMembership) -> None:
        self._core = core
        # KIP-1082: the member names itself. A version-4 UUID from the global generator, so a
        # test's random.seed() replays a group's assignments (which order members by id).
        member_id = str(uuid.UUID(int=random.getrandbits(128), version=4))
        core.timer.interval = _FIRST_INTERVAL_S  # until the broker names its own
        self._beat = EpochHeartbeat(
            core.group_id,
            member_id,
            core.timer,
            request_timeout=core.settings.request_timeout_s,
            on_fenced=self._fenced,
            what="ConsumerGroupHeartbeat",
            log=log,
        )
        self._sync_identity()
        # The broker's latest target, by topic id; None when it has not sent one since
        # (re)joining. Partitions of ids not resolved to names yet wait in it.
        self._target: dict[uuid.UUID, frozenset[int]] | None = None
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._unresolved: frozenset[uuid.UUID] = frozenset()
        self._reconciling = False  # the member task is revoking (and may commit)

    @property
    def settled(self) -> bool:
        """In the group, with the broker's target fully reconciled."""
        return (
            self._core.state is MemberState.STABLE
            and self._target is not None
            and not self._unresolved
            and self._resolved_target() == set(self._core.subscription.assignment)
        )

    def on_metadata(self, snapshot: ClusterMetadata) -> None:
        """Metadata may name a topic id the assignment is waiting for: reconcile again."""
        if self._unresolved and any(
            t.topic_id in self._unresolved for t in snapshot.topics.values()
        ):
            self._core.request_rejoin()

    # ------------------------------------------------------------------ main loop

    async def life(self) -> None:
        while True:
            if await self._core.standby():
                continue
            self._core.rejoin_requested = False
            changed = await self._heartbeat()
            if changed or self._unresolved:
                await self._reconcile()
            await self._core.sleep_until_woken()  # the interval, or the backoff after a failure

    def _request(self) -> ConsumerGroupHeartbeatRequest:
        cfg = self._core.settings
        subs = self._core.subscription
        regex = subs.pattern if subs.mode is SubscriptionMode.PATTERN else None
        owned: dict[uuid.UUID, list[int]] = {}
        for tp in subs.assignment:
            topic_id = self._ids.get(tp.topic)
            if topic_id is not None:  # owned partitions came by id: always known
                owned.setdefault(topic_id, []).append(tp.partition)
        return ConsumerGroupHeartbeatRequest(
            group_id=self._core.group_id,
            member_id=self._core.member_id,
            member_epoch=self._core.generation,
            instance_id=self._core.instance_id,
            rack_id=cfg.client_rack,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms,
            subscribed_topic_names=None if regex is not None else sorted(subs.topics),
            subscribed_topic_regex=None if regex is None else regex.pattern,
            server_assignor=cfg.remote_assignor,
            topic_partitions=[
                TopicPartitions(topic_id=t, partitions=sorted(p)) for t, p in owned.items()
            ],
        )

    async def _heartbeat(self) -> bool:
        """One heartbeat; True when the answer carried a new target assignment."""
        core = self._core
        if core.generation == 0 and core.state is not MemberState.STABLE:
            core.state = MemberState.JOINING
        request = self._request()
        response = await self._beat.beat(core.cluster, request)
        if response is None:  # fenced, or failed and backing off
            return False
        self._sync_identity()
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "group %s: heartbeat (epoch %d, owned %d) answered epoch %d, %s",
                core.group_id, request.member_epoch, len(core.subscription.assignment),
                response.member_epoch,
                "no new assignment" if response.assignment is None else "assignment "
                + str({str(t.topic_id)[:8]: t.partitions
                       for t in response.assignment.topic_partitions}),
            )  # fmt: skip
        if core.state is not MemberState.STABLE:
            core.became_stable()
        if response.assignment is None:
            return False
        target: dict[uuid.UUID, frozenset[int]] = {}
        for tps in response.assignment.topic_partitions:
            target[tps.topic_id] = target.get(tps.topic_id, frozenset()) | frozenset(tps.partitions)
        self._target = target
        return True

    def _sync_identity(self) -> None:
        """The heartbeat's member id and epoch are what the core shows and commits carry."""
        self._core.member_id = self._beat.member_id
        self._core.generation = self._beat.epoch

    async def _fenced(self, error: KafkaError) -> None:
        """The broker dropped this member: its partitions are lost; it joins again."""
        self._sync_identity()
        self._target = None
        self._unresolved = frozenset()
        await self._core.lose()
        self._core.request_rejoin()

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
        """Learn the names of topic ids, from the cached metadata or else a listing of
        every topic (a pattern's topics are not known here). What is learnt is kept: an
        owned partition's topic id is reported even after metadata forgot the topic."""
        missing = ids - self._names.keys()
        for topic_id, name in (await resolve_topic_ids(self._core.cluster, missing)).items():
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
                self._core.group_id, sorted(map(str, self._unresolved)),
            )  # fmt: skip
        target = self._resolved_target()
        self._core.cluster.request_update({tp.topic for tp in target})
        owned = set(self._core.subscription.assignment)
        revoked, added = owned - target, target - owned
        if not revoked and not added:
            self._core.assignment_settled()
            return
        if revoked:
            await self._revoke(revoked)
        if added:
            self._core.subscription.set_assignment(owned - revoked | added, needs_committed=True)
        if self._core.subscription.mode is SubscriptionMode.PATTERN:
            self._core.subscription.topics = frozenset(tp.topic for tp in target)
        self._core.rebalances += 1
        log.info(
            "group %s: epoch %s member %s revoked %s, assigned %s",
            self._core.group_id, self._core.generation, self._core.member_id,
            sorted(revoked), sorted(added),
        )  # fmt: skip
        if added:
            await self._core.call_listener("on_partitions_assigned", added)
        self._core.assignment_settled()
        self._core.request_rejoin()  # acknowledge with the next heartbeat, now

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
        budget = self._core.settings.request_timeout_s if timeout is None else timeout
        deadline = anyio.current_time() + budget
        stale = 0
        while True:
            joined = self._core.state is MemberState.STABLE
            try:
                await self._core.offsets.commit(
                    offsets,
                    # A consumer that only assigns partitions by hand is no member: it
                    # commits as a "simple" consumer (no id, epoch -1), as Java does.
                    generation=self._core.generation if joined else -1,
                    member_id=self._core.member_id if joined else "",
                    group_instance_id=self._core.instance_id if joined else None,
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
                    self._core.group_id, self._core.generation, stale,
                )  # fmt: skip
                done = self._beat.next_answer()
                if stale == 1:
                    # Heartbeat now; later retries wait for the member's own pacing, so a
                    # failing coordinator is not hammered by this loop.
                    self._core.request_rejoin()
                with anyio.move_on_after(left):
                    await done.wait()

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        self._reconciling = True
        try:
            await self._core.revoke(partitions, commit=True)
        finally:
            self._reconciling = False

    async def leave(self, *, reason: str, force: bool = False, permanent: bool = False) -> None:
        """Heartbeat with epoch -1 (-2 for a static member, which will be back; -1 for it
        too when ``permanent``, KIP-1092's LEAVE_GROUP, as Java: the broker has no other
        way to let a static member go for good); the member keeps its id."""
        if self._core.generation <= 0 and self._core.state is not MemberState.STABLE:
            self._core.state = MemberState.UNJOINED
            return
        request = self._request()
        static = self._core.instance_id is not None and not permanent
        request.member_epoch = STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH
        request.topic_partitions = None
        log.debug("group %s: leaving (%s)", self._core.group_id, reason)
        await self._beat.leave(self._core.cluster, request)
        self._sync_identity()
        self._target = None
        self._core.state = MemberState.UNJOINED
