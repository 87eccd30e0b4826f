"""FakeKafka's leader epochs on the wire (KIP-101, KIP-320): OffsetForLeaderEpoch, fencing
by the client's current leader epoch, Fetch v12+'s diverging epoch, and ``truncate`` (an
unclean leader election). Requests sent on a raw connection, in memory, on virtual time,
asyncio and trio; the answers are those of Kafka's Partition / LeaderEpochFileCache."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng import Producer
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic
from aiokafka_ng.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from aiokafka_ng.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from aiokafka_ng.protocol.records import iter_batches
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

TOPIC = "t"
NONE, OFFSET_OUT_OF_RANGE, NOT_LEADER = 0, 1, 6
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def produce(kafka: FakeKafka, n: int) -> None:
    async with Producer(**kafka.client_config(), linger_ms=0) as producer:
        for i in range(n):
            await producer.send_and_wait(TOPIC, b"%d" % i, partition=0)


async def epoch_end(
    kafka: FakeKafka, epoch: int, current: int = -1, node: int | None = None
) -> tuple[int, int, int]:
    """(error code, epoch, end offset) of OffsetForLeaderEpoch for partition 0."""
    node = kafka.leader(TOPIC, 0) if node is None else node
    config = ConnectionConfig(transport=kafka.transport, request_timeout_s=10)
    async with connect("127.0.0.1", kafka.nodes[node].port, config) as conn:
        request = OffsetForLeaderEpochRequest(
            replica_id=-1,
            topics=[
                OffsetForLeaderTopic(
                    topic=TOPIC,
                    partitions=[
                        OffsetForLeaderPartition(
                            partition=0, current_leader_epoch=current, leader_epoch=epoch
                        )
                    ],
                )
            ],
        )
        response = await conn.send(request)
    (p,) = response.topics[0].partitions
    return p.error_code, p.leader_epoch, p.end_offset


async def fetch(
    kafka: FakeKafka, offset: int, *, current: int, last_fetched: int, version: int = 12
) -> Any:
    config = ConnectionConfig(transport=kafka.transport, request_timeout_s=10)
    async with connect("127.0.0.1", kafka.nodes[kafka.leader(TOPIC, 0)].port, config) as conn:
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            topics=[
                FetchTopic(
                    topic=TOPIC,
                    partitions=[
                        FetchPartition(
                            partition=0,
                            current_leader_epoch=current,
                            fetch_offset=offset,
                            last_fetched_epoch=last_fetched,
                            partition_max_bytes=1 << 20,
                        )
                    ],
                )
            ],
        )
        response = await conn.send(request, version=version)
    (p,) = response.responses[0].partitions
    return p


async def test_offset_for_leader_epoch_answers_from_the_epoch_history() -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, 3)  # 0..2 in epoch 0
        kafka.move_leader(TOPIC, 0)  # epoch 1, writes nothing
        kafka.move_leader(TOPIC, 0)  # epoch 2
        await produce(kafka, 2)  # 3..4 in epoch 2
        assert kafka.leader_epoch(TOPIC, 0) == 2
        assert await epoch_end(kafka, 2) == (NONE, 2, 5)  # the latest: the log end
        assert await epoch_end(kafka, 0) == (NONE, 0, 3)  # where epoch 1 starts
        # Epoch 1 wrote nothing: Kafka's cache dropped it when epoch 2 started at the same
        # offset, so it is answered as an unknown epoch (the largest one below it).
        assert await epoch_end(kafka, 1) == (NONE, 0, 3)
        assert await epoch_end(kafka, 7) == (NONE, -1, -1)  # above every known epoch
        # The client's current epoch is checked first, then leadership.
        assert (await epoch_end(kafka, 0, current=1))[0] == FENCED_LEADER_EPOCH
        assert (await epoch_end(kafka, 0, current=3))[0] == UNKNOWN_LEADER_EPOCH
        assert await epoch_end(kafka, 0, current=2) == (NONE, 0, 3)
        follower = next(n for n in kafka.nodes if n != kafka.leader(TOPIC, 0))
        assert (await epoch_end(kafka, 0, current=2, node=follower))[0] == NOT_LEADER


async def test_truncate_is_an_unclean_election_and_the_log_says_where_it_diverged() -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, 10)  # 0..9 in epoch 0
        old_leader = kafka.leader(TOPIC, 0)
        with pytest.raises(KeyError):
            kafka.truncate(TOPIC, 1, 6)
        assert kafka.truncate(TOPIC, 0, 6) != old_leader
        assert kafka.leader_epoch(TOPIC, 0) == 1
        assert [r.offset for r in kafka.records(TOPIC, 0)] == list(range(6))
        await produce(kafka, 2)  # 6..7 in epoch 1
        assert kafka.end_offset(TOPIC, 0) == 8
        assert await epoch_end(kafka, 0, current=1) == (NONE, 0, 6)
        assert await epoch_end(kafka, 1, current=1) == (NONE, 1, 8)

        # A reader at 10 that last read epoch 0: the log diverged at 6.
        p = await fetch(kafka, 10, current=1, last_fetched=0)
        assert p.error_code == NONE and not p.records
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 6)
        assert p.high_watermark == 8
        # At the divergence the log is the reader's again: records, no diverging epoch.
        p = await fetch(kafka, 6, current=1, last_fetched=0)
        assert p.diverging_epoch.epoch == -1
        assert [r.offset for b in iter_batches(p.records) for r in b.records()] == [6, 7]
        # An epoch the log never had past its latest: out of range, as Kafka answers.
        assert (await fetch(kafka, 6, current=1, last_fetched=5)).error_code == (
            OFFSET_OUT_OF_RANGE
        )
        # Below v12 there is no last fetched epoch: nothing is checked.
        p = await fetch(kafka, 8, current=1, last_fetched=0, version=11)
        assert p.error_code == NONE and not p.records
        # The client's current leader epoch fences Fetch and ListOffsets both ways.
        assert (await fetch(kafka, 6, current=0, last_fetched=-1)).error_code == (
            FENCED_LEADER_EPOCH
        )
        assert (await fetch(kafka, 6, current=2, last_fetched=-1)).error_code == (
            UNKNOWN_LEADER_EPOCH
        )
        config = ConnectionConfig(transport=kafka.transport, request_timeout_s=10)
        leader = kafka.nodes[kafka.leader(TOPIC, 0)].port
        async with connect("127.0.0.1", leader, config) as conn:
            codes = []
            for current in (0, 1, 2):
                response = await conn.send(
                    ListOffsetsRequest(
                        replica_id=-1,
                        topics=[
                            ListOffsetsTopic(
                                name=TOPIC,
                                partitions=[
                                    ListOffsetsPartition(
                                        partition_index=0,
                                        current_leader_epoch=current,
                                        timestamp=-1,
                                    )
                                ],
                            )
                        ],
                    )
                )
                codes.append(response.topics[0].partitions[0].error_code)
        assert codes == [FENCED_LEADER_EPOCH, NONE, UNKNOWN_LEADER_EPOCH]
