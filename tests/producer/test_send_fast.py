"""``send()``'s C fast path (``producer/_send.c``) against its Python twin (send()'s own path).

Each test drives two producers through the same calls, one with the C function and one
with ``_C_SEND_FAST`` set to None, and compares everything the calls leave: the futures
(every slot), the batches (record bytes, futures, memory, positions), the pool, the sticky
partition, the errors raised. The producers are not started -- no broker, no senders -- so
nothing drains a batch between the calls and the two runs are deterministic (the sticky
partitioner is seeded): this is the accumulator's state right after send(), which is all
the C function touches. Without the C kernel (AIOKAFKA_NG_PURE_PYTHON=1) the tests that
need it fail rather than pass vacuously, unless the environment asked for pure Python.
"""

from __future__ import annotations

import asyncio
import random
import time
from types import MappingProxyType
from typing import Any

import pytest

import aiokafka_ng.producer.producer as producer_module
from aiokafka_ng import _native
from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.future import PENDING, DeliveryFuture
from aiokafka_ng.producer.partitioner import StickyPartitioner

pytestmark = pytest.mark.anyio

C_SEND = producer_module._C_SEND_FAST
TS = 1_700_000_000_000


def test_the_fast_path_is_bound_when_the_kernel_is() -> None:
    if _native.pure_python_requested():
        assert C_SEND is None
    else:
        assert C_SEND is not None, "the C kernel's send_fast refused the producer's classes"


def cluster(partitions: int = 5, topics: tuple[str, ...] = ("t",)) -> ClusterMetadata:
    parts = {p: PartitionMetadata(partition=p, leader=1) for p in range(partitions)}
    return ClusterMetadata(
        brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
        topics=MappingProxyType(
            {t: TopicMetadata(t, partitions=MappingProxyType(parts)) for t in topics}
        ),
    )


def armed(**config: Any) -> Producer:
    """A producer as start() leaves it, without a cluster: running, on this loop, with
    metadata for ``t`` and a seeded sticky partitioner. (5 partitions: not a power of two,
    so the key hash's sign bit matters.)"""
    config.setdefault("linger_ms", 1000)
    p = Producer(bootstrap_servers="127.0.0.1:9", **config)
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None  # trio
    p._intake.running = True
    p._intake.loop = p._acc.loop = loop
    p._acc.sticky = StickyPartitioner(random.Random(7))
    p._acc.update_metadata(cluster())
    return p


def slots(fut: DeliveryFuture) -> dict[str, Any]:
    batch = fut._batch
    return {
        "topic": fut.topic,
        "timestamp": fut._timestamp,
        "loop": fut._loop,
        "batch": None if batch is None else (batch.partition, batch.futures.index(fut)),
        "delta": fut._delta,
        "exc": fut._exc if fut._exc is None or fut._exc is PENDING else repr(fut._exc),
        "waiters": fut._waiters,
        "ctx": fut._ctx,
        "done": fut.done(),
    }


def state(p: Producer) -> dict[str, Any]:
    acc = p._acc
    topics = {}
    for name, t in acc.topics.items():
        topics[name] = {
            "sticky": t.sticky,
            "pending": len(t.pending),
            "partitions": [
                [
                    (
                        b.builder.build() if b.data is None else b.data,
                        len(b.futures),
                        b.memory,
                        b.positions,
                    )
                    for b in pq.batches
                ]
                for pq in t.partitions
            ],
        }
    return {
        "topics": topics,
        "available": p._pool.available,
        "failed": acc.records_failed,
        "valid": sorted(p._intake.valid_topics),
    }


async def run_both(
    calls: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch, **config: Any
) -> tuple[list[Any], list[Any], Producer, Producer, int]:
    """The calls through the C path and through the Python path: (outcomes, outcomes,
    producer, producer, records the C function took); an outcome is a future or the raised
    error's repr."""
    if C_SEND is None:
        pytest.fail("the C kernel is not built: nothing to compare")

    async def drive(p: Producer) -> list[Any]:
        out: list[Any] = []
        for args in calls:
            try:
                out.append(await p.send(*args))
            except Exception as exc:
                out.append(repr(exc))
        return out

    taken: list[Any] = []

    def counting(*args: Any) -> Any:
        fut = C_SEND(*args)
        if fut is not None:
            taken.append(fut)
        return fut

    monkeypatch.setattr(producer_module, "_C_SEND_FAST", counting)
    fast = armed(**config)
    got_fast = await drive(fast)
    monkeypatch.setattr(producer_module, "_C_SEND_FAST", None)
    slow = armed(**config)
    got_slow = await drive(slow)
    monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND)
    return got_fast, got_slow, fast, slow, len(taken)


def assert_same(got_fast: list[Any], got_slow: list[Any], fast: Producer, slow: Producer) -> None:
    assert len(got_fast) == len(got_slow)
    for i, (a, b) in enumerate(zip(got_fast, got_slow, strict=True)):
        if isinstance(b, DeliveryFuture):
            assert isinstance(a, DeliveryFuture), (i, a, b)
            assert type(a) is type(b)
            sa, sb = slots(a), slots(b)
            if sb["loop"] is not None:
                assert sa["loop"] is fast._intake.loop and sb["loop"] is slow._intake.loop
                sa["loop"] = sb["loop"] = "loop"
            assert sa == sb, i
        else:
            assert a == b, i
    assert state(fast) == state(slow)


def mixed_calls() -> list[tuple[Any, ...]]:
    """Every kind of call, the common case most often (and enough to fill batches)."""
    rng = random.Random(3)
    calls: list[tuple[Any, ...]] = []
    for i in range(600):
        ts = TS + i // 7
        kind = rng.randrange(24)
        value = rng.randbytes(rng.randrange(0, 120))
        key = b"key-%d" % rng.randrange(50)
        if kind < 8:
            calls.append(("t", value, key, None, ts))  # keyed
        elif kind < 13:
            calls.append(("t", value, None, None, ts))  # unkeyed: sticky
        elif kind == 13:
            calls.append(("t", None, key, None, ts))
        elif kind == 14:
            calls.append(("t", None, None, None, ts))
        elif kind == 15:
            calls.append(("t", value, key, rng.randrange(4), ts))  # explicit partition
        elif kind == 16:
            calls.append(("t", value, key, 9, ts))  # out of range: the future fails
        elif kind == 17:
            calls.append(("t", value, key, rng.choice([-1, True, "0", 2**70]), ts))
        elif kind == 18:
            calls.append(("t", value, key, None, rng.choice([-5, True, 2.5, 2**70])))
        elif kind == 19:
            calls.append(("t", value, key, None, ts, [("h", b"v")]))  # headers
        elif kind == 20:
            calls.append(("t", bytearray(value), memoryview(key), None, ts))
        elif kind == 21:
            calls.append(("t", "text", key, None, ts))  # no serializer: TypeError
        elif kind == 22:
            calls.append((rng.choice(["u", "bad name!", 5]), value, key, None, ts))
        else:
            calls.append(("t", b"x" * 3000, key, None, ts))  # over max_request_size
    return calls


async def test_mixed_calls_leave_the_same_state(monkeypatch: pytest.MonkeyPatch) -> None:
    got_fast, got_slow, fast, slow, taken = await run_both(
        mixed_calls(), monkeypatch, batch_size=700, max_request_size=2048
    )
    assert_same(got_fast, got_slow, fast, slow)
    assert taken > 250  # the C path did the common case
    # Batches filled and switched: the "full" handover was exercised.
    assert max(len(pq.batches) for pq in fast._acc.topics["t"].partitions) >= 3
    assert fast._acc.topics["u"].pending  # an unknown topic waits for metadata


async def test_batches_built_by_send_many_take_single_records_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A batch holding a send_many run has positions: a single record appended after the
    # run adds its -1 there.
    got: list[Any] = []
    for use_c in (True, False):
        monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND if use_c else None)
        p = armed()
        run = await p.send_many("t", [b"a", b"b", b"c"], partition=1, timestamp_ms=TS)
        futs = [await p.send("t", b"v%d" % i, None, 1, TS) for i in range(3)]
        got.append((futs, p, run))
    (fa, pa, _), (fb, pb, _) = got
    assert_same(fa, fb, pa, pb)
    assert pa._acc.topics["t"].partitions[1].batches[0].positions == [0, 1, 2, -1, -1, -1]


@pytest.mark.parametrize(
    ("config", "label"),
    [
        ({"key_serializer": lambda k: k, "value_serializer": lambda v: v}, "serializers"),
        ({"max_block_ms": 0, "buffer_memory": 4096}, "buffer full"),
    ],
)
async def test_other_configurations_match(
    config: dict[str, Any], label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, ...]] = [("t", b"v" * 90, b"k%d" % i, None, TS) for i in range(40)]
    got_fast, got_slow, fast, slow, taken = await run_both(calls, monkeypatch, **config)
    assert_same(got_fast, got_slow, fast, slow)
    assert (taken == 0) if label == "serializers" else (taken > 5)
    if label == "buffer full":
        assert any(isinstance(g, str) and "BufferExhausted" in g for g in got_fast)


async def test_now_is_stamped_once_per_millisecond() -> None:
    if C_SEND is None:
        pytest.fail("the C kernel is not built")
    p = armed()
    before = time.time_ns() // 1_000_000
    futs = [await p.send("t", b"v", b"k") for _ in range(200)]
    after = time.time_ns() // 1_000_000
    stamps = [f._timestamp for f in futs]
    assert all(before <= s <= after for s in stamps)
    assert stamps == sorted(stamps)
    # Equal stamps are one int object (what send() keeps in intake.last_ts).
    by_value = {s: s for s in stamps}
    assert all(s is by_value[s] for s in stamps)
    assert p._intake.last_ts == stamps[-1]


def refusals() -> list[tuple[str, Any]]:
    return [
        ("not running", lambda p: setattr(p._intake, "running", False)),
        ("serializer", lambda p: setattr(p._intake, "key_ser", bytes)),
        ("unknown topic", lambda p: p._intake.valid_topics.discard("t")),
        ("metadata not known", lambda p: setattr(p._acc.topics["t"], "ready", False)),
        ("records pending", lambda p: p._acc.topics["t"].pending.append(None)),
        ("custom partitioner", lambda p: setattr(p._acc, "partitioner", lambda *a: 0)),
        ("pool waiter", lambda p: p._pool._waiters.append(None)),
        ("pool empty", lambda p: setattr(p._pool, "_available", 10)),
    ]


@pytest.mark.parametrize(("label", "change"), refusals(), ids=[r[0] for r in refusals()])
async def test_refused_calls_change_nothing(label: str, change: Any) -> None:
    if C_SEND is None:
        pytest.fail("the C kernel is not built")
    p = armed()
    await p.send("t", b"seed", b"k", None, TS)  # the topic is known and has a batch
    change(p)
    before = state(p)
    args = [("t", b"v", b"k", None, TS, None), ("t", b"v", None, None, None, None)]
    for a in args:
        assert C_SEND(p._intake, *a) is None, label
    assert state(p) == before
