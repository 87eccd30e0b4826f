"""One lifecycle script run over the three clients: Producer, Consumer and AdminClient have
the same start / wait_ready / status / statistics / close(timeout) / async with, and the same
answers to starting twice, closing twice and closing a client that never started.

On the embedded broker (``kafka_broker``); the close-timeout test points the clients at a
port nothing listens on (127.0.0.1:1), which is what it is about: an unreachable cluster.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from aiokafka_ng.admin import AdminClient, AdminStatistics
from aiokafka_ng.cluster import ClientStatistics, ClusterStatistics
from aiokafka_ng.consumer import Consumer, ConsumerStatistics
from aiokafka_ng.errors import ClosedBeforeDeliveryError, IllegalStateError
from aiokafka_ng.producer import Producer, ProducerStatistics
from aiokafka_ng.testing import LocalBroker
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

KINDS = ["producer", "consumer", "admin"]
STATS_CLASS: dict[str, type[ClientStatistics]] = {
    "producer": ProducerStatistics,
    "consumer": ConsumerStatistics,
    "admin": AdminStatistics,
}
#: Far above what the tests wait: a close that ignored its timeout would hit fail_after.
LONG_MS = 120_000


def make(kind: str, servers: str, **extra: Any) -> Any:
    if kind == "producer":
        return Producer(bootstrap_servers=servers, client_id="life-p", **extra)
    if kind == "consumer":
        return Consumer(bootstrap_servers=servers, client_id="life-c", **extra)
    return AdminClient(bootstrap_servers=servers, client_id="life-a", **extra)


def check_statistics(kind: str, client: Any, state: str) -> ClientStatistics:
    stats = client.statistics()
    assert type(stats) is STATS_CLASS[kind]
    assert isinstance(stats, ClientStatistics)
    assert dataclasses.is_dataclass(stats)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.state = "x"  # type: ignore[misc]
    assert stats.state == state == client.status().state
    assert stats.client_id == client.config.client_id
    return stats


@pytest.mark.parametrize("kind", KINDS)
async def test_start_ready_statistics_close_twice(kind: str, kafka_broker: LocalBroker) -> None:
    client = make(kind, kafka_broker.bootstrap_servers)
    assert client.status().state == "new"
    await client.start()
    assert client.status().state == "running"
    await client.wait_ready(30)
    assert client.status().ready
    stats = check_statistics(kind, client, "running")
    assert isinstance(stats.cluster, ClusterStatistics)
    assert stats.cluster.metadata_requests >= 1  # wait_ready: a broker answered one
    with pytest.raises(IllegalStateError, match="once"):
        await client.start()

    with anyio.fail_after(30):
        await client.close(timeout=5)
    assert client.status().state == "closed"
    await client.close()  # idempotent
    await client.close(timeout=0)
    assert client.status().state == "closed"
    with pytest.raises(IllegalStateError):
        await client.start()  # no reopening
    with pytest.raises(IllegalStateError):
        await client.wait_ready(1)
    # Every client answers once closed, with its last counters.
    closed = check_statistics(kind, client, "closed")
    assert isinstance(closed.cluster, ClusterStatistics)
    assert closed.cluster.metadata_requests >= stats.cluster.metadata_requests


@pytest.mark.parametrize("kind", KINDS)
async def test_async_with_then_no_reentry(kind: str, kafka_broker: LocalBroker) -> None:
    client = make(kind, kafka_broker.bootstrap_servers)
    async with client as entered:
        assert entered is client
        await client.wait_ready(30)
        check_statistics(kind, client, "running")
    assert client.status().state == "closed"
    with pytest.raises(IllegalStateError):
        async with client:
            pass


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_an_unstarted_client(kind: str) -> None:
    # Nothing connects: the address is never dialled.
    client = make(kind, "127.0.0.1:1")
    stats = check_statistics(kind, client, "new")
    assert stats.cluster is None
    if isinstance(stats, ConsumerStatistics):  # nothing fetched yet, the limit configured
        assert stats.fetcher.fetch_requests == stats.fetcher.records_consumed == 0
        assert stats.fetcher.buffer_limit == client.config.fetch_buffer_bytes
    await client.close()
    assert client.status().state == "closed"
    await client.close(timeout=1)
    assert client.status().state == "closed"
    with pytest.raises(IllegalStateError):
        await client.start()
    with pytest.raises(IllegalStateError):
        async with client:
            pass


@pytest.mark.parametrize("kind", KINDS)
async def test_close_timeout_bounds_an_unreachable_cluster(kind: str) -> None:
    # Nothing listens on 127.0.0.1:1: what close() waits for never comes, and its
    # ``timeout`` -- not close_timeout_ms (two minutes here) -- bounds the wait. (A
    # consumer that never joined has nothing to wait for; the joined case is the next test.)
    extra: dict[str, Any] = {}
    if kind in ("producer", "consumer"):
        extra["close_timeout_ms"] = LONG_MS
    if kind == "consumer":
        extra["group_id"] = topic_name("life-g")
    client = make(kind, "127.0.0.1:1", **extra)
    await client.start()
    fut = None
    if kind == "producer":
        fut = await client.send(topic_name("life"), b"never delivered")
    elif kind == "consumer":
        client.subscribe([topic_name("life")])
    with anyio.fail_after(30):
        await client.close(timeout=0.5)
    assert client.status().state == "closed"
    if fut is not None:
        with pytest.raises(ClosedBeforeDeliveryError):
            await fut


async def test_consumer_close_timeout_overrides_close_timeout_ms(
    fresh_kafka_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A joined member whose broker is gone: leaving the group waits for an answer that
    # never comes, for close's timeout (1 s), not close_timeout_ms (two minutes). Tansu
    # delays a new group's first join by session_timeout_ms / 2: keep it short.
    broker = fresh_kafka_broker
    topic = topic_name("life-leave")
    with anyio.fail_after(30):
        async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            await producer.send_and_wait(topic, b"one", partition=0)
        consumer = Consumer(
            topic, bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}",
            client_id="life-leave", auto_offset_reset="earliest", close_timeout_ms=LONG_MS,
            session_timeout_ms=2000, heartbeat_interval_ms=500,
        )  # fmt: skip
        await consumer.start()
        assert (await consumer.getone()).value == b"one"  # joined, assigned, fetching
        await broker.stop()
        with caplog.at_level(logging.WARNING, logger="aiokafka_ng.consumer.consumer"):
            await consumer.close(timeout=1)
    assert consumer.status().state == "closed"
    assert [
        r.getMessage() for r in caplog.records if r.name == "aiokafka_ng.consumer.consumer"
    ] == [
        f"consumer life-leave: group g-{topic} not left cleanly within 1 s "
        "(close's timeout); its final commit may be lost"
    ]


async def test_consumer_stop_is_close() -> None:
    assert Consumer.stop is Consumer.close


async def test_producer_statistics_keep_the_dict_keys(kafka_broker: LocalBroker) -> None:
    topic = topic_name("life-stats")
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        await (await producer.send(topic, b"v"))
        stats = producer.statistics()
    assert isinstance(stats, Mapping)
    old_keys = {
        "memory", "senders", "records_sent", "records_failed", "batches_sent",
        "buffer_bytes_used", "request_latency_ms", "in_flight_batches",
        "in_flight_requests", "in_flight_by_node", "retries", "splits", "expired_batches",
        "producer_id", "producer_id_resets", "transaction_state",
    }  # fmt: skip
    assert old_keys <= set(stats)
    assert all(stats[k] == getattr(stats, k) for k in stats)
    assert stats["records_sent"] == 1 and stats.get("retries") == 0
    assert dict(stats)["memory"].total == producer.config.buffer_memory
    assert "nope" not in stats and stats.get("nope") is None
    with pytest.raises(KeyError):
        stats["nope"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_closed_client_is_not_ready(kind: str) -> None:
    # Issue 49 item 7: a closed producer kept its cluster and status() said ready=True, so
    # the FastAPI health recipe (docs/fastapi.md) answered 200 after shutdown.
    from aiokafka_ng.testing import FakeKafka

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        config = kafka.client_config()
        servers = config.pop("bootstrap_servers")
        client = make(kind, servers, **config)
        await client.start()
        await client.wait_ready(30)
        assert client.status().ready
        await client.close(timeout=5)
        status = client.status()
        assert (status.state, status.ready) == ("closed", False)
