"""What a share consumer hands out and how the application answers: :class:`ShareRecord`
and :class:`AcknowledgeType`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiokafka_ng.consumer.models import TopicPartition

__all__ = ["AcknowledgeType", "ShareRecord"]

K = TypeVar("K")
V = TypeVar("V")


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged (the protocol's codes)."""

    ACCEPT = 1  #: processed: never delivered again
    RELEASE = 2  #: give it back: delivered again (to any member), delivery count + 1
    REJECT = 3  #: unprocessable: never delivered again, not counted as processed
    #: keep it: the acquisition lock starts again (KIP-1222); the record stays unacknowledged
    RENEW = 4


@dataclass(frozen=True, slots=True)
class ShareRecord(Generic[K, V]):
    """A record of a share group. ``delivery_count`` is 1 the first time the record is
    delivered (to any member) and grows each time it is released or its lock expires."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: K
    value: V
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
