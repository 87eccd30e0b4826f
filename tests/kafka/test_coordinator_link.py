"""Group coordination has a connection of its own (as in the Java consumer), on Kafka 4.4.

A Kafka broker answers one connection's requests in order: a heartbeat or commit written
behind a long-poll Fetch on the same connection waits for the Fetch's answer. With its own
connection to the coordinator, a commit is answered while a Fetch to that same broker is
still parked (here for up to 30 s), for both group protocols.
"""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import NewTopic
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_commit_is_answered_while_a_fetch_to_the_coordinator_is_parked(
    kafka_cluster: KafkaCluster, protocol: str
) -> None:
    topic, group = unique("link"), unique("glink")
    ids = [node.node_id for node in kafka_cluster.brokers]
    async with admin_for(kafka_cluster) as admin:
        # One partition led by each broker: whichever the coordinator is, a Fetch goes to it.
        assignment = {p: ids[p:] + ids[:p] for p in range(len(ids))}
        created = await admin.create_topics([NewTopic(topic, replica_assignments=assignment)])
        created.raise_on_error()
        await eventually(lambda: admin.describe_topics([topic]), lambda r: topic in r.succeeded)
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
        for p in range(len(ids)):
            await producer.send_and_wait(topic, b"x", partition=p)
    async with Consumer(
        bootstrap_servers=kafka_cluster.bootstrap_servers,
        group_id=group,
        group_protocol=protocol,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=30_000,  # an empty partition parks its Fetch for 30 s
    ) as consumer:
        consumer.subscribe([topic])
        got = 0
        with anyio.fail_after(60):
            while got < len(ids):
                got += sum(map(len, (await consumer.getmany(timeout_ms=500)).values()))
        cluster = consumer._cluster
        assert cluster is not None
        coordinator = cluster.coordinator_cached(group)
        assert coordinator is not None
        pool = cluster._pool

        def parked() -> int:
            conn = pool.connection_if_open(coordinator)
            return 0 if conn is None else conn.statistics().in_flight

        with anyio.fail_after(30):
            while parked() == 0:  # noqa: ASYNC110 (the next Fetch to the coordinator is out)
                await anyio.sleep(0.01)
        shared = pool.connection_if_open(coordinator)
        assert shared is not None
        answered = shared.statistics().responses_received
        with anyio.fail_after(25):
            await consumer.commit()
        # The commit came back while that Fetch was still parked: nothing was answered on
        # the shared connection in the meantime, and the commit went over another one.
        assert shared.statistics().responses_received == answered
        assert shared.statistics().in_flight >= 1
        for p in range(len(ids)):
            assert await consumer.committed(TopicPartition(topic, p)) == 1
