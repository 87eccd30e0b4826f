"""How a consumer is put together: its parts built from its configuration.

:class:`~.consumer.Consumer` owns the parts (an :class:`~.offsets.OffsetsClient`, the
:class:`~.fetcher.Fetcher` and, with a ``group_id``, a group member of the configured
protocol) and runs the fetcher's and the member's tasks through its
:class:`~aiokafka_ng.cluster.ClientRuntime`, which supervises them. :class:`ConsumerStatistics`
is the shape of its ``statistics()`` snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokafka_ng.cluster import ClientStatistics, ClusterClient
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.fetcher import Fetcher, FetcherStatistics, FetchSettings
from aiokafka_ng.consumer.group import GroupCoordinator
from aiokafka_ng.consumer.group_consumer import ConsumerGroupMember
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.net.backoff import ExponentialBackoff

if TYPE_CHECKING:
    from aiokafka_ng.tracing import ConsumerTracing

__all__ = ["ConsumerStatistics", "build_parts", "build_tracing", "no_fetches"]


@dataclass(frozen=True, slots=True)
class ConsumerStatistics(ClientStatistics):
    """The consumer's ``statistics()`` snapshot: the common part (state, client id, cluster;
    keyword-only) and the fetcher's and the group's counters."""

    fetcher: FetcherStatistics
    assignment: tuple[TopicPartition, ...]
    group_state: str | None
    generation: int | None
    member_id: str | None
    rebalances: int


def no_fetches(buffer_limit: int) -> FetcherStatistics:
    """The fetcher's counters of a consumer not started yet: nothing fetched."""
    return FetcherStatistics(
        buffered_bytes=0,
        max_buffered_bytes=0,
        reserved_bytes=0,
        buffer_limit=buffer_limit,
        fetches_in_flight=0,
        fetch_requests=0,
        fetch_failures=0,
        bytes_dropped=0,
        partitions_buffered=0,
        records_consumed=0,
        fetch_latency_ms={},
    )


def build_parts(
    c: ConsumerConfig, cluster: ClusterClient, subscription: SubscriptionState
) -> tuple[OffsetsClient, Fetcher, GroupCoordinator | None]:
    """The offsets client, the fetcher and (with a ``group_id``) the group member."""
    backoff = ExponentialBackoff.retry(c.retry_backoff_ms, c.retry_backoff_max_ms)
    isolation = 1 if c.isolation_level == "read_committed" else 0
    offsets = OffsetsClient(
        cluster,
        group_id=c.group_id,
        isolation_level=isolation,
        backoff=backoff,
        timeout_s=c.request_timeout_ms / 1000,
    )
    settings = FetchSettings(
        min_bytes=c.fetch_min_bytes,
        max_bytes=c.fetch_max_bytes,
        max_wait_ms=c.fetch_max_wait_ms,
        max_partition_bytes=c.max_partition_fetch_bytes,
        buffer_bytes=c.fetch_buffer_bytes,
        isolation_level=isolation,
        check_crcs=c.check_crcs,
        auto_offset_reset=c.auto_offset_reset,
        rack_id=c.client_rack,
        request_timeout_s=c.request_timeout_ms / 1000,
        preferred_replica_ttl_s=c.metadata_max_age_ms / 1000,
    )
    fetcher = Fetcher(
        cluster,
        subscription,
        offsets,
        settings,
        backoff=backoff,
        group_offsets=lambda: c.group_id is not None,
        key_deserializer=c.key_deserializer,
        value_deserializer=c.value_deserializer,
    )
    if c.group_id is None:
        return offsets, fetcher, None
    member = ConsumerGroupMember if c.group_protocol == "consumer" else GroupCoordinator
    group = member(cluster, c.group_settings(), subscription, offsets, on_assignment=fetcher.wake)
    return offsets, fetcher, group


def build_tracing(config: ConsumerConfig) -> ConsumerTracing | None:
    """The spans of records handed out (``aiokafka_ng.tracing``), or None when the config
    has no ``tracer_provider``: then opentelemetry is not even imported."""
    if config.tracer_provider is None:
        return None
    from aiokafka_ng.tracing import ConsumerTracing  # needs the tracing extra

    return ConsumerTracing(config)
