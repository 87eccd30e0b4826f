"""Join and rebalance timings, classic vs KIP-848 consumer protocol, on Apache Kafka 4.4.

Not a test (the numbers depend on the machine): run
``python -m tests.kafka.kip848_timings [rounds]``. It starts a 3-node KafkaCluster and, per
protocol and round, measures

* first record: ``start()`` of a fresh group's only member to its first record of a
  6-partition topic holding 60 records;
* third join: a third member's ``start()`` until the three hold 2 partitions each (two
  members already share the topic and keep polling);

and then the same two with the Java client (``timings`` op of tests/kafka/java/Interop.java,
measured inside its JVM so the JVM's own start is not counted), each client with its default
settings (session 45 s and heartbeat 3 s for classic; the broker's 5 s heartbeat interval
for the consumer protocol).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
from typing import Any

import anyio

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import NewTopic
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, unique
from tests.kafka.test_java_interop import start_java

#: ``KIP848_PHASE=1``: start the third member at a random point of the owners' heartbeat
#: cycle (ours only; the Java op starts it right after the split, as ours does without it).
_PHASE = os.environ.get("KIP848_PHASE") == "1"


def _consumer(cluster: KafkaCluster, group: str, protocol: str) -> Consumer:
    extra: dict[str, Any] = {"group_protocol": protocol}
    return Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        **extra,
    )


async def _poll(consumer: Consumer) -> None:
    while True:
        await consumer.getmany(timeout_ms=100)


async def _until_even(consumers: list[Consumer], partitions: int) -> None:
    share = partitions // len(consumers)
    while True:  # sampling the members' state every 10 ms bounds the measurement error
        sets = [c.assignment() for c in consumers]
        if all(len(s) == share for s in sets) and len(set().union(*sets)) == partitions:
            return
        await anyio.sleep(0.01)


async def _first_record(cluster: KafkaCluster, topic: str, protocol: str) -> float:
    consumer = _consumer(cluster, unique("t"), protocol)
    t0 = anyio.current_time()
    async with consumer:
        consumer.subscribe([topic])
        await consumer.getone()
        return anyio.current_time() - t0


async def _third_join(cluster: KafkaCluster, topic: str, protocol: str) -> float:
    group = unique("t")
    members = [_consumer(cluster, group, protocol) for _ in range(3)]
    async with members[0], members[1], anyio.create_task_group() as tg:
        for m in members[:2]:
            m.subscribe([topic])
            tg.start_soon(_poll, m)
        with anyio.fail_after(120):
            await _until_even(members[:2], 6)
        if _PHASE:
            # The two owners reach an even split right after a heartbeat of theirs; a third
            # member starting at that instant always lands at the same point of their
            # heartbeat cycle. A random delay within one broker heartbeat interval (5 s)
            # samples every phase instead.
            await anyio.sleep(random.uniform(0, 5))
        t0 = anyio.current_time()
        async with members[2]:
            members[2].subscribe([topic])
            tg.start_soon(_poll, members[2])
            with anyio.fail_after(120):
                await _until_even(members, 6)
            elapsed = anyio.current_time() - t0
            tg.cancel_scope.cancel()
    return elapsed


async def main(rounds: int) -> None:
    async with KafkaCluster(brokers=3) as cluster:
        topic = unique("timing")
        async with admin_for(cluster) as admin:
            (await admin.create_topics([NewTopic(topic, 6, 3)])).raise_on_error()
        async with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
            for i in range(60):
                await producer.send_and_wait(topic, b"x", partition=i % 6)
        for protocol in ("consumer",) if _PHASE else ("classic", "consumer"):
            first = [await _first_record(cluster, topic, protocol) for _ in range(rounds)]
            third = [await _third_join(cluster, topic, protocol) for _ in range(rounds)]
            _report("ours", protocol, first, third)
            if _PHASE:
                continue
            java = await _java(cluster, topic, protocol, rounds)
            _report("java", protocol, java["first"], java["third"])


async def _java(cluster: KafkaCluster, topic: str, protocol: str, rounds: int) -> Any:
    spec = {
        "op": "timings", "topic": topic, "group_protocol": protocol, "rounds": rounds,
        "partitions": 6,
    }  # fmt: skip
    peer = await start_java(cluster, [spec])
    async with peer.process:
        with anyio.fail_after(120 * 2 * rounds):
            while (line := await peer.next_line())["op"] != "timings":
                pass
    return line


def _report(client: str, protocol: str, first: list[float], third: list[float]) -> None:
    print(
        f"{client:4s} {protocol:9s} start->first record median {statistics.median(first):.3f} s "
        f"{[round(x, 3) for x in first]}; third join -> even split median "
        f"{statistics.median(third):.3f} s {[round(x, 3) for x in third]}",
        flush=True,
    )


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 3)
