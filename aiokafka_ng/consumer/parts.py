"""How a consumer is put together: its parts built from its configuration.

:class:`~.consumer.Consumer` owns the parts (an :class:`~.offsets.OffsetsClient`, the
:class:`~.fetcher.Fetcher` and, with a ``group_id``, a group member of the configured
protocol) and runs the fetcher's and the member's tasks through its
:class:`~aiokafka_ng.cluster.ClientRuntime`, which supervises them. :class:`ConsumerStatistics`
is the shape of its ``statistics()`` snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka_ng.cluster import ClientStatistics, ClusterClient
from aiokafka_ng.cluster.telemetry import (
    MetricKind,
    TelemetryEngine,
    connection_table,
    table_collector,
)
from aiokafka_ng.consumer.classic_member import ClassicMember
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.fetcher import Fetcher, FetcherStatistics, FetchSettings
from aiokafka_ng.consumer.kip848_member import ConsumerGroupMember
from aiokafka_ng.consumer.membership import GroupMembership
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.net.backoff import ExponentialBackoff

if TYPE_CHECKING:
    from aiokafka_ng.tracing import ConsumerTracing

__all__ = [
    "TELEMETRY_GROUP_METRICS",
    "TELEMETRY_METRICS",
    "ConsumerStatistics",
    "build_parts",
    "build_tracing",
    "no_fetches",
    "telemetry_engine",
]


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


_SUM, _GAUGE = MetricKind.SUM, MetricKind.GAUGE

#: KIP-714's names (after ``org.apache.kafka.``) of the statistics that mean what Java's
#: consumer metric of that name means (groups ``consumer-fetch-manager-metrics``,
#: ``consumer-coordinator-metrics``, ``consumer-metrics``); see
#: :mod:`aiokafka_ng.cluster.telemetry`. Our fetch latency is over the consumer's life,
#: Java's over its last two 30 s windows.
TELEMETRY_METRICS = {
    "fetcher.records_consumed": ("consumer.fetch.manager.records.consumed.total", _SUM),
    "fetcher.fetch_requests": ("consumer.fetch.manager.fetch.total", _SUM),
    "fetcher.fetch_latency_ms.avg": ("consumer.fetch.manager.fetch.latency.avg", _GAUGE),
    "fetcher.fetch_latency_ms.max": ("consumer.fetch.manager.fetch.latency.max", _GAUGE),
    **connection_table("consumer"),
}
#: A group member's own (Java has a coordinator, and these metrics, only with a group id).
TELEMETRY_GROUP_METRICS = {
    **TELEMETRY_METRICS,
    "assignment.count": ("consumer.coordinator.assigned.partitions", _GAUGE),
    "rebalances": ("consumer.coordinator.rebalance.total", _SUM),
}


def telemetry_engine(c: ConsumerConfig, statistics: Callable[[], Any]) -> TelemetryEngine:
    """The consumer's KIP-714 metrics push (``statistics``: its snapshot). The resource
    names what Java's ``ClientTelemetryProvider`` names: group id, group instance id, rack."""
    resource = [
        (key, value)
        for key, value in (
            ("group_id", c.group_id),
            ("group_instance_id", c.group_instance_id),
            ("client_rack", c.client_rack),
        )
        if value
    ]
    table = TELEMETRY_METRICS if c.group_id is None else TELEMETRY_GROUP_METRICS
    return TelemetryEngine(table_collector(statistics, table), resource=tuple(resource))


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
) -> tuple[OffsetsClient, Fetcher, GroupMembership | None]:
    """The offsets client, the fetcher and (with a ``group_id``) the group membership, with
    the member of the configured ``group_protocol``."""
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
    protocol = ConsumerGroupMember if c.group_protocol == "consumer" else ClassicMember
    group = GroupMembership(
        cluster,
        c.group_settings(),
        subscription,
        offsets,
        protocol=protocol,
        on_assignment=fetcher.wake,
    )
    return offsets, fetcher, group


def build_tracing(config: ConsumerConfig) -> ConsumerTracing | None:
    """The spans of records handed out (``aiokafka_ng.tracing``), or None when the config
    has no ``tracer_provider``: then opentelemetry is not even imported."""
    if config.tracer_provider is None:
        return None
    from aiokafka_ng.tracing import ConsumerTracing  # needs the tracing extra

    return ConsumerTracing(config)
