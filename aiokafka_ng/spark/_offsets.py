"""Partition discovery and offset bounds, asked of the brokers on the Spark driver.

For each partition we need the earliest offset (ListOffsets EARLIEST) and the high
watermark. The high watermark is taken from a Fetch answer, not from ListOffsets LATEST:
on Apache Kafka both agree, but Tansu (the test broker) answers ListOffsets LATEST wrongly
(see shared/TANSU.md) while its Fetch high watermark is right. The Fetch asks for one byte
at the earliest offset with ``max_wait_ms=1``, so it costs one small round trip per leader
and returns at once even for an empty partition (measured: Tansu answers a Fetch with
``max_wait_ms=0`` with no partitions at all).

Retriable errors (stale leaders, a lost connection) refresh metadata and retry the whole
lookup a few times with the client's backoff; anything else is raised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import anyio

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.errors import KafkaError, UnknownTopicOrPartitionError, error_for_code
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic
from aiokafka_ng.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)

__all__ = ["Bounds", "partition_bounds"]

#: ``{tp: (earliest offset, high watermark)}``
Bounds = dict[TopicPartition, tuple[int, int]]

_ATTEMPTS = 6
_MAX_NAMED_FETCH_VERSION = 12  # v13+ names topics by id; names are all we need here


async def partition_bounds(properties: Mapping[str, str], topics: Iterable[str]) -> Bounds:
    """Every partition of ``topics`` with its earliest offset and high watermark."""
    config = ConsumerConfig.from_properties(properties)
    backoff = ExponentialBackoff.retry(config.retry_backoff_ms, config.retry_backoff_max_ms)
    names = list(topics)
    async with Cluster(config.cluster_config()) as cluster:
        failures = 0
        while True:
            try:
                return await _bounds_once(cluster, names)
            except KafkaError as exc:
                failures += 1
                if not exc.retriable or failures >= _ATTEMPTS:
                    raise
                cluster.request_update(names)
                await anyio.sleep(backoff.backoff_s(failures))


async def _bounds_once(cluster: Cluster, names: list[str]) -> Bounds:
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
    cluster: Cluster, leader: int, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsPartition(partition_index=p, timestamp=-2) for p in parts],
            )
            for topic, parts in _grouped(tps).items()
        ],
    )
    response: Any = await cluster.request(leader, request)
    out: dict[TopicPartition, int] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            _raise_for(p.error_code, tp, "ListOffsets")
            offset = p.offset if p.offset >= 0 else (p.old_style_offsets or [0])[0]
            out[tp] = offset
    return _complete(out, tps, "ListOffsets")


async def _high_watermarks(
    cluster: Cluster, leader: int, earliest: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    conn = await cluster.connection(leader)
    version = min(conn.version_for(FetchRequest), _MAX_NAMED_FETCH_VERSION)
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
    response: Any = await conn.send(request, version=version)
    if response.error_code:
        err = error_for_code(response.error_code)
        raise err(f"Fetch (high watermark) failed: {err.__name__}")
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
