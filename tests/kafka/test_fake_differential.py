"""FakeKafka against Apache Kafka 4.x: the same request sequences, the same answers (issue 46,
item 5).

Each test runs one scenario -- a short sequence of raw protocol requests -- on the shared
3-node Kafka cluster (``kafka_cluster``) and on one FakeKafka of 3 nodes, and compares the
normalized answers step by step (see :mod:`tests.kafka.differential`): error codes, offsets,
watermarks, leader and producer epochs, duplicate outcomes, group and transaction states.
A failure lists every step where the fake answered differently.

Asyncio only: what is compared is the brokers' answers, not the client's event loop (our
connection code runs on trio throughout the rest of the suite), and one module-scoped fake
serves every test.

Where the fake differs from Kafka on purpose, the scenarios go around it: Fetch sessions
are declined (every fetch here is sessionless, session id 0); a leader move is made by each
side's own means (Kafka: a reassignment that adds the new leader, then a preferred leader
election -- AlterPartitionReassignments and ElectLeaders, which the fake does not serve;
the fake: :meth:`FakeKafka.move_leader`), and leader epochs are then compared relative to
the current one, since a reassignment may bump it more than once. What Kafka finishes after
it answered (brokers and their replica managers learning of a topic, a follower learning
the high watermark, the group coordinator learning of a topic, transaction markers, a
coordinator loading) is waited for on both sides, with requests that change nothing, and is
not a step. Every answer is compared whole.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aiokafka_ng.protocol.messages import add_partitions_to_txn as apt
from aiokafka_ng.protocol.messages import alter_partition_reassignments as apr
from aiokafka_ng.protocol.messages import consumer_group_heartbeat as cgh
from aiokafka_ng.protocol.messages import create_partitions as cp
from aiokafka_ng.protocol.messages import create_topics as ct
from aiokafka_ng.protocol.messages import delete_groups as dg
from aiokafka_ng.protocol.messages import delete_records as dr
from aiokafka_ng.protocol.messages import delete_topics as dt
from aiokafka_ng.protocol.messages import describe_groups as dsg
from aiokafka_ng.protocol.messages import describe_transactions as dtx
from aiokafka_ng.protocol.messages import elect_leaders as el
from aiokafka_ng.protocol.messages import end_txn as et
from aiokafka_ng.protocol.messages import heartbeat as hb
from aiokafka_ng.protocol.messages import init_producer_id as ip
from aiokafka_ng.protocol.messages import join_group as jg
from aiokafka_ng.protocol.messages import leave_group as lg
from aiokafka_ng.protocol.messages import metadata as md
from aiokafka_ng.protocol.messages import offset_commit as oc
from aiokafka_ng.protocol.messages import offset_fetch as of
from aiokafka_ng.protocol.messages import sync_group as sg
from aiokafka_ng.testing import KafkaCluster
from aiokafka_ng.testing.fake import FakeKafka
from tests.kafka.differential import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    NOT_READY,
    Scenario,
    Side,
    Trace,
    batch,
    compare,
    pin_versions,
    run_both,
    until,
)
from tests.kafka.helpers import unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

NO_TOPIC_ID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def fake() -> AsyncIterator[FakeKafka]:
    # Auto-created topics as the Kafka fixture makes them (num.partitions=4).
    async with FakeKafka(brokers=3, default_partitions=4) as cluster:
        yield cluster


@pytest.fixture
async def sides(kafka_cluster: KafkaCluster, fake: FakeKafka) -> AsyncIterator[tuple[Side, Side]]:
    async with contextlib.AsyncExitStack() as stack:
        kafka = Side("kafka", kafka_cluster.bootstrap_servers, stack)
        faked = Side("fake", fake.bootstrap_servers, stack, fake)
        await pin_versions(kafka, faked)
        yield kafka, faked


# ---- scenarios -----------------------------------------------------------------------------


async def produce_and_list_offsets(side: Side, t: Trace, prefix: str) -> None:
    """Plain (non-idempotent) batches: their offsets, then every kind of ListOffsets."""
    topic = f"{prefix}-plain"
    await side.create_topic(topic)
    t.add("produce [1000, 5000]", await side.produce(topic, batch([(1000, b"a"), (5000, b"b")])))
    t.add("produce [3000]", await side.produce(topic, batch([(3000, b"c")])))
    t.add("produce acks=1", await side.produce(topic, batch([(2000, b"d"), (4000, b"e")]), acks=1))
    await side.produce_no_ack(topic, batch([(2500, b"f")]))
    for name, ts in [
        ("earliest", EARLIEST),
        ("latest", LATEST),
        ("max timestamp", MAX_TIMESTAMP),
        ("by timestamp 0", 0),
        ("by timestamp 2000", 2000),
        ("by timestamp 5000", 5000),
        ("by timestamp 9000", 9000),
    ]:
        t.add(f"list offsets {name}", await side.list_offsets(topic, ts))


async def idempotent_sequences(side: Side, t: Trace, prefix: str) -> None:
    """Kafka's idempotent-producer rules on one partition (KIP-98, KIP-360, KIP-588)."""
    topic = f"{prefix}-idem"
    await side.create_topic(topic)
    init = await init_producer_id(side, None, None)
    t.add("init producer id", (init.error_code, init.producer_epoch))
    pid = init.producer_id

    async def send(label: str, seq: int, n: int = 1, epoch: int = 0, producer: int = pid) -> None:
        records = [(1000 + i, b"v%d" % i) for i in range(n)]
        data = batch(records, producer_id=producer, epoch=epoch, sequence=seq)
        t.add(label, await side.produce(topic, data))

    await send("seq 0-1", 0, 2)
    for seq in range(2, 7):
        await send(f"seq {seq}", seq)
    await send("duplicate of the last batch (seq 6)", 6)
    await send("duplicate of seq 3", 3)
    await send("duplicate of seq 2 (the oldest of the last five)", 2)
    await send("duplicate of seq 0-1 (older than the last five)", 0, 2)
    await send("gap (seq 9 after 6)", 9)
    await send("seq 7 after the gap", 7)
    await send("same first sequence, other last (seq 7-8)", 7, 2)
    await send("epoch 1 at seq 5", 5, epoch=1)
    await send("epoch 1 at seq 0", 0, epoch=1)
    await send("epoch 1 duplicate of seq 0", 0, epoch=1)
    await send("epoch 1 seq 1", 1, epoch=1)
    await send("epoch 0 after epoch 1", 8, epoch=0)
    await send("epoch 3 (skipping 2) at seq 0", 0, epoch=3)
    stranger = pid + 500_000  # a producer id the partition has never seen
    await send("unknown producer at seq 0", 0, producer=stranger)
    await send("unknown producer seq 1", 1, producer=stranger)
    await send("unknown producer duplicate of seq 0", 0, producer=stranger)
    # A partition with no state for a producer takes any first sequence (no
    # UNKNOWN_PRODUCER_ID in Kafka 4), and goes on from there.
    another = pid + 600_000
    await send("another unknown producer at seq 5", 5, producer=another)
    await send("it goes on at seq 6", 6, producer=another)
    await send("then seq 0", 0, producer=another)
    t.add("list offsets latest", await side.list_offsets(topic, LATEST))


async def fetch_offsets(side: Side, t: Trace, prefix: str) -> None:
    """Fetch at, inside, at the end of and past the log; leader epochs; unknown topics."""
    topic = f"{prefix}-fetch"
    await side.create_topic(topic)
    for records in ([(1, b"a"), (2, b"b")], [(3, b"c")], [(4, b"d"), (5, b"e"), (6, b"f")]):
        t.add("produce", await side.produce(topic, batch(records)))
    leader, epoch = await side.leader(topic)
    t.add("leader epoch of a new topic", epoch)
    for offset in (0, 2, 3, 4, 6, 7, -1, 1 << 40):
        t.add(f"fetch at {offset}", await side.fetch(topic, offset))
    t.add("fetch, current epoch", await side.fetch(topic, 0, epoch=epoch))
    t.add("fetch, epoch + 1", await side.fetch(topic, 0, epoch=epoch + 1))
    t.add("list offsets, epoch + 1", await side.list_offsets(topic, LATEST, epoch=epoch + 1))
    other = next(n for n in side.nodes() if n != leader)
    t.add("fetch from a node that is no replica", await side.fetch(topic, 0, node=other))
    t.add(
        "produce to a node that is no replica",
        await side.produce(topic, batch([(7, b"g")]), node=other),
    )
    t.add(
        "list offsets at a node that is no replica",
        await side.list_offsets(topic, LATEST, node=other),
    )
    t.add("fetch partition 1 of 1", await side.fetch(topic, 0, partition=1, node=leader))
    t.add(
        "fetch an unknown topic id", await side.fetch(topic, 0, node=leader, topic_id=uuid.uuid4())
    )
    t.add("read_committed fetch", await side.fetch(topic, 0, read_committed=True))
    replicated = f"{prefix}-rf3"
    await side.create_topic(replicated, rf=3)
    t.add("produce, RF 3", await side.produce(replicated, batch([(1, b"a")])))
    leader, _ = await side.leader(replicated)
    follower = next(n for n in side.nodes() if n != leader)
    # A follower learns the high watermark from its next fetch from the leader, after the
    # leader answered the Produce: waited for (a Fetch changes nothing).
    high_watermark = (await side.fetch(replicated, 0))[2]
    await until(
        lambda: side.fetch(replicated, 0, node=follower), lambda got: got[2] == high_watermark
    )
    t.add("fetch from a follower (KIP-392)", await side.fetch(replicated, 0, node=follower))
    t.add("list offsets at a follower", await side.list_offsets(replicated, LATEST, node=follower))


async def leader_moved(side: Side, t: Trace, prefix: str) -> None:
    """After the partition's leader moved to another replica: the old leader, now a
    follower, refuses Produce and serves consumers' Fetch; epochs are fenced; the new
    leader's epoch history (OffsetForLeaderEpoch) has both epochs."""
    topic = f"{prefix}-moved"
    await side.create_topic(topic)
    t.add("produce", await side.produce(topic, batch([(1, b"a"), (2, b"b")])))
    old, first_epoch = await side.leader(topic)
    new = next(n for n in side.nodes() if n != old)
    await move_leader(side, topic, new)
    leader, epoch = await side.leader(topic)
    t.add("leader moved, epoch went up", (leader == new, epoch > first_epoch))

    def rel(e: int) -> str:
        return "current" if e == epoch else "older" if 0 <= e < epoch else f"{e} (current {epoch})"

    err, base, start = await side.produce(topic, batch([(3, b"c")]), node=old)
    hint = side.last_hint
    t.add(
        "produce to the old leader",
        (err, base, start, hint[0] == new, rel(hint[1]) if hint[1] >= 0 else -1),
    )
    # A follower learns the high watermark from its next fetch from the new leader:
    # waited for (a Fetch changes nothing).
    high_watermark = (await side.fetch(topic, 0))[2]
    await until(lambda: side.fetch(topic, 0, node=old), lambda got: got[2] == high_watermark)
    t.add("fetch from the old leader, a follower (KIP-392)", await side.fetch(topic, 0, node=old))
    t.add("produce to the new leader", await side.produce(topic, batch([(4, b"d")])))
    t.add("fetch, current epoch", await side.fetch(topic, 0, epoch=epoch))
    t.add("fetch, epoch + 1", await side.fetch(topic, 0, epoch=epoch + 1))
    t.add("fetch, epoch - 1", await side.fetch(topic, 0, epoch=epoch - 1))
    for name, ts in [("latest", LATEST), ("earliest", EARLIEST), ("max timestamp", MAX_TIMESTAMP)]:
        err, offset, stamp, ep = await side.list_offsets(topic, ts, epoch=epoch)
        t.add(f"list offsets {name}", (err, offset, stamp, rel(ep)))
    t.add("list offsets, epoch - 1", await side.list_offsets(topic, LATEST, epoch=epoch - 1))
    # KIP-320: where an epoch ends in the new leader's log (offsets 0-1 were written in the
    # first epoch, 2 in the current one).
    for name, asked in [("first", first_epoch), ("current", epoch), ("current + 1", epoch + 1)]:
        err, found, end = await side.offset_for_leader_epoch(topic, asked, current=epoch)
        t.add(f"offset for leader epoch: {name}", (err, rel(found) if found >= 0 else found, end))
    err, _, _ = await side.offset_for_leader_epoch(topic, first_epoch, current=epoch - 1)
    t.add("offset for leader epoch, current epoch - 1", err)
    # Fetch v12+ checks the epoch the reader last fetched against that history.
    for offset, last in [(2, first_epoch), (3, first_epoch), (3, epoch), (3, epoch + 1)]:
        *got, (div_epoch, div_end) = await side.fetch(
            topic, offset, epoch=epoch, last_fetched_epoch=last
        )
        t.add(
            f"fetch at {offset}, last fetched epoch {rel(last)}",
            (*got, rel(div_epoch) if div_epoch >= 0 else div_epoch, div_end),
        )


async def move_leader(side: Side, topic: str, to: int) -> None:
    """Partition 0's leader moves to ``to``, and the old leader stays a replica.

    The fake: :meth:`FakeKafka.move_leader` (which keeps the old leader as a replica).
    Kafka: a reassignment adds ``to`` first in the replicas, then, once it is in the ISR,
    a preferred leader election makes it the leader; both finish after they answered, and
    are waited for on every node."""
    if side.fake is not None:
        side.fake.move_leader(topic, 0, to)
        return
    (old, _) = await side.leader(topic)
    answer = await side.send(
        apr.AlterPartitionReassignmentsRequest(
            timeout_ms=30000,
            topics=[
                apr.ReassignableTopic(
                    name=topic,
                    partitions=[apr.ReassignablePartition(partition_index=0, replicas=[to, old])],
                )
            ],
        )
    )
    codes = [answer.error_code] + [p.error_code for r in answer.responses for p in r.partitions]
    assert not any(codes), f"the reassignment failed: {answer}"
    await side.wait_known(
        topic,
        1,
        lambda parts: parts[0].replica_nodes == [to, old] and set(parts[0].isr_nodes) == {to, old},
    )
    elected = await side.send(
        el.ElectLeadersRequest(
            election_type=0,  # preferred: the first replica
            topic_partitions=[el.TopicPartitions(topic=topic, partitions=[0])],
            timeout_ms=30000,
        )
    )
    codes = [elected.error_code] + [
        p.error_code for r in elected.replica_election_results for p in r.partition_result
    ]
    assert not any(codes), f"the election failed: {elected}"
    await side.wait_known(topic, 1, lambda parts: parts[0].leader_id == to)


async def admin_errors(side: Side, t: Trace, prefix: str) -> None:
    """Metadata for unknown and invalid names; CreateTopics, CreatePartitions, DeleteTopics."""

    def label(name: str | None) -> str:
        return "None" if name is None else name.replace(prefix, "P")

    def topics(answered: list[md.MetadataResponseTopic]) -> list[tuple[str, int]]:
        return [(label(x.name), x.error_code) for x in answered]

    unknown = f"{prefix}-none"
    t.add("metadata, unknown topic", topics((await side.metadata([unknown])).topics))
    t.add("metadata, invalid name", topics((await side.metadata(["bad name!"])).topics))
    t.add(
        "metadata, invalid name, auto-create",
        topics((await side.metadata(["bad name!"], allow_auto=True)).topics),
    )

    def creatable(name: str, partitions: int = 1, rf: int = 1) -> ct.CreatableTopic:
        return ct.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf)

    made = f"{prefix}-made"
    t.add("create 3 partitions, RF 2", await side.create_topics(creatable(made, 3, 2)))
    t.add("create it again", await side.create_topics(creatable(made)))
    t.add(
        "create with broker defaults (-1, -1)",
        await side.create_topics(creatable(f"{prefix}-dflt", -1, -1)),
    )
    t.add("create 0 partitions", await side.create_topics(creatable(f"{prefix}-zero", 0)))
    t.add("create RF 0", await side.create_topics(creatable(f"{prefix}-rf0", 1, 0)))
    t.add("create RF 4 on 3 brokers", await side.create_topics(creatable(f"{prefix}-rf4", 1, 4)))
    for bad in ("bad name!", ".", "..", "x" * 250, ""):
        t.add(f"create invalid name {bad[:10]!r}", await side.create_topics(creatable(bad)))
    t.add(
        "validate only",
        await side.create_topics(creatable(f"{prefix}-dry", 2, 3), validate_only=True),
    )
    twice = f"{prefix}-twice"
    t.add(
        "the same name twice in one request",
        await side.create_topics(creatable(twice), creatable(twice)),
    )
    t.add("the name given twice was not made", topics((await side.metadata([twice])).topics))
    unknown_config = creatable(f"{prefix}-nocfg")
    unknown_config.configs = [ct.CreatableTopicConfig(name="no.such.config", value="1")]
    t.add("an unknown config name", await side.create_topics(unknown_config))
    both_bad = creatable(f"{prefix}-nocfg0", 0)
    both_bad.configs = [ct.CreatableTopicConfig(name="no.such.config", value="1")]
    t.add("an unknown config name and 0 partitions", await side.create_topics(both_bad))
    t.add(
        "the validated topic was not made", topics((await side.metadata([f"{prefix}-dry"])).topics)
    )

    async def grow(
        name: str, count: int, assign: list[list[int]] | None = None
    ) -> list[tuple[str, int]]:
        assignments = (
            None
            if assign is None
            else [cp.CreatePartitionsAssignment(broker_ids=a) for a in assign]
        )
        answer = await side.send(
            cp.CreatePartitionsRequest(
                topics=[cp.CreatePartitionsTopic(name=name, count=count, assignments=assignments)],
                timeout_ms=30000,
            )
        )
        return [(label(r.name), r.error_code) for r in answer.results]

    nodes = side.nodes()
    t.add("create partitions 3 -> 2", await grow(made, 2))
    t.add("create partitions 3 -> 3", await grow(made, 3))
    t.add("create partitions, unknown topic", await grow(unknown, 5))
    t.add("create partitions 3 -> 5, one assignment", await grow(made, 5, [nodes[:2]]))
    t.add("create partitions 3 -> 4, one replica (RF 2)", await grow(made, 4, [nodes[:1]]))
    t.add("create partitions 3 -> 4, an unknown broker", await grow(made, 4, [[nodes[0], 99]]))
    t.add("create partitions 3 -> 4, a broker twice", await grow(made, 4, [[nodes[0]] * 2]))
    t.add("create partitions 3 -> 4, assigned", await grow(made, 4, [[nodes[2], nodes[0]]]))
    await side.wait_known(made, 4)
    t.add("create partitions 4 -> 5", await grow(made, 5))
    await side.wait_known(made, 5)
    parts = await side.partitions(made)
    t.add("partitions after growing", len(parts))
    t.add("the assigned partition's replicas", [nodes.index(n) for n in parts[3].replica_nodes])

    async def delete(name: str | None, topic_id: uuid.UUID = NO_TOPIC_ID) -> list[tuple[str, int]]:
        answer = await side.send(
            dt.DeleteTopicsRequest(
                topics=[dt.DeleteTopicState(name=name, topic_id=topic_id)],
                topic_names=[] if name is None else [name],
                timeout_ms=30000,
            )
        )
        return [(label(r.name), r.error_code) for r in answer.responses]

    t.add("delete an unknown topic", await delete(unknown))
    t.add("delete an unknown topic id", await delete(None, uuid.uuid4()))
    t.add("delete a topic", await delete(made))

    async def described() -> list[tuple[str, int]]:
        return topics((await side.metadata([made])).topics)

    # Kafka's brokers learn of the deletion a moment after the controller answered.
    t.add("metadata after the delete", await until(described, lambda got: got != [("P-made", 0)]))


async def auto_create(side: Side, t: Trace, prefix: str) -> None:
    """Metadata that may create a topic: the topic as created (num.partitions, RF 3)."""
    topic = f"{prefix}-auto"
    first = (await side.metadata([topic], allow_auto=True)).topics
    t.add("metadata creating the topic", [(x.error_code, len(x.partitions)) for x in first])
    await side.wait_known(topic, 4)
    parts = await side.partitions(topic)
    t.add(
        "partitions and replicas",
        [(p.error_code, len(p.replica_nodes), p.leader_epoch) for p in parts],
    )


async def delete_records(side: Side, t: Trace, prefix: str) -> None:
    """DeleteRecords moves the log start; what ListOffsets, Fetch and Produce then say."""
    topic = f"{prefix}-deleted"
    await side.create_topic(topic)
    for records in ([(1, b"a"), (9, b"b")], [(3, b"c")], [(4, b"d"), (5, b"e"), (6, b"f")]):
        t.add("produce", await side.produce(topic, batch(records)))
    leader, _ = await side.leader(topic)

    async def delete(offset: int, partition: int = 0) -> list[tuple[int, int]]:
        answer = await side.send(
            dr.DeleteRecordsRequest(
                topics=[
                    dr.DeleteRecordsTopic(
                        name=topic,
                        partitions=[
                            dr.DeleteRecordsPartition(partition_index=partition, offset=offset)
                        ],
                    )
                ],
                timeout_ms=30000,
            ),
            leader,
        )
        return [(p.error_code, p.low_watermark) for r in answer.topics for p in r.partitions]

    t.add("delete before 4 (inside the last batch)", await delete(4))
    t.add("list offsets earliest", await side.list_offsets(topic, EARLIEST))
    # The deleted records stay in the segment: a time lookup skips those below the log
    # start, the max-timestamp lookup still sees them.
    t.add("list offsets by timestamp 0", await side.list_offsets(topic, 0))
    t.add("list offsets by timestamp 9 (a deleted record's)", await side.list_offsets(topic, 9))
    t.add("list offsets max timestamp", await side.list_offsets(topic, MAX_TIMESTAMP))
    for offset in (2, 3, 4, 5):
        t.add(f"fetch at {offset}", await side.fetch(topic, offset))
    t.add("delete before 2 (below the start)", await delete(2))
    t.add("delete before 7 (past the end)", await delete(7))
    t.add("delete before the high watermark (-1)", await delete(-1))
    t.add("fetch at 6", await side.fetch(topic, 6))
    t.add("produce after", await side.produce(topic, batch([(7, b"g")])))
    t.add("delete in partition 1 of 1", await delete(0, partition=1))


async def produce_errors(side: Side, t: Trace, prefix: str) -> None:
    """acks, CRC, max.message.bytes and other batches Kafka refuses."""
    small = batch([(1, b"x" * 100)])
    large = batch([(1, b"x" * 101)])
    topic = f"{prefix}-small"
    await side.create_topic(topic, max_message_bytes=str(len(small)))
    t.add("a batch of max.message.bytes", await side.produce(topic, small))
    t.add("a batch one byte larger", await side.produce(topic, large))
    t.add("acks=2", await side.produce(topic, small, acks=2))
    corrupt = bytearray(small)
    corrupt[-2] ^= 0xFF
    t.add("a bad CRC", await side.produce(topic, bytes(corrupt)))
    two = batch([(1, b"a")]) + batch([(2, b"b")])
    t.add("two batches in one partition's records", await side.produce(topic, two))
    leader, _ = await side.leader(topic)
    t.add("partition 1 of 1", await side.produce(topic, small, partition=1, node=leader))
    t.add("an unknown topic", await side.produce(f"{prefix}-none", small, node=leader))
    t.add("list offsets latest", await side.list_offsets(topic, LATEST))


async def simple_offsets(side: Side, t: Trace, prefix: str) -> None:
    """Offsets of a group with no members (generation -1): commit, fetch, delete."""
    topic, group = f"{prefix}-offsets", f"{prefix}-simple"
    await side.create_topic(topic, 2)
    node = await side.coordinator(group)
    other = next(n for n in side.nodes() if n != node)

    async def commit(
        offsets: dict[int, int],
        *,
        name: str = topic,
        generation: int = -1,
        member: str = "",
        at: int | None = None,
    ) -> list[tuple[int, int]]:
        answer = await side.send(
            oc.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=generation,
                member_id=member,
                topics=[
                    oc.OffsetCommitRequestTopic(
                        name=name,
                        partitions=[
                            oc.OffsetCommitRequestPartition(
                                partition_index=p, committed_offset=o, committed_metadata=f"m{o}"
                            )
                            for p, o in sorted(offsets.items())
                        ],
                    )
                ],
            ),
            node if at is None else at,
        )
        return [(p.partition_index, p.error_code) for r in answer.topics for p in r.partitions]

    async def fetch(
        partitions: list[int] | None,
        *,
        stable: bool = False,
        gid: str = group,
        at: int | None = None,
    ) -> object:
        topics = (
            None
            if partitions is None
            else [of.OffsetFetchRequestTopics(name=topic, partition_indexes=partitions)]
        )
        answer = await side.send(
            of.OffsetFetchRequest(
                groups=[of.OffsetFetchRequestGroup(group_id=gid, topics=topics)],
                require_stable=stable,
            ),
            node if at is None else at,
        )
        (g,) = answer.groups
        return (
            g.error_code,
            [
                (
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata,
                    p.error_code,
                )
                for r in g.topics
                for p in r.partitions
            ],
        )

    t.add("fetch before any commit", await fetch([0, 1]))
    t.add("commit 0 -> 5, 1 -> 7", await commit({0: 5, 1: 7}))
    t.add("fetch", await fetch([0, 1]))
    t.add("fetch all topics", await fetch(None))
    t.add("fetch, require_stable", await fetch([0], stable=True))
    t.add("commit past the log end", await commit({0: 1000}))
    t.add("commit partition 2 of 2", await commit({2: 1}))
    t.add("commit an unknown topic", await commit({0: 1}, name=f"{prefix}-none"))
    t.add(
        "commit at generation 3 (no such generation)",
        await commit({0: 6}, generation=3, member="m"),
    )
    t.add("commit to a node that is not the coordinator", await commit({0: 6}, at=other))
    t.add("fetch after", await fetch([0, 1]))
    nobody = f"{prefix}-nobody"
    t.add("fetch an unknown group", await fetch([0], gid=nobody, at=await side.coordinator(nobody)))

    async def delete(*groups: str) -> list[tuple[int, ...]]:
        answer = await side.send(dg.DeleteGroupsRequest(groups_names=list(groups)), node)
        return [(r.error_code,) for r in answer.results]

    t.add("delete the group", await delete(group))
    t.add("fetch after the delete", await fetch([0, 1]))
    t.add("delete it again", await delete(group))


async def classic_group(side: Side, t: Trace, prefix: str) -> None:
    """One member through a classic group's life: join twice (KIP-394), sync, heartbeat,
    commit at its generation, leave."""
    group = f"{prefix}-classic"
    node = await side.coordinator(group)
    protocols = [jg.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")]

    async def join(member: str) -> jg.JoinGroupResponse:
        return await side.send(
            jg.JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id=member,
                protocol_type="consumer",
                protocols=protocols,
            ),
            node,
        )

    first = await join("")
    t.add(
        "join without a member id", (first.error_code, first.generation_id, bool(first.member_id))
    )
    member = first.member_id
    second = await join(member)
    t.add(
        "join with it",
        (
            second.error_code,
            second.generation_id,
            second.protocol_type,
            second.protocol_name,
            second.leader == member,
            [m.member_id == member for m in second.members],
        ),
    )
    generation = second.generation_id
    synced = await side.send(
        sg.SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[sg.SyncGroupRequestAssignment(member_id=member, assignment=b"plan")],
        ),
        node,
    )
    t.add(
        "sync", (synced.error_code, synced.protocol_type, synced.protocol_name, synced.assignment)
    )

    async def beat(gen: int, who: str) -> int:
        answer = await side.send(
            hb.HeartbeatRequest(group_id=group, generation_id=gen, member_id=who), node
        )
        return answer.error_code

    t.add("heartbeat", await beat(generation, member))
    t.add("heartbeat, old generation", await beat(generation - 1, member))
    t.add("heartbeat, unknown member", await beat(generation, "nobody"))
    described = await side.send(dsg.DescribeGroupsRequest(groups=[group]), node)
    t.add(
        "describe",
        [
            (g.error_code, g.group_state, g.protocol_type, g.protocol_data, len(g.members))
            for g in described.groups
        ],
    )
    left = await side.send(
        lg.LeaveGroupRequest(group_id=group, members=[lg.MemberIdentity(member_id=member)]), node
    )
    t.add("leave", (left.error_code, [m.error_code for m in left.members]))
    t.add("heartbeat after leaving", await beat(generation, member))
    described = await side.send(dsg.DescribeGroupsRequest(groups=[group]), node)
    t.add(
        "describe after", [(g.error_code, g.group_state, len(g.members)) for g in described.groups]
    )


async def consumer_group(side: Side, t: Trace, prefix: str) -> None:
    """One KIP-848 member: joins a new group subscribed to a topic not yet created, gets
    every partition once it is, confirms, is fenced for a wrong epoch, commits at its
    epoch, leaves."""
    topic, group = f"{prefix}-cg", f"{prefix}-kip848"
    node = await side.coordinator(group)
    member = uuid.uuid4().hex

    async def beat(epoch: int, owned: list[cgh.TopicPartitions] | None, who: str = member) -> Any:
        answer = await side.send(
            cgh.ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=who,
                member_epoch=epoch,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[topic] if epoch == 0 else None,
                topic_partitions=owned,
            ),
            node,
        )
        names = {v: k.replace(prefix, "P") for k, v in side.topic_ids.items()}
        got = None
        if answer.assignment is not None:
            got = sorted(
                (names.get(tp.topic_id, "?"), sorted(tp.partitions))
                for tp in answer.assignment.topic_partitions
            )
        return answer, (answer.error_code, answer.member_epoch, got)

    answer, (err, epoch, got) = await beat(0, [])
    t.add("join", (err, epoch, got, answer.heartbeat_interval_ms))
    # The topic is created after the join: a Kafka broker hands a new topic to its metadata
    # cache (what Metadata answers), then its replica manager, then its group coordinator
    # (BrokerMetadataPublisher), so a join right after the creation may or may not see it.
    # The coordinator bumps the group epoch when it learns of it: waited for with
    # heartbeats that change nothing until then (same epoch, same owned partitions).
    await side.create_topic(topic, 2)
    answer, (err, epoch, got) = await until(
        lambda: beat(epoch, []), lambda got: got[1][1] != epoch or got[1][0] != 0
    )
    t.add("assigned once the topic exists", (err, epoch, got))
    owned = [] if answer.assignment is None else answer.assignment.topic_partitions
    answer, (err, again, got) = await beat(epoch, owned)
    t.add("heartbeat owning the assignment", (err, again, got))
    t.add("heartbeat at a wrong epoch", (await beat(epoch + 5, owned))[1])
    t.add("heartbeat of an unknown member", (await beat(3, owned, uuid.uuid4().hex))[1])

    async def commit(at_epoch: int) -> list[int]:
        answer = await side.send(
            oc.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=at_epoch,
                member_id=member,
                topics=[
                    oc.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[oc.OffsetCommitRequestPartition(partition_index=0)],
                    )
                ],
            ),
            node,
        )
        return [p.error_code for r in answer.topics for p in r.partitions]

    t.add("commit at the member epoch", await commit(epoch))
    t.add("commit at an older epoch", await commit(epoch - 1))
    t.add("leave", (await beat(-1, owned))[1])


async def init_producer_id(
    side: Side, tid: str | None, node: int | None, pid: int = -1, epoch: int = -1
) -> ip.InitProducerIdResponse:
    """InitProducerId, for a transactional id (to its coordinator ``node``) or without."""
    request = ip.InitProducerIdRequest(
        transactional_id=tid,
        transaction_timeout_ms=60000 if tid else -1,
        producer_id=pid,
        producer_epoch=epoch,
    )
    # COORDINATOR_LOAD_IN_PROGRESS from a transaction coordinator Kafka has just loaded, or
    # from a broker of a fresh cluster that has no block of producer ids yet: the shared
    # cluster's history, not a behaviour under test.
    return await until(lambda: side.send(request, node), lambda a: a.error_code not in NOT_READY)


async def end_txn(
    side: Side,
    tid: str,
    node: int,
    pid: int,
    epoch: int,
    *,
    commit: bool,
    version: int | None = None,
) -> et.EndTxnResponse:
    request = et.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return await side.send(request, node, version=version)


async def describe_txn(side: Side, tid: str, node: int) -> tuple[int, str, int]:
    """(error code, state, producer epoch) of DescribeTransactions."""
    answer = await side.send(dtx.DescribeTransactionsRequest(transactional_ids=[tid]), node)
    (state,) = answer.transaction_states
    return state.error_code, state.transaction_state, state.producer_epoch


async def txn_settled(side: Side, tid: str, node: int) -> None:
    """Until the transaction is no longer PrepareCommit/PrepareAbort: Kafka writes the
    markers and the Complete state after EndTxn answered (the fake before)."""
    await until(lambda: describe_txn(side, tid, node), lambda d: not d[1].startswith("Prepare"))


def txn_batch(pid: int, epoch: int, seq: int, n: int = 1) -> bytes:
    # Timestamps of now: Kafka rolls a log segment when a batch is segment.ms newer than
    # the segment's first, and its markers carry the time they are written, so older
    # records would put each marker in a segment of its own -- and a Fetch never reads
    # past the end of a segment (the fake has no segments).
    now = int(time.time() * 1000)
    records = [(now + i, b"t%d" % i) for i in range(n)]
    return batch(records, producer_id=pid, epoch=epoch, sequence=seq, transactional=True)


async def transactions(side: Side, t: Trace, prefix: str) -> None:
    """A transactional producer on a transaction.version 2 cluster (KIP-890): epochs from
    InitProducerId and EndTxn, partitions joining through Produce, a commit, an abort, and
    what read_committed then sees."""
    topic, tid = f"{prefix}-txn", f"{prefix}-tid"
    await side.create_topic(topic)
    node = await side.coordinator(tid, transaction=True)
    init = await init_producer_id(side, tid, node)
    pid, epoch = init.producer_id, init.producer_epoch
    t.add("init", (init.error_code, epoch))
    init = await init_producer_id(side, tid, node)
    t.add(
        "init again: same id, next epoch",
        (init.error_code, init.producer_id == pid, init.producer_epoch),
    )
    epoch = init.producer_epoch

    async def produce(seq: int, n: int, at_epoch: int) -> tuple[int, int, int]:
        return await side.produce(topic, txn_batch(pid, at_epoch, seq, n), transactional_id=tid)

    async def end(commit: bool, at_epoch: int) -> tuple[int, int]:
        answer = await end_txn(side, tid, node, pid, at_epoch, commit=commit)
        return answer.error_code, answer.producer_epoch

    t.add("transactional produce (joins the transaction)", await produce(0, 2, epoch))
    t.add("describe", await describe_txn(side, tid, node))
    t.add("read_committed fetch, open transaction", await side.fetch(topic, 0, read_committed=True))
    t.add("read_uncommitted fetch", await side.fetch(topic, 0))
    t.add(
        "list offsets latest, read_committed",
        await side.list_offsets(topic, LATEST, read_committed=True),
    )
    t.add("end with a stale epoch", await end(True, epoch - 1))
    err, bumped = await end(True, epoch)
    t.add("commit: the epoch moves", (err, bumped - epoch))
    await txn_settled(side, tid, node)
    t.add("describe after the commit", await describe_txn(side, tid, node))
    t.add("read_committed fetch after the commit", await side.fetch(topic, 0, read_committed=True))
    epoch = bumped
    t.add("produce in the next transaction", await produce(0, 1, epoch))
    err, bumped = await end(False, epoch)
    t.add("abort: the epoch moves", (err, bumped - epoch))
    await txn_settled(side, tid, node)
    t.add("read_committed fetch after the abort", await side.fetch(topic, 0, read_committed=True))
    t.add("read_uncommitted fetch after the abort", await side.fetch(topic, 0))
    t.add("produce at the fenced epoch", await produce(1, 1, epoch))
    epoch = bumped
    err, bumped = await end(False, epoch)
    t.add("abort with nothing in the transaction", (err, bumped - epoch))
    await txn_settled(side, tid, node)
    t.add("describe after the empty abort", await describe_txn(side, tid, node))
    t.add(
        "init with a wrong epoch (KIP-360)",
        (await init_producer_id(side, tid, node, pid, bumped + 5)).error_code,
    )
    init = await init_producer_id(side, tid, node, pid, bumped)
    t.add(
        "init with the current epoch (KIP-360)",
        (init.error_code, init.producer_id == pid, init.producer_epoch - bumped),
    )


async def transactions_v1_requests(side: Side, t: Trace, prefix: str) -> None:
    """The transaction version 1 requests a client may still send to a Kafka 4 cluster:
    Produce below v12 (no implicit add), AddPartitionsToTxn v3, EndTxn v4 (no epoch bump)."""
    topic, tid = f"{prefix}-txn1", f"{prefix}-tid1"
    await side.create_topic(topic)
    node = await side.coordinator(tid, transaction=True)
    init = await init_producer_id(side, tid, node)
    pid, epoch = init.producer_id, init.producer_epoch
    t.add("init", (init.error_code, epoch))

    async def produce(seq: int, version: int) -> tuple[int, int, int]:
        data = txn_batch(pid, epoch, seq)
        return await side.produce(topic, data, transactional_id=tid, version=version)

    async def add(*names: str) -> list[tuple[str, int]]:
        answer = await side.send(
            apt.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    apt.AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in names
                ],
            ),
            node,
            version=3,
        )
        return sorted(
            (r.name.replace(prefix, "P"), p.partition_error_code)
            for r in answer.results_by_topic_v3_and_below
            for p in r.results_by_partition
        )

    t.add("produce v11 to a partition not added", await produce(0, 11))
    t.add("produce v9 to a partition not added", await produce(0, 9))
    t.add("add it and an unknown topic", await add(topic, f"{prefix}-none"))
    t.add("add it", await add(topic))
    t.add("produce v11", await produce(0, 11))
    answer = await end_txn(side, tid, node, pid, epoch, commit=True, version=4)
    t.add("end v4: commit", (answer.error_code, answer.producer_epoch))
    await txn_settled(side, tid, node)
    t.add("describe after the commit", await describe_txn(side, tid, node))
    t.add("read_committed fetch", await side.fetch(topic, 0, read_committed=True))
    answer = await end_txn(side, tid, node, pid, epoch, commit=True, version=4)
    t.add("end v4 again: a retry of the commit", answer.error_code)
    answer = await end_txn(side, tid, node, pid, epoch, commit=False, version=4)
    t.add("end v4: abort after the commit", answer.error_code)


SCENARIOS: dict[str, Scenario] = {
    "produce_and_list_offsets": produce_and_list_offsets,
    "idempotent_sequences": idempotent_sequences,
    "fetch_offsets": fetch_offsets,
    "leader_moved": leader_moved,
    "admin_errors": admin_errors,
    "auto_create": auto_create,
    "delete_records": delete_records,
    "produce_errors": produce_errors,
    "simple_offsets": simple_offsets,
    "classic_group": classic_group,
    "consumer_group": consumer_group,
    "transactions": transactions,
    "transactions_v1_requests": transactions_v1_requests,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_same_answers(sides: tuple[Side, Side], name: str) -> None:
    kafka, fake = sides
    got_kafka, got_fake = await run_both(kafka, fake, SCENARIOS[name], unique("diff"))
    for line in kafka.transients:  # shown with -s, and with a failure
        print(f"retried on Kafka: {line}")
    problem = compare(got_kafka, got_fake)
    assert problem is None, problem


async def test_api_versions_as_kafkas(sides: tuple[Side, Side]) -> None:
    """Every API the fake serves, Kafka 4.x serves at the same versions: a client negotiates
    the same version with both. One exception: Kafka 4 still lists Produce v0-v2 (for old
    librdkafka clients), the fake starts at v3, the generated codec's first version."""
    kafka, fake = sides
    theirs, ours = kafka.conn().api_versions, fake.conn().api_versions
    expected = {key: theirs.get(key) for key in ours}
    if expected.get(0) is not None:
        expected[0] = (3, theirs[0][1])
    differ = {key: (expected[key], ours[key]) for key in ours if expected[key] != ours[key]}
    assert not differ, f"API key: (Kafka's range, the fake's range): {differ}"
