"""The consumer: ``Consumer`` (public), fetcher, group membership, offsets.

async with Consumer("events", bootstrap_servers="127.0.0.1:9092", group_id="g",
                    auto_offset_reset="earliest") as consumer:
    async for record in consumer:
        ...
"""

from aiokafka_ng.consumer.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
)
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.consumer import Consumer, ConsumerStatistics
from aiokafka_ng.consumer.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    RecordDeserializationError,
)
from aiokafka_ng.consumer.fetcher import FetcherStatistics
from aiokafka_ng.consumer.membership import ConsumerRebalanceListener
from aiokafka_ng.consumer.models import (
    CloseOptions,
    ConsumerRecord,
    GroupMembershipOperation,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from aiokafka_ng.consumer.share import (
    AcknowledgeType,
    ShareConsumer,
    ShareConsumerStatistics,
    ShareRecord,
)

__all__ = [
    "AcknowledgeType",
    "CloseOptions",
    "CommitFailedError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerStatistics",
    "ConsumerStoppedError",
    "CooperativeStickyAssignor",
    "FetcherStatistics",
    "GroupMembershipOperation",
    "GroupMetadata",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RangeAssignor",
    "RecordDeserializationError",
    "RoundRobinAssignor",
    "ShareConsumer",
    "ShareConsumerStatistics",
    "ShareRecord",
    "TopicPartition",
]
