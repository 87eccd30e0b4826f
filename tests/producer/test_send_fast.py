"""``send()``'s C fast path (``producer/_send.c``) against its Python twin (send()'s own path).

Each test drives two producers through the same calls, one with the C function and one
with ``_C_SEND_FAST`` set to None, and compares everything a user can see of the calls: the
errors raised, every future's outcome (its RecordMetadata -- partition, offset, timestamp --
or its error), the buffer memory and the failed-record count right after the calls, and the
topic's log as FakeKafka stored it (every record's partition, offset, timestamp, key, value
and headers). The unkeyed records' sticky partitions are drawn from a generator seeded alike
for both producers (``seeded_producer``), so a batch filled or switched differently shows as
records in other partitions. Both run on
FakeKafka in memory, on virtual time: the two runs are the same sequence of events. Without
the C kernel (AIOKAFKA_NG_PURE_PYTHON=1) the tests that need it fail rather than pass
vacuously, unless the environment asked for pure Python.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import aiokafka_ng.producer.producer as producer_module
from aiokafka_ng import _native
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

C_SEND = producer_module._C_SEND_FAST
TS = 1_700_000_000_000
PARTITIONS = 5  # not a power of two, so the key hash's sign bit matters
SeededRandom = random.Random
PRODUCE = 0
HOLD_MS = 5_000  # virtual; within the request timeout


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def test_the_fast_path_is_bound_when_the_kernel_is() -> None:
    if _native.pure_python_requested():
        assert C_SEND is None
    else:
        assert C_SEND is not None, "the C kernel's send_fast refused the producer's classes"


def outcome(got: Any) -> Any:
    """What a call left, as a user sees it once the producer flushed: the error it raised,
    or its future's error or RecordMetadata."""
    if not isinstance(got, DeliveryFuture):
        return got  # the raised error's repr
    assert got.done()
    exc = got.exception()
    return (type(got), got.topic, repr(exc) if exc is not None else got.result())


class Run:
    """One producer's run of the calls: outcomes, statistics right after the calls, the log."""

    def __init__(self) -> None:
        self.outcomes: list[Any] = []
        self.after_calls: tuple[int, int, int] = (0, 0, 0)
        self.log: list[list[tuple[Any, ...]]] = []
        self.taken = 0  # records the C function took

    def same_as(self, other: Run) -> None:
        assert len(self.outcomes) == len(other.outcomes)
        for i, (a, b) in enumerate(zip(self.outcomes, other.outcomes, strict=True)):
            assert a == b, i
        assert self.after_calls == other.after_calls
        assert self.log == other.log


@asynccontextmanager
async def seeded_producer(
    kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch, **config: Any
) -> AsyncIterator[Producer]:
    """A started producer whose random choices (the sticky partitions first) are the same
    for every producer made here: the global generator seeded, and every generator the
    producer makes for itself seeded alike. (Both: a build of partitioner.py from before
    the sticky partitioner drew its seed from the global generator seeds it from the OS.)"""
    random.seed(7)
    with monkeypatch.context() as m:
        m.setattr(random, "Random", lambda *args: SeededRandom(7))
        p = Producer(**kafka.client_config(), **config)
    async with p:
        yield p


async def run(
    calls: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch, use_c: bool, **config: Any
) -> Run:
    """The calls through the C path (``use_c``) or the Python path, on a fresh cluster whose
    topic ``t`` has 5 partitions (no other topic exists); partition 0 starts with the two
    records ``warm`` and ``hold``."""
    result = Run()
    if use_c:
        if C_SEND is None:
            pytest.fail("the C kernel is not built: nothing to compare")

        def counting(*args: Any) -> Any:
            fut = C_SEND(*args)
            if fut is not None:
                result.taken += 1
            return fut

        monkeypatch.setattr(producer_module, "_C_SEND_FAST", counting)
    else:
        monkeypatch.setattr(producer_module, "_C_SEND_FAST", None)
    config.setdefault("linger_ms", 1000)
    try:
        async with FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka:
            kafka.create_topic("t", partitions=PARTITIONS)
            async with seeded_producer(
                kafka, monkeypatch, max_in_flight_requests_per_connection=1, **config
            ) as p:
                await p.send_and_wait("t", b"warm", partition=0, timestamp_ms=TS)  # metadata
                # One Produce in flight, its answer held: the sender can send nothing more
                # until the calls are done, so no batch leaves the accumulator between two
                # calls (the scheduler's order, random under trio, cannot change which
                # records share a batch). The clock stands still meanwhile: no call waits.
                kafka.delay(1, HOLD_MS, api_key=PRODUCE)
                await p.send("t", b"hold", partition=0, timestamp_ms=TS)
                await kafka.wait_until(lambda: kafka.requests(1)[PRODUCE] >= 2)
                got: list[Any] = []
                for args in calls:
                    try:
                        got.append(await p.send(*args))
                    except Exception as exc:
                        got.append(repr(exc))
                stats = p.statistics()
                result.after_calls = (
                    stats.memory.available,
                    stats.records_failed,
                    stats.buffer_bytes_used,
                )
                assert stats.batches_sent == 1  # the warm-up's only: nothing left meanwhile
                kafka.delay(1, 0, api_key=PRODUCE)
                await p.flush()
            result.outcomes = [outcome(g) for g in got]
            result.log = [
                [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kafka.records("t", n)]
                for n in range(PARTITIONS)
            ]
    finally:
        monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND)
    return result


async def run_both(
    calls: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch, **config: Any
) -> tuple[Run, Run]:
    fast = await run(calls, monkeypatch, True, **config)
    slow = await run(calls, monkeypatch, False, **config)
    fast.same_as(slow)
    return fast, slow


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
    fast, _ = await run_both(mixed_calls(), monkeypatch, batch_size=700, max_request_size=2048)
    assert fast.taken > 250  # the C path did the common case
    # Batches filled and switched: the unkeyed records moved between partitions, and
    # partitions got several batches' worth ("full" handovers).
    sticky = {n for n, records in enumerate(fast.log) for r in records if r[2] is None}
    assert len(sticky) >= 3
    assert max(len(records) for records in fast.log) > 3 * 700 // 120
    # A topic that does not exist waits for metadata, then fails (both alike, above).
    unknown = [o for o in fast.outcomes if isinstance(o, tuple) and o[1] == "u"]
    assert unknown and all(isinstance(o[2], str) for o in unknown)


async def test_batches_built_by_send_many_take_single_records_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A batch holding a send_many run takes single records after it (the C path appends
    # to a batch that has a run's positions).
    if C_SEND is None:
        pytest.fail("the C kernel is not built: nothing to compare")
    runs = []
    for use_c in (True, False):
        monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND if use_c else None)
        async with FakeKafka(brokers=1, tcp=False) as kafka:
            kafka.create_topic("t", partitions=PARTITIONS)
            async with Producer(**kafka.client_config(), linger_ms=1000) as p:
                await p.partitions_for("t")
                run_ = await p.send_many("t", [b"a", b"b", b"c"], partition=1, timestamp_ms=TS)
                futs = [await p.send("t", b"v%d" % i, None, 1, TS) for i in range(3)]
                await p.flush()
                runs.append(
                    (
                        list(await run_),
                        [await f for f in futs],
                        [(r.offset, r.value) for r in kafka.records("t", 1)],
                    )
                )
    monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND)
    assert runs[0] == runs[1]
    metas, singles, log = runs[0]
    assert [m.offset for m in metas + singles] == list(range(6))
    assert log == list(enumerate([b"a", b"b", b"c", b"v0", b"v1", b"v2"]))


def custom_partitioner(key: bytes | None, all_parts: list[int], available: list[int]) -> int:
    return all_parts[-1]


@pytest.mark.parametrize(
    ("config", "label"),
    [
        ({"key_serializer": lambda k: k, "value_serializer": lambda v: v}, "serializers"),
        ({"partitioner": custom_partitioner}, "custom partitioner"),
        ({"max_block_ms": 0, "buffer_memory": 4096}, "buffer full"),
    ],
)
async def test_other_configurations_match(
    config: dict[str, Any], label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the C path declines (serializers, a custom partitioner) send() is the Python
    # path's, whatever the C function looked at first; where the buffer runs out it hands
    # over at the same record.
    calls: list[tuple[Any, ...]] = [("t", b"v" * 90, b"k%d" % i, None, TS) for i in range(40)]
    fast, _ = await run_both(calls, monkeypatch, **config)
    assert (fast.taken == 0) if label != "buffer full" else (fast.taken > 5)
    if label == "buffer full":
        assert any(isinstance(o, str) and "BufferExhausted" in o for o in fast.outcomes)


async def test_a_stopped_producer_refuses_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not running: the C path declines and send() raises what the Python path raises.
    if C_SEND is None:
        pytest.fail("the C kernel is not built: nothing to compare")
    errors = []
    for use_c in (True, False):
        monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND if use_c else None)
        async with FakeKafka(brokers=1, tcp=False) as kafka:
            kafka.create_topic("t", partitions=PARTITIONS)
            p = Producer(**kafka.client_config())
            await p.start()
            await p.send_and_wait("t", b"seed", b"k")  # the topic is known
            await p.close()
            with pytest.raises(Exception) as info:
                await p.send("t", b"v", b"k", None, TS)
            errors.append(repr(info.value))
    monkeypatch.setattr(producer_module, "_C_SEND_FAST", C_SEND)
    assert errors[0] == errors[1] and "Closed" in errors[0]


async def test_now_is_stamped_once_per_millisecond() -> None:
    if C_SEND is None:
        pytest.fail("the C kernel is not built")
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", partitions=PARTITIONS)
        async with Producer(**kafka.client_config(), linger_ms=1000) as p:
            await p.partitions_for("t")
            before = time.time_ns() // 1_000_000
            futs = [await p.send("t", b"v", b"k") for _ in range(200)]
            after = time.time_ns() // 1_000_000
            await p.flush()
    stamps = [f.result().timestamp for f in futs]
    assert all(before <= s <= after for s in stamps)
    assert stamps == sorted(stamps)
    # Equal stamps are one int object (send() keeps the last one and reuses it).
    by_value = {s: s for s in stamps}
    assert all(s is by_value[s] for s in stamps)
