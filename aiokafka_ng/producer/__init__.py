"""The producer: :class:`Producer` and its delivery futures."""

from aiokafka_ng.producer.future import BatchDelivery, DeliveryFuture, RecordMetadata
from aiokafka_ng.producer.producer import Producer, ProducerRecord
from aiokafka_ng.producer.statistics import ProducerStatistics
from aiokafka_ng.producer.transactions import (
    ConsumerGroupMetadata,
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionNotStartedError,
)
from aiokafka_ng.producer.txn_coordinator import PreparedTransaction

__all__ = [
    "BatchDelivery",
    "ConsumerGroupMetadata",
    "DeliveryFuture",
    "IllegalTransactionStateError",
    "PreparedTransaction",
    "Producer",
    "ProducerRecord",
    "ProducerStatistics",
    "RecordMetadata",
    "TransactionAbortedError",
    "TransactionNotStartedError",
]
