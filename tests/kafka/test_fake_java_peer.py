"""The Java client (kafka-clients 4.x) against FakeKafka over TCP: it produces (plain,
idempotent, transactional with an aborted then a committed transaction) and consumes, and
our consumer reads back exactly what it wrote. Only the Java jars are needed, not a Kafka
cluster: the peer is ``tests/kafka/java/Interop.java``, as in test_java_interop.py."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.testing import FakeKafka
from tests.kafka.test_java_interop import (
    PARTITIONS,
    expected_rows,
    make_records,
    read_ours,
    run_java,
    to_json,
)

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the peer is a JVM: one loop is enough
async def test_the_java_client_produces_and_consumes_on_the_fake() -> None:
    records = make_records("fake", 12)
    aborted = make_records("aborted", 4)
    ops: list[dict[str, Any]] = [
        {"op": "produce", "topic": "plain", "compression": "lz4", "records": to_json(records)},
        {
            "op": "produce",
            "topic": "idempotent",
            "compression": "zstd",
            "idempotent": True,
            "records": to_json(records),
        },
        {
            "op": "produce",
            "topic": "transactional",
            "compression": "gzip",
            "idempotent": True,
            "transactional_id": "java-tx",
            "transactions": [
                {"commit": False, "records": to_json(aborted)},
                {"commit": True, "records": to_json(records)},
            ],
        },
        {"op": "consume", "topic": "transactional", "isolation": "read_committed", "count": 12},
    ]
    async with FakeKafka(brokers=3) as kafka:
        for topic in ("plain", "idempotent", "transactional"):
            kafka.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        lines = await run_java(kafka, ops)
        acks = {line["topic"]: line["acks"] for line in lines if line["op"] == "produced"}
        for topic in ("plain", "idempotent"):
            want = expected_rows(records, acks[topic])
            got = await read_ours(kafka, topic, len(want), "read_uncommitted")
            assert got == want, topic
        committed = expected_rows(records, acks["transactional"][len(aborted) :])
        got = await read_ours(kafka, "transactional", 12, "read_committed")
        assert got == committed
        java_read = [line for line in lines if line["op"] == "record"]
        assert len(java_read) == 12  # Java's read_committed consumer skipped the aborted ones
        assert {"op": "consumed", "topic": "transactional", "count": 12} in lines
