"""Soak: a producer and a two-member consumer group on a 3-node cluster, at a steady rate,
for a long time, under faults -- and nothing may leak, be lost, doubled or reordered.

Setup: a FakeKafka of 3 nodes in the same process, reached over TCP on 127.0.0.1 (so the
clients' sockets count in the file descriptors); the topic is replicated on all 3. The
producer (idempotent, the default) sends numbered records round-robin to 4 partitions at
``--rate`` records/s. Two consumers of one group read them, commit after every poll (retrying
until the commit is through) and in ``on_partitions_revoked`` (so a rebalance hands over
exactly what was processed). Every ``--fault-every`` seconds (default 60) the chaos step
moves two partition leaders, cuts every connection of one node after its next request, and
takes a node down for 2 s (less than the session timeout), in turn killed (its partitions,
coordinators and the controller role fail over) and cut off from the clients (it keeps its
roles).

Every ``--report-every`` seconds (default 10) it prints RSS, open file descriptors, live
asyncio tasks, records produced and consumed (distinct records). At the end: lost /
duplicated / reordered (each must be 0; a record handed twice because a member lost its
partition before committing it -- expelled from the group: at-least-once's allowance -- is
counted as redelivered), the RSS slope over the run, and fds/tasks after everything closed
against before. ``python bench/soak.py [--minutes 10] [--rate 2000]`` or ``nox -s soak``; a
30-second version runs in the test suite (tests/reliability/test_soak.py). Loopback only,
bounded.

``--kafka``: the same on a real 3-node Apache Kafka cluster (``KafkaCluster``; the topic has
replication factor 3 and min.insync.replicas=2); the faults are then, in turn, a SIGKILL of
a node (started again 2 s later) and a 7 s SIGSTOP of one (past the client's request
timeout and the brokers' session timeout, so leadership moves).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import struct
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiokafka_ng.admin import AdminClient, NewTopic
from aiokafka_ng.consumer import Consumer, ConsumerRebalanceListener, TopicPartition
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, KafkaCluster

PARTITIONS = 4
_PACK = struct.Struct(">iq")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def live_tasks() -> int:
    return len(asyncio.all_tasks())


@dataclass
class SoakResult:
    produced: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    #: Handed again after the member that had it lost the partition before committing it
    #: (expelled: its session ran out, e.g. on a loop starved by a busy machine): what an
    #: at-least-once group may redeliver, so not counted as duplicated.
    redelivered: int = 0
    reordered: int = 0
    failed_sends: int = 0
    faults: int = 0
    rss_samples: list[tuple[float, float]] = field(default_factory=list)
    fds_before: int = 0
    fds_after: int = 0
    tasks_before: int = 0
    tasks_after: int = 0

    @property
    def rss_slope_mb_per_min(self) -> float:
        pts = self.rss_samples[len(self.rss_samples) // 3 :]  # after warm-up
        if len(pts) < 2:
            return 0.0
        mx = sum(t for t, _ in pts) / len(pts)
        my = sum(m for _, m in pts) / len(pts)
        var = sum((t - mx) ** 2 for t, _ in pts)
        return 0.0 if not var else 60 * sum((t - mx) * (m - my) for t, m in pts) / var


class _Partition:
    """What one partition's readers were handed, in constant memory (the soak must not grow
    by itself): every sequence number below ``expected`` was seen, except ``missing``."""

    def __init__(self) -> None:
        self.expected = 0
        self.missing: set[int] = set()
        self.failed: set[int] = set()  # sends that failed (not expected downstream)
        self.handed = 0
        self.duplicated = 0
        #: Redelivery (see SoakResult.redelivered), in whichever order the two copies come:
        #: records lost uncommitted whose second copy has not come yet, and repeats not
        #: (yet) explained by such a loss -- seq -> how many (counted in ``duplicated``).
        self.may_repeat: set[int] = set()
        self.unexplained: dict[int, int] = {}
        self.redelivered = 0
        self.reordered = 0
        # Where it went wrong, for the report (bounded: the first few of each).
        self.jumps: list[tuple[int, int]] = []  # (expected, got) when seq skipped ahead
        self.repeats: list[tuple[int, int]] = []  # (expected, got) when seq went back
        self._repeating = False

    def record(self, seq: int) -> None:
        self.handed += 1
        repeating, self._repeating = self._repeating, False
        if seq == self.expected:
            self.expected += 1
        elif seq > self.expected:
            if len(self.jumps) < 5:
                self.jumps.append((self.expected, seq))
            self.missing.update(range(self.expected, seq))
            self.expected = seq + 1
        elif seq in self.missing:
            self.missing.discard(seq)
            self.reordered += 1
        elif seq in self.may_repeat:
            self.may_repeat.discard(seq)
            self.redelivered += 1
        else:
            if not repeating and len(self.repeats) < 5:
                self.repeats.append((self.expected, seq))  # where a run of repeats starts
            self.duplicated += 1
            self.unexplained[seq] = self.unexplained.get(seq, 0) + 1
            self._repeating = True

    def lost_uncommitted(self, handed: list[int]) -> None:
        """A member lost this partition with ``handed`` not committed: the new owner starts
        at the last commit, so each may be handed twice, and in any order (the new owner
        may hand some before the old member learns it was expelled, and the old member may
        hand some after the new owner did). Not duplicates, then: redelivered."""
        for seq in handed:
            repeats = self.unexplained.get(seq)
            if repeats:  # its second copy came already
                if repeats == 1:
                    del self.unexplained[seq]
                else:
                    self.unexplained[seq] = repeats - 1
                self.duplicated -= 1
                self.redelivered += 1
            else:
                self.may_repeat.add(seq)

    @property
    def distinct(self) -> int:
        """Records handed at least once."""
        return self.handed - self.duplicated - self.redelivered

    def lost(self, sent: int) -> int:
        gone = self.missing | set(range(self.expected, sent))
        return len(gone - self.failed)


class _Member:
    """One consumer of the group: records what it was handed; commits after each poll and
    before partitions are taken away."""

    def __init__(self, seen: dict[int, _Partition], progress: Callable[[], None]) -> None:
        self.seen = seen
        self.progress = progress
        self.consumer: Consumer | None = None
        #: partition -> what this member was handed since its last commit went through
        self.uncommitted: dict[int, list[int]] = {}

    def committed(self, partitions: set[int] | None = None) -> None:
        """A commit went through: what was handed (of ``partitions``; all if None) is safe."""
        for part in list(self.uncommitted) if partitions is None else partitions:
            self.uncommitted.pop(part, None)

    async def run(self, topic: str, settings: dict[str, Any], stop: asyncio.Event) -> None:
        member = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                if member.consumer is not None and revoked:
                    await member.consumer.commit()
                    member.committed({tp.partition for tp in revoked})

            async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                # Already someone else's: a commit would be refused, and the new owner
                # starts at the last commit, so what was handed since may come again.
                for tp in lost:
                    handed = member.uncommitted.pop(tp.partition, [])
                    member.seen[tp.partition].lost_uncommitted(handed)

        async with Consumer(**settings) as consumer:
            self.consumer = consumer
            consumer.subscribe([topic], listener=Listener())
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=2000)
                for records in batch.values():
                    for r in records:
                        part, seq = _PACK.unpack(r.value)
                        self.seen[part].record(seq)
                        self.uncommitted.setdefault(part, []).append(seq)
                if batch:
                    self.progress()
                    await self._commit(consumer)
            self.consumer = None

    async def _commit(self, consumer: Consumer) -> None:
        """What was handed out is committed before the next poll: an at-least-once app
        that wants no duplicates does not read on while its commits fail (the coordinator's
        node is down, say); a rebalance that took the partitions committed them already."""
        for _ in range(200):
            try:
                await consumer.commit()
                self.committed()
                return
            except CommitFailedError:
                return  # revoked (committed by the listener) or lost
            except KafkaError:
                await asyncio.sleep(0.05)


async def _chaos(fake: FakeKafka, topic: str, every: float, result: SoakResult) -> None:
    rng = random.Random(7)
    nodes = sorted(fake.nodes)
    while True:
        await asyncio.sleep(every)
        result.faults += 1
        for _ in range(2):
            fake.move_random_leader(topic)
        fake.cut_after(rng.choice(nodes), 1)
        node = rng.choice(nodes)
        killed = result.faults % 2 == 0
        if killed:
            fake.kill(node)
        else:
            fake.isolate(node)
        # Down for less than the session timeout: the group keeps its members (a longer
        # outage of the coordinator's node expels them, and re-delivery is then Kafka's
        # at-least-once contract, not a client fault).
        await asyncio.sleep(min(every / 6, 2.0))
        if killed:
            fake.restart(node)
        else:
            fake.isolate(node, False)


async def _kafka_chaos(cluster: KafkaCluster, every: float, result: SoakResult) -> None:
    """The real cluster's faults, in turn: SIGKILL a node and start it again 2 s later
    (``start`` waits until it is back in the metadata), or SIGSTOP a node for 7 s -- past
    the client's 5 s request timeout and the brokers' 6 s session timeout, so its
    partitions' leadership moves -- then SIGCONT."""
    rng = random.Random(7)
    while True:
        await asyncio.sleep(every)
        result.faults += 1
        node = rng.choice(cluster.brokers)
        if result.faults % 2:
            node.kill()
            await asyncio.sleep(min(every / 6, 2.0))
            await node.start()
        else:
            node.pause()
            try:
                await asyncio.sleep(7.0)
            finally:
                node.resume()


async def _kafka_heal(cluster: KafkaCluster) -> None:
    for node in cluster.brokers:
        if node.paused:
            node.resume()
        if not node.running:
            await node.start()


async def soak(
    seconds: float,
    rate: int = 2000,
    fault_every: float = 60.0,
    report_every: float = 10.0,
    out: Callable[[str], None] = print,
    kafka: bool = False,
) -> SoakResult:
    """``kafka``: a 3-node Apache Kafka cluster (KafkaCluster, replication factor 3,
    min.insync.replicas=2) with node kills and pauses, instead of a FakeKafka with its
    leader moves, connection cuts, kills and cut-off nodes."""
    result = SoakResult()
    topic = f"soak-{os.getpid()}-{int(time.time())}"
    async with AsyncExitStack() as stack:
        fake: FakeKafka | None = None
        cluster: KafkaCluster | None = None
        if kafka:
            cluster = await stack.enter_async_context(KafkaCluster(brokers=3))
            bootstrap = cluster.bootstrap_servers
            async with AdminClient(bootstrap_servers=bootstrap) as admin:
                new = NewTopic(topic, PARTITIONS, 3, topic_configs={"min.insync.replicas": "2"})
                (await admin.create_topics([new])).raise_on_error()
        else:
            fake = await stack.enter_async_context(FakeKafka(3, seed=3))
            fake.create_topic(topic, PARTITIONS, replication_factor=3)
            bootstrap = fake.bootstrap_servers
        result.fds_before, result.tasks_before = open_fds(), live_tasks()
        seen = {p: _Partition() for p in range(PARTITIONS)}
        common = {
            "bootstrap_servers": bootstrap,
            "retry_backoff_ms": 20,
            "retry_backoff_max_ms": 500,
            "reconnect_backoff_ms": 20,
            "reconnect_backoff_max_ms": 500,
            "request_timeout_ms": 5000,
        }
        group = {
            **common,
            "group_id": f"g-{topic}",
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            # (Kafka's minimum is 6000.) On Kafka the 7 s pause of a node must
            # not outlast the group's session when that node is the coordinator: expelled
            # members redeliver what they could not commit (at-least-once, not a fault).
            "session_timeout_ms": 10000 if kafka else 6000,
            "heartbeat_interval_ms": 500,
            "fetch_max_wait_ms": 100,
        }
        stop = asyncio.Event()
        started = time.monotonic()

        def report(tag: str) -> None:
            t = time.monotonic() - started
            result.rss_samples.append((t, rss_mb()))
            result.consumed = sum(t.distinct for t in seen.values())
            out(
                f"[soak] {tag} t={t:6.0f}s rss={result.rss_samples[-1][1]:7.1f}MB "
                f"fds={open_fds():4d} tasks={live_tasks():4d} produced={result.produced:9d} "
                f"consumed={result.consumed:9d} faults={result.faults}"
            )

        async with Producer(**common, linger_ms=5) as producer:
            caught_up = asyncio.Event()
            target: list[int] = []  # set once sending stopped: what the group must reach

            def progress() -> None:
                # Distinct records only: counting the duplicates a rebalance re-reads would
                # end the drain while records are still unread, which then count as lost.
                distinct = sum(t.distinct for t in seen.values())
                if target and distinct >= target[0]:
                    caught_up.set()

            members = [_Member(seen, progress), _Member(seen, progress)]
            consumers = [
                asyncio.create_task(m.run(topic, {**group, "client_id": f"m{i}"}, stop))
                for i, m in enumerate(members)
            ]
            if fake is not None:
                faults = _chaos(fake, topic, fault_every, result)
            else:
                assert cluster is not None
                faults = _kafka_chaos(cluster, fault_every, result)
            chaos = asyncio.create_task(faults)
            next_seq = dict.fromkeys(range(PARTITIONS), 0)

            def on_done(fut: Any, part: int, seq: int) -> None:
                if fut.exception() is None:
                    result.produced += 1
                else:
                    seen[part].failed.add(seq)
                    result.failed_sends += 1

            next_report = report_every
            i = 0
            tick = 0.01
            while (elapsed := time.monotonic() - started) < seconds:
                due = int(elapsed * rate)
                while i < due:
                    part = i % PARTITIONS
                    seq = next_seq[part]
                    next_seq[part] = seq + 1
                    fut = await producer.send(topic, _PACK.pack(part, seq), partition=part)
                    fut.add_done_callback(lambda f, p=part, s=seq: on_done(f, p, s))
                    i += 1
                if elapsed >= next_report:
                    report("run")
                    next_report += report_every
                await asyncio.sleep(tick)
            chaos.cancel()
            await asyncio.gather(chaos, return_exceptions=True)
            if fake is not None:
                fake.clear_faults()
                for node in fake.nodes:
                    if not fake.alive(node):
                        fake.restart(node)
            else:
                assert cluster is not None
                await _kafka_heal(cluster)
            await producer.flush(timeout=120)
            # Drain: the group catches up with everything acknowledged (bounded).
            target.append(result.produced)
            progress()
            try:
                await asyncio.wait_for(caught_up.wait(), timeout=120)
            except TimeoutError:
                out("[soak] the group did not catch up within 120 s")
            stop.set()
            await asyncio.gather(*consumers)
        report("end")
        if fake is not None:
            # The fake's side of the closed connections (tasks and sockets) ends.
            served = fake

            def all_closed() -> bool:
                return served.open_connections() == 0

            await served.wait_until(all_closed)
        result.fds_after, result.tasks_after = open_fds(), live_tasks()
    for part, t in seen.items():
        result.lost += t.lost(next_seq[part])
        result.duplicated += t.duplicated
        result.redelivered += t.redelivered
        result.reordered += t.reordered
        if t.jumps or t.repeats or t.lost(next_seq[part]):
            out(
                f"[soak] partition {part}: sent {next_seq[part]}, handed {t.handed}, "
                f"skipped ahead (expected, got) {t.jumps}, went back {t.repeats}, "
                f"lost {sorted(t.missing)[:10]}..."
            )
    out(
        f"[soak] lost={result.lost} duplicated={result.duplicated} "
        f"redelivered={result.redelivered} reordered={result.reordered} "
        f"failed_sends={result.failed_sends} faults={result.faults} "
        f"rss_slope={result.rss_slope_mb_per_min:+.2f}MB/min "
        f"fds {result.fds_before}->{result.fds_after} tasks {result.tasks_before}->"
        f"{result.tasks_after}"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--fault-every", type=float, default=60.0)
    parser.add_argument("--report-every", type=float, default=10.0)
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="run on a 3-node Apache Kafka cluster (KafkaCluster) with node kills and pauses",
    )
    args = parser.parse_args()
    result = asyncio.run(
        soak(
            args.minutes * 60,
            args.rate,
            args.fault_every,
            args.report_every,
            kafka=args.kafka,
        )
    )
    bad = result.lost or result.duplicated or result.reordered
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
