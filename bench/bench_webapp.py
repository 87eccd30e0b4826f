"""The web-app pattern: request handlers that each ``await`` their own record, aiokafka_ng
against aiokafka and confluent-kafka's ``AIOProducer``, all in one run on one LocalBroker
(Tansu), reported side by side with ratios ours/peer.

Every request does ``await (await producer.send(topic, value, key))``: it sends one record
and waits for its acknowledgement. Records are 100 B values with keys ``key-0..key-999``
(so every client spreads them over the partitions), acks=all, linger 5 ms; each run writes
to a topic of its own with 4 partitions, created before the client starts.

Patterns (``--patterns``, default all four):

* ``one``        -- one request at a time: the next send starts when the previous record is
  acknowledged, as fast as that goes, for ``--seconds``
* ``paced``      -- one request every 50 ms (20 records/s) for ``--seconds``; each request is
  a task of its own, so a slow acknowledgement does not delay the next request
* ``concurrent`` -- 200 tasks, each looping send + await its own record, for ``--seconds``
  (a task that is waiting when the time is up finishes its record)
* ``idle``       -- a started producer with nothing to send, for ``--idle-seconds``

Each client runs in a process of its own (one at a time, so they do not share the two
cores), which starts the producer, sends one record and waits for it (connections and
metadata exist from then on), and only then measures the pattern; starting and closing are
outside every figure. The numbers, per pattern and client:

* ``records/s``     -- records acknowledged / seconds from the first send to the last ack
* ``CPU us/record`` -- the client process's CPU (``time.process_time``: user + system, all
  its threads, so librdkafka's and the executor's too) over the pattern, per record, in
  microseconds. The harness's own work (a timestamp and a list append per record, the
  tasks of the pattern) is in it, the same for every client
* ``p50 ms``, ``p99 ms`` -- send -> ack latency: from just before ``send()`` to the moment
  the awaiting request resumes
* ``CPU ms per 10 s`` (idle) -- that process CPU while idle, scaled to 10 s
* ``broker CPU us/record`` -- the broker's process CPU over the same span, per record
  (``/proc``; its clock ticks every 10 ms, so coarse for the slow patterns)
* ``other load, cores`` -- what the rest of the machine (not the client, not the broker)
  used over the same span, in cores of its 2: how much noise the cell had. It is read from
  ``/proc/stat`` (10 ms ticks) and the client's share from ``process_time``, so a near-idle
  cell can show a few hundredths below zero

Columns: ``ours`` is aiokafka_ng from this checkout (its root is the child's
``PYTHONPATH``; ``--label`` renames it); ``aiokafka`` is aiokafka's ``AIOKafkaProducer``
(``linger_ms=5``); ``confluent`` is confluent-kafka's ``confluent_kafka.aio.AIOProducer``
with its defaults, which buffer records in Python up to ``batch_size=1000`` or an idle
second (``buffer_timeout=1.0``) before librdkafka sees them, and serve acknowledgements only
when the producer next calls ``poll``/``flush`` (on a later ``produce()`` or a buffer timeout);
``conf-tuned`` is the same with ``batch_size=1, buffer_timeout=0.1``: every record goes to
librdkafka at once, and its timeout task (which checks every ``max(0.1, timeout / 2)`` s,
so 0.1 s is its fastest) serves acknowledgements when nothing else does. librdkafka gets
``linger.ms=5`` in both.

Ratio columns divide the first aiokafka_ng column by each other column, cell by cell: above
1 is more records/s, more CPU or more latency than the peer.

An A/B of two commits in one period: ``--tree LABEL=PATH`` (repeatable) adds a column for
aiokafka_ng from another checkout, for example a git worktree of main at another commit
(copy the compiled ``aiokafka_ng/*.so`` and ``aiokafka_ng/*/*.so`` into it, or its
pure-Python twins run; the header says how many compiled modules each column loaded). The
child runs with ``PYTHONPATH=PATH`` and the run stops if ``aiokafka_ng`` was imported from
anywhere else.

Run: ``python bench/bench_webapp.py [--seconds 10] [--patterns one,idle]
[--clients ours,aiokafka] [--label after --tree before=/work/wt-before]``; ``nox -s bench``
runs every bench script. ``--broker``/``--bootstrap`` as in ``bench_producer.py``
(``brokers.py``). Not a test: numbers depend on the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brokers import Target, add_options, describe, open_target
from cpu_time import machine_cpu, process_cpu

PARTITIONS = 4
VALUE = b"v" * 100
KEYS = [b"key-%d" % i for i in range(1000)]
PACED_INTERVAL = 0.05  # 20 records/s
TASKS = 200
PATTERNS = {
    "one": "one request at a time",
    "paced": f"paced, {1 / PACED_INTERVAL:.0f} records/s",
    "concurrent": f"{TASKS} concurrent requests",
    "idle": "idle started producer",
}
PEERS = ("aiokafka", "confluent", "conf-tuned")
#: ``conf-tuned``: what makes ``AIOProducer`` answer a lone request in 0.1 s, not 1-1.5 s.
CONF_TUNED = {"batch_size": 1, "buffer_timeout": 0.1}
CHECKOUT = Path(__file__).resolve().parent.parent
RESULT = "RESULT "

# `send(topic, value, key)` returns an awaitable of the record's future.
Send = Callable[[str, bytes, bytes], Awaitable[Awaitable[Any]]]


# ---------------------------------------------------------------------------- child: clients


@asynccontextmanager
async def ours(bootstrap: str) -> AsyncIterator[Send]:
    from aiokafka_ng.producer import Producer

    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as p:
        yield p.send


@asynccontextmanager
async def aiokafka(bootstrap: str) -> AsyncIterator[Send]:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await p.start()
    try:
        yield p.send
    finally:
        await p.stop()


def confluent(**aio: Any) -> Callable[[str], Any]:
    @asynccontextmanager
    async def open_(bootstrap: str) -> AsyncIterator[Send]:
        from confluent_kafka.aio import AIOProducer

        conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
        p = AIOProducer(conf, **aio)
        try:
            yield p.produce
        finally:
            await p.close()

    return open_


CLIENTS: dict[str, Callable[[str], Any]] = {
    "ours": ours,
    "aiokafka": aiokafka,
    "confluent": confluent(),
    "conf-tuned": confluent(**CONF_TUNED),
}


# ---------------------------------------------------------------------------- child: patterns


async def one(send: Send, topic: str, seconds: float) -> list[float]:
    clock, lat = time.perf_counter, []
    end = clock() + seconds
    i = 0
    while clock() < end:
        t = clock()
        await (await send(topic, VALUE, KEYS[i % 1000]))
        lat.append(clock() - t)
        i += 1
    return lat


async def paced(send: Send, topic: str, seconds: float) -> list[float]:
    clock, lat = time.perf_counter, []

    async def request(i: int) -> None:
        t = clock()
        await (await send(topic, VALUE, KEYS[i % 1000]))
        lat.append(clock() - t)

    start = clock()
    tasks = []
    for i in range(int(seconds / PACED_INTERVAL)):
        delay = start + i * PACED_INTERVAL - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(request(i)))
    await asyncio.gather(*tasks)
    return lat


async def concurrent(send: Send, topic: str, seconds: float) -> list[float]:
    clock, lat = time.perf_counter, []
    end = clock() + seconds

    async def worker(i: int) -> None:
        while clock() < end:
            t = clock()
            await (await send(topic, VALUE, KEYS[i % 1000]))
            lat.append(clock() - t)
            i += TASKS

    await asyncio.gather(*(worker(w) for w in range(TASKS)))
    return lat


async def idle(send: Send, topic: str, seconds: float) -> list[float]:
    await asyncio.sleep(seconds)
    return []


RUN: dict[str, Callable[[Send, str, float], Awaitable[list[float]]]] = {
    "one": one,
    "paced": paced,
    "concurrent": concurrent,
    "idle": idle,
}


async def measure(args: argparse.Namespace) -> Any:
    brokers = [int(p) for p in args.broker_pids.split(",") if p]

    def clocks() -> tuple[float, float, float, float]:
        broker = sum(process_cpu(pid) for pid in brokers)
        return time.perf_counter(), time.process_time(), broker, machine_cpu()

    async with CLIENTS[args.child](args.bootstrap) as send:
        await (await send(args.topic, VALUE, KEYS[0]))  # connected, metadata known
        before = clocks()
        lat = await RUN[args.pattern](send, args.topic, args.secs)
        elapsed, cpu, broker, machine = (b - a for a, b in zip(before, clocks(), strict=True))
    return {
        "records": len(lat),
        "elapsed": elapsed,
        "cpu": cpu,
        "broker": broker if brokers else None,
        # Everything else the machine ran meanwhile, in cores: how noisy the cell is.
        "other": (machine - cpu - broker) / elapsed,
        **quantiles(lat),
    }


def quantiles(lat: list[float]) -> dict[str, float]:
    if not lat:
        return {}
    if len(lat) == 1:
        return {"p50": lat[0] * 1e3, "p99": lat[0] * 1e3}
    # inclusive: within the samples even when there are few (confluent's defaults: ~10)
    qs = statistics.quantiles(lat, n=100, method="inclusive")
    return {"p50": qs[49] * 1e3, "p99": qs[98] * 1e3}


def child(args: argparse.Namespace) -> None:
    result = asyncio.run(measure(args))
    if args.child == "ours":
        import aiokafka_ng

        compiled = sorted(
            name
            for name, mod in list(sys.modules.items())
            if name.startswith("aiokafka_ng") and str(getattr(mod, "__file__", "")).endswith(".so")
        )
        result.update(source=str(Path(aiokafka_ng.__file__).resolve().parent), compiled=compiled)
    print(RESULT + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------- parent


@dataclass
class Column:
    label: str
    client: str  # a key of CLIENTS
    tree: Path | None = None  # aiokafka_ng's checkout (its PYTHONPATH), for ours

    def describe(self, result: dict[str, Any]) -> str:
        if self.tree is None:
            name = "aiokafka" if self.client == "aiokafka" else "confluent-kafka"
            return f"{self.label}: {name} {version(self.client)}"
        return (
            f"{self.label}: aiokafka_ng from {result['source']} ({git_head(self.tree)}), "
            f"{len(result['compiled'])} compiled modules loaded"
        )


def version(client: str) -> str:
    if client == "aiokafka":
        import aiokafka

        return str(aiokafka.__version__)
    import confluent_kafka

    aio = ", ".join(f"{k}={v}" for k, v in CONF_TUNED.items()) if client == "conf-tuned" else ""
    return f"{confluent_kafka.__version__} AIOProducer({aio or 'defaults'})"


def git_head(tree: Path) -> str:
    def git(*a: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *a], capture_output=True, text=True)
        return done.stdout.strip()

    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("log", "-1", "--format=%h") or "not a git checkout") + dirty


def run_child(col: Column, pattern: str, target: Target, topic: str, secs: float) -> Any:
    env = dict(os.environ)
    # Peers get this checkout too: the child imports no aiokafka_ng then, but nothing of
    # another one's either.
    env["PYTHONPATH"] = str(col.tree or CHECKOUT)
    command = [sys.executable, __file__, "--child", col.client, "--pattern", pattern]
    command += ["--bootstrap", target.bootstrap, "--topic", topic, "--secs", str(secs)]
    command += ["--broker-pids", ",".join(map(str, target.pids))]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=secs * 3 + 120)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        print(f"{col.label} {pattern} failed:\n{done.stderr.strip()[-2000:]}", file=sys.stderr)
        return None
    result = json.loads(lines[-1][len(RESULT) :])
    if col.tree is not None and not Path(result["source"]).is_relative_to(col.tree.resolve()):
        raise SystemExit(f"{col.label}: aiokafka_ng came from {result['source']}, not {col.tree}")
    return result


#: Rows about the run, not the client: no ratios.
BROKER, OTHER = "broker CPU us/record", "other load, cores"


def rows(pattern: str, r: dict[str, Any] | None) -> dict[str, float | None]:
    """The figures of one run: the table's rows for ``pattern``."""
    if r is None:
        return {}
    if pattern == "idle":
        return {"CPU ms per 10 s": r["cpu"] * 1e3 * 10 / r["elapsed"], OTHER: r["other"]}
    n, broker = r["records"], r["broker"]
    return {
        "records/s": n / r["elapsed"],
        "CPU us/record": r["cpu"] / n * 1e6 if n else None,
        "p50 ms": r.get("p50"),
        "p99 ms": r.get("p99"),
        BROKER: broker / n * 1e6 if n and broker is not None else None,
        OTHER: r["other"],
    }


def cell(x: float | None, width: int = 12) -> str:
    if x is None:
        return f"{'-':>{width}}"
    return f"{x:>{width},.0f}" if x >= 1000 else f"{x:>{width}.3g}"


def parse_tree(spec: str) -> Column:
    label, _, path = spec.rpartition("=")
    tree = Path(path).resolve()
    if not (tree / "aiokafka_ng" / "__init__.py").is_file():
        raise SystemExit(f"--tree {spec}: no aiokafka_ng package in {tree}")
    return Column(label or tree.name, "ours", tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser)
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (not idle)")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--label", default="ours", help="this checkout's column")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="[LABEL=]PATH",
        help="also aiokafka_ng from the checkout PATH, as column LABEL (repeatable)",
    )
    parser.add_argument(
        "--clients", help=f"columns, in order; default LABEL, the trees' labels, {','.join(PEERS)}"
    )
    # The child process: one client, one pattern.
    parser.add_argument("--child", choices=list(CLIENTS), help=argparse.SUPPRESS)
    parser.add_argument("--pattern", choices=list(PATTERNS), help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--secs", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    known = {args.label: Column(args.label, "ours", CHECKOUT)}
    known.update((c.label, c) for c in map(parse_tree, args.tree))
    known.update((p, Column(p, p)) for p in PEERS)
    names = args.clients.split(",") if args.clients else list(known)
    if unknown := [n for n in names if n not in known]:
        raise SystemExit(f"unknown clients {unknown}; known: {', '.join(known)}")
    cols = [known[n] for n in names]
    patterns = [p for p in args.patterns.split(",") if p]
    if unknown := [p for p in patterns if p not in PATTERNS]:
        raise SystemExit(f"unknown patterns {unknown}; known: {', '.join(PATTERNS)}")
    # Ratios: the first aiokafka_ng column against each other column.
    base = next((c.label for c in cols if c.client == "ours"), "")
    ratios = [(c.label, max(12, len(base + c.label) + 3)) for c in cols if base and c.label != base]

    results: dict[tuple[str, str], Any] = {}
    with open_target(args) as target:
        print(
            f"web-app benchmark: await (await send()) per request, 100 B keyed, acks=all, "
            f"linger 5 ms, {PARTITIONS} partitions, {describe(target)}; "
            f"{args.seconds:g} s per run, idle {args.idle_seconds:g} s"
        )
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        for pattern in patterns:
            secs = args.idle_seconds if pattern == "idle" else args.seconds
            for col in cols:
                topic = target.create_topic(PARTITIONS, prefix="webapp")
                results[pattern, col.label] = run_child(col, pattern, target, topic, secs)
        print(f"load average after: {os.getloadavg()[0]:.2f}")

    for col in cols:
        sample = next((r for (_, label), r in results.items() if label == col.label and r), None)
        print(col.describe(sample) if sample is not None else f"{col.label}: no run")
    widths = {c.label: max(12, len(c.label) + 2) for c in cols}
    head = f"{'':<45}" + "".join(f"{c.label:>{widths[c.label]}}" for c in cols)
    print(head + "".join(f"{base + '/' + label:>{width}}" for label, width in ratios))
    for pattern in patterns:
        figures = {c.label: rows(pattern, results[pattern, c.label]) for c in cols}
        metrics = next((list(f) for f in figures.values() if f), [])
        for i, metric in enumerate(metrics):
            name = f"{PATTERNS[pattern] if i == 0 else '':<24}{metric:<21}"
            line = name + "".join(cell(figures[c.label].get(metric), widths[c.label]) for c in cols)
            for label, width in ratios if metric not in (BROKER, OTHER) else ():
                a, b = figures[base].get(metric), figures[label].get(metric)
                line += f"{a / b:>{width - 1}.2f}x" if a and b else f"{'-':>{width}}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
