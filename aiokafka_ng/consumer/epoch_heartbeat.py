"""One epoch-based heartbeat: what KIP-848's ConsumerGroupHeartbeat and KIP-932's
ShareGroupHeartbeat have in common, for the KIP-848 member
(:class:`~.kip848_member.ConsumerGroupMember`) and the share consumer.

Theory of operation
-------------------
Both protocols keep a member in its group the same way: the member names itself (a member
id it makes, KIP-1082), joins with epoch 0, and from then on heartbeats with the epoch the
broker gave it, at the interval the broker names in each answer. :class:`EpochHeartbeat`
holds that identity (``member_id``, ``epoch``), paces the rounds with the caller's
:class:`~aiokafka_ng.cluster.Periodic` timer, and reads every answer the same way:

- success: the epoch (and the member id, if the broker sent one) from the answer, the next
  round one broker-named interval on;
- UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH: the broker dropped the member. The epoch goes
  back to 0, the caller's ``on_fenced`` drops what it held (its partitions are lost), and
  the join goes at once, as Java's heartbeat managers do -- after the backoff instead if
  the join itself was fenced, so a broker that keeps fencing is not hammered;
- any other retriable error, or no answer (the connection, the lookup, the request
  timeout): the next round after the timer's backoff
  (:class:`~aiokafka_ng.cluster.RetryState`'s, shared with the other requests of the
  client). Whether the coordinator is looked up again is the coordinator route's to decide
  (:mod:`aiokafka_ng.cluster.retry`), as for every group request: after NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, a broken connection or a request timeout it is; after
  COORDINATOR_LOAD_IN_PROGRESS it is not;
- anything else (authorization, FENCED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST,
  GROUP_MAX_SIZE_REACHED, ...) is raised: retrying cannot fix it, and the caller stops.

What each protocol puts in its request (subscription, owned partitions, rack), what it does
with the assignment of an answer, and its loop (the KIP-848 member's runs the poll timer
too) stay with the caller; it sends each request through :meth:`EpochHeartbeat.beat`, and
its leave (epoch -1, or -2 for a KIP-848 static member) through :meth:`EpochHeartbeat.leave`.
One exchange is in flight at a time: the caller's loop is the only sender.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from aiokafka_ng.cluster import ONCE, ClusterClient, Coordinator, Periodic, unchecked
from aiokafka_ng.errors import (
    FencedMemberEpochError,
    KafkaError,
    UnknownMemberIdError,
    error_for_code,
)
from aiokafka_ng.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse
from aiokafka_ng.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatResponse
from aiokafka_ng.protocol.primitives import ApiRequest

__all__ = ["LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "EpochHeartbeat"]

LEAVE_EPOCH = -1  # a member leaves
STATIC_LEAVE_EPOCH = -2  # a KIP-848 static member leaves for now and will be back

# The two heartbeats this serves; their answers share the fields read here.
Answer = TypeVar("Answer", ConsumerGroupHeartbeatResponse, ShareGroupHeartbeatResponse)

_FENCED = (UnknownMemberIdError, FencedMemberEpochError)


class EpochHeartbeat:
    """A member's identity in an epoch-based group and the reading of its heartbeats
    (module docstring). ``timer`` paces the caller's loop; ``on_fenced(error)`` drops what
    the member held when the broker fenced it; ``what`` names the heartbeat in errors and
    ``log`` is the caller's logger."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        timer: Periodic,
        *,
        request_timeout: float,
        on_fenced: Callable[[KafkaError], Awaitable[None]],
        what: str,
        log: logging.Logger,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = 0
        self.timer = timer
        self._request_timeout = request_timeout
        self._on_fenced = on_fenced
        self._what = what
        self._log = log
        # Made on demand: an anyio.Event needs a running event loop, and a share consumer
        # builds this before one runs.
        self._answered: anyio.Event | None = None

    def next_answer(self) -> anyio.Event:
        """An event set when the exchange in flight, or else the next one, has ended
        (answered or failed): a STALE_MEMBER_EPOCH commit waits on it for a new epoch."""
        if self._answered is None:
            self._answered = anyio.Event()
        return self._answered

    async def beat(self, cluster: ClusterClient, request: ApiRequest[Answer]) -> Answer | None:
        """One heartbeat exchange: ``request`` (made with this ``member_id`` and ``epoch``)
        to the group's coordinator, over its own link. The answer when it succeeded (the
        epoch and the next interval taken from it); None when the member was fenced or the
        round failed retriably (the timer says when the next one goes); raises what
        retrying cannot fix."""
        try:
            try:
                answer = await self._exchange(cluster, request)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self._failed(exc)
                return None
            if answer.error_code:
                error = error_for_code(answer.error_code)(
                    f"{self._what} {self.group_id}: {answer.error_message}"
                )
                if isinstance(error, _FENCED):
                    await self._fenced(error)
                    return None
                if not error.retriable:
                    raise error
                self._failed(error)
                return None
            interval = answer.heartbeat_interval_ms / 1000
            self.timer.succeeded(interval=interval if interval > 0 else None)
            if answer.member_id:
                self.member_id = answer.member_id
            self.epoch = answer.member_epoch
            return answer
        finally:
            if self._answered is not None:
                self._answered.set()
                self._answered = None

    async def leave(self, cluster: ClusterClient, request: ApiRequest[Answer]) -> None:
        """Send the leave ``request`` (its epoch -1, or -2), once: a failure is logged, the
        session times the member out instead. The epoch is 0 after, for a later join."""
        try:
            answer = await self._exchange(cluster, request)
            if answer.error_code:
                self._log.info(
                    "group %s: leaving answered %s",
                    self.group_id, error_for_code(answer.error_code).__name__,
                )  # fmt: skip
        except KafkaError as exc:
            self._log.info(
                "group %s: leaving failed (%r); the session times out", self.group_id, exc
            )
        self.epoch = 0

    async def _exchange(self, cluster: ClusterClient, request: ApiRequest[Answer]) -> Answer:
        # Once, unchecked, the coordinator lookup and the request within the request
        # timeout: every error code has its meaning here, and a round that failed is the
        # timer's to pace.
        return await cluster.call(
            request,
            Coordinator(self.group_id, link=True),
            timeout=self._request_timeout,
            retry=ONCE,
            check=unchecked,
        )

    def _failed(self, error: KafkaError) -> None:
        self._log.debug("group %s: heartbeat failed (%r)", self.group_id, error)
        self.timer.failed(error)

    async def _fenced(self, error: KafkaError) -> None:
        self._log.info("group %s: member fenced (%r); joining again", self.group_id, error)
        joining = self.epoch == 0
        self.epoch = 0
        await self._on_fenced(error)
        if joining:
            self.timer.failed(error)  # fenced at epoch 0: no answer to rejoin at once with
        else:
            self.timer.wake()
