"""Re-bootstrap (KIP-1102) on Apache Kafka: the bootstrap address is a TCP proxy
(``TcpProxy``: bytes forwarded, nothing rewritten) in front of one single-node cluster; that
cluster is killed and a new one, on other ports and with another cluster id, takes its place
behind the same address. The client finds it again only by going back to
``bootstrap_servers`` (tests/cluster/test_rebootstrap.py has the same on the bundled broker,
and the strategy "none" counterpart)."""

from __future__ import annotations

import logging

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.consumer import TopicPartition
from aiokafka_ng.testing import KafkaCluster, TcpProxy

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def single_node() -> KafkaCluster:
    return KafkaCluster(brokers=1, tls=False, heap="256m")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # two JVM clusters: one backend
async def test_a_replaced_cluster_is_found_again(
    anyio_backend: str, kafka_cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    del kafka_cluster  # only for --kafka's checks (Java present, jars fetched)
    old, new = single_node(), single_node()
    await old.start()
    try:
        async with (
            TcpProxy(old.brokers[0]) as proxy,
            Producer(
                bootstrap_servers=proxy.bootstrap_servers,
                metadata_recovery_rebootstrap_trigger_ms=2000,
                retry_backoff_max_ms=300,
                reconnect_backoff_max_ms=300,
            ) as producer,
        ):
            assert (await producer.send_and_wait("moved", b"old")).offset == 0
            await new.start()
            await old.stop()
            proxy.set_upstream(new.brokers[0])
            with caplog.at_level(logging.WARNING), anyio.fail_after(90):
                meta = await producer.send_and_wait("moved", b"new")
            assert meta.offset == 0  # written to the new cluster's topic
            cluster_stats = producer.statistics().cluster
            assert cluster_stats is not None and cluster_stats.rebootstraps == 1
            cluster = producer._runtime.cluster  # no public view of the cluster id yet
            assert cluster is not None
            assert cluster.metadata.cluster_id == new.cluster_id
        assert any("re-bootstrapping from" in r.getMessage() for r in caplog.records)
        consumer = Consumer(bootstrap_servers=new.bootstrap_servers, auto_offset_reset="earliest")
        async with consumer:
            consumer.assign([TopicPartition("moved", 0)])
            with anyio.fail_after(30):
                records = await consumer.getmany(timeout_ms=10_000)
        assert [r.value for rs in records.values() for r in rs] == [b"new"]
    finally:
        await old.stop()
        await new.stop()
