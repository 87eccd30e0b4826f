"""Transactions against the real local broker (Tansu), on asyncio and trio.

What Tansu shows for real: commit and abort (EndTxn), markers written as control batches
that take offsets, fencing by a second producer with the same transactional id (and the
abort of its predecessor's open transaction), TxnOffsetCommit of consumer offsets.
What it cannot show: read_committed hiding aborted records -- Tansu sends no
aborted-transactions list in Fetch responses. The exactly-once test therefore reads the
output partition's real log from Tansu and replays it to our read_committed fetcher, served
by FakeKafka with the aborted list a Kafka broker would send (derived from the ABORT
markers in that log).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import (
    Cluster,
    ClusterConfig,
    parse_bootstrap_servers,
)
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.fetcher import Fetcher, FetchSettings
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.errors import IllegalStateError, ProducerFencedError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer import (
    IllegalTransactionStateError,
    Producer,
    TransactionAbortedError,
    TransactionNotStartedError,
)
from aiokafka_ng.protocol.messages.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from aiokafka_ng.protocol.records import iter_batches
from aiokafka_ng.testing import FakeKafka, LocalBroker
from aiokafka_ng.testing.fake import Received
from tests.helpers import topic_name
from tests.kafka.helpers import eventually

pytestmark = pytest.mark.anyio

_ABORT, _COMMIT = 0, 1
FETCH = 1


def txn_producer(broker: Any, tid: str, **kw: Any) -> Producer:
    return Producer(
        bootstrap_servers=broker.bootstrap_servers,
        transactional_id=tid,
        linger_ms=1,
        max_block_ms=10000,
        **kw,
    )


class Log:
    """One partition's log as stored, control batches included."""

    def __init__(self, high_watermark: int, raw: bytes) -> None:
        self.high_watermark = high_watermark
        self.raw = raw
        # (offset, producer id, value) of data records; (offset, pid, kind) of markers
        self.data: list[tuple[int, int, bytes | None]] = []
        self.markers: list[tuple[int, int, int]] = []
        for b in iter_batches(raw):
            for r in b.records():
                if b.is_control:
                    assert r.key is not None
                    self.markers.append((r.offset, b.producer_id, int.from_bytes(r.key[2:4])))
                else:
                    self.data.append((r.offset, b.producer_id, r.value))

    def aborted_transactions(self) -> list[AbortedTransaction]:
        """What a Kafka broker lists for a read_committed fetch from offset 0: per ABORT
        marker, the producer and the first offset of the transaction it ends."""
        out = []
        first: dict[int, int] = {}  # producer id -> first offset of its open transaction
        events = [(o, pid, None) for o, pid, _ in self.data] + [
            (o, pid, kind) for o, pid, kind in self.markers
        ]
        for offset, pid, kind in sorted(events, key=lambda e: e[0]):
            if kind is None:
                first.setdefault(pid, offset)
            else:
                start = first.pop(pid, None)
                if kind == _ABORT and start is not None:
                    out.append(AbortedTransaction(producer_id=pid, first_offset=start))
        return out


async def read_log(bootstrap: str, topic: str, partition: int = 0, *, settle: bool = True) -> Log:
    """The partition's log once no transaction is open in it (bounded wait; ``settle``
    False: as it is now).

    Kafka answers EndTxn once the coordinator has logged PREPARE_COMMIT/ABORT and writes the
    markers afterwards (WriteTxnMarkers), so right after ``commit_transaction()`` the marker
    may be missing: until it is written the last stable offset trails the high watermark.
    """
    config = ClusterConfig(bootstrap_servers=parse_bootstrap_servers(bootstrap))
    async with Cluster(config) as cluster:
        leader = await cluster.leader_for(topic, partition)
        request = FetchRequest(
            max_wait_ms=200,
            min_bytes=0,
            max_bytes=1 << 24,
            isolation_level=0,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(
                            partition=partition, fetch_offset=0, partition_max_bytes=1 << 24
                        )
                    ],
                )
            ],
        )
        for _ in range(200):  # 50 ms apart: 10 s
            response = await cluster.request(leader, request, version=11)
            part = response.responses[0].partitions[0]
            assert part.error_code == 0
            if not (settle and 0 <= part.last_stable_offset < part.high_watermark):
                break
            await anyio.sleep(0.05)
    return Log(part.high_watermark, bytes(part.records or b""))


# ---------------------------------------------------------------------- commit / abort


async def test_commit_and_abort_markers_take_offsets(kafka_broker: Any) -> None:
    topic, tid = topic_name("t"), topic_name("txn")
    async with txn_producer(kafka_broker, tid) as producer:
        async with producer.transaction():
            futs = [await producer.send(topic, b"c%d" % i, partition=0) for i in range(3)]
        assert [(await f).offset for f in futs] == [0, 1, 2]

        producer.begin_transaction()
        aborted = [await producer.send(topic, b"a%d" % i, partition=0) for i in range(2)]
        await producer.flush()  # written to the log, then aborted
        assert [(await f).offset for f in aborted] == [4, 5]  # 3 is the COMMIT marker
        await producer.abort_transaction()

        # An aborted transaction whose records never left the buffer: they fail.
        producer.begin_transaction()
        dropped = await producer.send(topic, b"never", partition=0)
        await producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            await dropped

        async with producer.transaction():
            last = await producer.send(topic, b"c3", partition=0)
        assert (await last).offset == 7  # 6 is the ABORT marker
        stats = producer.statistics()
        assert stats["transaction_state"] == "ready"

    # Apache Kafka writes the markers after EndTxn has answered: wait for the last one.
    log = await eventually(
        lambda: read_log(kafka_broker.bootstrap_servers, topic), lambda r: r.high_watermark >= 9
    )
    assert log.high_watermark == 9  # offsets advanced past every control record
    assert [(o, k) for o, _, k in log.markers] == [(3, _COMMIT), (6, _ABORT), (8, _COMMIT)]
    assert [(o, v) for o, _, v in log.data] == [
        (0, b"c0"),
        (1, b"c1"),
        (2, b"c2"),
        (4, b"a0"),
        (5, b"a1"),
        (7, b"c3"),
    ]
    assert all(b.is_transactional for b in iter_batches(log.raw))


async def test_second_producer_fences_the_first(kafka_broker: Any) -> None:
    topic, tid = topic_name("t"), topic_name("txn")
    async with txn_producer(kafka_broker, tid) as first:
        async with first.transaction():
            await first.send(topic, b"one", partition=0)
        pid = first.statistics()["producer_id"]
        async with txn_producer(kafka_broker, tid) as second:
            assert second.statistics()["producer_id"] == pid  # same id, newer epoch
            first.begin_transaction()
            fut = await first.send(topic, b"zombie", partition=1)
            if isinstance(kafka_broker, LocalBroker) or not first._txn or not first._txn.v2:
                # The zombie's AddPartitionsToTxn meets PRODUCER_FENCED at the coordinator.
                with pytest.raises(ProducerFencedError):
                    await fut
            else:
                # Transactions v2 (Kafka 4's default): no AddPartitionsToTxn, the Produce goes
                # to the leader and is answered INVALID_PRODUCER_EPOCH, abortable as in the Java
                # client; the abort's EndTxn then meets PRODUCER_FENCED.
                with pytest.raises(TransactionAbortedError):
                    await fut
                with pytest.raises(ProducerFencedError):
                    await first.abort_transaction()
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()  # fatal: every later call says so
            async with second.transaction():
                await second.send(topic, b"two", partition=0)
    log = await read_log(kafka_broker.bootstrap_servers, topic, 0)
    assert [v for _, _, v in log.data] == [b"one", b"two"]
    assert (await read_log(kafka_broker.bootstrap_servers, topic, 1)).data == []


async def test_fenced_in_the_middle_of_a_transaction(kafka_broker: Any) -> None:
    """The partition is already in the transaction when the successor starts: the first
    producer learns it from its next Produce (PRODUCER_FENCED), not from the coordinator."""
    topic, tid = topic_name("t"), topic_name("txn")
    async with txn_producer(kafka_broker, tid) as first:
        first.begin_transaction()
        await (await first.send(topic, b"open", partition=0))
        async with txn_producer(kafka_broker, tid) as second:
            late = await first.send(topic, b"late", partition=0)
            if isinstance(kafka_broker, LocalBroker):  # Tansu answers PRODUCER_FENCED
                with pytest.raises(ProducerFencedError):
                    await late
            else:
                # Apache Kafka answers the Produce INVALID_PRODUCER_EPOCH, abortable as in the
                # Java client (KIP-588); the abort's EndTxn then meets PRODUCER_FENCED.
                with pytest.raises(TransactionAbortedError):
                    await late
                with pytest.raises(ProducerFencedError):
                    await first.abort_transaction()
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            async with second.transaction():
                await second.send(topic, b"after", partition=0)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    # The successor's InitProducerId aborted the open transaction ("open" at 0, marker 1).
    assert [(o, v) for o, _, v in log.data] == [(0, b"open"), (2, b"after")]
    assert [(o, k) for o, _, k in log.markers] == [(1, _ABORT), (3, _COMMIT)]


async def test_abortable_errors_leave_the_producer_usable(kafka_broker: Any) -> None:
    topic, tid = topic_name("t"), topic_name("txn")
    async with txn_producer(kafka_broker, tid) as producer:
        # The body raises: aborted, the exception propagates.
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                await (await producer.send(topic, b"x1", partition=0))
                raise RuntimeError("boom")
        # A record of the transaction fails (no partition 9 in a 4-partition topic): the
        # commit refuses, the context aborts, the next transaction commits.
        with pytest.raises(IllegalTransactionStateError, match="not delivered"):
            async with producer.transaction():
                await producer.send(topic, b"x2", partition=0)
                await producer.send(topic, b"bad", partition=9)
        async with producer.transaction():
            await producer.send(topic, b"ok", partition=0)
        assert producer.statistics()["transaction_state"] == "ready"
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == [b"x1", b"x2", b"ok"]
    assert [k for _, _, k in log.markers] == [_ABORT, _ABORT, _COMMIT]
    assert [a.first_offset for a in log.aborted_transactions()] == [0, 2]


async def test_cancelled_transaction_is_aborted_and_the_producer_goes_on(
    kafka_broker: Any,
) -> None:
    """Only the task's work is cancelled, not the producer: a task of the producer aborts
    the transaction, and the next ``transaction()`` waits for that abort."""
    topic, tid = topic_name("t"), topic_name("txn")
    async with txn_producer(kafka_broker, tid) as producer:
        await producer.init_transactions()  # already done by start(): a no-op
        # Cancelled once the record is acknowledged (a 0.2 s timeout here expired before the
        # acknowledgement at a load average of ~23, and nothing was written to abort).
        with anyio.CancelScope() as scope:
            async with producer.transaction():
                await (await producer.send(topic, b"cancelled", partition=0))
                scope.cancel()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        async with producer.transaction():
            await producer.send(topic, b"next", partition=0)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [(o, v) for o, _, v in log.data] == [(0, b"cancelled"), (2, b"next")]
    assert [(o, k) for o, _, k in log.markers] == [(1, _ABORT), (3, _COMMIT)]


async def test_illegal_call_sequences_raise_named_errors(kafka_broker: Any) -> None:
    topic = topic_name("t")
    async with txn_producer(kafka_broker, topic_name("txn")) as producer:
        with pytest.raises(TransactionNotStartedError):
            await producer.send(topic, b"outside")  # send outside a transaction
        with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
            await producer.commit_transaction()  # commit without begin
        with pytest.raises(IllegalTransactionStateError):
            await producer.abort_transaction()
        producer.begin_transaction()
        with pytest.raises(IllegalTransactionStateError, match="already open"):
            producer.begin_transaction()
        await producer.abort_transaction()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as plain:
        with pytest.raises(IllegalStateError, match="transactional_id"):
            plain.begin_transaction()


# ---------------------------------------------------------------------- consume-transform-produce


async def fill_input(broker: Any, topic: str, n: int) -> None:
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        for i in range(n):
            await producer.send(topic, b"in-%03d" % i, partition=i % 2)
        await producer.flush()


async def process(
    broker: Any,
    in_topic: str,
    out_topic: str,
    group: str,
    tid: str,
    total: int,
    *,
    crash: anyio.Event | None = None,
) -> None:
    """Read ``in_topic`` (read_committed, group offsets), write each value upper-cased to
    ``out_topic`` and commit the input offsets in the same transaction. With ``crash``:
    after writing (and delivering) some outputs of the second transaction, set the event and
    hang until the caller cancels us -- a crash in the middle of a transaction."""
    consumer = Consumer(
        in_topic,
        bootstrap_servers=broker.bootstrap_servers,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=2000,
        heartbeat_interval_ms=500,
    )
    async with consumer, txn_producer(broker, tid) as producer:
        # Where the last committed transaction left off (asked once: progress is then
        # counted locally).
        done = 0
        for p in (0, 1):
            done += await consumer.committed(TopicPartition(in_topic, p)) or 0
        batches = 0
        while done < total:
            records = await consumer.getmany(timeout_ms=500, max_records=4)
            if not records:
                continue
            batches += 1
            async with producer.transaction():
                for recs in records.values():
                    for r in recs:
                        await producer.send(out_topic, r.value.upper(), partition=0)
                if crash is not None and batches == 2:
                    await producer.flush()  # the outputs are in the log
                    crash.set()
                    await anyio.sleep_forever()
                # The consumer's group metadata (generation, member id): KIP-447 fencing.
                meta = consumer.group_metadata()
                assert meta.group_id == group and meta.generation_id >= 0 and meta.member_id
                await producer.send_offsets_to_transaction(
                    {tp: recs[-1].offset + 1 for tp, recs in records.items()}, consumer
                )
            done += sum(len(recs) for recs in records.values())


async def read_committed_values(topic: str, log: Log) -> list[bytes | None]:
    """Our read_committed fetcher over ``log``, served by FakeKafka as a Kafka broker would
    serve it: the records as Tansu stored them, with the aborted-transaction list Tansu does
    not send (the model cannot hold this log: its batches come from another broker's
    producers, so every Fetch is answered by a script)."""
    aborted = log.aborted_transactions()
    done = anyio.Event()

    async def serve(call: Received) -> FetchResponse:
        (asked,) = call.request.topics
        offset = asked.partitions[0].fetch_offset
        if offset != 0:
            await done.wait()  # a long poll at the log end, outlasting the read
        data = PartitionData(
            partition_index=0,
            high_watermark=log.high_watermark,
            last_stable_offset=log.high_watermark,
            log_start_offset=0,
            aborted_transactions=aborted if offset == 0 else [],
            records=log.raw if offset == 0 else b"",
        )
        topic_response = FetchableTopicResponse(
            topic=asked.topic, topic_id=asked.topic_id, partitions=[data]
        )
        return FetchResponse(responses=[topic_response])

    tp = TopicPartition(topic, 0)
    out: list[bytes | None] = []
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic(topic)
        kafka.answer(FETCH, serve)
        config = ConsumerConfig(**kafka.client_config()).cluster_config()
        async with Cluster(config) as cluster:
            backoff = ExponentialBackoff(1, 5)
            offsets = OffsetsClient(
                cluster, group_id=None, isolation_level=1, backoff=backoff, timeout_s=5
            )
            made: list[Fetcher] = []  # the subscription's changes wake the fetcher
            subs = SubscriptionState(lambda: made[0].wake() if made else None)
            fetcher = Fetcher(
                cluster,
                subs,
                offsets,
                FetchSettings(isolation_level=1),
                backoff=backoff,
                group_offsets=lambda: False,
            )
            made.append(fetcher)
            async with anyio.create_task_group() as tg:
                await tg.start(fetcher.run)
                subs.assign_manual([tp])
                subs.state(tp).seek(0)
                with anyio.fail_after(10):
                    while (subs.state(tp).position or 0) < log.high_watermark:
                        for records in fetcher.drain(1000).values():
                            out.extend(r.value for r in records)
                        if (subs.state(tp).position or 0) < log.high_watermark:
                            await fetcher.wait_for_data()
                done.set()
                tg.cancel_scope.cancel()
        fetches = kafka.received(FETCH)
    assert fetches and all(x.request.isolation_level == 1 for x in fetches)
    return out


async def test_consume_transform_produce_exactly_once_after_a_crash(kafka_broker: Any) -> None:
    n = 20
    in_topic, out_topic, group, tid = (
        topic_name("in"),
        topic_name("out"),
        topic_name("g"),
        topic_name("txn"),
    )
    await fill_input(kafka_broker, in_topic, n)

    crashed = anyio.Event()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: process(kafka_broker, in_topic, out_topic, group, tid, n, crash=crashed)
            )
            await crashed.wait()
            tg.cancel_scope.cancel()  # the crash: the task dies mid-transaction
        # Restart with the same transactional id and group: carries on where the last
        # committed transaction left off.
        await process(kafka_broker, in_topic, out_topic, group, tid, n)

    expected = sorted(b"IN-%03d" % i for i in range(n))
    log = await read_log(kafka_broker.bootstrap_servers, out_topic)
    raw_values = [v or b"" for _, _, v in log.data]
    # The crashed transaction's outputs are in the log (Tansu keeps and serves them) ...
    assert len(raw_values) > n and sorted(set(raw_values)) == expected
    assert any(kind == _ABORT for _, _, kind in log.markers)
    # ... and read_committed drops exactly them: every input once.
    committed = await read_committed_values(out_topic, log)
    assert sorted(v for v in committed if v is not None) == expected
    assert len(committed) == n

    # The input offsets were committed inside the transactions.
    async with Consumer(
        bootstrap_servers=kafka_broker.bootstrap_servers, group_id=group
    ) as consumer:
        committed_offsets = [await consumer.committed(TopicPartition(in_topic, p)) for p in (0, 1)]
    assert sum(c or 0 for c in committed_offsets) == n
