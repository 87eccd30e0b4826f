"""Subscription state: what the consumer reads, and where it is in each partition.

One :class:`PartitionState` per assigned partition holds the *position* (the offset of the
next record to hand to the application), the offsets learned from fetch responses, the
pause flag and what must happen before the partition can be fetched:

* ``position is None`` and ``reset is None``: ask the group for the committed offset first
  (``needs_committed``), falling back to ``auto_offset_reset``;
* ``reset`` set ("earliest", "latest", or a timestamp): look the offset up with ListOffsets;
* ``validate`` set (KIP-320): the position must be checked against the leader's log before
  fetching from it again -- the partition's leader epoch moved past ``seen_epoch`` (the
  epoch the position was last known good under), or the position came from a committed
  offset with an epoch. The check asks the leader where ``leader_epoch`` (the epoch of the
  last record consumed) ends in its log; a log that ends before the position was
  truncated under the consumer (:mod:`.positions`).

Every change that invalidates data fetched earlier (seek, reset, reassignment) bumps
``epoch``; a fetch response or buffered data carrying an older epoch is dropped, so a seek
never lets records from before it leak out. Objects are identity-compared too: a partition
revoked and re-assigned gets a new state object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.errors import IllegalStateError

if TYPE_CHECKING:
    from aiokafka_ng.consumer.buffer import BufferedFetch

__all__ = ["PartitionState", "SubscriptionMode", "SubscriptionState"]


class SubscriptionMode(Enum):
    NONE = "none"
    TOPICS = "topics"  # subscribe(topics): the group assigns
    PATTERN = "pattern"  # subscribe(pattern=...): the group assigns matching topics
    ASSIGNED = "assigned"  # assign([...]): the user assigns


class PartitionState:
    """Where the consumer is in one partition. See the module docstring."""

    __slots__ = (
        "buffer",
        "epoch",
        "error",
        "failures",
        "highwater",
        "in_flight",
        "last_stable_offset",
        "leader_epoch",
        "log_start_offset",
        "needs_committed",
        "paused",
        "polled_at_ms",
        "position",
        "preferred_replica",
        "preferred_until",
        "reset",
        "retry_at",
        "seen_epoch",
        "served",
        "tp",
        "validate",
    )

    def __init__(self, tp: TopicPartition, *, needs_committed: bool) -> None:
        self.tp = tp
        self.position: int | None = None
        # Epoch of the last record handed out (for commits, and KIP-320's checks); -1 when
        # the position has none (a seek, a reset by ListOffsets).
        self.leader_epoch = -1
        # The partition's leader epoch (metadata's) under which the position was last known
        # to be in the leader's log: a fetch answered under it, or a validation.
        self.seen_epoch = -1
        self.validate = False
        self.needs_committed = needs_committed
        self.reset: str | int | None = None
        self.paused = False
        self.highwater: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None
        # Wall-clock ms of the last fetch answer for it (aiokafka's last_poll_timestamp).
        self.polled_at_ms: int | None = None
        self.epoch = 0
        self.in_flight = False
        self.buffer: BufferedFetch | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.served = 0  # when a fetch last brought data for it (fetcher's counter)
        # KIP-392: the replica the leader told us to fetch from (rack-aware), and until when.
        self.preferred_replica = -1
        self.preferred_until = 0.0
        self.error: Exception | None = None  # raised to the application on its next poll

    def __repr__(self) -> str:
        return (
            f"PartitionState({self.tp.topic}-{self.tp.partition}, position={self.position}, "
            f"reset={self.reset!r}, paused={self.paused}, buffered={self.buffer is not None})"
        )

    @property
    def has_position(self) -> bool:
        return (
            self.position is not None
            and self.reset is None
            and not self.needs_committed
            and not self.validate
        )

    def seek(self, offset: int, leader_epoch: int = -1, *, validate: bool = False) -> None:
        """Go to ``offset``; ``leader_epoch``: the epoch of the record before it, when known
        (a committed offset's), with ``validate`` to check it before fetching."""
        self.position = offset
        self.leader_epoch = leader_epoch
        self.validate = validate and leader_epoch >= 0
        self.reset = None
        self.needs_committed = False
        self.error = None
        self.epoch += 1

    def request_reset(self, strategy: str | int) -> None:
        self.reset = strategy
        self.needs_committed = False
        self.validate = False
        self.error = None
        self.epoch += 1

    def request_validation(self) -> None:
        """The leader epoch changed: check the position before fetching (data fetched under
        the old leader is dropped, as it may be from a log that is no longer)."""
        self.validate = True
        self.epoch += 1

    def validated(self, current_epoch: int) -> None:
        """The position is in the log of the leader of ``current_epoch``."""
        self.validate = False
        self.seen_epoch = max(self.seen_epoch, current_epoch)


class SubscriptionState:
    """The set of partitions assigned and how they came to be."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.mode = SubscriptionMode.NONE
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.listener: Any = None
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.states: tuple[PartitionState, ...] = ()  # assignment.values(), for hot loops
        self._on_change = on_change
        self.generation = 0  # bumped on every assignment change

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        self._check_mode(SubscriptionMode.TOPICS)
        self.mode = SubscriptionMode.TOPICS
        self.topics = frozenset(topics)
        self.pattern = None
        self.listener = listener
        self._on_change()

    def subscribe_pattern(self, pattern: re.Pattern[str], listener: Any = None) -> None:
        self._check_mode(SubscriptionMode.PATTERN)
        self.mode = SubscriptionMode.PATTERN
        self.pattern = pattern
        self.topics = frozenset()
        self.listener = listener
        self._on_change()

    def match_topics(self, available: Iterable[str]) -> frozenset[str]:
        """For a pattern subscription: the matching topics, remembered as ``topics``."""
        assert self.pattern is not None
        self.topics = frozenset(t for t in available if self.pattern.fullmatch(t))
        return self.topics

    def assign_manual(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_mode(SubscriptionMode.ASSIGNED)
        self.mode = SubscriptionMode.ASSIGNED
        self.topics = frozenset(tp.topic for tp in partitions)
        self.set_assignment(partitions, needs_committed=True)

    def unsubscribe(self) -> None:
        self.mode = SubscriptionMode.NONE
        self.topics = frozenset()
        self.pattern = None
        self.listener = None
        self.set_assignment((), needs_committed=False)

    def set_assignment(
        self, partitions: Iterable[TopicPartition], *, needs_committed: bool
    ) -> None:
        """Install a new assignment; partitions kept keep their state (cooperative)."""
        new: dict[TopicPartition, PartitionState] = {}
        for tp in sorted(set(partitions)):
            state = self.assignment.get(tp)
            new[tp] = (
                state if state is not None else PartitionState(tp, needs_committed=needs_committed)
            )
        for tp, state in self.assignment.items():
            if tp not in new:
                state.epoch += 1  # anything in flight for it is now stale
        self.assignment = new
        self.states = tuple(new.values())
        self.generation += 1
        self._on_change()

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"partition {tp.topic}-{tp.partition} is not assigned")
        return state

    def _check_mode(self, mode: SubscriptionMode) -> None:
        if self.mode not in (SubscriptionMode.NONE, mode) and not (
            {self.mode, mode} <= {SubscriptionMode.TOPICS, SubscriptionMode.PATTERN}
        ):
            raise IllegalStateError(
                "subscribe() and assign() cannot be mixed; call unsubscribe() first"
            )
