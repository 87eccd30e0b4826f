"""Value objects of the consumer API (aiokafka-compatible names)."""

from __future__ import annotations

from typing import NamedTuple

# Defined beside the batch decoder, which builds records directly (see record_reader.py).
from aiokafka_ng.protocol.record_reader import ConsumerRecord, TopicPartition

__all__ = [
    "ConsumerRecord",
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
