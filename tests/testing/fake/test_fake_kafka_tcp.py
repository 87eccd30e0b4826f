"""FakeKafka over TCP (on the real clock: a virtual one could jump past bytes in flight):
our clients, confluent-kafka (librdkafka) and aiokafka, and what a broken peer gets."""

from __future__ import annotations

import random
import struct

import aiokafka
import anyio
import confluent_kafka
import pytest

from aiokafka_ng import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio


async def test_our_clients_over_tcp() -> None:
    async with FakeKafka(brokers=3) as kafka:
        config = kafka.client_config(memory=False)
        assert "transport" not in config
        async with AdminClient(**config) as admin:
            await admin.create_topics([NewTopic("t", num_partitions=2, replication_factor=2)])
        async with Producer(**config) as producer:
            metas = [
                await producer.send_and_wait("t", b"%d" % i, partition=i % 2) for i in range(10)
            ]
        assert [m.offset for m in metas] == [i // 2 for i in range(10)]
        async with Consumer(**config, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
            got = []
            with anyio.fail_after(60):
                async for record in consumer:
                    got.append(record.value)
                    if len(got) == 10:
                        break
        assert sorted(got) == sorted(b"%d" % i for i in range(10))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # aiokafka runs on asyncio only
async def test_confluent_kafka_and_aiokafka_produce_and_consume() -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("x", partitions=2)
        servers = kafka.bootstrap_servers

        def librdkafka() -> int:
            producer = confluent_kafka.Producer(
                {"bootstrap.servers": servers, "enable.idempotence": True}
            )
            for i in range(50):
                producer.produce("x", b"c%d" % i, key=b"k%d" % i)
            assert producer.flush(30) == 0
            consumer = confluent_kafka.Consumer(
                {"bootstrap.servers": servers, "group.id": "g", "enable.auto.commit": False}
            )
            consumer.assign([confluent_kafka.TopicPartition("x", p, 0) for p in (0, 1)])
            seen = 0
            for _ in range(200):
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen += 1
                    if seen == 50:
                        break
            consumer.close()
            return seen

        assert await anyio.to_thread.run_sync(librdkafka) == 50
        assert kafka.end_offset("x", 0) + kafka.end_offset("x", 1) == 50
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=servers, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("x", b"a%d" % i, partition=0)
        finally:
            await producer.stop()
        assert [r.value for r in kafka.records("x", 0)][-20:] == [b"a%d" % i for i in range(20)]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_garbage_and_unknown_versions_close_that_connection_only() -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t")
        host, port = kafka.bootstrap_servers.split(":")
        # Metadata (key 3) at version 99, then bytes that are no request at all.
        for frame in (struct.pack(">ihhi", 8, 3, 99, 1), struct.pack(">i", 3) + b"\xff\xff\xff"):
            async with await anyio.connect_tcp(host, int(port)) as raw:
                await raw.send(frame)
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await raw.receive()
        async with Producer(**kafka.client_config(memory=False)) as producer:
            assert (await producer.send_and_wait("t", b"still serving")).offset == 0
        with pytest.raises(ValueError, match="characters"):
            kafka.create_topic("no spaces")


def _librdkafka_idempotent_produce(servers: str, topic: str, count: int) -> list[object]:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 2,
            "batch.num.messages": 50,  # many small requests, so the chaos hits some
            "retry.backoff.ms": 10,
            "reconnect.backoff.ms": 10,
            "log_level": 0,
        }
    )
    failures: list[object] = []
    for i in range(count):
        producer.produce(
            topic,
            value=b"%d" % i,
            partition=i % 4,
            on_delivery=lambda err, msg: failures.append(err) if err else None,
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    return failures


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the chaos is all the loop runs
async def test_librdkafka_idempotent_through_moves_and_cuts() -> None:
    """librdkafka (idempotent, 5 in flight) while leaders move every 20 ms and connections
    are cut at random: the fake answers moves and cuts so that it recovers as on Kafka --
    including its own epoch bumps (KIP-360) after OUT_OF_ORDER_SEQUENCE_NUMBER. What
    librdkafka promises here is no loss and first-seen order per partition, not
    exactly-once: at a bump it re-sends every unconfirmed batch, so a batch that was
    written but whose answer a cut lost is written twice."""
    topic, count = "rdk", 5000
    async with FakeKafka(brokers=3, seed=3) as kafka:
        kafka.create_topic(topic, 4, replication_factor=3)
        rng = random.Random(3)
        moves = 0

        async def chaos() -> None:
            nonlocal moves
            while True:
                await anyio.sleep(0.02)
                moves += kafka.move_random_leader(topic) is not None
                if rng.random() < 0.2:
                    kafka.cut_after(rng.choice(sorted(kafka.nodes)), rng.randint(1, 4))

        async with anyio.create_task_group() as tg:
            tg.start_soon(chaos)
            failed = await anyio.to_thread.run_sync(
                _librdkafka_idempotent_produce, kafka.bootstrap_servers, topic, count
            )
            tg.cancel_scope.cancel()
        assert not failed, f"{len(failed)} failed: {sorted({str(e) for e in failed})[:3]}"
        assert moves > 0 and kafka.errors(0, 6) > 0  # NOT_LEADER_OR_FOLLOWER was answered
        for p in range(4):
            values = [int(r.value or b"") for r in kafka.records(topic, p)]
            assert list(dict.fromkeys(values)) == list(range(p, count, 4)), f"partition {p}"
