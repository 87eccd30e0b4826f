"""The share consumer (KIP-932 share groups, "queues for Kafka"); see ``consumer.py``."""

from aiokafka_ng.consumer.share._wire import AcknowledgeType, ShareRecord
from aiokafka_ng.consumer.share.consumer import (
    AcknowledgementCallback,
    ShareConsumer,
    ShareConsumerStatistics,
)

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCallback",
    "ShareConsumer",
    "ShareConsumerStatistics",
    "ShareRecord",
]
