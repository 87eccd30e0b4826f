"""Kafka error codes and the exception hierarchy they map to (pure)."""

from __future__ import annotations


class KafkaError(Exception):
    """Base class of every error raised by aiokafka_ng."""

    errno: int = -1
    retriable: bool = False
    invalid_metadata: bool = False
    message: str = ""


class ProtocolError(KafkaError):
    """Bytes that do not decode as the Kafka protocol says they must."""
