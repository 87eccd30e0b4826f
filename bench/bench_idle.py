"""Idle and lone-record cost of a producer: what a web app with little traffic pays.

Two measurements per client, each client in its own process (so one's memory and timers
do not weigh on another's), against one LocalBroker (Tansu) or ``--bootstrap``:

* ``idle``: a started producer that has sent one record, then nothing for ``--seconds``
  (default 10): the process's CPU time (``time.process_time``) and, on asyncio, how often
  the event loop woke (``select()`` calls of the loop's selector).
* ``lone``: one request at a time, ``await (await producer.send(...))``, ``--records``
  times (default 2,000, after 200 to warm up; acks=all, linger 5 ms, 100 B): CPU time per
  record (user and system) and loop wake-ups per record.

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


async def _measure(client: str, bootstrap: str, what: str, n: int, seconds: float) -> str:
    if client == "aiokafka":
        from aiokafka import AIOKafkaProducer

        producer: Any = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
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
        await (producer.stop() if client == "aiokafka" else producer.close())
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
