"""send_batch's bulk path: same per-record semantics as send(), against the real broker
(Tansu); the run encoder is checked byte for byte against the per-record one."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka_ng.consumer import Consumer
from aiokafka_ng.errors import BufferExhaustedError, MessageSizeTooLargeError
from aiokafka_ng.producer import Producer, ProducerRecord
from aiokafka_ng.producer.partitioner import default_partition
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.records import RecordBatchBuilder
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio


async def read_all(bootstrap: str, topic: str, n: int) -> list[Any]:
    out: list[Any] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        with anyio.fail_after(30):
            while len(out) < n:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(recs)
    return out


async def test_keyed_run_lands_in_order_per_partition(kafka_broker: Any) -> None:
    topic = topic_name()
    n = 6000
    keys = [b"k%d" % (i % 7) for i in range(n)]
    values = [b"v%d" % i for i in range(n)]
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, batch_size=4096) as p:
        futs = await p.send_batch(topic, values, keys=keys)
        assert len(futs) == n
        metas = [await f for f in futs]
    for key, meta in zip(keys, metas, strict=True):
        assert meta.partition == default_partition(key, 4)  # Tansu auto-creates 4
    per_part: dict[int, list[int]] = {}
    for meta in metas:
        per_part.setdefault(meta.partition, []).append(meta.offset)
    for offsets in per_part.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    got = await read_all(kafka_broker.bootstrap_servers, topic, n)
    by_part: dict[int, list[bytes]] = {}
    for rec in got:
        by_part.setdefault(rec.partition, []).append(rec.value)
    for part, vals in by_part.items():
        expected = [values[i] for i, m in enumerate(metas) if m.partition == part]
        assert vals == expected


async def test_unkeyed_explicit_partition_and_records(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
        futs = await p.send_batch(topic, [b"a", b"b", None], partition=2, timestamp_ms=1234)
        metas = [await f for f in futs]
        assert [(m.partition, m.offset, m.timestamp) for m in metas] == [
            (2, 0, 1234), (2, 1, 1234), (2, 2, 1234)
        ]  # fmt: skip
        sticky = await p.send_batch(topic, [b"x"] * 500)  # one sticky partition until full
        assert len({(await f).partition for f in sticky}) == 1
        recs = [ProducerRecord(b"r1", key=b"k"), ProducerRecord(b"r2", key=b"k")]
        m1, m2 = [await f for f in await p.send_batch(topic, recs)]
        assert m1.partition == m2.partition and m2.offset == m1.offset + 1
        mixed = [ProducerRecord(b"h", headers=[("h", b"1")]), b"plain"]
        assert all([(await f).offset >= 0 for f in await p.send_batch(topic, mixed)])
        with pytest.raises(ValueError, match="2 keys for 1 values"):
            await p.send_batch(topic, [b"x"], keys=[b"a", b"b"])
        with pytest.raises(TypeError, match="value must be bytes"):
            await p.send_batch(topic, [b"x", 5])


async def test_oversize_record_fails_alone(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, max_request_size=10_000
    ) as p:
        futs = await p.send_batch(topic, [b"a", b"x" * 20_000, b"b"], partition=0)
        assert (await futs[0]).offset == 0
        with pytest.raises(MessageSizeTooLargeError):
            await futs[1]
        assert (await futs[2]).offset == 1


async def test_unknown_topic_does_not_block_and_is_delivered_in_order(
    kafka_broker: Any,
) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
        with anyio.fail_after(1):  # no metadata yet: queued, not awaited
            futs = await p.send_batch(topic, [b"%d" % i for i in range(300)], partition=1)
        assert not any(f.done() for f in futs)
        assert [(await f).offset for f in futs] == list(range(300))


async def test_buffer_full_back_pressure(kafka_broker: Any) -> None:
    topic = topic_name()
    # A buffer of ~50 records: the run streams through it chunk by chunk.
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, buffer_memory=16_384, batch_size=2048
    ) as p:
        await p.partitions_for(topic)
        futs = await p.send_batch(topic, [b"y" * 100] * 2000, partition=0)
        assert [(await f).offset for f in futs] == list(range(2000))
        assert p.statistics().buffer_bytes_used == 0  # every byte came back


async def test_buffer_exhausted_fails_the_rest_in_their_futures(kafka_broker: Any) -> None:
    # max_block_ms=0 and batches held back (a linger of an hour; only flush() sends them):
    # the first chunks fill the buffer, the rest cannot wait and fail alone, in their futures.
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        buffer_memory=8192,
        max_block_ms=0,
        linger_ms=3_600_000,
    ) as p:
        # The topic's metadata, learnt by delivering one record to another partition
        # (partitions_for would not wait under max_block_ms=0).
        await p.send(topic, b"warm", partition=3)
        await p.flush()
        futs = await p.send_batch(topic, [b"z" * 50] * 200, partition=0)
        failed = [f for f in futs if f.done() and isinstance(f.exception(), BufferExhaustedError)]
        queued = [f for f in futs if not f.done()]
        assert failed and queued and len(failed) + len(queued) == 200
        assert futs.index(failed[0]) == len(queued)  # the head went, the tail failed
        await p.flush()
        assert [(await f).offset for f in queued] == list(range(len(queued)))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=300)),
        min_size=1,
        max_size=60,
    ),
    st.integers(0, 2**40),
    st.sampled_from([Compression.NONE, Compression.LZ4]),
    st.integers(200, 4000),
    st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=60)), max_size=3),
)
def test_append_run_encodes_like_append(
    records: list[tuple[bytes | None, bytes | None]],
    ts: int,
    codec: Compression,
    max_size: int,
    headers: list[tuple[str, bytes | None]],
) -> None:
    # headers: one header set on every record of the run (a traced bulk call's context).
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    one = RecordBatchBuilder(codec, max_size=max_size)
    taken = 0
    for k, v in records:
        if one.append(ts, k, v, headers) is None:
            break
        taken += 1
    run = RecordBatchBuilder(codec, max_size=max_size)
    assert run.append_run(ts, keys, values, 0, len(values), headers) == taken
    assert run.record_count == one.record_count and run.is_full == one.is_full
    assert run.build() == one.build()


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=300), st.integers(1, 20_000))
def test_chunks_stop_at_the_record_or_byte_limit(sizes: list[int], limit: int) -> None:
    from itertools import accumulate

    from aiokafka_ng.producer import bulk

    ends = [0, *accumulate(sizes)]
    lo = 0
    while lo < len(sizes):
        # The rule, record by record: at least one record, then while the next one fits.
        want = lo + 1
        while want < len(sizes) and want - lo < bulk._CHUNK and sum(sizes[lo : want + 1]) <= limit:
            want += 1
        assert bulk.chunk_end(ends, lo, limit) == want
        lo = want


def test_chunks_hold_at_most_chunk_records() -> None:
    from aiokafka_ng.producer import bulk

    ends = list(range(10_001))  # 10,000 one-byte records, no byte limit in reach
    assert bulk.chunk_end(ends, 0, 1 << 40) == bulk._CHUNK
    assert bulk.chunk_end(ends, 8192, 1 << 40) == 10_000
    assert bulk.chunk_end(ends, 5, 0) == 6  # at least one record, whatever the limit
