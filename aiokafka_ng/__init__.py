"""aiokafka_ng: an asyncio-native (anyio) Kafka client.

::

    from aiokafka_ng import Producer, Consumer, AdminClient, NewTopic, TopicPartition

The public names below are imported on first use (PEP 562), so ``import aiokafka_ng.protocol``
(pure, no I/O) does not drag in anyio, pydantic and every client.

``aiokafka_ng.__compiled__`` is True when the hot modules (record batches, the partitioner,
the consumer's record construction) run compiled by mypyc; ``AIOKAFKA_NG_PURE_PYTHON=1``
forces the pure-Python twins (see ``aiokafka_ng._native``). ``aiokafka_ng.build_info()``
says which build runs and, for the pure one, why (no C compiler when it was installed, ...).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aiokafka_ng import _native
from aiokafka_ng._native import BuildInfo, build_info

#: The one place the version is written (pyproject.toml reads it from here).
__version__ = "0.1.0.dev0"

_native.honour_pure_python_env()

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Producer": "aiokafka_ng.producer",
    "RecordMetadata": "aiokafka_ng.producer",
    "DeliveryFuture": "aiokafka_ng.producer",
    "ProducerRecord": "aiokafka_ng.producer",
    "ProducerConfig": "aiokafka_ng.config",
    "Consumer": "aiokafka_ng.consumer",
    "ConsumerConfig": "aiokafka_ng.consumer",
    "ConsumerRecord": "aiokafka_ng.consumer",
    "ConsumerRebalanceListener": "aiokafka_ng.consumer",
    "OffsetAndMetadata": "aiokafka_ng.consumer",
    "OffsetAndTimestamp": "aiokafka_ng.consumer",
    "TopicPartition": "aiokafka_ng.consumer",
    "ShareConsumer": "aiokafka_ng.consumer",
    "ShareRecord": "aiokafka_ng.consumer",
    "AcknowledgeType": "aiokafka_ng.consumer",
    "AdminClient": "aiokafka_ng.admin",
    "ClientStatus": "aiokafka_ng.cluster",
    "AdminConfig": "aiokafka_ng.admin",
    "NewTopic": "aiokafka_ng.admin",
    "NewPartitions": "aiokafka_ng.admin",
    "ConfigResource": "aiokafka_ng.admin",
    "KafkaError": "aiokafka_ng.errors",
    "ConfigError": "aiokafka_ng.errors",
    "KafkaConnectionError": "aiokafka_ng.errors",
    "KafkaTimeoutError": "aiokafka_ng.errors",
    "BufferExhaustedError": "aiokafka_ng.errors",
    "errors": "aiokafka_ng.errors",
}

__all__ = [
    "AcknowledgeType",
    "AdminClient",
    "AdminConfig",
    "BufferExhaustedError",
    "BuildInfo",
    "ClientStatus",
    "ConfigError",
    "ConfigResource",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "DeliveryFuture",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "RecordMetadata",
    "ShareConsumer",
    "ShareRecord",
    "TopicPartition",
    "__version__",
    "build_info",
    "errors",
]

if TYPE_CHECKING:
    from aiokafka_ng import errors
    from aiokafka_ng.admin import AdminClient, AdminConfig, ConfigResource, NewPartitions, NewTopic
    from aiokafka_ng.cluster import ClientStatus
    from aiokafka_ng.config import ProducerConfig
    from aiokafka_ng.consumer import (
        AcknowledgeType,
        Consumer,
        ConsumerConfig,
        ConsumerRebalanceListener,
        ConsumerRecord,
        OffsetAndMetadata,
        OffsetAndTimestamp,
        ShareConsumer,
        ShareRecord,
        TopicPartition,
    )
    from aiokafka_ng.errors import (
        BufferExhaustedError,
        ConfigError,
        KafkaConnectionError,
        KafkaError,
        KafkaTimeoutError,
    )
    from aiokafka_ng.producer import DeliveryFuture, Producer, ProducerRecord, RecordMetadata


def __getattr__(name: str) -> Any:
    if name == "__compiled__":
        return _native.is_compiled()
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'aiokafka_ng' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if name == "errors" else getattr(module, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
