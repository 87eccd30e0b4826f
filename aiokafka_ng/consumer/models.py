"""Value objects of the consumer API (aiokafka-compatible names)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

# Defined beside the batch decoder, which builds records directly (see record_reader.py).
from aiokafka_ng.protocol.record_reader import ConsumerRecord, TopicPartition

__all__ = [
    "CloseOptions",
    "ConsumerRecord",
    "GroupMembershipOperation",
    "GroupMetadata",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "TopicPartition",
]


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the offset of the *next* record to read, and free-form metadata."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class GroupMetadata(NamedTuple):
    """This member's view of its group, for ``Producer.send_offsets_to_transaction``: with
    the generation and member id the coordinator can reject a commit from a member that a
    rebalance has fenced (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndTimestamp(NamedTuple):
    """Answer of ``offsets_for_times``: the first offset whose timestamp is >= the asked one."""

    offset: int
    timestamp: int


class GroupMembershipOperation(Enum):
    """What closing does to the consumer's group membership (KIP-1092; Java's
    ``CloseOptions.GroupMembershipOperation``).

    * ``DEFAULT``: a dynamic member leaves the group; a static one (``group_instance_id``)
      stays, so the coordinator keeps its partitions for its return within the session
      timeout.
    * ``LEAVE_GROUP``: leave at once, static members too (classic: LeaveGroup naming the
      instance id; KIP-848: the leave heartbeat with epoch -1), so the partitions move now.
    * ``REMAIN_IN_GROUP``: send nothing: the member stays until ``session_timeout_ms``
      runs out without heartbeats (a KIP-848 static member still says it will be back,
      epoch -2, as on ``DEFAULT``). The group does not rebalance at the close, only when
      the session times out (a static member back in time keeps its partitions).
    """

    DEFAULT = "default"
    LEAVE_GROUP = "leave_group"
    REMAIN_IN_GROUP = "remain_in_group"


@dataclass(frozen=True, slots=True)
class CloseOptions:
    """How to close a consumer (Java's ``CloseOptions``): ``Consumer.close(CloseOptions(...))``.

    ``timeout`` bounds the final commit and the leave, in seconds (None:
    ``close_timeout_ms``); ``group_membership_operation`` says whether to leave the group
    (:class:`GroupMembershipOperation`, also accepted by its value, ``"remain_in_group"``).
    """

    group_membership_operation: GroupMembershipOperation | str = GroupMembershipOperation.DEFAULT
    timeout: float | None = None

    def __post_init__(self) -> None:
        op = self.group_membership_operation
        if not isinstance(op, GroupMembershipOperation):
            try:
                op = GroupMembershipOperation(str(op).lower())
            except ValueError:
                known = ", ".join(repr(o.value) for o in GroupMembershipOperation)
                raise ValueError(
                    f"group_membership_operation {op!r} is not one of {known}"
                ) from None
            object.__setattr__(self, "group_membership_operation", op)
        if self.timeout is not None and self.timeout < 0:
            raise ValueError("timeout must be >= 0 or None")

    @property
    def operation(self) -> GroupMembershipOperation:
        """``group_membership_operation`` as the enum (a string was turned into it)."""
        op = self.group_membership_operation
        assert isinstance(op, GroupMembershipOperation)  # __post_init__ converted it
        return op
