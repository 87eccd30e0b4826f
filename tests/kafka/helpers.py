"""Helpers for the tests that run against the real Apache Kafka cluster (``kafka_cluster``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

from aiokafka_ng.admin import AdminClient, NewTopic
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import KafkaCluster

T = TypeVar("T")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin_for(cluster: KafkaCluster, **config: Any) -> AdminClient:
    config.setdefault("bootstrap_servers", cluster.bootstrap_servers)
    return AdminClient(default_api_timeout_ms=30000, **config)


@asynccontextmanager
async def new_topic(
    cluster: KafkaCluster, partitions: int = 1, replicas: int = 3, **configs: str
) -> AsyncIterator[str]:
    """A fresh topic (deleted afterwards); ``configs`` use ``_`` for ``.``."""
    name = unique("k")
    topic_configs = {key.replace("_", "."): value for key, value in configs.items()}
    async with admin_for(cluster) as admin:
        (
            await admin.create_topics(
                [NewTopic(name, partitions, replicas, topic_configs=topic_configs)]
            )
        ).raise_on_error()
        # Known to every broker before the test uses it (see eventually and
        # known_everywhere): a test's next client may ask any of them.
        await known_everywhere(cluster, name, partitions)
        try:
            yield name
        finally:
            await admin.delete_topics([name])


async def known_everywhere(
    cluster: KafkaCluster, topic: str, partitions: int, within: float = 30.0
) -> None:
    """Return once every running node's own Metadata answer lists ``topic`` with a leader
    for each of its ``partitions``. (An admin client's describe goes to one broker, any
    one: a topic it saw may still be unknown to the broker the next client asks.)"""
    config = ConnectionConfig(client_id="aiokafka-ng-tests", connect_timeout_s=2.0)
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    with anyio.fail_after(within):
        for node in cluster.brokers:
            if not node.running or node.paused:
                continue
            async with connect(node.host, node.port, config) as conn:
                while True:
                    answer = await conn.send(request)
                    known = [t for t in answer.topics if t.name == topic and not t.error_code]
                    parts = known[0].partitions if known else []
                    if len(parts) == partitions and all(p.leader_id >= 0 for p in parts):
                        break
                    await anyio.sleep(0.05)


async def eventually(
    probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], attempts: int = 200
) -> T:
    """``probe()`` until ``ok`` holds (bounded); the last value either way, for the asserts.

    KRaft: the controller acknowledges a change (CreatePartitions, IncrementalAlterConfigs)
    once it is in the metadata log, and each broker applies it a moment later, so a read
    served by another broker may briefly show the old state -- Kafka promises no
    read-your-writes across brokers, for the Java AdminClient either.
    """
    value = await probe()
    for _ in range(attempts):  # 50 ms apart: 10 s by default
        if ok(value):
            break
        await anyio.sleep(0.05)
        value = await probe()
    return value


async def whole_again(cluster: KafkaCluster, within: float = 90) -> None:
    """Every node running and resumed, listed in the metadata, and no partition of any
    topic under-replicated: the shared cluster is as a destructive test found it.

    Each broker must have caught up (ISR == replicas everywhere), or the next test's
    acks=all writes with min.insync.replicas=2 could meet a second fault with one copy.
    """
    for node in cluster.brokers:
        if node.paused:
            node.resume()
        if not node.running:
            await node.start()
    wanted = {node.node_id for node in cluster.brokers}
    async with admin_for(cluster) as admin:
        with anyio.fail_after(within):
            while True:
                listed = {b.node_id for b in (await admin.describe_cluster()).brokers}
                if listed == wanted:
                    names = list(await admin.list_topics(include_internal=True))
                    described = (await admin.describe_topics(names)).succeeded
                    lagging = [
                        (name, p.partition)
                        for name, topic in described.items()
                        for p in topic.partitions
                        if len(p.isr) < len(p.replicas)
                    ]
                    if len(described) == len(names) and not lagging:
                        return
                await anyio.sleep(0.2)


async def log_ends(cluster: KafkaCluster, topic: str, partitions: int) -> int:
    """The sum of the partitions' high watermarks (records, aborted ones and markers)."""
    async with Consumer(bootstrap_servers=cluster.bootstrap_servers) as c:
        ends = await c.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return sum(ends.values())


async def read_all(
    cluster: KafkaCluster,
    topic: str,
    partitions: int,
    isolation: str = "read_committed",
    *,
    settle: bool = True,
    **settings: Any,
) -> list[Any]:
    """Every record of the topic's first ``partitions`` partitions (``settings``: more of
    the consumer's, e.g. its deserializers).

    read_committed: once no transaction is open in them (bounded, 10 s; ``settle`` False:
    as they are now), then up to the last stable offsets. Kafka answers EndTxn before it
    writes the markers, so right after a commit the last stable offset still lags the high
    watermark.
    """
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[Any] = []
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level=isolation, **settings
    ) as c:
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)  # read_committed: the last stable offsets
        if isolation == "read_committed" and settle:
            for _ in range(200):  # 50 ms apart
                if sum(ends.values()) == await log_ends(cluster, topic, partitions):
                    break
                await anyio.sleep(0.05)
                ends = await c.end_offsets(tps)
        with anyio.fail_after(120):
            while [tp for tp in tps if await c.position(tp) < ends[tp]]:
                for records in (await c.getmany(timeout_ms=500)).values():
                    out.extend(records)
    return out


async def spark_topics(
    cluster: KafkaCluster, topics: dict[str, str], rows: int, *, alternate: bool
) -> None:
    """The Spark sink tests' topics: each of ``topics`` with 2 partitions (replication 3),
    and rows 0..``rows``-1 in ``topics["input"]`` (value ``b"<i>"``, key ``b"k<i>"``);
    ``alternate`` puts them in partitions 0 and 1 in turn (a streaming write's task 0 then
    gets half), else the keys decide."""
    async with admin_for(cluster) as admin:
        new = [NewTopic(t, 2, 3) for t in topics.values()]
        (await admin.create_topics(new)).raise_on_error()
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5) as producer:
        for i in range(rows):
            partition = i % 2 if alternate else None
            await producer.send(topics["input"], f"{i}".encode(), f"k{i}".encode(), partition)
        await producer.flush()
