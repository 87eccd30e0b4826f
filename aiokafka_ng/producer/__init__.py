"""The producer: :class:`Producer` and its delivery futures."""

from aiokafka_ng.producer.future import DeliveryFuture, RecordMetadata
from aiokafka_ng.producer.producer import Producer, ProducerRecord

__all__ = ["DeliveryFuture", "Producer", "ProducerRecord", "RecordMetadata"]
