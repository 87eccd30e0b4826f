"""The Java client (kafka-clients 4.x) as interop peer, on the real 3-node Kafka cluster.

``tests/kafka/java/Interop.java`` runs as a single-file source program on the cluster's own
jars; each test starts one JVM that does all its cases (a JVM start costs about a second of
the 2 shared cores). Records are compared one by one: partition, offset, timestamp, key,
value and headers, with null keys, null and empty values, binary bytes, duplicate header
names and a null header value among them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from aiokafka_ng import Consumer, KafkaError, Producer, TopicPartition
from aiokafka_ng.admin import NewTopic
from aiokafka_ng.testing import KafkaCluster
from aiokafka_ng.testing._kafka_jars import ensure_jars, find_java
from tests.kafka.helpers import admin_for, eventually, new_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

SOURCE = Path(__file__).parent / "java" / "Interop.java"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 3
#: (partition, offset, timestamp, key, value, headers) of one record.
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def make_records(tag: str, n: int = 12) -> list[dict[str, Any]]:
    """Records that exercise the format: keyed ones go through the partitioner, some name
    their partition, one has no timestamp (the producer stamps it)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        key = None if i % 4 == 3 else b"%s-\x00\xff-%d" % (tag.encode(), i)
        value: bytes | None = bytes((i * j + 7) & 0xFF for j in range(300)) + b"v" * 200
        if i % 5 == 4:
            value = None
        elif i == 6:
            value = b""
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("h", b"\x00\x01"), ("h", None), ("\u00fc", b"")]
        out.append(
            {
                "partition": i % PARTITIONS if i % 2 == 0 or key is None else None,
                "key": key,
                "value": value,
                "timestamp": None if i == 5 else 1_700_000_000_000 + i,
                "headers": headers,
            }
        )
    return out


def to_json(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "key": b64(r["key"]),
            "value": b64(r["value"]),
            "headers": [[k, b64(v)] for k, v in r["headers"]],
        }
        for r in records
    ]


def expected_rows(records: Sequence[dict[str, Any]], acks: Sequence[Sequence[int]]) -> list[Row]:
    rows = [
        (p, o, ts, r["key"], r["value"], tuple(r["headers"]))
        for r, (p, o, ts) in zip(records, acks, strict=True)
    ]
    for r, (p, _, ts) in zip(records, acks, strict=True):
        if r["partition"] is not None:
            assert p == r["partition"]
        if r["timestamp"] is not None:
            assert ts == r["timestamp"]
    return sorted(rows)


def java_row(line: dict[str, Any]) -> Row:
    return (
        line["partition"],
        line["offset"],
        line["timestamp"],
        unb64(line["key"]),
        unb64(line["value"]),
        tuple((k, unb64(v)) for k, v in line["headers"]),
    )


class JavaPeer:
    """One JVM running Interop.java; its JSON lines are read as they come."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self._buffer = b""

    async def next_line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive()
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\n", 1)
            if raw.startswith(b"{"):  # anything else is a log line of the JVM's
                line: dict[str, Any] = json.loads(raw)
                self.lines.append(line)
                return line


async def start_java(cluster: KafkaCluster, ops: list[dict[str, Any]]) -> JavaPeer:
    libs = ensure_jars()
    process = await anyio.open_process(
        [
            find_java(),
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{libs}/*",
            str(SOURCE),
        ],
        stderr=None,
    )
    assert process.stdin is not None
    spec = {"bootstrap": cluster.bootstrap_servers, "ops": ops}
    await process.stdin.send(json.dumps(spec).encode() + b"\n")
    return JavaPeer(process)


async def run_java(cluster: KafkaCluster, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the ops to the end; every JSON line the program printed."""
    peer = await start_java(cluster, ops)
    async with peer.process:
        with anyio.fail_after(120):
            assert peer.process.stdin is not None
            await peer.process.stdin.aclose()
            assert peer.process.stdout is not None
            async for chunk in peer.process.stdout:
                peer._buffer += chunk
            assert await peer.process.wait() == 0
    return [json.loads(raw) for raw in peer._buffer.split(b"\n") if raw.startswith(b"{")]


@asynccontextmanager
async def new_topics(cluster: KafkaCluster, names: Iterable[str]) -> AsyncIterator[None]:
    """Fresh topics of PARTITIONS partitions, replicated 3 times, deleted afterwards."""
    names = list(names)
    async with admin_for(cluster) as admin:
        (await admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in names])).raise_on_error()
        try:
            yield
        finally:
            await admin.delete_topics(names)


async def read_ours(cluster: KafkaCluster, topic: str, count: int, isolation: str) -> list[Row]:
    """``count`` records of every partition of ``topic`` from offset 0, with our consumer."""
    rows: list[Row] = []
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level=isolation,
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        with anyio.fail_after(30):
            while len(rows) < count:
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    rows += [
                        (tp.partition, r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                        for r in records
                    ]
    return sorted(rows)


async def test_java_producer_to_our_consumer(kafka_cluster: KafkaCluster) -> None:
    """Java produces with each codec, idempotently, and transactionally (an aborted
    transaction, then a committed one); our consumer reads every record back exactly, under
    read_uncommitted and read_committed (which hides the aborted records and the markers)."""
    cases = [*CODECS, "idempotent", "transactional"]
    topics = {case: unique(f"j-{case}") for case in cases}
    records = {case: make_records(case) for case in cases}
    aborted = make_records("aborted", 6)
    ops: list[dict[str, Any]] = []
    for case in cases:
        op: dict[str, Any] = {"op": "produce", "topic": topics[case]}
        if case in CODECS:
            op |= {"compression": case, "records": to_json(records[case])}
        elif case == "idempotent":
            op |= {"compression": "lz4", "idempotent": True, "records": to_json(records[case])}
        else:
            op |= {
                "compression": "zstd",
                "idempotent": True,
                "transactional_id": unique("jtx"),
                "transactions": [
                    {"commit": False, "records": to_json(aborted)},
                    {"commit": True, "records": to_json(records[case])},
                ],
            }
        ops.append(op)
    async with new_topics(kafka_cluster, topics.values()):
        lines = await run_java(kafka_cluster, ops)
        acks = {line["topic"]: line["acks"] for line in lines if line["op"] == "produced"}
        for case in cases:
            topic = topics[case]
            if case == "transactional":
                aborted_acks, committed_acks = (
                    acks[topic][: len(aborted)],
                    acks[topic][len(aborted) :],
                )
                want = expected_rows(records[case], committed_acks)
                everything = sorted(want + expected_rows(aborted, aborted_acks))
            else:
                want = everything = expected_rows(records[case], acks[topic])
            got_committed = await read_ours(kafka_cluster, topic, len(want), "read_committed")
            assert got_committed == want, case
            got_all = await read_ours(kafka_cluster, topic, len(everything), "read_uncommitted")
            assert got_all == everything, case


async def test_our_producer_to_java_consumer_and_partitioner(kafka_cluster: KafkaCluster) -> None:
    """We produce with each codec, idempotently, and transactionally (an aborted transaction,
    then a committed one); Java's read_committed consumer sees exactly the committed records.
    Our keyed records without a partition land where Java's partitioner (murmur2) puts the
    same keys."""
    cases = [*CODECS, "idempotent", "transactional"]
    topics = {case: unique(f"p-{case}") for case in cases}
    records = {case: make_records(case) for case in cases}
    aborted = make_records("aborted", 6)
    async with new_topics(kafka_cluster, topics.values()):
        want: dict[str, list[Row]] = {}
        for case in cases:
            config: dict[str, Any] = {"compression_type": case if case in CODECS else "zstd"}
            if case == "idempotent":
                config["enable_idempotence"] = True
            if case == "transactional":
                config["transactional_id"] = unique("ptx")
            async with Producer(
                bootstrap_servers=kafka_cluster.bootstrap_servers,
                acks="all",
                linger_ms=20,
                **config,
            ) as producer:

                async def send_all(batch: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
                    futures = [
                        await producer.send(
                            topics[case],  # noqa: B023 -- awaited before the loop moves on
                            r["value"],
                            key=r["key"],
                            partition=r["partition"],
                            timestamp_ms=r["timestamp"],
                            headers=r["headers"],
                        )
                        for r in batch
                    ]
                    metas = [await f for f in futures]
                    return [(m.partition, m.offset, m.timestamp) for m in metas]

                if case == "transactional":
                    producer.begin_transaction()
                    await send_all(aborted)
                    await producer.abort_transaction()
                    producer.begin_transaction()
                    acks = await send_all(records[case])
                    await producer.commit_transaction()
                else:
                    acks = await send_all(records[case])
            want[case] = expected_rows(records[case], acks)
        keyed = [r for case in cases for r in records[case] if r["partition"] is None]
        ops: list[dict[str, Any]] = [
            {
                "op": "consume",
                "topic": topics[case],
                "isolation": "read_committed",
                "count": len(want[case]),
            }
            for case in cases
        ]
        ops.append(
            {"op": "partition", "partitions": PARTITIONS, "keys": [b64(r["key"]) for r in keyed]}
        )
        lines = await run_java(kafka_cluster, ops)
        for case in cases:
            got = sorted(
                java_row(line)
                for line in lines
                if line["op"] == "record" and line["topic"] == topics[case]
            )
            assert got == want[case], case
            assert all(
                line["timestamp_type"] == "CreateTime"
                for line in lines
                if line["op"] == "record" and line["topic"] == topics[case]
            )
        (picked,) = [line["picked"] for line in lines if line["op"] == "partitions"]
        assert len(keyed) > 20
        # Keys are unique across the cases (the case name is in them).
        ours = {row[3]: row[0] for case in cases for row in want[case] if row[3] is not None}
        assert [ours[r["key"]] for r in keyed] == picked
        assert len(set(picked)) == PARTITIONS  # the keys spread, so the check can tell


async def test_classic_group_java_member_and_ours(kafka_cluster: KafkaCluster) -> None:
    """A classic group with a Java member and one of ours, both on their default assignors
    (Java 4.x: range then cooperative-sticky; ours the same): the group settles on range,
    each member owns 3 of the 6 partitions, each reads exactly the records of its own
    partitions and commits them, and the group's committed offsets cover every record."""
    partitions = 6
    group_id = unique("jg")
    async with new_topic(kafka_cluster, partitions) as topic:
        peer = await start_java(
            kafka_cluster, [{"op": "group", "topic": topic, "group_id": group_id}]
        )
        ours_rows: list[tuple[int, bytes | None]] = []
        ours_assigned: list[frozenset[int]] = []
        async with peer.process, anyio.create_task_group() as tg:
            consumer = Consumer(
                bootstrap_servers=kafka_cluster.bootstrap_servers,
                group_id=group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=10000,
            )
            with anyio.fail_after(90):
                # Java alone first: it owns every partition.
                while not (
                    (line := await peer.next_line())["op"] == "assigned"
                    and len(line["partitions"]) == partitions
                ):
                    pass
                stop = anyio.Event()

                async def ours() -> None:
                    async with consumer:
                        consumer.subscribe([topic])
                        while not stop.is_set():
                            batches = await consumer.getmany(timeout_ms=200)
                            mine = frozenset(tp.partition for tp in consumer.assignment())
                            if not ours_assigned or ours_assigned[-1] != mine:
                                ours_assigned.append(mine)
                            for tp, records in batches.items():
                                ours_rows.extend((tp.partition, r.value) for r in records)
                            if batches:
                                await consumer.commit()

                tg.start_soon(ours)
                # The rebalance that lets ours in: Java is left with half.
                while not (
                    (line := await peer.next_line())["op"] == "assigned"
                    and len(line["partitions"]) == partitions // 2
                ):
                    pass
                java_partitions = frozenset(line["partitions"])
                async with Producer(
                    bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all"
                ) as producer:
                    for i in range(60):
                        await producer.send(topic, b"r%d" % i, partition=i % partitions)
                    await producer.flush()
                java_rows: list[tuple[int, bytes | None]] = []
                while len(java_rows) < 30:
                    line = await peer.next_line()
                    assert line["op"] in ("record", "committed"), line
                    if line["op"] == "record":
                        java_rows.append((line["partition"], unb64(line["value"])))
                while (await peer.next_line())["op"] != "committed":
                    pass
                async with admin_for(kafka_cluster) as admin:
                    # Ours commits after each batch it reads; wait for its last commit.
                    offsets = await eventually(
                        lambda: admin.list_consumer_group_offsets(group_id),
                        lambda got: [o.offset for o in got.values()] == [10] * partitions,
                    )
                assert {tp.partition: o.offset for tp, o in offsets.items()} == dict.fromkeys(
                    range(partitions), 10
                )
                stop.set()
                assert peer.process.stdin is not None
                await peer.process.stdin.send(b"leave\n")
                while (await peer.next_line())["op"] != "left":
                    pass
    # Range, not cooperative-sticky: each member owns a contiguous half.
    assert java_partitions in ({0, 1, 2}, {3, 4, 5})
    assert ours_assigned[-1] == frozenset(range(partitions)) - java_partitions
    expected = {(i % partitions, b"r%d" % i) for i in range(60)}
    assert sorted(java_rows) == sorted(r for r in expected if r[0] in java_partitions)
    assert sorted(ours_rows) == sorted(r for r in expected if r[0] not in java_partitions)


async def test_group_without_a_common_assignor_names_both_sides(
    kafka_cluster: KafkaCluster,
) -> None:
    """Ours offering only roundrobin cannot join a group whose Java member offers its
    defaults (range, cooperative-sticky): the error names our assignors and the group's."""
    group_id = unique("jg")
    async with new_topic(kafka_cluster, 2) as topic:
        peer = await start_java(
            kafka_cluster, [{"op": "group", "topic": topic, "group_id": group_id}]
        )
        async with peer.process:
            with anyio.fail_after(60):
                while (await peer.next_line())["op"] != "assigned":
                    pass
                async with Consumer(
                    bootstrap_servers=kafka_cluster.bootstrap_servers,
                    group_id=group_id,
                    partition_assignment_strategy=["roundrobin"],
                ) as consumer:
                    consumer.subscribe([topic])
                    with pytest.raises(KafkaError) as caught:
                        while True:
                            await consumer.getmany(timeout_ms=200)
                assert peer.process.stdin is not None
                await peer.process.stdin.send(b"leave\n")
                while (await peer.next_line())["op"] != "left":
                    pass
    message = str(caught.value)
    assert "INCONSISTENT_GROUP_PROTOCOL" in message or "Inconsistent" in type(caught.value).__name__
    assert "offered ['roundrobin']" in message and "use 'range'" in message, message
