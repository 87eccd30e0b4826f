"""The share consumer (KIP-932 share groups, "queues for Kafka"); see ``consumer.py``."""

from aiokafka_ng.consumer.share.consumer import (
    AcknowledgementCallback,
    ShareConsumer,
    ShareConsumerStatistics,
)
from aiokafka_ng.consumer.share.records import AcknowledgeType, ShareRecord

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCallback",
    "ShareConsumer",
    "ShareConsumerStatistics",
    "ShareRecord",
]
