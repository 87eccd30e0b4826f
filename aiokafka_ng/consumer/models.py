"""Value objects of the consumer API (aiokafka-compatible names)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

__all__ = ["ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition"]

K = TypeVar("K")
V = TypeVar("V")


class TopicPartition(NamedTuple):
    """A partition of a topic. Hashable and ordered (topic, then partition)."""

    topic: str
    partition: int


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


@dataclass(slots=True)
class ConsumerRecord(Generic[K, V]):
    """One record as handed to the application.

    ``timestamp_type`` is 0 (create time) or 1 (log append time). ``key``/``value`` are what
    the deserializers returned (raw bytes by default); the ``serialized_*_size`` fields are
    the sizes on the wire, -1 for null. ``checksum`` is always None (v2 batches carry one
    CRC per batch, not per record) and is kept for aiokafka compatibility. Not frozen: a
    frozen dataclass costs a ``object.__setattr__`` per field, and records are made in bulk.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: K
    value: V
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    headers: Sequence[tuple[str, bytes | None]]
    leader_epoch: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
