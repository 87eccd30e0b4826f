"""FakeKafka end to end in memory: our clients, the fault methods, and virtual time (every
test here runs on a virtual clock, asyncio's and trio's: the timings asserted are exact, and
a 30 s timeout costs no wall time). Over TCP, and other clients: test_fake_kafka_tcp.py."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from aiokafka_ng.errors import KafkaTimeoutError, NotEnoughReplicasError, NotLeaderOrFollowerError
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

PRODUCE, FETCH = 0, 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def consume(config: dict[str, Any], topic: str, partitions: int, n: int) -> list[bytes]:
    """The values of the first ``n`` records of ``topic``, partition by partition."""
    out: list[bytes] = []
    async with Consumer(**config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        with anyio.fail_after(60):
            async for record in consumer:
                assert record.value is not None
                out.append(record.value)
                if len(out) == n:
                    break
    return out


async def test_admin_producer_and_consumer_round_trip_in_memory() -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        config = kafka.client_config()
        async with AdminClient(**config) as admin:
            await admin.create_topics([NewTopic("t", num_partitions=3, replication_factor=3)])
            cluster = await admin.describe_cluster()
        assert sorted(b.node_id for b in cluster.brokers) == [1, 2, 3]
        async with Producer(**config) as producer:
            futures = [await producer.send("t", b"v%d" % i, key=b"k%d" % i) for i in range(60)]
            metas = [await f for f in futures]
        by_partition = {p: [m.offset for m in metas if m.partition == p] for p in range(3)}
        for p, offsets in by_partition.items():
            assert offsets == list(range(len(offsets)))  # in order, no gap, per partition
            assert kafka.end_offset("t", p) == len(offsets)
        values = await consume(config, "t", 3, 60)
        assert sorted(values) == sorted(b"v%d" % i for i in range(60))


async def test_a_record_sent_later_ends_a_waiting_fetch_at_once() -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t")
        config = kafka.client_config()
        got: list[float] = []
        async with Consumer(**config, auto_offset_reset="earliest", fetch_max_wait_ms=500) as c:
            c.assign([TopicPartition("t", 0)])

            async def read_one() -> None:
                async for _record in c:
                    got.append(anyio.current_time())
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(read_one)
                await anyio.sleep(10)  # virtual: twenty long polls come and go empty
                async with Producer(**config, linger_ms=0) as producer:
                    sent_at = anyio.current_time()
                    await producer.send_and_wait("t", b"late")
        assert got and got[0] - sent_at < 0.5  # the waiting fetch answered, not the next one


async def test_delivery_timeout_is_exact_on_virtual_time() -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t")
        async with Producer(
            **kafka.client_config(),
            linger_ms=0,
            delivery_timeout_ms=30_000,
            request_timeout_ms=10_000,
        ) as producer:
            await producer.send_and_wait("t", b"first")
            kafka.black_hole(1)
            start = anyio.current_time()
            future = await producer.send("t", b"lost")
            with pytest.raises(KafkaTimeoutError):
                await future
            waited = anyio.current_time() - start
        # delivery_timeout_ms, plus at most the producer's expiry tick (100 ms).
        assert 30.0 <= waited <= 30.1
        assert kafka.end_offset("t", 0) == 1


async def test_injected_errors_are_retried_and_each_record_is_written_once() -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=1)
        rule = kafka.inject(PRODUCE, NotEnoughReplicasError.errno, times=3)
        async with Producer(**kafka.client_config(), retry_backoff_ms=100) as producer:
            metas = [await producer.send_and_wait("t", b"%d" % i) for i in range(5)]
        assert rule.hits == 3
        assert [m.offset for m in metas] == [0, 1, 2, 3, 4]
        assert [r.value for r in kafka.records("t", 0)] == [b"%d" % i for i in range(5)]


async def test_killing_the_leader_loses_and_duplicates_nothing() -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=2, replication_factor=3)
        leader = kafka.cluster.partition("t", 0).leader
        async with Producer(**kafka.client_config(), linger_ms=2) as producer:
            futures = []
            for i in range(200):
                futures.append(await producer.send("t", b"%d" % i, partition=i % 2))
                if i == 100:
                    kafka.kill(leader)
                if i % 10 == 0:
                    await anyio.sleep(0.001)
            metas = [await f for f in futures]
        assert kafka.cluster.partition("t", 0).leader != leader
        for p in range(2):
            values = [r.value for r in kafka.records("t", p)]
            assert values == [b"%d" % i for i in range(p, 200, 2)]  # all, once, in order
            assert [m.offset for m in metas if m.partition == p] == list(range(100))


async def test_an_isolated_node_keeps_its_partitions_and_the_producer_waits_for_it() -> None:
    async with FakeKafka(brokers=2) as kafka:
        kafka.create_topic("t", partitions=1, replication_factor=2)
        leader = kafka.cluster.partition("t", 0).leader
        async with Producer(**kafka.client_config(), delivery_timeout_ms=60_000) as producer:
            await producer.send_and_wait("t", b"a")
            kafka.isolate(leader)
            future = await producer.send("t", b"b")
            await anyio.sleep(5)
            assert not future.done() and kafka.open_connections(leader) == 0
            kafka.isolate(leader, on=False)
            meta = await future
        assert (meta.offset, kafka.cluster.partition("t", 0).leader) == (1, leader)


async def test_a_moved_leader_answers_not_leader_and_the_client_follows() -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=1, replication_factor=3)
        async with Producer(**kafka.client_config()) as producer:
            await producer.send_and_wait("t", b"a")
            old = kafka.cluster.partition("t", 0).leader
            new = kafka.move_leader("t", 0)
            meta = await producer.send_and_wait("t", b"b")
        assert new != old and meta.offset == 1
        assert kafka.cluster.partition("t", 0).leader_epoch == 1
        assert kafka.requests(new)[PRODUCE] >= 1


async def test_a_cut_connection_mid_response_is_reconnected() -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t")
        async with Producer(**kafka.client_config()) as producer:
            await producer.send_and_wait("t", b"a")
            kafka.cut_after_bytes(1, 10)
            meta = await producer.send_and_wait("t", b"b")
        # The cut answer's batch was written; the retry is a duplicate answered with its offset.
        assert meta.offset == 1
        assert [r.value for r in kafka.records("t", 0)] == [b"a", b"b"]


async def test_the_fixture_serves_a_client(fake_kafka: FakeKafka) -> None:
    async with Producer(**fake_kafka.client_config()) as producer:
        meta = await producer.send_and_wait("auto-created", b"v")
    assert meta.offset == 0
    assert fake_kafka.end_offset("auto-created", 0) == 1


async def test_read_committed_sees_committed_transactions_only() -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=1)
        config = kafka.client_config()
        async with Producer(**config, transactional_id="tx") as producer:
            async with producer.transaction():
                for i in range(3):
                    await producer.send("t", b"c%d" % i)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait("t", b"aborted")  # written, then aborted
                    raise RuntimeError("abort")
            async with producer.transaction():
                await producer.send("t", b"last")
        log = kafka.cluster.partition("t", 0).log
        assert len(log.aborted) == 1 and log.last_stable_offset == log.high_watermark
        assert [r.value for r in kafka.records("t", 0)] == [
            b"c0",
            b"c1",
            b"c2",
            b"aborted",
            b"last",
        ]
        async with Consumer(
            **config, isolation_level="read_committed", auto_offset_reset="earliest"
        ) as c:
            c.assign([TopicPartition("t", 0)])
            seen: list[bytes | None] = []
            with anyio.fail_after(60):
                async for record in c:
                    seen.append(record.value)
                    if record.value == b"last":
                        break
        assert seen == [b"c0", b"c1", b"c2", b"last"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_group_consumes_every_partition_and_commits(protocol: str) -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=3)
        config = kafka.client_config()
        async with Producer(**config) as producer:
            for i in range(30):
                await producer.send_and_wait("t", b"%d" % i, partition=i % 3)
        got = 0
        async with Consumer(
            "t", **config, group_id="g", group_protocol=protocol, auto_offset_reset="earliest"
        ) as consumer:
            with anyio.fail_after(120):
                async for _record in consumer:
                    got += 1
                    if got == 30:
                        break
            await consumer.commit()
        assert got == 30
        assert kafka.committed("g") == {("t", p): 10 for p in range(3)}


async def test_a_partitions_first_batch_goes_alone_so_a_failure_cannot_reorder() -> None:
    """Stop 47's anomaly (140 records expired on Apache Kafka), replayed: a broker takes any
    first sequence from a producer it has no state for, so when a partition's first batch
    failed and the pipelined second one got in, the first fit nowhere -- it expired (before
    stop 47), or was written behind the second under a new producer id (stop 47 to now,
    19 reorders in 20,000 explorer schedules). Now the second waits until the first is
    written: in order, one producer id."""
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t")
        produces: list[int] = []

        def first_produce(topic: str, partition: int) -> bool:
            produces.append(partition)
            return len(produces) == 1

        kafka.inject(PRODUCE, NotLeaderOrFollowerError.errno, times=1, match=first_produce)
        kafka.delay(1, 50, api_key=PRODUCE)  # the first request is still out when b is sent
        async with Producer(**kafka.client_config(), linger_ms=0) as producer:
            first = await producer.send("t", b"a")
            await kafka.wait_until(lambda: kafka.requests(1)[PRODUCE] >= 1)
            second = await producer.send("t", b"b")
            metas = [await first, await second]
            resets = producer.statistics().producer_id_resets
        assert [m.offset for m in metas] == [0, 1]
        assert resets == 0
        assert [r.value for r in kafka.records("t", 0)] == [b"a", b"b"]


async def test_a_crashed_follower_holds_acks_all_until_the_cluster_fences_it() -> None:
    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=1, replication_factor=3)
        partition = kafka.cluster.partition("t", 0)
        assert partition is not None
        leader, follower = partition.leader, partition.replicas[1]
        config = kafka.client_config()
        async with (
            Producer(**config, request_timeout_ms=30_000) as producer,
            Producer(**config, acks=1, enable_idempotence=False) as one,
        ):
            await producer.send_and_wait("t", b"before")
            await one.send_and_wait("t", b"before, acks=1")
            kafka.kill(follower, failover_after=9.0)
            start = anyio.current_time()
            await one.send_and_wait("t", b"acks=1")  # the leader alone: at once
            assert anyio.current_time() - start < 0.01
            start = anyio.current_time()
            meta = await producer.send_and_wait("t", b"acks=all")
            # Committed once the cluster fenced the follower (9 s after the crash) and the
            # ISR shrank: not before, and the leader never moved.
            assert anyio.current_time() - start == pytest.approx(9.0, abs=0.1)
        assert (meta.offset, partition.leader) == (3, leader)
        assert follower not in partition.isr(kafka.cluster)


async def test_cut_after_cuts_at_the_nth_next_request() -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t")
        async with Producer(**kafka.client_config(), linger_ms=0) as producer:
            await producer.send_and_wait("t", b"a")
            connects = len(kafka.connection_attempts(1))
            kafka.cut_after(1, 1)
            meta = await producer.send_and_wait("t", b"b")  # cut, reconnected, retried
            assert len(kafka.connection_attempts(1)) > connects
        assert meta.offset == 1 and kafka.end_offset("t", 0) == 2
        with pytest.raises(ValueError):
            kafka.cut_after(1, 0)
