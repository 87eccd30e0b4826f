"""Idle and lone-record cost of a producer: what a web app with little traffic pays.

Two measurements per client, each client in its own process (so one's memory and timers
do not weigh on another's), against one LocalBroker (Tansu) or ``--bootstrap``:

* ``idle``: a started producer that has sent one record, then nothing for ``--seconds``
  (default 10): the process's CPU time (``time.process_time``) and, on asyncio, how often
  the event loop woke (``select()`` calls of the loop's selector).
* ``lone``: one request at a time, ``await (await producer.send(...))``, ``--records``
  times (default 2,000, after 200 to warm up; acks=all, linger 5 ms, 100 B): CPU time per
  record (user and system) and loop wake-ups per record.

The ``floor`` client (asyncio, ``lone`` only; not in the default ``--clients``) is no
Kafka client: one asyncio protocol that writes one Produce request built once (only its
correlation id changes), 5 ms after each "send", and resolves a future when the answer's
size prefix says it arrived whole. It is what any asyncio client pays for the lone-record
pattern before doing any Kafka work of its own: the linger timer, one write and one read
system call, the loop's turns and one awaiting task. Ours and aiokafka's per-record cost
minus the floor's is the clients' own.

Run: ``python bench/bench_idle.py [--clients ours,ours-trio,aiokafka] [--bootstrap H:P]``.
Not a test: CPU time on a shared machine varies by tens of percent from run to run; for
repeatable instruction counts run one measurement under ``valgrind --tool=callgrind`` twice
with different ``--records`` and subtract (startup cancels out).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import selectors
import subprocess
import sys
import time
from typing import Any

VALUE = b"v" * 100


class _CountingSelector(selectors.DefaultSelector):
    """Counts the loop's turns: asyncio calls ``select()`` once per turn."""

    turns = 0

    def select(self, timeout: float | None = None) -> Any:
        _CountingSelector.turns += 1
        return super().select(timeout)


class _FloorProducer:
    """See ``floor`` in the module docstring."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.waiting: asyncio.Future[None] | None = None
        self.buffered = bytearray()
        self.correlation_id = 0

    async def start(self) -> None:
        from aiokafka_ng import Producer
        from aiokafka_ng.protocol.framing import encode_request
        from aiokafka_ng.protocol.messages.produce import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )
        from aiokafka_ng.protocol.records import RecordBatchBuilder

        # The topic exists (a broker that creates topics on first use does it on Metadata,
        # which this client never sends) and partition 0 has a leader before we write to it.
        made = Producer(bootstrap_servers=self.bootstrap)
        await made.start()
        try:
            await (await made.send("bench-idle", VALUE, partition=0))
        finally:
            await made.close()
        builder = RecordBatchBuilder()
        builder.append(int(time.time() * 1000), None, VALUE)
        request = ProduceRequest(
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                TopicProduceData(
                    name="bench-idle",
                    partition_data=[PartitionProduceData(index=0, records=builder.build())],
                )
            ],
        )
        self.frame = bytearray(encode_request(request, 9, 0, "floor"))
        host, port = self.bootstrap.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        self.loop = loop
        floor = self

        class Reader(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                buf = floor.buffered
                buf += data
                if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    del buf[: 4 + int.from_bytes(buf[:4], "big")]
                    assert floor.waiting is not None
                    floor.waiting.set_result(None)

        self.transport, _ = await loop.create_connection(Reader, host, int(port))

    def _write(self) -> None:
        self.correlation_id += 1
        self.frame[8:12] = self.correlation_id.to_bytes(4, "big")
        self.transport.write(self.frame)

    async def send(self, topic: str, value: bytes) -> asyncio.Future[None]:
        self.waiting = fut = self.loop.create_future()
        self.loop.call_later(0.005, self._write)  # the linger
        return fut

    async def stop(self) -> None:
        self.transport.close()


async def _measure(client: str, bootstrap: str, what: str, n: int, seconds: float) -> str:
    if client == "floor":
        producer: Any = _FloorProducer(bootstrap)
        await producer.start()
    elif client == "aiokafka":
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
        await producer.start()
    else:
        from aiokafka_ng import Producer

        producer = Producer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
        await producer.start()
    try:
        for _ in range(200 if what == "lone" else 1):
            await (await producer.send("bench-idle", VALUE))
        if what == "idle":
            await _sleep(0.5)
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), _CountingSelector.turns
        c0 = time.process_time()
        if what == "idle":
            await _sleep(seconds)
        else:
            for _ in range(n):
                await (await producer.send("bench-idle", VALUE))
        c1 = time.process_time()
        ru1, t1 = resource.getrusage(resource.RUSAGE_SELF), _CountingSelector.turns
    finally:
        await (producer.close() if client.startswith("ours") else producer.stop())
    turns = "-" if client.endswith("trio") else f"{t1 - t0}"
    if what == "idle":
        return (
            f"{client:10} idle {seconds:g} s: CPU {1000 * (c1 - c0):.2f} ms, loop wake-ups {turns}"
        )
    user, system = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
    per = "-" if turns == "-" else f"{int(turns) / n:.2f}"
    return (
        f"{client:10} lone x{n}: CPU/record {1000 * (c1 - c0) / n:.3f} ms "
        f"(user {1000 * user / n:.3f}, sys {1000 * system / n:.3f}), loop wake-ups/record {per}"
    )


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


def _child(client: str, bootstrap: str, what: str, n: int, seconds: float) -> None:
    if client.endswith("trio"):
        import anyio

        line = anyio.run(_measure, client, bootstrap, what, n, seconds, backend="trio")
    else:
        loop = asyncio.SelectorEventLoop(_CountingSelector())
        try:
            line = loop.run_until_complete(_measure(client, bootstrap, what, n, seconds))
        finally:
            loop.close()
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="ours,ours-trio,aiokafka")
    parser.add_argument("--bootstrap")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--child", nargs=3, metavar=("CLIENT", "BOOTSTRAP", "WHAT"))
    args = parser.parse_args()
    if args.child:
        _child(*args.child, args.records, args.seconds)
        return

    def run_all(bootstrap: str) -> None:
        for what in ("idle", "lone"):
            for client in args.clients.split(","):
                cmd = [sys.executable, __file__, "--child", client, bootstrap, what]
                cmd += ["--records", str(args.records), "--seconds", str(args.seconds)]
                subprocess.run(cmd, check=True)

    if args.bootstrap:
        run_all(args.bootstrap)
        return
    from aiokafka_ng.testing import LocalBroker

    with LocalBroker() as broker:
        run_all(broker.bootstrap_servers)


if __name__ == "__main__":
    main()
