"""The consumer's ``async for`` and the cyclic collector (issue 36): records handed out one
by one are no objects for the collector to walk (compiled build) and nothing on the path
forms a cycle. Counts, not timings, against the real broker."""

from __future__ import annotations

import gc
import uuid
from collections import Counter
from typing import Any

import pytest

from aiokafka_ng.consumer import Consumer, ConsumerRecord
from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol import speedups

pytestmark = pytest.mark.anyio

N = 3000


def _ours(obj: object) -> bool:
    """Part of a cycle our code made: an object of a type of ours, or a frame, coroutine or
    function of our code. A CI run once found a cycle of the test harness's own (anyio's
    TestRunner of an earlier test, its event loop, tasks and frames) becoming unreachable
    during the measured loop: garbage, but not the consumer's."""
    if type(obj).__module__.startswith("aiokafka_ng"):
        return True
    code = getattr(obj, "f_code", None) or getattr(obj, "cr_code", None)
    code = code or getattr(obj, "__code__", None)
    return code is not None and "/aiokafka_ng/" in code.co_filename


async def test_async_for_leaves_nothing_per_record_for_the_collector(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"gc-{uuid.uuid4().hex[:10]}"
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_many(topic, [b"v%d" % i for i in range(N)], partition=0)
        await producer.flush()
    async with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        first = await c.getone()  # assignment, connections, the first fetch
        kept: list[ConsumerRecord[Any, Any]] = [first]
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            before = Counter(type(o) for o in gc.get_objects())
            async for record in c:
                kept.append(record)
                if len(kept) == N:
                    break
            grown = Counter(type(o) for o in gc.get_objects()) - before
            values = [r.value for r in kept]
            del kept, record
            found = gc.collect()
            garbage = [type(o).__name__ for o in gc.garbage if _ours(o)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert values == [b"v%d" % i for i in range(N)]
    records = grown.pop(ConsumerRecord, 0)
    if speedups.AVAILABLE:
        # Decoded records leave the collector's lists at once (record_reader._C_TRACK);
        # what is left is the fetch machinery's: a few dozen objects, not one per record.
        assert records == 0
        assert sum(grown.values()) < 200, sorted(f"{t.__name__} {n}" for t, n in grown.items())
    else:
        # Interpreted, records stay tracked (those of the first fetch were decoded
        # before the count began).
        assert 0 < records <= N - 1
    assert garbage == [], (found, garbage)
