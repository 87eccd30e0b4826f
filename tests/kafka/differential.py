"""Send one request sequence to Apache Kafka and to FakeKafka, and keep what each answered.

A :class:`Side` is one cluster seen through raw protocol connections, one per node: it
routes a request to a partition's leader, which it reads from that side's own Metadata,
and names topics by id where the request version wants one. A scenario
(``async def scenario(side, trace, prefix)``) runs once per side and writes normalized
answers into its :class:`Trace`: error codes, offsets, watermarks, epochs -- never hosts,
ports, node ids, topic ids, producer ids, throttle times, or timestamps the broker chose.
Fresh topics with the same names on both sides make offsets comparable as they are, since
each log starts at 0.

Both sides get a request at the same version: the highest that our client, Kafka and the
fake all support (:func:`pin_versions`), so that no answer differs only by version.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from aiokafka_ng.net.connection import Connection, ConnectionConfig, connect
from aiokafka_ng.protocol.messages import REQUEST_TYPES
from aiokafka_ng.protocol.messages import create_topics as ct
from aiokafka_ng.protocol.messages import describe_transactions as dtx
from aiokafka_ng.protocol.messages import fetch as f
from aiokafka_ng.protocol.messages import find_coordinator as fc
from aiokafka_ng.protocol.messages import list_offsets as lo
from aiokafka_ng.protocol.messages import metadata as md
from aiokafka_ng.protocol.messages import offset_fetch as of
from aiokafka_ng.protocol.messages import offset_for_leader_epoch as ofle
from aiokafka_ng.protocol.messages import produce as pr
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest
from aiokafka_ng.protocol.record_reader import iter_batches
from aiokafka_ng.protocol.records import RecordBatchBuilder
from aiokafka_ng.testing.fake import FakeKafka

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_TIMESTAMP",
    "NOT_READY",
    "Scenario",
    "Side",
    "Trace",
    "batch",
    "compare",
    "pin_versions",
    "run_both",
    "until",
]

R = TypeVar("R", bound=ApiMessage)
T = TypeVar("T")
CONFIG = ConnectionConfig(client_id="aiokafka-ng-differential", connect_timeout_s=5.0)
NO_TOPIC_ID = uuid.UUID(int=0)
#: ListOffsets' special timestamps.
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
NOT_READY = frozenset({14, 15, 16})
NOT_LEADER_OR_FOLLOWER = 6


async def until(
    probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], within: float = 30.0
) -> T:
    """``await probe()`` every 20 ms until ``ok`` holds for its value, which it returns
    (TimeoutError after ``within`` seconds): for what Kafka finishes after it answered."""
    with anyio.fail_after(within):
        while True:
            value = await probe()
            if ok(value):
                return value
            await anyio.sleep(0.02)


def batch(
    records: Sequence[tuple[int, bytes]],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One v2 record batch of ``(timestamp_ms, value)`` records (no keys)."""
    builder = RecordBatchBuilder(
        max_size=1 << 20,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    for ts, value in records:
        builder.append(ts, None, value)
    return builder.build()


@dataclass
class Trace:
    """The normalized answers of one side, in request order."""

    steps: list[tuple[str, object]] = field(default_factory=list)

    def add(self, label: str, value: object) -> None:
        self.steps.append((label, value))


def compare(kafka: Trace, fake: Trace) -> str | None:
    """None when both traces are equal, else every step that differs."""
    if kafka.steps == fake.steps:
        return None
    lines = ["FakeKafka answered differently from Apache Kafka:"]
    for i in range(max(len(kafka.steps), len(fake.steps))):
        k = kafka.steps[i] if i < len(kafka.steps) else None
        g = fake.steps[i] if i < len(fake.steps) else None
        if k != g:
            label = (k or g or ("?", None))[0]
            lines.append(f"  step {i} {label}:")
            lines.append(f"      kafka: {k[1] if k else '(no step)'}")
            lines.append(f"      fake:  {g[1] if g else '(no step)'}")
    return "\n".join(lines)


class Side:
    """One cluster under test: Apache Kafka, or FakeKafka when ``fake`` is given (for the
    few steps each side makes its own way, such as moving a leader)."""

    def __init__(
        self,
        name: str,
        bootstrap_servers: str,
        stack: contextlib.AsyncExitStack,
        fake: FakeKafka | None = None,
    ) -> None:
        self.name = name
        self.fake = fake
        host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
        self._bootstrap = (host, int(port))
        self._stack = stack
        self._conns: dict[int | None, Connection] = {}
        self.addresses: dict[int, tuple[str, int]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        #: Request versions by API key, the same for both sides (:func:`pin_versions`).
        self.versions: dict[int, int] = {}
        #: (leader id, leader epoch) hinted by the last Produce or Fetch answer (KIP-951).
        self.last_hint = (-1, -1)
        #: NOT_LEADER_OR_FOLLOWER answers to Produce routed by Metadata, retried (``produce``).
        self.transients: list[str] = []

    def __repr__(self) -> str:
        return f"<Side {self.name}>"

    # ---- connections --------------------------------------------------------------------

    async def open(self) -> None:
        """Connect to the bootstrap node and to every node its Metadata lists.

        Up front, not on first use: a connection's reader task group must not be entered
        inside a cancel scope (``fail_after``) that ends before it."""
        host, port = self._bootstrap
        self._conns[None] = await self._stack.enter_async_context(connect(host, port, CONFIG))
        await self.metadata([])
        for node, (host, port) in sorted(self.addresses.items()):
            self._conns[node] = await self._stack.enter_async_context(connect(host, port, CONFIG))

    def conn(self, node: int | None = None) -> Connection:
        """The connection to ``node`` (None: the bootstrap node)."""
        return self._conns[node]

    def nodes(self) -> list[int]:
        return sorted(n for n in self._conns if n is not None)

    async def send(
        self, request: ApiRequest[R], node: int | None = None, *, version: int | None = None
    ) -> R:
        """``request`` to ``node`` (None: the bootstrap node) at ``version``, by default
        the version pinned for both sides."""
        if version is None:
            version = self.versions.get(request.API_KEY)
        return await self.conn(node).send(request, version=version, timeout=30)

    async def coordinator(self, key: str, *, transaction: bool = False) -> int:
        """The node coordinating a group (or transactional id), once it is ready.

        Kafka creates ``__consumer_offsets`` / ``__transaction_state`` on first use and
        then loads the partition; until then FindCoordinator answers
        COORDINATOR_NOT_AVAILABLE and the coordinator NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS. That is the shared cluster's history, not a
        behaviour under test: it is waited out, with probes that change nothing."""

        async def probe() -> int:
            answer = await self.send(
                fc.FindCoordinatorRequest(key_type=1 if transaction else 0, coordinator_keys=[key])
            )
            (found,) = answer.coordinators
            if found.error_code:
                return -1
            if transaction:
                txns = await self.send(
                    dtx.DescribeTransactionsRequest(transactional_ids=[key]), found.node_id
                )
                code = txns.transaction_states[0].error_code
            else:
                group = of.OffsetFetchRequestGroup(group_id=key, topics=[])
                offsets = await self.send(of.OffsetFetchRequest(groups=[group]), found.node_id)
                code = offsets.groups[0].error_code
            return -1 if code in NOT_READY else found.node_id

        return await until(probe, lambda node: node >= 0)

    # ---- metadata and topics ------------------------------------------------------------

    async def metadata(
        self, topics: list[str] | None, *, allow_auto: bool = False, node: int | None = None
    ) -> md.MetadataResponse:
        request = md.MetadataRequest(
            topics=None if topics is None else [md.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto,
        )
        resp = await self.send(request, node)
        for b in resp.brokers:
            self.addresses[b.node_id] = (b.host, b.port)
        for t in resp.topics:
            if t.name is not None and not t.error_code:
                self.topic_ids[t.name] = t.topic_id
        return resp

    async def partitions(
        self, topic: str, node: int | None = None
    ) -> list[md.MetadataResponsePartition]:
        resp = await self.metadata([topic], node=node)
        found = [t for t in resp.topics if t.name == topic and not t.error_code]
        return sorted(found[0].partitions, key=lambda p: p.partition_index) if found else []

    async def wait_known(
        self,
        topic: str,
        partitions: int,
        ok: Callable[[list[md.MetadataResponsePartition]], bool] = lambda parts: True,
    ) -> None:
        """Until every node's Metadata lists ``topic`` with ``partitions`` led partitions
        and ``ok`` holds for them, and each leader leads: Kafka's brokers learn of a change
        one by one, and each publishes it to its metadata cache (what Metadata answers)
        before its replica manager acts on it (a new leader answers NOT_LEADER_OR_FOLLOWER
        until then). A ListOffsets at the leader, which changes nothing, tells when it has."""
        for node in self.nodes():
            await until(
                functools.partial(self.partitions, topic, node),
                lambda parts: (
                    len(parts) == partitions and all(p.leader_id >= 0 for p in parts) and ok(parts)
                ),
            )
        for p in await self.partitions(topic):
            lookup = functools.partial(
                self.list_offsets, topic, LATEST, partition=p.partition_index, node=p.leader_id
            )
            await until(lookup, lambda got: got[0] == 0)

    async def leader(self, topic: str, partition: int = 0) -> tuple[int, int]:
        """(leader node, leader epoch) of the partition, as this side's Metadata says."""
        for p in await self.partitions(topic):
            if p.partition_index == partition:
                return p.leader_id, p.leader_epoch
        raise LookupError(f"{self.name}: no partition {topic}-{partition}")

    async def create_topics(
        self, *topics: ct.CreatableTopic, validate_only: bool = False
    ) -> list[tuple[int, int, int]]:
        """CreateTopics: each answered topic's (error code, partitions, replication
        factor). A created topic is waited for on every node."""
        resp = await self.send(
            ct.CreateTopicsRequest(
                topics=list(topics), timeout_ms=30000, validate_only=validate_only
            )
        )
        out = []
        for r in resp.topics:
            out.append((r.error_code, r.num_partitions, r.replication_factor))
            if not r.error_code and not validate_only:
                await self.wait_known(r.name, r.num_partitions)
        return out

    async def create_topic(
        self, name: str, partitions: int = 1, rf: int = 1, **configs: str
    ) -> None:
        """A topic that must be created (``configs`` use ``_`` for ``.``)."""
        topic = ct.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            configs=[
                ct.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                for k, v in configs.items()
            ],
        )
        ((code, _, _),) = await self.create_topics(topic)
        assert code == 0, f"{self.name}: creating {name} failed with error {code}"

    # ---- data plane ---------------------------------------------------------------------

    def _produce_request(
        self, topic: str, partition: int, records: bytes, acks: int, transactional_id: str | None
    ) -> pr.ProduceRequest:
        return pr.ProduceRequest(
            transactional_id=transactional_id,
            acks=acks,
            timeout_ms=30000,
            topic_data=[
                pr.TopicProduceData(
                    name=topic,
                    topic_id=self.topic_ids.get(topic, NO_TOPIC_ID),
                    partition_data=[pr.PartitionProduceData(index=partition, records=records)],
                )
            ],
        )

    async def produce(
        self,
        topic: str,
        records: bytes,
        *,
        partition: int = 0,
        acks: int = -1,
        node: int | None = None,
        transactional_id: str | None = None,
        version: int | None = None,
    ) -> tuple[int, int, int]:
        """(error code, base offset, log start offset) of one batch produced to the
        partition's leader (or ``node``)."""
        routed, epoch = node is None, -1
        request = self._produce_request(topic, partition, records, acks, transactional_id)
        with anyio.fail_after(30):
            while True:
                if routed:
                    node, epoch = await self.leader(topic, partition)
                resp = await self.send(request, node, version=version)
                (t,) = resp.responses
                (p,) = t.partition_responses
                self.last_hint = (p.current_leader.leader_id, p.current_leader.leader_epoch)
                if not (routed and p.error_code == NOT_LEADER_OR_FOLLOWER):
                    return p.error_code, p.base_offset, p.log_start_offset
                # The leader Metadata named no longer leads (nothing was appended): a
                # leadership change of the cluster's own, which a client meets by asking
                # Metadata again. Kept, to be reported, and retried like a client would.
                _, now = await self.leader(topic, partition)
                self.transients.append(
                    f"{topic}-{partition}: Produce to node {node} at leader epoch {epoch} "
                    f"answered NOT_LEADER_OR_FOLLOWER ({p.error_message!r}); the epoch is "
                    f"now {now}, the answer's hint {self.last_hint}"
                )
                await anyio.sleep(0.05)

    async def produce_no_ack(self, topic: str, records: bytes, *, partition: int = 0) -> None:
        """One batch with acks=0 (no answer), then a Metadata round trip on the same
        connection, which the broker answers only once it has handled the Produce."""
        node, _ = await self.leader(topic, partition)
        request = self._produce_request(topic, partition, records, 0, None)
        version = self.versions.get(request.API_KEY)
        await self.conn(node).send(request, version=version, expect_response=False)
        await self.metadata([], node=node)

    async def fetch(
        self,
        topic: str,
        offset: int,
        *,
        partition: int = 0,
        epoch: int = -1,
        read_committed: bool = False,
        node: int | None = None,
        topic_id: uuid.UUID | None = None,
        last_fetched_epoch: int = -1,
    ) -> tuple[Any, ...]:
        """One partition's sessionless fetch, answered at once (max_wait_ms 0):
        (top-level error, partition error, high watermark, last stable offset, log start
        offset, offsets of the data records returned, offsets of the control records,
        first offsets of the aborted transactions listed -- None for read_uncommitted);
        with a ``last_fetched_epoch``, then the diverging epoch's (epoch, end offset)."""
        if node is None:
            node, _ = await self.leader(topic, partition)
        request = f.FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=1 if read_committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=[
                f.FetchTopic(
                    topic=topic,
                    topic_id=topic_id or self.topic_ids.get(topic, NO_TOPIC_ID),
                    partitions=[
                        f.FetchPartition(
                            partition=partition,
                            current_leader_epoch=epoch,
                            fetch_offset=offset,
                            last_fetched_epoch=last_fetched_epoch,
                            partition_max_bytes=1 << 20,
                        )
                    ],
                )
            ],
        )
        resp = await self.send(request, node)
        if not resp.responses:
            return (resp.error_code,)
        (t,) = resp.responses
        (p,) = t.partitions
        self.last_hint = (p.current_leader.leader_id, p.current_leader.leader_epoch)
        data: list[int] = []
        control: list[int] = []
        for b in iter_batches(p.records or b""):
            (control if b.is_control else data).extend(r.offset for r in b.records())
        aborted = None
        if read_committed and p.aborted_transactions is not None:
            aborted = sorted(a.first_offset for a in p.aborted_transactions)
        answer: tuple[Any, ...] = (
            resp.error_code,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            p.log_start_offset,
            data,
            control,
            aborted,
        )
        if last_fetched_epoch >= 0:
            answer += ((p.diverging_epoch.epoch, p.diverging_epoch.end_offset),)
        return answer

    async def list_offsets(
        self,
        topic: str,
        timestamp: int,
        *,
        partition: int = 0,
        epoch: int = -1,
        read_committed: bool = False,
        node: int | None = None,
    ) -> tuple[int, int, int, int]:
        """(error code, offset, timestamp, leader epoch) of one ListOffsets lookup."""
        if node is None:
            node, _ = await self.leader(topic, partition)
        request = lo.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=[
                lo.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        lo.ListOffsetsPartition(
                            partition_index=partition,
                            current_leader_epoch=epoch,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
            timeout_ms=30000,
        )
        resp = await self.send(request, node)
        (t,) = resp.topics
        (p,) = t.partitions
        return p.error_code, p.offset, p.timestamp, p.leader_epoch

    async def offset_for_leader_epoch(
        self, topic: str, leader_epoch: int, *, current: int = -1, partition: int = 0
    ) -> tuple[int, int, int]:
        """(error code, epoch, end offset) of one OffsetForLeaderEpoch, asked of the
        leader as a consumer asks (replica id -1)."""
        node, _ = await self.leader(topic, partition)
        request = ofle.OffsetForLeaderEpochRequest(
            replica_id=-1,
            topics=[
                ofle.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=[
                        ofle.OffsetForLeaderPartition(
                            partition=partition,
                            current_leader_epoch=current,
                            leader_epoch=leader_epoch,
                        )
                    ],
                )
            ],
        )
        resp = await self.send(request, node)
        (t,) = resp.topics
        (p,) = t.partitions
        return p.error_code, p.leader_epoch, p.end_offset


Scenario = Callable[[Side, Trace, str], Awaitable[None]]


async def pin_versions(kafka: Side, fake: Side) -> None:
    """Open both sides, and pin every API both serve to the highest version our client,
    Kafka and the fake share."""
    await kafka.open()
    await fake.open()
    theirs, ours = kafka.conn().api_versions, fake.conn().api_versions
    for key, (f_lo, f_hi) in ours.items():
        request_type = REQUEST_TYPES.get(key)
        if key not in theirs or request_type is None:
            continue
        k_lo, k_hi = theirs[key]
        hi = min(f_hi, k_hi, request_type.MAX_STABLE_VERSION)
        if hi >= max(f_lo, k_lo, request_type.MIN_VERSION):
            kafka.versions[key] = fake.versions[key] = hi


async def run_both(kafka: Side, fake: Side, scenario: Scenario, prefix: str) -> tuple[Trace, Trace]:
    """``scenario`` on Kafka, then on the fake, with the same topic name prefix."""
    on_kafka, on_fake = Trace(), Trace()
    await scenario(kafka, on_kafka, prefix)
    await scenario(fake, on_fake, prefix)
    return on_kafka, on_fake
