"""Producer benchmark: aiokafka_ng vs aiokafka vs confluent-kafka in the patterns users write,
all clients in one run on one LocalBroker (Tansu), reported as msgs/s and ratios.

Throughput patterns (acks=all, linger 5 ms, 6 partitions, ``--records`` records each, keyed
and unkeyed, 100 B uncompressed; the gather pattern also with 1 KiB lz4):

* ``gather``   -- ``futs.append(await p.send(...))``, ``await asyncio.gather(*futs)`` every 10k
* ``flush``    -- send everything, ``await p.flush()``, then check every ``fut.exception()``
* ``callback`` -- ``fut.add_done_callback(cb)`` on each, flush at the end, cb counts outcomes
* ``tasks``    -- 2,000 concurrent tasks, each looping ``await p.send_and_wait(...)``
* ``batch``    -- ``await p.send_batch(topic, values, keys=...)`` per 10k (aiokafka has no bulk
  call: its ``create_batch``/``send_batch`` per partition is used)
* ``many``     -- ``await p.send_many(topic, values, keys=...)`` per 10k, one result per call,
  each awaited at the end (its per-record metadata not read); aiokafka as for ``batch``
* ``many1m``   -- ``many`` with ``batch_size=1_000_000`` for us and aiokafka
  (``max_batch_size``): librdkafka's default ``batch.size``, so all three batch alike.
  Every other row keeps each client's defaults (ours and aiokafka's: 16 KiB, the Java
  client's), where per-batch work weighs on the bulk path

``--clients ...,traced`` adds the ``traced`` column: ours with tracing on
(``tracer_provider=``: the OpenTelemetry SDK with a BatchSpanProcessor over an exporter that
drops the spans, so the figure is the client's and the SDK's span cost, not an exporter's);
``tr/ng`` is it against ours from the same run.

After the table, CPU seconds per million records for each run: the client's process (all
its threads: librdkafka's too) and the broker's (Tansu), from ``time.process_time`` and
``/proc/PID/stat`` around each run (client start and close included; the broker's clock
ticks every 10 ms). On this 2-core machine the two together bound the rate: at 16 KiB
batches Tansu spends about 1.5-3 times as much CPU per record as at 1 MB.

The ``null`` column runs the gather/flush/callback/tasks loops unchanged against
``NullProducer``, which does no Kafka work and returns plain ``asyncio.Future`` objects:
what the pattern itself costs under asyncio. ``null/conf`` is that cost against
confluent-kafka's synchronous loop; ``ng/null`` is ours against it. It is not a bound on
our futures everywhere (they run a batch's callbacks with one loop handle where
``asyncio.Future`` uses one per callback, so the callback row can beat it), but
``asyncio.gather``'s own per-future cost is client independent: the run ends by timing
gather over already-done futures and printing the gather pattern's ceiling for *any*
client.

confluent-kafka has one synchronous idiom for all of these: a ``produce()`` loop with
``poll(0)`` every 1,000 and ``flush()``; with an ``on_delivery`` callback in the callback
pattern. Its figure is that loop's, measured once per key mode and shown in each row; the
``tasks`` row uses its asyncio ``AIOProducer`` (``await (await p.produce(...))``).

Latency: a fixed offered rate (``--rates``, default 5k, 20k, 40k and 60k msg/s) of 100 B
keyed records for ``--latency-seconds`` (default 3 s); completion by one shared
``add_done_callback`` function (``on_delivery`` for confluent-kafka), send times kept by the
future's id (the record's number in its value for confluent-kafka), so the harness keeps no
object per record: a lambda per record is three objects the collector counts, enough on
their own to set how often it runs (``--lambdas`` attaches one per record instead, as
application code often does); p50/p99/p999/max of send -> ack in milliseconds, and
the cyclic collector's share of the run: collections of each generation (and per 10k
records) and their summed and longest pause, from ``gc.callbacks``. The ``null`` row is the
pacing loop itself with the null producer (futures resolved on the next loop turn): the
harness's own floor. ``--ballast N`` keeps N small long-lived containers alive first, as an
application's heap would be: a full collection walks all of them, so its pause grows with
the heap while the young ones do not. The last lines give ours/confluent for p99 and p999
at each rate.

Run: ``python bench/bench_producer.py [--records N] [--patterns gather,batch] [--clients ...]``
(``nox -s bench`` runs every bench script). Prints one table; ratios are ours/peer from the
same run. Not a test: numbers depend on the machine and its load.

On Apache Kafka: ``python bench/bench_producer.py --broker kafka [--records 100000]`` starts
a 3-node KRaft cluster (``aiokafka_ng.testing.KafkaCluster``; topics with replication
factor 3, the same acks=all) and adds the Java client (kafka-clients, the cluster's version;
``java/BenchClient.java``: one ``send(record, callback)`` per record, then ``flush()``, with
the same record size, keys, acks, linger and batch size) as the ``java`` column, run once
per key mode and batch size like confluent's loop. Its CPU is the JVM's own (all threads)
from building the client to closing it; JVM start is printed apart. The broker CPU is the
sum of the three broker JVMs, and ``(c)`` after it is the cores they used during the run:
near 2 the brokers alone fill this 2-core machine. ``--bootstrap HOST:PORT
[--broker-pids P,...]`` uses a running broker instead (see ``brokers.py``).
``--clients ...,java`` also works on Tansu, but there the Java producer's records all expired
(delivery.timeout.ms, 120 s) in the one try made: not looked into.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from brokers import JavaClient, Target, add_options, describe, open_target

from aiokafka_ng.producer import Producer

PARTITIONS = 6
#: ``--lambdas``: the latency runs attach a closure per record (what application code often
#: writes) instead of one shared callback.
LAMBDAS = False
WINDOW = 10_000
TASKS = 2_000


def payloads(size: int) -> list[bytes]:
    # Half random hex: compressible about 2x, like typical JSON-ish payloads.
    return [os.urandom(size // 4).hex().encode().ljust(size, b"x")[:size] for _ in range(64)]


KEYS = [b"key-%d" % i for i in range(1000)]


#: The broker of this run (set by main): topics get its replication factor, and are deleted
#: when the run ends.
TARGET: Target | None = None


def create_topic(bootstrap: str) -> str:
    assert TARGET is not None and TARGET.bootstrap == bootstrap
    return TARGET.create_topic(PARTITIONS)


class Job:
    def __init__(
        self,
        bootstrap: str,
        n: int,
        size: int,
        codec: str,
        keyed: bool,
        batch_size: int | None = None,  # None: the client's default
    ) -> None:
        self.bootstrap = bootstrap
        self.n = n
        self.codec = codec
        self.keyed = keyed
        vals = payloads(size)
        self.values = [vals[i % len(vals)] for i in range(n)]
        self.keys: list[bytes] | None = [KEYS[i % 1000] for i in range(n)] if keyed else None
        self.topic = create_topic(bootstrap)
        self.batch_size = batch_size

    def key(self, i: int) -> bytes | None:
        return None if self.keys is None else self.keys[i]


# ---------------------------------------------------------------------------- aiokafka_ng


class NullProducer:
    """The pattern's own cost with plain asyncio futures: ``send()`` makes one and queues
    it; one loop callback per burst resolves the queue, as a sender resolves a batch. No
    Kafka work."""

    def __init__(self, job: Job) -> None:
        self._pending: list[asyncio.Future[None]] = []
        self._loop = asyncio.get_running_loop()
        self._scheduled = False

    async def __aenter__(self) -> NullProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._resolve()

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(PARTITIONS))

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
        fut = self._loop.create_future()
        self._pending.append(fut)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._resolve)
        return fut

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
        return await (await self.send(topic, value, key))

    async def flush(self) -> None:
        self._resolve()

    def _resolve(self) -> None:
        pending, self._pending, self._scheduled = self._pending, [], False
        for fut in pending:
            fut.set_result(None)


def ours(job: Job, **kw: Any) -> Producer:
    codec = job.codec
    if job.batch_size is not None:
        kw["batch_size"] = job.batch_size
    return Producer(
        bootstrap_servers=job.bootstrap, acks="all", linger_ms=5, compression_type=codec, **kw
    )


_TRACER_PROVIDER: Any = None


def traced(job: Job) -> Producer:
    """``ours`` with tracing on (the ``traced`` column): the OpenTelemetry SDK's provider with
    a BatchSpanProcessor, as a service sets it up, over an exporter that drops the spans (the
    client's cost, not an exporter's)."""
    global _TRACER_PROVIDER
    if _TRACER_PROVIDER is None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        _TRACER_PROVIDER = TracerProvider()
        # A queue that never fills: a dropped span would not be counted as a cost.
        _TRACER_PROVIDER.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1 << 20))
    return ours(job, tracer_provider=_TRACER_PROVIDER)


async def ours_gather(job: Job, make: Callable[[Job], Any] = ours) -> float:
    async with make(job) as p:
        await p.partitions_for(job.topic)
        send, topic, values, keys = p.send, job.topic, job.values, job.keys
        t0 = time.perf_counter()
        futs = []
        for i in range(job.n):
            futs.append(await send(topic, values[i], None if keys is None else keys[i]))
            if len(futs) == WINDOW:
                await asyncio.gather(*futs)
                futs = []
        await asyncio.gather(*futs)
        return time.perf_counter() - t0


async def ours_flush(job: Job, make: Callable[[Job], Any] = ours) -> float:
    async with make(job) as p:
        await p.partitions_for(job.topic)
        send, topic, values, keys = p.send, job.topic, job.values, job.keys
        t0 = time.perf_counter()
        futs = [
            await send(topic, values[i], None if keys is None else keys[i]) for i in range(job.n)
        ]
        await p.flush()
        elapsed = time.perf_counter() - t0
        assert not any(f.exception() for f in futs)
        return elapsed


async def ours_callback(job: Job, make: Callable[[Job], Any] = ours) -> float:
    outcomes = [0, 0]

    def cb(fut: Any) -> None:
        outcomes[fut.exception() is not None] += 1

    async with make(job) as p:
        await p.partitions_for(job.topic)
        send, topic, values, keys = p.send, job.topic, job.values, job.keys
        t0 = time.perf_counter()
        for i in range(job.n):
            (await send(topic, values[i], None if keys is None else keys[i])).add_done_callback(cb)
        await p.flush()
        await asyncio.sleep(0)  # callbacks run from the loop
        elapsed = time.perf_counter() - t0
    assert outcomes == [job.n, 0], outcomes
    return elapsed


async def ours_tasks(job: Job, make: Callable[[Job], Any] = ours) -> float:
    async with make(job) as p:
        await p.partitions_for(job.topic)
        return await _tasks(job, p.send_and_wait)


async def ours_batch(job: Job, make: Callable[[Job], Any] = ours) -> float:
    async with make(job) as p:
        await p.partitions_for(job.topic)
        topic, values, keys = job.topic, job.values, job.keys
        t0 = time.perf_counter()
        for lo in range(0, job.n, WINDOW):
            futs = await p.send_batch(
                topic,
                values[lo : lo + WINDOW],
                keys=None if keys is None else keys[lo : lo + WINDOW],
            )
        await p.flush()
        elapsed = time.perf_counter() - t0
        assert not any(f.exception() for f in futs)
        return elapsed


async def ours_many(job: Job, make: Callable[[Job], Any] = ours) -> float:
    async with make(job) as p:
        await p.partitions_for(job.topic)
        topic, values, keys = job.topic, job.values, job.keys
        t0 = time.perf_counter()
        runs = [
            await p.send_many(
                topic,
                values[lo : lo + WINDOW],
                keys=None if keys is None else keys[lo : lo + WINDOW],
            )
            for lo in range(0, job.n, WINDOW)
        ]
        for run_ in runs:
            await run_  # raises the first error if a record failed
        return time.perf_counter() - t0


async def _tasks(job: Job, send_and_wait: Callable[..., Any]) -> float:
    per = job.n // TASKS
    topic, values, keys = job.topic, job.values, job.keys

    async def worker(w: int) -> None:
        for j in range(w * per, (w + 1) * per):
            await send_and_wait(topic, values[j], None if keys is None else keys[j])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(TASKS)))
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------- aiokafka


async def _aiokafka(job: Job) -> Any:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(
        bootstrap_servers=job.bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=None if job.codec == "none" else job.codec,
        **({} if job.batch_size is None else {"max_batch_size": job.batch_size}),
    )
    await p.start()
    await p.partitions_for(job.topic)
    return p


async def aio_gather(job: Job) -> float:
    p = await _aiokafka(job)
    try:
        send, topic, values, keys = p.send, job.topic, job.values, job.keys
        t0 = time.perf_counter()
        futs = []
        for i in range(job.n):
            futs.append(await send(topic, values[i], None if keys is None else keys[i]))
            if len(futs) == WINDOW:
                await asyncio.gather(*futs)
                futs = []
        await asyncio.gather(*futs)
        return time.perf_counter() - t0
    finally:
        await p.stop()


async def aio_flush(job: Job) -> float:
    p = await _aiokafka(job)
    try:
        send, topic, values, keys = p.send, job.topic, job.values, job.keys
        t0 = time.perf_counter()
        futs = [
            await send(topic, values[i], None if keys is None else keys[i]) for i in range(job.n)
        ]
        await p.flush()
        elapsed = time.perf_counter() - t0
        assert not any(f.exception() for f in futs)
        return elapsed
    finally:
        await p.stop()


async def aio_callback(job: Job) -> float:
    outcomes = [0, 0]

    def cb(fut: Any) -> None:
        outcomes[fut.exception() is not None] += 1

    p = await _aiokafka(job)
    try:
        send, topic, values, keys = p.send, job.topic, job.values, job.keys
        t0 = time.perf_counter()
        for i in range(job.n):
            (await send(topic, values[i], None if keys is None else keys[i])).add_done_callback(cb)
        await p.flush()
        await asyncio.sleep(0)
        elapsed = time.perf_counter() - t0
    finally:
        await p.stop()
    assert outcomes == [job.n, 0], outcomes
    return elapsed


async def aio_tasks(job: Job) -> float:
    p = await _aiokafka(job)
    try:
        return await _tasks(job, p.send_and_wait)
    finally:
        await p.stop()


async def aio_batch(job: Job) -> float:
    # aiokafka's bulk API: create_batch() per partition, append, send_batch().
    p = await _aiokafka(job)
    try:
        parts = sorted(await p.partitions_for(job.topic))
        topic, values, keys = job.topic, job.values, job.keys
        t0 = time.perf_counter()
        futs = []
        i = 0
        while i < job.n:
            part = parts[(i // 100) % len(parts)]
            batch = p.create_batch()
            while i < job.n:
                key = None if keys is None else keys[i]
                if batch.append(key=key, value=values[i], timestamp=None) is None:
                    break
                i += 1
            futs.append(await p.send_batch(batch, topic, partition=part))
        await asyncio.gather(*futs)
        return time.perf_counter() - t0
    finally:
        await p.stop()


# ---------------------------------------------------------------------------- confluent


def _confluent(job: Job) -> Any:
    from confluent_kafka import Producer as CProducer

    p = CProducer(
        {
            "bootstrap.servers": job.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": job.codec,
        }
    )
    p.list_topics(job.topic, timeout=30)
    return p


def conf_loop(job: Job, callback: bool = False) -> float:
    p = _confluent(job)
    outcomes = [0, 0]

    def on_delivery(err: Any, msg: Any) -> None:
        outcomes[err is not None] += 1

    kw: dict[str, Any] = {"on_delivery": on_delivery} if callback else {}
    produce, poll, topic, values, keys = p.produce, p.poll, job.topic, job.values, job.keys
    t0 = time.perf_counter()
    for i in range(job.n):
        while True:
            try:
                produce(topic, values[i], None if keys is None else keys[i], **kw)
                break
            except BufferError:
                poll(0.001)
        if i % 1000 == 0:
            poll(0)
    assert p.flush(60) == 0
    elapsed = time.perf_counter() - t0
    if callback:
        assert outcomes == [job.n, 0], outcomes
    return elapsed


async def conf_tasks(job: Job) -> float:
    from confluent_kafka.aio import AIOProducer

    p = AIOProducer(
        {"bootstrap.servers": job.bootstrap, "acks": "all", "linger.ms": 5}, max_workers=4
    )
    try:

        async def send_and_wait(topic: str, value: bytes, key: bytes | None) -> Any:
            return await (await p.produce(topic, value=value, key=key))

        return await _tasks(job, send_and_wait)
    finally:
        await p.close()


# ---------------------------------------------------------------------------- latency


async def latency_ours(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as p:
        await p.partitions_for(topic)
        lat = await _paced(rate, seconds, p.send, topic)
        await p.flush()
        await asyncio.sleep(0.01)
    return lat


async def latency_aiokafka(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await p.start()
    try:
        await p.partitions_for(topic)
        lat = await _paced(rate, seconds, p.send, topic)
        await p.flush()
        await asyncio.sleep(0.01)
    finally:
        await p.stop()
    return lat


async def _paced(rate: int, seconds: float, send: Callable[..., Any], topic: str) -> list[float]:
    """Send at ``rate`` for ``seconds``; send -> done-callback times. The harness keeps no
    object per record for the collector (one shared callback, send times by the future's
    id): what is tracked per record in flight is the client's."""
    lat: list[float] = []
    sent_at: dict[int, float] = {}
    clock = time.perf_counter

    def done(fut: Any) -> None:
        lat.append(clock() - sent_at.pop(id(fut)))

    total = int(rate * seconds)
    value = b"v" * 100
    start = clock()
    sent = 0
    while sent < total:
        due = min(total, int((clock() - start) * rate) + 1)
        while sent < due:
            t = clock()
            fut = await send(topic, value, KEYS[sent % 1000])
            if LAMBDAS:
                fut.add_done_callback(lambda f, t=t: lat.append(clock() - t))
            else:
                sent_at[id(fut)] = t
                fut.add_done_callback(done)
            sent += 1
        await asyncio.sleep(0.0005)
    return lat


def latency_confluent(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    from confluent_kafka import Producer as CProducer

    p = CProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    p.list_topics(topic, timeout=30)
    total = int(rate * seconds)
    # One shared on_delivery, as for the others: the record's number is in its value.
    sent_at = [0.0] * total
    lat: list[float] = []
    clock = time.perf_counter

    def done(err: Any, msg: Any) -> None:
        lat.append(clock() - sent_at[int(msg.value()[:8])])

    pad = b"v" * 92
    start = clock()
    sent = 0
    while sent < total:
        due = min(total, int((clock() - start) * rate) + 1)
        while sent < due:
            t = sent_at[sent] = clock()
            cb = (lambda err, msg, t=t: lat.append(clock() - t)) if LAMBDAS else done
            p.produce(topic, b"%08d" % sent + pad, KEYS[sent % 1000], on_delivery=cb)
            sent += 1
        p.poll(0.0005)
    p.flush(30)
    return lat


async def latency_null(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    p = NullProducer(None)  # type: ignore[arg-type]  # it never reads the job
    lat = await _paced(rate, seconds, p.send, topic)
    await p.flush()
    await asyncio.sleep(0.01)
    return lat


def quantiles(lat: list[float]) -> dict[str, float]:
    """p50, p99, p999 and max of ``lat``, in milliseconds."""
    qs = statistics.quantiles(lat, n=1000)
    return {"p50": qs[499] * 1e3, "p99": qs[989] * 1e3, "p999": qs[998] * 1e3,
            "max": max(lat) * 1e3}  # fmt: skip


def pct(lat: list[float]) -> str:
    if len(lat) < 2:
        return "no samples"
    q = quantiles(lat)
    return (
        f"p50 {q['p50']:6.2f}  p99 {q['p99']:6.2f}  p999 {q['p999']:6.2f}  max {q['max']:7.2f} ms"
    )


class GcMeter:
    """The cyclic collector's collections during a run, per generation, and the time they
    took (``gc.callbacks``: the collector calls back before and after each collection)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.pause = [0.0, 0.0, 0.0]
        self.longest = 0.0
        self._t0 = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        took = time.perf_counter() - self._t0
        gen = info["generation"]
        self.count[gen] += 1
        self.pause[gen] += took
        self.longest = max(self.longest, took)

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def line(self, records: int) -> str:
        per = 10_000 / max(1, records)
        counts = "/".join(str(c) for c in self.count)
        per10k = "/".join(f"{c * per:.1f}" for c in self.count)
        pauses = "/".join(f"{t * 1e3:.1f}" for t in self.pause)
        return (
            f"gc gen0/1/2 {counts} ({per10k} per 10k) pause {pauses} ms"
            f" = {sum(self.pause) * 1e3:.1f} ms, longest {self.longest * 1e3:.1f} ms"
        )


def latency_runs(bs: str, clients: set[str], rates: list[int], secs: float) -> None:
    """Every latency row, then ours against confluent-kafka's at each rate."""
    table: dict[tuple[int, str], dict[str, float]] = {}
    for rate in rates:
        for client, fn in (
            ("null", latency_null),
            ("ours", latency_ours),
            ("aiokafka", latency_aiokafka),
            ("confluent", latency_confluent),
        ):
            if client not in clients:
                continue
            topic = create_topic(bs)
            gc.collect()  # every run starts from the same collector state
            with GcMeter() as meter:
                lat = run(fn, bs, topic, rate, secs)
            if len(lat) >= 2:
                table[rate, client] = quantiles(lat)
            print(f"latency {rate:>6} msg/s {client:<10} {pct(lat)}", flush=True)
            print(f"{'':>29}{meter.line(len(lat))}", flush=True)
    for rate in rates:
        ng, conf = table.get((rate, "ours")), table.get((rate, "confluent"))
        if ng and conf:
            print(
                f"latency {rate:>6} msg/s ours/confluent  p99 {ng['p99'] / conf['p99']:.2f}x"
                f"  p999 {ng['p999'] / conf['p999']:.2f}x",
                flush=True,
            )


# ---------------------------------------------------------------------------- main

OURS = {
    "gather": ours_gather,
    "flush": ours_flush,
    "callback": ours_callback,
    "tasks": ours_tasks,
    "batch": ours_batch,
    "many": ours_many,
    "many1m": ours_many,
}
NULL_PATTERNS = ("gather", "flush", "callback", "tasks")
AIO = {
    "gather": aio_gather,
    "flush": aio_flush,
    "callback": aio_callback,
    "tasks": aio_tasks,
    "batch": aio_batch,
    "many": aio_batch,
    "many1m": aio_batch,
}


def run(fn: Callable[..., Any], *args: Any) -> Any:
    if asyncio.iscoroutinefunction(fn):
        return asyncio.run(fn(*args))
    return fn(*args)


def measured(target: Target, fn: Callable[..., Any], *args: Any) -> tuple[float, float, float]:
    """``run(fn, *args)`` (its elapsed seconds) with the CPU seconds this process and the
    broker (all its processes) spent meanwhile."""
    own = time.process_time()
    broker = target.cpu()
    elapsed = run(fn, *args)
    return elapsed, time.process_time() - own, target.cpu() - broker


def java_produce(java: JavaClient, job: Job) -> tuple[float, float]:
    """The Java client's ``send(record, callback)`` loop and ``flush()`` on ``job``'s records
    (its own, made alike: see java/BenchClient.java): elapsed and JVM CPU seconds."""
    out = java.run(
        "produce",
        job.bootstrap,
        job.topic,
        job.n,
        len(job.values[0]),
        int(job.keys is not None),
        job.codec,
        job.batch_size or 0,
        "all",
        5,
    )
    assert (out["count"], out["errors"]) == (job.n, 0), out
    return out["elapsed"], out["cpu"]


def main() -> None:
    global TARGET
    parser = argparse.ArgumentParser()
    add_options(parser)
    parser.add_argument(
        "--records", type=int, help="per run; default 200,000 (Tansu), 100,000 (Kafka)"
    )
    parser.add_argument("--patterns", default=",".join(OURS))
    parser.add_argument(
        "--clients", help="default ours,aiokafka,confluent,null (and java with --broker kafka)"
    )
    parser.add_argument("--rates", default="5000,20000,40000,60000")
    parser.add_argument("--latency-seconds", type=float, default=3.0)
    parser.add_argument("--ballast", type=int, default=0)
    parser.add_argument("--lambdas", action="store_true")
    args = parser.parse_args()
    global LAMBDAS
    LAMBDAS = args.lambdas
    kafka = args.broker == "kafka"
    n = args.records or (100_000 if kafka else 200_000)
    patterns = [p for p in args.patterns.split(",") if p]
    clients = set((args.clients or "ours,aiokafka,confluent,null" + ",java" * kafka).split(","))
    rows: list[tuple[str, dict[str, float]]] = []
    cpu: list[tuple[str, dict[str, tuple[float, float, float]]]] = []
    with open_target(args) as target, ExitStack() as stack:
        TARGET = target
        bs = target.bootstrap
        java = stack.enter_context(JavaClient()) if "java" in clients else None

        def timed(
            key: str, used: dict[str, tuple[float, float, float]], fn: Callable[..., Any], *a: Any
        ) -> float:
            elapsed, client, broker_cpu = measured(target, fn, *a)
            # per record: client and broker CPU in microseconds; the broker's cores in use
            used[key] = (client / n * 1e6, broker_cpu / n * 1e6, broker_cpu / elapsed)
            return n / elapsed

        def timed_java(used: dict[str, tuple[float, float, float]], job: Job) -> float:
            assert java is not None
            broker = target.cpu()
            elapsed, client = java_produce(java, job)
            broker_cpu = target.cpu() - broker  # JVM start included: a slight overcount
            used["java"] = (client / n * 1e6, broker_cpu / n * 1e6, broker_cpu / elapsed)
            return n / elapsed

        print(
            f"producer benchmark: {n} records/run, acks=all, {PARTITIONS} partitions, "
            f"{describe(target)}"
        )
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        print(f"{'pattern':<28}{'aiokafka_ng':>12}{'aiokafka':>12}{'confluent':>12}"
              f"{'ng/aio':>8}{'ng/conf':>8}{'null':>12}{'null/conf':>10}{'ng/null':>8}"
              f"{'java':>12}{'ng/java':>8}{'traced':>12}{'tr/ng':>8}")  # fmt: skip
        java_runs: dict[int | None, tuple[float, tuple[float, float, float]]] = {}
        for label, size, codec in (("100 B", 100, "none"), ("1 KiB lz4", 1024, "lz4")):
            for keyed in (True, False):
                conf_plain = conf_cb = None
                java_runs.clear()
                for pattern in patterns:
                    if codec != "none" and (pattern != "gather" or not keyed):
                        continue
                    rates: dict[str, float] = {}
                    used: dict[str, tuple[float, float]] = {}
                    spec = (bs, n, size, codec, keyed, 1_000_000 if pattern == "many1m" else None)
                    if "ours" in clients:
                        rates["ours"] = timed("ours", used, OURS[pattern], Job(*spec))
                    if "traced" in clients:
                        rates["traced"] = timed("traced", used, OURS[pattern], Job(*spec), traced)
                    if "null" in clients and pattern in NULL_PATTERNS:
                        rates["null"] = n / run(OURS[pattern], Job(*spec), NullProducer)
                    if "aiokafka" in clients:
                        rates["aio"] = timed("aio", used, AIO[pattern], Job(*spec))
                    if "confluent" in clients:
                        job = Job(*spec)
                        if pattern == "tasks":
                            rates["conf"] = timed("conf", used, conf_tasks, job)
                        elif pattern == "callback":
                            if conf_cb is None:
                                conf_cb = (timed("conf", used, conf_loop, job, True), used["conf"])
                            rates["conf"], used["conf"] = conf_cb
                        else:
                            if conf_plain is None:
                                conf_plain = (timed("conf", used, conf_loop, job), used["conf"])
                            rates["conf"], used["conf"] = conf_plain
                    if java is not None:
                        # One idiom (send with a callback, flush), like confluent's loop: run
                        # once per key mode and batch size, shown in each row.
                        if spec[-1] not in java_runs:
                            rate = timed_java(used, Job(*spec))
                            java_runs[spec[-1]] = (rate, used["java"])
                        rates["java"], used["java"] = java_runs[spec[-1]]
                    name = f"{pattern} {label} {'keyed' if keyed else 'unkeyed'}"
                    rows.append((name, rates))
                    cpu.append((name, used))
                    print(_row(name, rates), flush=True)
        gathers = [r["conf"] for k, r in rows if k.startswith("gather 100") and "conf" in r]
        print(gather_ceiling(max(gathers, default=0.0)), flush=True)
        print(
            "CPU seconds per million records, client process + broker "
            "(and the broker's cores in use during the run, of 2):"
        )
        for name, used in cpu:
            cells = "".join(
                f"{label:>10} {used[key][0]:5.2f} + {used[key][1]:5.2f} ({used[key][2]:.1f})"
                for key, label in (
                    ("ours", "ours"),
                    ("traced", "traced"),
                    ("aio", "aiokafka"),
                    ("conf", "confluent"),
                    ("java", "java"),
                )
                if key in used
            )
            print(f"  {name:<26}{cells}", flush=True)
        if java is not None and java.overhead_cpu:
            print(
                f"java: JVM start and class loading, outside the figures above: "
                f"{statistics.median(java.overhead_cpu):.2f} CPU s per JVM (median)"
            )
        ballast = [{"i": i} for i in range(args.ballast)]  # an application's heap
        rates = [int(r) for r in args.rates.split(",") if r]
        if rates:
            print(
                f"latency: {args.ballast} long-lived objects of ballast, collector on,"
                f" {'a closure per record' if LAMBDAS else 'one shared callback'}"
            )
        latency_runs(bs, clients, rates, args.latency_seconds)
        del ballast
        print(f"load average after: {os.getloadavg()[0]:.2f}")


def gather_ceiling(confluent_rate: float) -> str:
    """``asyncio.gather``'s own cost per future (already done, so no waiting is timed), and
    the rate no client can pass in the gather pattern because of it alone."""

    async def timed() -> float:
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(WINDOW)]
        for fut in futs:
            fut.set_result(None)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            await asyncio.gather(*futs)
            best = min(best, (time.perf_counter() - t0) / WINDOW)
        return best

    per = asyncio.run(timed())
    line = f"asyncio.gather alone: {per * 1e9:.0f} ns/future -> gather pattern <= {1 / per:,.0f}/s"
    if confluent_rate:
        line += f" = {1 / per / confluent_rate:.2f}x confluent's loop above"
    return line


def _row(name: str, r: dict[str, float]) -> str:
    def cell(k: str) -> str:
        return f"{r[k]:>12,.0f}" if k in r else f"{'-':>12}"

    def ratio(a: str, b: str, width: int = 8) -> str:
        return f"{r[a] / r[b]:>{width - 1}.2f}x" if a in r and b in r else f"{'-':>{width}}"

    return (
        f"{name:<28}{cell('ours')}{cell('aio')}{cell('conf')}"
        f"{ratio('ours', 'aio')}{ratio('ours', 'conf')}{cell('null')}{ratio('null', 'conf', 10)}"
        f"{ratio('ours', 'null')}{cell('java')}{ratio('ours', 'java')}"
        f"{cell('traced')}{ratio('traced', 'ours')}"
    )


if __name__ == "__main__":
    main()
