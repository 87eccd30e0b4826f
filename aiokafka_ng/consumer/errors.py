"""Errors that only the consumer raises (all are :class:`~aiokafka_ng.errors.KafkaError`)."""

from __future__ import annotations

from aiokafka_ng.errors import IllegalStateError, KafkaError

__all__ = ["CommitFailedError", "ConsumerStoppedError", "RecordDeserializationError"]


class CommitFailedError(KafkaError):
    """An offset commit was refused because the group rebalanced (or this member was
    removed) since the offsets were fetched; the partitions may now belong to another
    member. Not retriable: the records will be redelivered to the new owner."""

    message = "Commit failed: the group rebalanced or this member left it."


class ConsumerStoppedError(IllegalStateError):
    """The consumer is closed (or was never started with ``async with``)."""

    message = "The consumer is not running."


class RecordDeserializationError(KafkaError):
    """A key or value deserializer raised; ``topic``/``partition``/``offset`` locate it.

    The position stays *at* the record, so ``seek(tp, offset + 1)`` skips it.
    """

    message = "A record could not be deserialized."

    def __init__(self, message: str, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
