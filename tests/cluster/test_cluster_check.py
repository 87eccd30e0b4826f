"""KIP-1242: a connection to a broker the metadata named says which node of which cluster it
means (ApiVersions v5), and a broker that is another answers REBOOTSTRAP_REQUIRED; the
client then goes back to ``bootstrap_servers`` instead of sending its requests to whoever
holds the address now.

Shown on FakeKafka, which answers as Kafka 4.4 does (``FakeKafka.swap_addresses`` gives two
nodes each other's address, as two pods whose IPs were swapped);
tests/kafka/test_kafka_consumer_kips.py checks Kafka's own answers to the same requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

API_VERSIONS = 18
PRODUCE = 0
REBOOTSTRAP_REQUIRED = 129


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def sent_identity(kafka: FakeKafka) -> list[tuple[int, str | None, int]]:
    """(node reached, cluster id named, node id named) of every ApiVersions received."""
    return [
        (r.node, r.request.cluster_id, r.request.node_id)
        for r in kafka.received(API_VERSIONS)
        if r.version >= 5
    ]


def one_bootstrap(kafka: FakeKafka) -> dict[str, Any]:
    """Bootstrap from node 1 only: nodes 2 and 3 get connections of their own, opened once
    the first broker has said it offers ApiVersions v5."""
    return {**kafka.client_config(), "bootstrap_servers": f"127.0.0.1:{kafka.nodes[1].port}"}


async def test_connections_to_known_nodes_name_the_node_and_cluster() -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic("t", 3, replication_factor=1)
        leaders = {kafka.leader("t", p) for p in range(3)}
        assert leaders == {1, 2, 3}
        async with Producer(**one_bootstrap(kafka), linger_ms=0) as producer:
            for p in range(3):
                await producer.send_and_wait("t", b"x", partition=p)
        sent = sent_identity(kafka)
        # The bootstrap connection knows nothing to expect (it then serves node 1: the same
        # address); the connections to the other nodes name them.
        assert (1, None, -1) in sent
        named = {(node, cluster, meant) for node, cluster, meant in sent if cluster is not None}
        assert named == {(n, kafka.cluster.cluster_id, n) for n in (2, 3)}


async def test_an_address_now_held_by_another_node_sends_the_client_back_to_bootstrap() -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic("t", 3, replication_factor=1)
        led_by = {kafka.leader("t", p): p for p in range(3)}
        async with Producer(
            **one_bootstrap(kafka), linger_ms=0, metadata_max_age_ms=3_600_000
        ) as producer:
            await producer.send_and_wait("t", b"warm", partition=led_by[1])
            # Nodes 2 and 3 trade addresses before the producer has connected to either:
            # its metadata still has the old ones, and nothing has told it otherwise.
            kafka.swap_addresses(2, 3)
            produced_before = len(kafka.received(PRODUCE))
            meta = await producer.send_and_wait("t", b"after", partition=led_by[2])
            assert meta.offset == 0
            stats = producer.statistics().cluster
            assert stats is not None and stats.rebootstraps == 1
        # Node 3, at node 2's old address, was asked for node 2 and said so; the record
        # went to node 2 only, at its new address.
        assert (3, kafka.cluster.cluster_id, 2) in sent_identity(kafka), sent_identity(kafka)
        assert {r.node for r in kafka.received(PRODUCE)[produced_before:]} == {2}
        assert [r.value for r in kafka.records("t", led_by[2])] == [b"after"]


@pytest.mark.parametrize(
    "setting",
    [{"metadata_cluster_check_enable": False}, {"metadata_recovery_strategy": "none"}],
    ids=["check-off", "strategy-none"],
)
async def test_without_the_check_or_a_rebootstrap_to_lead_to_nothing_is_named(
    setting: dict[str, Any],
) -> None:
    # As Java: metadata.cluster.check.enable=false, or metadata.recovery.strategy=none
    # (where the answer could lead to no re-bootstrap), sends no identity.
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic("t", 3, replication_factor=1)
        async with Producer(**one_bootstrap(kafka), linger_ms=0, **setting) as producer:
            for p in range(3):
                await producer.send_and_wait("t", b"x", partition=p)
        sent = sent_identity(kafka)
        assert {node for node, _, _ in sent} == {1, 2, 3}
        assert {cluster for _, cluster, _ in sent} == {None}, sent
