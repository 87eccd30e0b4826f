"""Measure what clients do while their broker is down (the table in docs/fastapi.md).

A producer, a group consumer and an admin client run against a bundled broker
(:class:`~aiokafka_ng.testing.LocalBroker`), which is then stopped. Printed: the log lines
of aiokafka_ng at INFO and above, and how long ``status()``, ``send()``,
``send_and_wait()``, admin calls and each client's shutdown take, in seconds. The broker is
then started again to show the line logged when it is back.

    python tools/outage_timeline.py                  # asyncio, bounded calls only (~30 s)
    python tools/outage_timeline.py --backend trio
    python tools/outage_timeline.py --defaults       # also send_and_wait() and list_topics()
                                                     # with default timeouts (~3 min more)
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka_ng import AdminClient, Consumer, Producer  # noqa: E402
from aiokafka_ng.errors import KafkaError  # noqa: E402
from aiokafka_ng.testing import LocalBroker  # noqa: E402

_t0 = time.monotonic()


class _Print(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("aiokafka_ng.consumer.group"):
            return  # joins and assignments: not about the outage
        print(f"  [{time.monotonic() - _t0:7.2f} s {record.levelname}] {record.getMessage()}")


async def _timed(label: str, call: Awaitable[Any]) -> None:
    start = time.monotonic()
    try:
        outcome = f"returned {await call!r}"
    except KafkaError as exc:
        outcome = f"raised {type(exc).__name__}: {exc}"
    print(f"{label}: {time.monotonic() - start:.2f} s, {outcome[:160]}")


async def main(defaults: bool) -> None:
    global _t0
    broker = LocalBroker()
    await broker.start()
    servers = broker.bootstrap_servers
    topic = f"outage-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(bootstrap_servers=servers)
    producer = Producer(bootstrap_servers=servers, client_id="web-producer")
    consumer = Consumer(
        topic, bootstrap_servers=servers, group_id=f"g-{topic}", client_id="web-consumer",
        auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
    )  # fmt: skip
    try:
        await admin.__aenter__()
        await producer.start()
        await consumer.start()
        await producer.send_and_wait(topic, b"before", partition=0)
        with anyio.fail_after(30):
            await consumer.getone()
        print("producer, consumer and admin client up; stopping the broker")
        _t0 = time.monotonic()
        await broker.stop()
        print(f"broker stopped: {time.monotonic() - _t0:.2f} s")
        start = time.monotonic()
        # Polling is the measurement: it is what a load balancer's /health probe sees.
        while producer.status().ready:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        print(f"status().ready false (/health 503): {time.monotonic() - start:.2f} s")
        await _timed("send()", producer.send(topic, b"queued"))
        await _timed("send_and_wait(timeout=5)", producer.send_and_wait(topic, b"x", timeout=5))
        await _timed("list_topics(timeout_ms=3000)", admin.list_topics(timeout_ms=3000))
        if defaults:
            await _timed("send_and_wait()", producer.send_and_wait(topic, b"y"))
            await _timed("list_topics()", admin.list_topics())
        start = time.monotonic()
        await _timed("producer.close()", producer.close())
        await _timed("consumer.stop()", consumer.stop())
        await _timed("admin.close()", admin.close())
        print(f"shutdown in all: {time.monotonic() - start:.2f} s")
        print("starting the broker again, then stopping it for ~3 s")
        await broker.start()
        async with Producer(bootstrap_servers=servers, client_id="second") as again:
            await again.send_and_wait(topic, b"up")
            await broker.stop()
            while again.status().ready:  # noqa: ASYNC110 (as above)
                await anyio.sleep(0.01)
            await anyio.sleep(3)  # the outage (a measurement, not synchronisation)
            await broker.start()
            await _timed("send_and_wait(timeout=30) after the restart",
                         again.send_and_wait(topic, b"back", timeout=30))  # fmt: skip
    finally:
        await producer.close(timeout=0)
        await consumer.stop()
        await admin.close()
        await broker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--defaults", action="store_true", help="also the default timeouts")
    args = parser.parse_args()
    logging.getLogger("aiokafka_ng").addHandler(_Print())
    logging.getLogger("aiokafka_ng").setLevel(logging.INFO)
    anyio.run(main, args.defaults, backend=args.backend)
