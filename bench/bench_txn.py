"""Transactions benchmark: aiokafka_ng vs aiokafka vs confluent-kafka vs the Java client, one
after another on one 3-node Apache Kafka cluster (KRaft, replication factor 3).

The pattern is the consume-transform-produce cycle at its smallest, one transaction after
another with nothing between them: ``begin``, one 100 B record to the output topic's
partition 0, ``send_offsets_to_transaction`` (the input topic's partition 0, a consumer
group), ``commit``. Each transaction's first request to a coordinator comes a few
milliseconds after the previous commit, while the transaction coordinator is still writing
that commit's markers, and is answered CONCURRENT_TRANSACTIONS until they are written: how
soon a client asks again sets the rate (see ``aiokafka_ng/producer/txn_coordinator.py``).
A consume-transform-produce application that commits per poll meets this on every poll.

Per client and round: transactions committed per second over ``--seconds``, the p50 and p99
of one transaction (begin to commit returned), and the client's CPU per transaction (its
process, all threads, from building the client to closing it; the JVM's own for Java, its
start and class loading outside). Rounds alternate the clients' order; the table gives the
median of the rounds and ratios ours/peer.

Run: ``python bench/bench_txn.py [--seconds 10] [--rounds 2] [--clients ours,aiokafka,
confluent,java]`` (starts the cluster: about 30 s; ``--bootstrap HOST:PORT`` uses a running
one, see ``brokers.py``). Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from brokers import JavaClient, Target, add_options, describe, open_target, ratio

VALUE = b"x" * 100


@dataclass
class Result:
    rate: float  # transactions committed per second
    p50_ms: float
    p99_ms: float
    cpu_ms: float  # client CPU per transaction


def _result(took: list[float], elapsed: float, cpu: float) -> Result:
    took = sorted(took)
    return Result(
        rate=len(took) / elapsed,
        p50_ms=took[len(took) // 2] * 1000,
        p99_ms=took[min(len(took) - 1, int(len(took) * 0.99))] * 1000,
        cpu_ms=cpu / len(took) * 1000,
    )


@dataclass
class Job:
    target: Target
    input: str
    output: str
    seconds: float

    def names(self) -> tuple[str, str]:
        """A fresh transactional id and consumer group for one measurement."""
        tag = uuid.uuid4().hex[:8]
        return f"bench-txn-{tag}", f"bench-group-{tag}"


def ours(job: Job) -> Result:
    from aiokafka_ng import Producer

    txid, group = job.names()

    async def run() -> Result:
        cpu0 = time.process_time()
        took: list[float] = []
        async with Producer(bootstrap_servers=job.target.bootstrap, transactional_id=txid) as p:
            await p.partitions_for(job.output)
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < job.seconds:
                t = time.perf_counter()
                n += 1
                async with p.transaction():
                    await p.send(job.output, VALUE, partition=0)
                    await p.send_offsets_to_transaction({(job.input, 0): n}, group)
                took.append(time.perf_counter() - t)
            elapsed = time.perf_counter() - t0
        return _result(took, elapsed, time.process_time() - cpu0)

    return asyncio.run(run())


def aiokafka(job: Job) -> Result:
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    txid, group = job.names()

    async def run() -> Result:
        cpu0 = time.process_time()
        took: list[float] = []
        p = AIOKafkaProducer(bootstrap_servers=job.target.bootstrap, transactional_id=txid)
        await p.start()
        try:
            await p.partitions_for(job.output)
            tp = TopicPartition(job.input, 0)
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < job.seconds:
                t = time.perf_counter()
                n += 1
                await p.begin_transaction()
                await p.send(job.output, VALUE, partition=0)
                await p.send_offsets_to_transaction({tp: n}, group)
                await p.commit_transaction()
                took.append(time.perf_counter() - t)
            elapsed = time.perf_counter() - t0
        finally:
            await p.stop()
        return _result(took, elapsed, time.process_time() - cpu0)

    return asyncio.run(run())


def confluent(job: Job) -> Result:
    from confluent_kafka import Consumer, Producer, TopicPartition

    txid, group = job.names()
    cpu0 = time.process_time()
    took: list[float] = []
    p = Producer({"bootstrap.servers": job.target.bootstrap, "transactional.id": txid})
    # The group's metadata comes from a consumer of that group (never subscribed: no
    # rebalance, only the id the coordinator is looked up by).
    c = Consumer({"bootstrap.servers": job.target.bootstrap, "group.id": group})
    try:
        meta = c.consumer_group_metadata()
        p.init_transactions(30)
        p.list_topics(job.output, timeout=30)
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < job.seconds:
            t = time.perf_counter()
            n += 1
            p.begin_transaction()
            p.produce(job.output, VALUE, partition=0)
            p.send_offsets_to_transaction([TopicPartition(job.input, 0, n)], meta, 30)
            p.commit_transaction(30)
            took.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
    finally:
        c.close()
    return _result(took, elapsed, time.process_time() - cpu0)


def java_runner(java: JavaClient) -> Callable[[Job], Result]:
    def run(job: Job) -> Result:
        txid, group = job.names()
        line = java.run("txn", job.target.bootstrap, job.input, job.output, group, txid,
                        job.seconds)  # fmt: skip
        count = line["count"]
        return Result(
            rate=count / line["elapsed"],
            p50_ms=line["p50"],
            p99_ms=line["p99"],
            cpu_ms=line["cpu"] / count * 1000,
        )

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", default="ours,aiokafka,confluent,java")
    add_options(parser)
    parser.set_defaults(broker="kafka")  # transactions and their markers: Apache Kafka's
    args = parser.parse_args()
    names = [c for c in args.clients.split(",") if c]
    with open_target(args) as target:
        runners: dict[str, Callable[[Job], Result]] = {
            "ours": ours,
            "aiokafka": aiokafka,
            "confluent": confluent,
        }
        if "java" in names:
            runners["java"] = java_runner(JavaClient())
        job = Job(target, target.create_topic(1, "txn-in"), target.create_topic(1, "txn-out"),
                  args.seconds)  # fmt: skip
        print(f"transactions benchmark: {describe(target)}, {args.seconds:g} s per run, "
              f"one 100 B record and the offsets per transaction")  # fmt: skip
        results: dict[str, list[Result]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                try:
                    results[name].append(runners[name](job))
                except Exception as exc:  # a client that cannot run here: say why, go on
                    print(f"  {name}: failed: {exc!r}")
    print(f"{'client':<10} {'txn/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/txn':>11}")
    med: dict[str, Result] = {}
    for name in names:
        if not results[name]:
            continue
        rs = results[name]
        med[name] = Result(
            *(statistics.median(getattr(x, f) for x in rs) for f in Result.__annotations__)
        )
        m = med[name]
        each = ", ".join(f"{x.rate:.1f}" for x in rs)
        print(f"{name:<10} {m.rate:>8.1f} {m.p50_ms:>8.1f} {m.p99_ms:>8.1f} "
              f"{m.cpu_ms:>11.2f}   (rounds: {each} txn/s)")  # fmt: skip
    ours_m = med.get("ours")
    for name, m in med.items():
        if name == "ours" or ours_m is None:
            continue
        print(f"ours/{name}: rate {ratio(ours_m.rate, m.rate)}, p99 "
              f"{ratio(ours_m.p99_ms, m.p99_ms)}, CPU per transaction "
              f"{ratio(ours_m.cpu_ms, m.cpu_ms)}")  # fmt: skip


if __name__ == "__main__":
    main()
