"""Partition discovery and offset bounds, asked of the brokers on the Spark driver.

For each partition we need the earliest offset (ListOffsets EARLIEST) and the high
watermark. The high watermark is taken from a Fetch answer, not from ListOffsets LATEST:
on Apache Kafka both agree, but Tansu (the test broker) answers ListOffsets LATEST wrongly
(see shared/TANSU.md) while its Fetch high watermark is right. The Fetch asks for one byte
at the earliest offset with ``max_wait_ms=1``, so it costs one small round trip per leader
and returns at once even for an empty partition (measured: Tansu answers a Fetch with
``max_wait_ms=0`` with no partitions at all).

Which partitions: ``subscribe`` names topics; ``subscribePattern`` lists every topic
(Metadata for all, internal topics left out as the Java consumer does) and keeps full
matches; ``assign`` names partitions, each of which must exist.

Offsets by timestamp (``startingTimestamp`` and friends) are ListOffsets with the timestamp,
asked of each leader; an answer of -1 means no record at or after it.

Retriable errors (stale leaders, a lost connection) refresh metadata and retry the whole
lookup (Spark's ``fetchOffset.numRetries`` times, default 3) under the client's exponential
backoff starting at ``fetchOffset.retryIntervalMs``; anything else is raised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

from aiokafka_ng.cluster import ONCE, Cluster, Node, Retry, RetryState
from aiokafka_ng.cluster.client import ClusterClient
from aiokafka_ng.cluster.retry import retrying
from aiokafka_ng.cluster.topics import list_topics
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.errors import KafkaError, UnknownTopicOrPartitionError, error_for_code
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from aiokafka_ng.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from aiokafka_ng.spark._options import Subscription

__all__ = ["Bounds", "offsets_for_times", "partition_bounds", "subscribed_bounds"]

T = TypeVar("T")

#: ``{tp: (earliest offset, high watermark)}``
Bounds = dict[TopicPartition, tuple[int, int]]

_RETRIES = 3  # Spark's fetchOffset.numRetries default
_RETRY_INTERVAL_MS = 10  # Spark's fetchOffset.retryIntervalMs default
_MAX_NAMED_FETCH_VERSION = 12  # v13+ names topics by id; names are all we need here


async def partition_bounds(properties: Mapping[str, str], topics: Iterable[str]) -> Bounds:
    """Every partition of ``topics`` with its earliest offset and high watermark."""
    names = list(topics)
    return await _with_retries(properties, names, lambda c: _bounds_once(c, names))


async def subscribed_bounds(
    properties: Mapping[str, str],
    sub: Subscription,
    retries: int = _RETRIES,
    retry_interval_ms: int = _RETRY_INTERVAL_MS,
) -> Bounds:
    """The partitions ``sub`` reads, with their earliest offset and high watermark."""

    async def once(cluster: ClusterClient) -> Bounds:
        if sub.kind == "subscribe":
            return await _bounds_once(cluster, list(sub.topics))
        if sub.kind == "subscribePattern":
            names = sorted(name for name in await list_topics(cluster) if sub.matches(name))
            return await _bounds_once(cluster, names) if names else {}
        wanted = [TopicPartition(t, p) for t, p in sub.assigned]
        bounds = await _bounds_once(cluster, sorted({tp.topic for tp in wanted}))
        missing = [f"{tp.topic}-{tp.partition}" for tp in wanted if tp not in bounds]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"option 'assign' names partitions that do not exist: {', '.join(missing)}"
            )
        return {tp: bounds[tp] for tp in wanted}

    return await _with_retries(
        properties, list({t for t, _ in sub.assigned} | set(sub.topics)), once
    )


async def offsets_for_times(
    properties: Mapping[str, str],
    times: Mapping[TopicPartition, int],
    retries: int = _RETRIES,
    retry_interval_ms: int = _RETRY_INTERVAL_MS,
) -> dict[TopicPartition, int | None]:
    """The first offset at or after each timestamp (ms); None when no record is that late."""

    async def once(cluster: ClusterClient) -> dict[TopicPartition, int | None]:
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in times:
            by_leader[await cluster.leader_for(tp.topic, tp.partition)].append(tp)
        out: dict[TopicPartition, int | None] = {}
        for leader, tps in by_leader.items():
            found = await _list_offsets(cluster, leader, {tp: times[tp] for tp in tps})
            out.update({tp: (o if o >= 0 else None) for tp, o in found.items()})
        return out

    topics = sorted({tp.topic for tp in times})
    return await _with_retries(properties, topics, once, retries, retry_interval_ms)


async def _with_retries(
    properties: Mapping[str, str],
    names: list[str],
    once: Callable[[ClusterClient], Awaitable[T]],
    retries: int = _RETRIES,
    retry_interval_ms: int = _RETRY_INTERVAL_MS,
) -> T:
    config = ConsumerConfig.from_properties(properties)
    top = max(retry_interval_ms, config.retry_backoff_max_ms)
    backoff = ExponentialBackoff.retry(retry_interval_ms, top)
    async with Cluster(config.cluster_config()) as cluster:

        async def stale(_error: KafkaError) -> None:
            cluster.request_update(names)

        # The cluster's retry driver with Spark's budget: at most ``retries`` retries, no
        # deadline of its own (each request is bounded by the request timeout).
        return await retrying(
            lambda: once(cluster),
            RetryState(backoff),
            what="offset lookup",
            retry=Retry(max_retries=retries),
            on_retry=stale,
        )


async def _bounds_once(cluster: ClusterClient, names: list[str]) -> Bounds:
    found = await cluster.wait_for_topics(names)
    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    for name in names:
        for p in sorted(found[name].partitions):
            by_leader[await cluster.leader_for(name, p)].append(TopicPartition(name, p))
    out: Bounds = {}
    for leader, tps in by_leader.items():
        earliest = await _earliest(cluster, leader, tps)
        highs = await _high_watermarks(cluster, leader, earliest)
        for tp in tps:
            out[tp] = (earliest[tp], highs[tp])
    return out


def _raise_for(code: int, tp: TopicPartition, what: str) -> None:
    if code:
        err = error_for_code(code)
        raise err(f"{what} of {tp.topic}-{tp.partition} failed: {err.__name__}")


def _grouped(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        grouped[tp.topic].append(tp.partition)
    return grouped


async def _earliest(
    cluster: ClusterClient, leader: int, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    found = await _list_offsets(cluster, leader, dict.fromkeys(tps, -2))
    return {tp: max(o, 0) for tp, o in found.items()}


async def _list_offsets(
    cluster: ClusterClient, leader: int, timestamps: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """ListOffsets at ``leader``: -2 asks for the earliest offset, a timestamp for the first
    offset at or after it (-1 back when there is none)."""
    tps = list(timestamps)
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsPartition(
                        partition_index=p, timestamp=timestamps[TopicPartition(topic, p)]
                    )
                    for p in parts
                ],
            )
            for topic, parts in _grouped(tps).items()
        ],
    )
    # Once: _with_retries retries the whole lookup on Spark's budget.
    response = await cluster.call(request, Node(leader), retry=ONCE)
    out: dict[TopicPartition, int] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            _raise_for(p.error_code, tp, "ListOffsets")
            # -1 is "no such offset" (a timestamp later than every record).
            out[tp] = p.offset
    return _complete(out, tps, "ListOffsets")


def _fetch_checked(response: FetchResponse) -> FetchResponse:
    if response.error_code:
        err = error_for_code(response.error_code)
        raise err(f"Fetch (high watermark) failed: {err.__name__}")
    return response


async def _high_watermarks(
    cluster: ClusterClient, leader: int, earliest: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=1,
        min_bytes=1,
        max_bytes=1,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=p,
                        fetch_offset=earliest[TopicPartition(topic, p)],
                        partition_max_bytes=1,
                    )
                    for p in parts
                ],
            )
            for topic, parts in _grouped(earliest).items()
        ],
    )
    response = await cluster.call(
        request,
        Node(leader),
        retry=ONCE,
        check=_fetch_checked,
        max_version=_MAX_NAMED_FETCH_VERSION,
    )
    out: dict[TopicPartition, int] = {}
    for t in response.responses:
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition_index)
            _raise_for(p.error_code, tp, "Fetch (high watermark)")
            out[tp] = p.high_watermark
    return _complete(out, earliest, "Fetch")


def _complete(
    got: dict[TopicPartition, int], wanted: Iterable[TopicPartition], what: str
) -> dict[TopicPartition, int]:
    missing = [tp for tp in wanted if tp not in got]
    if missing:
        raise UnknownTopicOrPartitionError(f"{what}: no answer for {missing}")
    return got
