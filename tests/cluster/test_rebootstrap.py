"""Re-bootstrap (KIP-899/KIP-1102, ``metadata_recovery_strategy``) on the bundled broker.

The bootstrap address is a TCP proxy (``TcpProxy``: bytes forwarded, nothing rewritten) in
front of broker A; after bootstrap the client talks to A's advertised address
directly. A is then stopped and broker B started on another port, and the proxy sends new
connections to B: the same bootstrap address, a new cluster behind it
(a DNS name or load balancer moved to new machines). Only a client that goes back to
``bootstrap_servers`` can find B. The Apache Kafka version of this test is in
tests/kafka/test_kafka_rebootstrap.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.errors import SendTimeoutError
from aiokafka_ng.testing import LocalBroker, TcpProxy
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

FAST = {
    "metadata_recovery_rebootstrap_trigger_ms": 1500,
    "retry_backoff_max_ms": 200,
    "reconnect_backoff_max_ms": 200,
    "metadata_max_age_ms": 500,
}


async def test_a_replaced_cluster_is_found_again_through_the_bootstrap_address(
    kafka_broker_factory: Callable[..., LocalBroker], caplog: pytest.LogCaptureFixture
) -> None:
    first = kafka_broker_factory()
    topic = topic_name("reboot")
    async with (
        TcpProxy(first) as proxy,
        Producer(bootstrap_servers=proxy.bootstrap_servers, **FAST) as producer,
    ):
        before = await producer.send_and_wait(topic, b"before")
        assert before.offset == 0
        second = kafka_broker_factory()  # the new cluster, on another port
        await anyio.to_thread.run_sync(first.stop_sync)
        proxy.set_upstream(second)
        with caplog.at_level(logging.WARNING), anyio.fail_after(60):
            after = await producer.send_and_wait(topic, b"after")
        assert after.offset == 0  # a record of the new cluster's topic
        cluster_stats = producer.statistics().cluster
        assert cluster_stats is not None and cluster_stats.rebootstraps == 1
    assert any("re-bootstrapping from" in r.getMessage() for r in caplog.records)


async def test_strategy_none_keeps_asking_the_old_brokers(
    kafka_broker_factory: Callable[..., LocalBroker],
) -> None:
    first = kafka_broker_factory()
    topic = topic_name("reboot-none")
    async with (
        TcpProxy(first) as proxy,
        Producer(
            bootstrap_servers=proxy.bootstrap_servers,
            metadata_recovery_strategy="none",
            close_timeout_ms=500,
            **FAST,
        ) as producer,
    ):
        await producer.send_and_wait(topic, b"before")
        second = kafka_broker_factory()
        await anyio.to_thread.run_sync(first.stop_sync)
        proxy.set_upstream(second)
        # Twice the trigger time and more: still asking the broker that is gone.
        with pytest.raises(SendTimeoutError):
            await producer.send_and_wait(topic, b"after", timeout=4)
        cluster_stats = producer.statistics().cluster
        assert cluster_stats is not None and cluster_stats.rebootstraps == 0
        assert proxy.connections == 1  # the bootstrap connection, never again
