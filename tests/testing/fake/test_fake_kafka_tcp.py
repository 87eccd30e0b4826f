"""FakeKafka over TCP (on the real clock: a virtual one could jump past bytes in flight):
our clients, confluent-kafka (librdkafka) and aiokafka, and what a broken peer gets."""

from __future__ import annotations

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
