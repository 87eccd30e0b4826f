"""Network-partition workloads on Apache Kafka (issue 50) and the checker that reads them back.

A run: a topic of 3 partitions, replication factor 3, ``min.insync.replicas=2``, unclean
leader election off. An idempotent ``acks=all`` producer sends numbered records (record i
to partition i % 3) at a steady pace, and a consumer group member reads the topic and
commits what it read, while a seeded :class:`Schedule` applies faults with a
:class:`~aiokafka_ng.testing.Nemesis` -- each held for a while, then healed, then a pause
for the cluster to recover. Afterwards a fresh consumer reads every partition from the start
and :func:`check` reports, per partition and in total: acknowledged, lost (acknowledged and
not read), duplicated (read twice), reordered (read after a higher number of its partition),
committed offsets lost (a commit that was acknowledged and is later not the group's
offset), the time from each heal until every partition acknowledged a record sent after it,
and the fraction of the sends made during a fault that were acknowledged before it was
healed. With that configuration Kafka promises that nothing acknowledged is lost.

Replay: ``python -m tests.kafka.partitions --seed N --steps K`` (as root) starts a cluster of
its own and prints the report; the same seed gives the same schedule.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import AdminClient, NewTopic, TopicPartition
from aiokafka_ng.testing import KafkaCluster, Nemesis

_log = logging.getLogger("partitions")

PARTITIONS = 3
#: Seconds between two sends of the producer.
SEND_INTERVAL = 0.01
#: Kafka settings of a partition run (every node): a follower that stops fetching leaves
#: the ISR after 5 s, not 30, so a fault's effect shows within a short hold.
BROKER_PROPERTIES = {
    "unclean.leader.election.enable": "false",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "replica.lag.time.max.ms": "5000",
}

FAULTS = (
    "isolate-leader",  # the leader of partition 0 cut from every node and every client
    "leader-from-followers",  # the leader of partition 0 cut from the other nodes only
    "isolate-controller",  # the active controller (quorum leader) cut from everything
    "clients-from-node",  # the clients cut from one node; the nodes still talk
    "lossy-node",  # 30% of one node's packets dropped
    "slow-node",  # one node's links limited to 256 kbit/s
)


@dataclass(frozen=True, slots=True)
class Step:
    fault: str
    node_index: int  # for faults on "one node": which (0-based) when not a leader's
    hold: float  # seconds the fault lasts
    recover: float  # seconds after the heal before the next fault


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    steps: tuple[Step, ...]

    @classmethod
    def seeded(cls, seed: int, steps: int, hold: float = 8.0, recover: float = 6.0) -> Schedule:
        rng = random.Random(seed)
        faults = list(FAULTS)
        rng.shuffle(faults)
        return cls(
            seed,
            tuple(
                Step(
                    faults[i % len(faults)],
                    rng.randrange(3),
                    round(hold * rng.uniform(0.75, 1.25), 2),
                    round(recover * rng.uniform(0.75, 1.25), 2),
                )
                for i in range(steps)
            ),
        )


@dataclass
class Window:
    """One fault as it ran: what, on which node, when (monotonic seconds)."""

    step: Step
    target: int
    start: float
    healed: float = 0.0
    recovered_s: float | None = None  # heal -> every partition acknowledged a later send


@dataclass
class Run:
    topic: str
    group: str
    schedule: Schedule
    sent_at: dict[int, float] = field(default_factory=dict)  # seq -> when sent
    acked_at: dict[int, float] = field(default_factory=dict)  # seq -> when acknowledged
    failed: dict[int, str] = field(default_factory=dict)  # seq -> error
    windows: list[Window] = field(default_factory=list)
    commits: dict[int, int] = field(default_factory=dict)  # partition -> last acked commit
    commit_errors: int = 0
    #: Set once 50 records are acknowledged: the workload flows, faults may begin.
    flowing: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class Report:
    seed: int
    client: str
    steps: list[str]
    sent: int
    acknowledged: int
    failed: int
    lost: list[int]
    duplicated: list[int]
    reordered: list[int]
    committed_lost: dict[int, tuple[int, int | None]]  # partition -> (committed, now)
    recover_s: list[float | None]
    acked_during_faults: float

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.committed_lost)

    def row(self) -> str:
        recover = ", ".join("-" if r is None else f"{r:.1f}" for r in self.recover_s)
        return (
            f"{self.client} | seed {self.seed} | {' '.join(self.steps)} | sent {self.sent} | acked "
            f"{self.acknowledged} | failed {self.failed} | lost {len(self.lost)} | dup "
            f"{len(self.duplicated)} | reordered {len(self.reordered)} | commits lost "
            f"{len(self.committed_lost)} | recover s [{recover}] | acked during faults "
            f"{self.acked_during_faults:.0%}"
        )


def _partition_of(seq: int) -> int:
    return seq % PARTITIONS


#: The producers a schedule can run: ours, the Java client (kafka-clients, through
#: tests/kafka/java/Interop.java's "stream" op) and librdkafka (confluent-kafka).
CLIENTS = ("aiokafka-ng", "java", "confluent-kafka")


async def run(
    cluster: KafkaCluster, nemesis: Nemesis, schedule: Schedule, client: str = "aiokafka-ng"
) -> Report:
    """One run of ``schedule`` on a fresh topic with ``client``'s producer (see the module
    docstring); the committing group member is ours in every run."""
    name = f"part-{schedule.seed}-{time.monotonic_ns() % 10**9}"
    async with AdminClient(
        bootstrap_servers=cluster.bootstrap_servers, default_api_timeout_ms=30000
    ) as admin:
        (await admin.create_topics([NewTopic(name, PARTITIONS, 3)])).raise_on_error()
        state = Run(topic=name, group=f"{name}-g", schedule=schedule)
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            producers = {
                "aiokafka-ng": _produce,
                "java": _produce_java,
                "confluent-kafka": _produce_confluent,
            }
            tg.start_soon(producers[client], cluster, state, done)
            tg.start_soon(_consume_and_commit, cluster, state, done)
            try:
                await _apply_schedule(admin, cluster, nemesis, state)
            finally:
                nemesis.reset()
                done.set()
        report = await check(cluster, state)
        report.client = client
        return report


async def _apply_schedule(
    admin: AdminClient, cluster: KafkaCluster, nemesis: Nemesis, state: Run
) -> None:
    await state.flowing.wait()
    for step in state.schedule.steps:
        target = await _target(admin, cluster, state.topic, step)
        window = Window(step, target, time.monotonic())
        _fault(nemesis, step.fault, target)
        _log.warning("fault %s on node %d", step.fault, target)
        state.windows.append(window)
        await anyio.sleep(step.hold)
        nemesis.reset()
        window.healed = time.monotonic()
        _log.warning("healed")
        await anyio.sleep(step.recover)
    # The last window's recovery is seen by the time the producer has sent for a while.
    await anyio.sleep(2.0)


def _fault(nemesis: Nemesis, fault: str, target: int) -> None:
    if fault in ("isolate-leader", "isolate-controller"):
        nemesis.isolate(target)
    elif fault == "leader-from-followers":
        nemesis.isolate_from_nodes(target)
    elif fault == "clients-from-node":
        nemesis.cut_clients(target)
    elif fault == "lossy-node":
        nemesis.lossy(target, 0.3)
    elif fault == "slow-node":
        nemesis.slow(target, "256kbit")
    else:
        raise ValueError(f"unknown fault {fault!r}")


async def _target(admin: AdminClient, cluster: KafkaCluster, topic: str, step: Step) -> int:
    """The node a step acts on, read from the healthy cluster just before the fault."""
    if step.fault in ("isolate-leader", "leader-from-followers"):
        description = (await admin.describe_topics([topic])).result(topic)
        leader = description.partitions[0].leader
        if leader is not None:
            return leader.node_id
    if step.fault == "isolate-controller":
        return (await admin.describe_metadata_quorum()).leader_id
    return cluster.brokers[step.node_index].node_id


async def _produce(cluster: KafkaCluster, state: Run, done: anyio.Event) -> None:
    async with (
        Producer(
            bootstrap_servers=cluster.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            request_timeout_ms=5000,
            delivery_timeout_ms=60000,
            linger_ms=5,
        ) as producer,
        anyio.create_task_group() as tg,
    ):
        seq = 0
        while not done.is_set():
            future = await producer.send(
                state.topic, b"%08d" % seq, key=None, partition=_partition_of(seq)
            )
            state.sent_at[seq] = time.monotonic()
            tg.start_soon(_settle, future, seq, state)
            seq += 1
            await anyio.sleep(SEND_INTERVAL)
        await producer.flush()


async def _settle(future: Any, seq: int, state: Run) -> None:
    try:
        await future
    except Exception as exc:  # a record that failed is not acknowledged: never "lost"
        state.failed[seq] = type(exc).__name__
    else:
        _acked(state, seq)


def _acked(state: Run, seq: int) -> None:
    state.acked_at[seq] = time.monotonic()
    if len(state.acked_at) >= 50:
        state.flowing.set()


_INTEROP = Path(__file__).parent / "java" / "Interop.java"


async def _produce_java(cluster: KafkaCluster, state: Run, done: anyio.Event) -> None:
    """The Java producer, same settings, in a JVM of its own: each line it prints is taken
    as it comes, so "sent" and "ack" times are this process's clock (plus a pipe's delay)."""
    spec = {
        "bootstrap": cluster.bootstrap_servers,
        "ops": [
            {
                "op": "stream",
                "topic": state.topic,
                "partitions": PARTITIONS,
                "interval_ms": int(SEND_INTERVAL * 1000),
            }
        ],
    }
    command = [cluster.java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-cp", f"{cluster.libs}/*", str(_INTEROP)]  # fmt: skip
    async with await anyio.open_process(command, stderr=None) as process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(json.dumps(spec).encode() + b"\n")

        async def stop() -> None:
            await done.wait()
            assert process.stdin is not None
            await process.stdin.send(b"stop\n")

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop)
            buffer = b""
            finished = False
            while not finished:
                buffer += await process.stdout.receive()
                *lines, buffer = buffer.split(b"\n")
                now = time.monotonic()
                for raw in lines:
                    if not raw.startswith(b"{"):
                        continue  # a log line of the JVM's
                    line = json.loads(raw)
                    if line["op"] == "sent":
                        state.sent_at[line["seq"]] = now
                    elif line["op"] == "ack":
                        _acked(state, line["seq"])
                    elif line["op"] == "fail":
                        state.failed[line["seq"]] = line["error"]
                    elif line["op"] == "streamed":
                        finished = True
        await process.wait()


async def _produce_confluent(cluster: KafkaCluster, state: Run, done: anyio.Event) -> None:
    """librdkafka's idempotent producer, same settings, polled in a worker thread; its
    delivery reports run in that thread (dict writes only, which the GIL keeps whole)."""
    import threading

    import confluent_kafka

    stop = threading.Event()

    def produce() -> None:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "request.timeout.ms": 5000,
                "delivery.timeout.ms": 60000,
            }
        )

        def report(seq: int) -> Callable[[Any, Any], None]:
            def on_delivery(error: Any, _message: Any) -> None:
                if error is None:
                    state.acked_at[seq] = time.monotonic()
                else:
                    state.failed[seq] = str(error.name())

            return on_delivery

        seq = 0
        while not stop.is_set():
            producer.produce(
                state.topic, b"%08d" % seq, partition=_partition_of(seq), on_delivery=report(seq)
            )
            state.sent_at[seq] = time.monotonic()
            seq += 1
            producer.poll(0)  # delivery reports; poll(timeout) returns early on one
            time.sleep(SEND_INTERVAL)  # the pace of the other two producers
        producer.flush()

    async def stopper() -> None:
        # anyio.Event is not thread-safe: the flowing signal is set from this side.
        while not done.is_set():
            if len(state.acked_at) >= 50:
                state.flowing.set()
            with anyio.move_on_after(0.1):
                await done.wait()
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stopper)
        await anyio.to_thread.run_sync(produce)


async def _consume_and_commit(cluster: KafkaCluster, state: Run, done: anyio.Event) -> None:
    async with Consumer(
        state.topic,
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=state.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10000,
        request_timeout_ms=5000,
    ) as consumer:
        while not done.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            if not batch:
                continue
            offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
            try:
                await consumer.commit(offsets)
            except Exception:  # a commit refused during a fault: not acknowledged
                state.commit_errors += 1
            else:
                for tp, offset in offsets.items():
                    state.commits[tp.partition] = offset


async def check(cluster: KafkaCluster, state: Run) -> Report:
    """Read the topic back and compare it with what the producer and the group were told."""
    read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    tps = [TopicPartition(state.topic, p) for p in range(PARTITIONS)]
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest"
    ) as reader:
        reader.assign(tps)
        ends = await reader.end_offsets(tps)
        while [tp for tp in tps if await reader.position(tp) < ends[tp]]:
            for tp, records in (await reader.getmany(timeout_ms=500)).items():
                read[tp.partition].extend(int(r.value) for r in records if r.value is not None)
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, group_id=state.group
    ) as group_view:
        committed_now = {p: await group_view.committed(tps[p]) for p in range(PARTITIONS)}
    seen: dict[int, int] = {}
    duplicated, reordered = [], []
    for records in read.values():
        highest = -1
        for seq in records:
            seen[seq] = seen.get(seq, 0) + 1
            if seen[seq] == 2:
                duplicated.append(seq)
            if seq < highest and seen[seq] == 1:
                reordered.append(seq)
            highest = max(highest, seq)
    lost = sorted(seq for seq in state.acked_at if seq not in seen)
    committed_lost = {
        p: (offset, committed_now[p])
        for p, offset in state.commits.items()
        if committed_now[p] is None or committed_now[p] < offset  # type: ignore[operator]
    }
    _recovery(state)
    during = [
        seq
        for seq, at in state.sent_at.items()
        if any(w.start <= at < w.healed for w in state.windows)
    ]
    acked_in_window = sum(
        1
        for seq in during
        if seq in state.acked_at
        and any(w.start <= state.sent_at[seq] < w.healed and state.acked_at[seq] < w.healed
                for w in state.windows)
    )  # fmt: skip
    return Report(
        seed=state.schedule.seed,
        client="aiokafka-ng",
        steps=[f"{w.step.fault}@{w.target}" for w in state.windows],
        sent=len(state.sent_at),
        acknowledged=len(state.acked_at),
        failed=len(state.failed),
        lost=lost,
        duplicated=duplicated,
        reordered=reordered,
        committed_lost=committed_lost,
        recover_s=[w.recovered_s for w in state.windows],
        acked_during_faults=acked_in_window / len(during) if during else 1.0,
    )


def _recovery(state: Run) -> None:
    """Per window: from the heal until every partition acknowledged a record sent after it."""
    for window in state.windows:
        firsts = []
        for p in range(PARTITIONS):
            after = [
                state.acked_at[seq]
                for seq, at in state.sent_at.items()
                if at >= window.healed and _partition_of(seq) == p and seq in state.acked_at
            ]
            firsts.append(min(after) if after else None)
        if all(first is not None for first in firsts):
            window.recovered_s = max(f for f in firsts if f is not None) - window.healed


def new_cluster() -> KafkaCluster:
    return KafkaCluster(
        brokers=3,
        tls=False,
        addressable=True,
        heap="512m",
        broker_properties=BROKER_PROPERTIES,
    )


async def _main(
    seed: int,
    runs: int,
    steps: int,
    hold: float,
    recover: float,
    clients: list[str],
    faults: list[str] | None,
) -> int:
    reason = Nemesis.unavailable()
    if reason is not None:
        print(f"cannot run: {reason}")
        return 2
    failed = 0
    async with new_cluster() as cluster:
        with Nemesis(cluster) as nemesis:
            for run_seed in range(seed, seed + runs):
                for client in clients:
                    schedule = Schedule.seeded(run_seed, steps, hold, recover)
                    if faults:  # the seed still picks the node of "one node" faults
                        schedule = Schedule(run_seed, tuple(
                            replace(step, fault=faults[i % len(faults)])
                            for i, step in enumerate(schedule.steps)
                        ))  # fmt: skip
                    report = await run(cluster, nemesis, schedule, client)
                    print(report.row(), flush=True)
                    if report.ok:
                        continue
                    failed += 1
                    found = {"lost": report.lost[:20], "duplicated": report.duplicated[:20],
                             "reordered": report.reordered[:20],
                             "committed_lost": report.committed_lost}  # fmt: skip
                    print(json.dumps(found))
                    print(f"replay: python -m tests.kafka.partitions --seed {run_seed} --runs 1 "
                          f"--steps {steps} --hold {hold} --recover {recover} "
                          f"--clients {client}"
                          + (f" --faults {' '.join(faults)}" if faults else ""))  # fmt: skip
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1, help="seeds seed, seed+1, ...")
    parser.add_argument("--steps", type=int, default=len(FAULTS))
    parser.add_argument("--hold", type=float, default=8.0)
    parser.add_argument("--recover", type=float, default=6.0)
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=["aiokafka-ng"])
    parser.add_argument("--faults", nargs="+", choices=FAULTS, help="these, in turn, instead")
    parser.add_argument("--debug", action="store_true", help="the client's DEBUG log, timed")
    args = parser.parse_args()
    if args.debug:
        logging.basicConfig(format="%(relativeCreated)8.0f %(name)s %(message)s")
        logging.getLogger("aiokafka_ng").setLevel(logging.DEBUG)
    code = anyio.run(
        _main, args.seed, args.runs, args.steps, args.hold, args.recover, args.clients, args.faults
    )
    raise SystemExit(code)


if __name__ == "__main__":
    main()
