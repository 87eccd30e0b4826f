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
        fetcher = consumer._fetcher
        assert cluster is not None and fetcher is not None
        coordinator = cluster.coordinator_cached(group)
        assert coordinator is not None

        pool = cluster._pool

        def fetch_parked_at_coordinator() -> bool:
            conn = pool.connection_if_open(coordinator)
            written = conn is not None and conn.statistics().in_flight > 0
            return written and coordinator in fetcher._in_flight

        # The Fetch itself is watched, not the shared connection's traffic as a whole: any
        # other request to that broker (a metadata refresh, say) is answered there too,
        # and a CI-style run (ci23) saw one more answer on it during the commit.
        with anyio.fail_after(30):
            while not fetch_parked_at_coordinator():  # noqa: ASYNC110
                await anyio.sleep(0.01)

        def fetches_ended() -> tuple[float, int]:  # answered, failed: to any broker
            stats = consumer.statistics().fetcher
            return stats.fetch_latency_ms["count"], stats.fetch_failures

        ended = fetches_ended()
        with anyio.fail_after(25):
            await consumer.commit()
        # The commit came back (within 25 s) while that Fetch stayed parked (for up to
        # 30 s): no Fetch ended meanwhile, and one to the coordinator is still out. A commit
        # written behind it on the same connection could not have been answered before it.
        assert fetches_ended() == ended
        assert fetch_parked_at_coordinator()
        for p in range(len(ids)):
            assert await consumer.committed(TopicPartition(topic, p)) == 1
