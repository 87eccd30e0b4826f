"""Admin operations on one group follow its coordinator when it moves: the cluster's
coordinator route forgets the coordinator that answered NOT_COORDINATOR (at the top level,
per group or per partition, as each API puts it) and the next round looks it up again; no
admin code invalidates a coordinator by hand. On FakeKafka, virtual time."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.admin import AdminClient, OffsetAndMetadata, TopicPartition
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 10, 8, 9, 47
NOT_COORDINATOR = 16
FAST = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 50}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_one_group_operations_follow_a_moved_coordinator() -> None:
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", 2, 1)
        kafka.move_coordinator("g", 1)
        async with AdminClient(**kafka.client_config(), **FAST) as admin:
            first = await admin.alter_consumer_group_offsets("g", {tp0: 1})
            assert first.succeeded == {tp0: None}
            lookups = len(kafka.received(FIND_COORDINATOR))

            # OffsetCommit: NOT_COORDINATOR per partition.
            kafka.move_coordinator("g", 2)
            altered = await admin.alter_consumer_group_offsets("g", {tp0: 7, tp1: 3})
            assert altered.succeeded == {tp0: None, tp1: None}
            # OffsetFetch: per group (v8+) or at the top level.
            kafka.move_coordinator("g", 1)
            offsets = await admin.list_consumer_group_offsets("g")
            assert offsets == {tp0: OffsetAndMetadata(7, ""), tp1: OffsetAndMetadata(3, "")}
            # OffsetDelete: at the top level.
            kafka.move_coordinator("g", 2)
            deleted = await admin.delete_consumer_group_offsets("g", [tp1])
            assert deleted.succeeded == {tp1: None}
            latency = admin.statistics().request_latency_ms_by_node

        # Each move cost one stale answer and one new lookup, nothing more.
        assert len(kafka.received(FIND_COORDINATOR)) == lookups + 3
        assert kafka.errors(OFFSET_COMMIT, NOT_COORDINATOR, node=1) == 2  # per partition
        assert kafka.errors(OFFSET_FETCH, NOT_COORDINATOR, node=2) == 1
        assert kafka.errors(OFFSET_DELETE, NOT_COORDINATOR, node=1) == 1
        assert [s.node for s in kafka.received(OFFSET_COMMIT)] == [1, 1, 2]
        assert [s.node for s in kafka.received(OFFSET_DELETE)] == [1, 2]
        # The round trips count at the broker that answered, the stale ones included.
        assert latency[1]["count"] >= 3 and latency[2]["count"] >= 3
