"""The dead-cluster memory scenario, run in a fresh interpreter by
``test_producer_reliability.test_dead_cluster_blocks_send_then_fails_within_memory``.

A fresh process, because RSS only shows growth when no earlier test freed memory that the
allocator can hand out again. Prints one JSON line of figures; the test asserts on them.
Usage: ``python memory_child.py asyncio|trio``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from aiokafka_ng.errors import BufferExhaustedError, KafkaTimeoutError
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.testing import virtual_time
from tests.reliability.helpers import fake_cluster, rss_bytes, value

BUFFER_MEMORY = int(sys.argv[2]) if len(sys.argv) > 2 else 8 * 1024 * 1024


async def scenario() -> dict[str, Any]:
    topic = "dead"
    out: dict[str, Any] = {"buffer_memory": BUFFER_MEMORY}
    async with (
        fake_cluster(topic, seed=15) as kafka,
        Producer(
            **kafka.client_config(),
            buffer_memory=BUFFER_MEMORY,
            max_block_ms=500,
            request_timeout_ms=1000,
            delivery_timeout_ms=3000,
            reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=200,
            linger_ms=10,
            batch_size=64 * 1024,
        ) as producer,
    ):
        await producer.send_and_wait(topic, value(0, 0), partition=0)
        for node in kafka.nodes:
            kafka.kill(node)
        before = rss_bytes()
        futs: list[DeliveryFuture] = []
        with anyio.fail_after(30):
            while True:
                t0 = anyio.current_time()
                try:
                    futs.append(await producer.send(topic, value(len(futs) % 4, len(futs))))
                except BufferExhaustedError:
                    out["blocked"] = anyio.current_time() - t0
                    break
            out["grown"] = rss_bytes() - before
            out["available"] = producer.statistics()["memory"].available
            t0 = anyio.current_time()
            for fut in futs:
                await fut.wait_done()
            out["failed_after"] = anyio.current_time() - t0
        out["queued"] = len(futs)
        out["timed_out"] = sum(isinstance(f.exception(), KafkaTimeoutError) for f in futs)
        out["refilled"] = producer.statistics()["memory"].available
        for node in kafka.nodes:
            kafka.restart(node)
        with anyio.fail_after(20):
            after = await producer.send_and_wait(topic, value(0, 1), partition=0)
        out["after_offset"] = after.offset
    return out


def main() -> None:
    # On virtual time (a FakeKafka in memory): max_block_ms and delivery_timeout_ms are
    # measured exactly; RSS is real.
    backend, options = virtual_time.backend(sys.argv[1])
    result = anyio.run(scenario, backend=backend, backend_options=options)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
