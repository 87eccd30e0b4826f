"""aiokafka-style names over aiokafka_ng's clients: migrate by changing one import.

``from aiokafka_ng.compat import AIOKafkaProducer, AIOKafkaConsumer`` gives classes that take
aiokafka's constructor keywords and offer its ``start()``/``stop()`` lifecycle, so code
written for aiokafka (its README's examples included) runs unchanged apart from the import.

How the keywords map:

* Same name, same meaning (most of them: ``bootstrap_servers``, ``client_id``, ``acks``,
  ``linger_ms``, ``group_id``, ``auto_offset_reset``, serializers, SASL/SSL settings, ...):
  passed through.
* Renamed: ``max_batch_size`` -> ``batch_size``; ``compression_type=None`` -> ``"none"``;
  aiokafka assignor classes in ``partition_assignment_strategy`` -> their names.
* Accepted and ignored (nothing to do here): ``loop``, ``api_version``,
  ``consumer_timeout_ms``, and aiokafka's ``DefaultPartitioner``. The Kerberos names
  (``sasl_kerberos_service_name``, ``sasl_kerberos_domain_name``) are passed through for
  ``sasl_mechanism="GSSAPI"``.
* ``sasl_oauth_token_provider`` (aiokafka's ``AbstractTokenProvider``: ``async token()``
  and optional ``extensions()``) with ``sasl_mechanism="OAUTHBEARER"``: passed through; the
  connection asks it for a token at every (re-)authentication.

Transactions take aiokafka's calls (``await begin_transaction()``, ``commit_transaction()``,
``abort_transaction()``, ``send_offsets_to_transaction(offsets, group_id)``, ``async with
producer.transaction()``) over the native producer's transactions. ``create_batch()`` and
``send_batch(batch, topic, partition=p)`` are aiokafka's (see :mod:`aiokafka_ng._compat_producer`);
``send_batch`` with anything but a ``BatchBuilder`` first is the native one.
``RecordMetadata`` has every field name of aiokafka's (``topic_partition``, ``timestamp_type``,
``log_start_offset`` included; read them by name: the order differs); consumers have
``last_poll_timestamp(tp)``.

Defaults are aiokafka_ng's, not aiokafka's, for every keyword the caller does not pass. The
notable differences: the producer is idempotent with ``acks="all"`` and ``linger_ms=5`` (aiokafka:
``acks=1``, no idempotence, ``linger_ms=0``). Two exceptions: the consumer's
``session_timeout_ms`` defaults to aiokafka's 10 s (Java's is 45 s), and its assignors are
``roundrobin`` (aiokafka's only default, first, so a group of aiokafka and compat members
keeps using it), then ``range`` and ``cooperative-sticky`` (so the same consumer also joins
a group of Java, librdkafka or native members).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka_ng._compat_admin import (
    AdminCompat,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    RecordsToDelete,
)
from aiokafka_ng._compat_producer import BatchBuilder, BatchFuture
from aiokafka_ng.admin import NewTopic as _NewTopic
from aiokafka_ng.consumer import (
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)
from aiokafka_ng.errors import ConfigError, KafkaError
from aiokafka_ng.producer import DeliveryFuture, Producer, RecordMetadata

__all__ = [
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "BatchBuilder",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "KafkaError",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "RecordMetadata",
    "RecordsToDelete",
    "TopicPartition",
    "translate_config",
]

_IGNORED = frozenset(
    {
        "loop",
        "api_version",
        "consumer_timeout_ms",
    }
)
_RENAMED = {"max_batch_size": "batch_size"}
_UNSUPPORTED: dict[str, str] = {}
_AIOKAFKA_SESSION_TIMEOUT_MS = 10000
_AIOKAFKA_ASSIGNORS = ("roundrobin", "range", "cooperative-sticky")
# aiokafka's defaults for these mean "not set": dropping them lets ours apply.
_NONE_MEANS_DEFAULT = frozenset(
    {"max_poll_records", "client_rack", "client_id", "acks", "transactional_id"}
)


def _assignor_name(item: Any) -> Any:
    # aiokafka passes assignor classes; ours are chosen by name (aiokafka's `name` attribute
    # is the protocol name, which is what the group coordinator sees anyway).
    if isinstance(item, str):
        return item
    name = getattr(item, "name", None)
    module = getattr(item, "__module__", "") or ""
    if isinstance(name, str) and module.startswith("aiokafka."):
        return name
    return item


def translate_config(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """aiokafka constructor keywords -> aiokafka_ng keywords (see the module docstring).

    Raises ``ConfigError`` naming every keyword aiokafka_ng cannot honour.
    """
    out: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for key, value in kwargs.items():
        if key in _IGNORED:
            continue
        if key in _UNSUPPORTED:
            if value is not None:
                refused[key] = _UNSUPPORTED[key]
            continue
        if key in _NONE_MEANS_DEFAULT and value is None:
            continue
        if key == "compression_type" and value is None:
            value = "none"
        elif key == "partitioner":
            if type(value).__module__.startswith("aiokafka."):
                continue  # aiokafka's DefaultPartitioner: ours is the same murmur2 default
        elif key == "partition_assignment_strategy":
            value = tuple(_assignor_name(a) for a in value)
        elif key == "sasl_mechanism" and not str(kwargs.get("security_protocol", "")).startswith(
            "SASL"
        ):
            continue  # aiokafka always passes "PLAIN"; it means nothing without SASL
        out[_RENAMED.get(key, key)] = value
    if refused:
        raise ConfigError(refused)
    if str(out.get("security_protocol", "")).startswith("SASL"):
        out.setdefault("sasl_mechanism", "PLAIN")  # aiokafka's default mechanism
    return out


def _checked_offsets(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    # aiokafka's checks on send_offsets_to_transaction's offsets, with its errors: a
    # non-empty dict of TopicPartition -> offset, (offset, metadata) or OffsetAndMetadata.
    if not offsets or not isinstance(offsets, dict):
        raise ValueError(offsets)
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        if not isinstance(tp, TopicPartition):
            raise TypeError("Key should be TopicPartition instance")
        if isinstance(value, int):
            out[tp] = OffsetAndMetadata(value)
            continue
        try:
            offset, metadata = value[0], value[1]
        except Exception as exc:
            raise ValueError(offsets) from exc
        if not isinstance(metadata, str):
            raise TypeError("Metadata should be a string")
        out[tp] = OffsetAndMetadata(offset, metadata, getattr(value, "leader_epoch", -1))
    return out


class AIOKafkaProducer(Producer):
    """:class:`~aiokafka_ng.producer.Producer` with aiokafka's keywords and ``stop()``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**translate_config(kwargs))

    async def stop(self) -> None:
        """Deliver what was sent, then close (aiokafka's name for :meth:`close`)."""
        await self.close()

    # aiokafka's begin_transaction is a coroutine (it waits for the producer id, which our
    # start() already has); code written for it awaits the call, so this one is awaitable.
    async def begin_transaction(self) -> None:  # type: ignore[override]
        """Open a transaction (aiokafka: ``await producer.begin_transaction()``)."""
        super().begin_transaction()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[Any, Any], group_metadata_or_id: Any
    ) -> None:
        """aiokafka's ``send_offsets_to_transaction(offsets, group_id)``: the group is
        a non-empty group id string there (a ``ConsumerGroupMetadata`` is accepted too)."""
        if isinstance(group_metadata_or_id, str) and not group_metadata_or_id:
            raise ValueError(group_metadata_or_id)
        await super().send_offsets_to_transaction(_checked_offsets(offsets), group_metadata_or_id)

    def create_batch(self) -> BatchBuilder:
        """An empty :class:`BatchBuilder` (aiokafka's); nothing is sent until
        :meth:`send_batch` gets it."""
        return BatchBuilder(
            self.config.batch_size, self.config.key_serializer, self.config.value_serializer
        )

    # Two methods under one name: aiokafka's send_batch(batch, topic, *, partition) and the
    # native send_batch(topic, records, ...). The first argument's type tells them apart.
    async def send_batch(  # type: ignore[override]
        self, batch_or_topic: Any, *args: Any, **kwargs: Any
    ) -> BatchFuture | list[DeliveryFuture]:
        """With a :class:`BatchBuilder` first, aiokafka's ``send_batch(batch, topic, *,
        partition)``: the batch's records go to that one partition, in append order, and
        the returned future, awaited, gives the batch's ``RecordMetadata`` (its first
        record's offset). Anything else first: the native
        ``Producer.send_batch(topic, records, *, keys, partition, timestamp_ms)``."""
        if not isinstance(batch_or_topic, BatchBuilder):
            return await super().send_batch(batch_or_topic, *args, **kwargs)
        return await self._send_builder(batch_or_topic, *args, **kwargs)

    async def _send_builder(
        self, batch: BatchBuilder, topic: str, *, partition: int
    ) -> BatchFuture:
        if partition.__class__ is not int or partition < 0:
            raise TypeError(f"send_batch: partition must be a non-negative int (got {partition!r})")
        records = batch._take(partition)
        if not records:
            raise ValueError("send_batch: the batch holds no records")
        return BatchFuture(await super().send_batch(topic, records, partition=partition))


class AIOKafkaConsumer(Consumer):
    """:class:`~aiokafka_ng.consumer.Consumer` with aiokafka's keywords."""

    def __init__(self, *topics: str, **kwargs: Any) -> None:
        config = translate_config(kwargs)
        # aiokafka's group timing, not Java's 45 s: a session timeout is what a group waits
        # for a dead member, and code written for aiokafka was tuned with its 10 s.
        # Neither exists with group_protocol="consumer" (KIP-848: the broker owns them).
        if str(config.get("group_protocol", "classic")).lower() != "consumer":
            config.setdefault("session_timeout_ms", _AIOKAFKA_SESSION_TIMEOUT_MS)
            config.setdefault("partition_assignment_strategy", _AIOKAFKA_ASSIGNORS)
        super().__init__(*topics, **config)


class AIOKafkaAdminClient(AdminCompat):
    """:class:`~aiokafka_ng.admin.AdminClient` with aiokafka's constructor keywords,
    ``start()``/``close()`` and admin surface (see :mod:`aiokafka_ng._compat_admin` for the
    result shapes and the one documented difference)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**translate_config(kwargs))


def NewTopic(  # a class in aiokafka; a factory here
    name: str,
    num_partitions: int = -1,
    replication_factor: int = -1,
    replica_assignments: Mapping[int, Sequence[int]] | None = None,
    topic_configs: Mapping[str, str | None] | None = None,
) -> _NewTopic:
    """aiokafka's ``NewTopic(name, num_partitions, replication_factor, ...)``."""
    return _NewTopic(
        name,
        num_partitions=num_partitions,
        replication_factor=replication_factor,
        replica_assignments=replica_assignments,
        topic_configs=dict(topic_configs or {}),
    )
