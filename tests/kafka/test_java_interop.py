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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import NewTopic, TopicPartition
from aiokafka_ng.testing import KafkaCluster
from aiokafka_ng.testing._kafka_jars import ensure_jars, find_java
from tests.kafka.helpers import admin_for, new_topic, unique

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
    async with admin_for(kafka_cluster) as admin:
        (
            await admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in topics.values()])
        ).raise_on_error()
    lines = await run_java(kafka_cluster, ops)
    acks = {line["topic"]: line["acks"] for line in lines if line["op"] == "produced"}
    for case in cases:
        topic = topics[case]
        if case == "transactional":
            aborted_acks, committed_acks = acks[topic][: len(aborted)], acks[topic][len(aborted) :]
            want = expected_rows(records[case], committed_acks)
            everything = sorted(want + expected_rows(aborted, aborted_acks))
        else:
            want = everything = expected_rows(records[case], acks[topic])
        got_committed = await read_ours(kafka_cluster, topic, len(want), "read_committed")
        assert got_committed == want, case
        got_all = await read_ours(kafka_cluster, topic, len(everything), "read_uncommitted")
        assert got_all == everything, case
