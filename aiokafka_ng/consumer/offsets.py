"""Offset requests: ListOffsets (to the leaders), OffsetFetch and OffsetCommit (to the group
coordinator), each run by the cluster's retry driver (:mod:`aiokafka_ng.cluster.retry`)
paced by the consumer's :class:`ExponentialBackoff`.

Retry rules, as the Java client applies them:

* ListOffsets: carries the leader epoch the metadata gives (KIP-320's current leader epoch,
  as Java's); per-partition ``invalid_metadata`` errors (not leader, unknown partition,
  fenced/unknown leader epoch) refresh metadata and retry that partition; other retriable
  errors retry; anything else is raised. A connection failure retries the whole node.
* OffsetForLeaderEpoch (KIP-320, to the leaders): as ListOffsets; a leader that does not
  offer it (v3+, what Java asks for) is not asked (``EpochEnd.asked`` False), and the
  position is taken as valid, as Java does.
* OffsetFetch/OffsetCommit (route: the group's coordinator): ``NOT_COORDINATOR``/
  ``COORDINATOR_NOT_AVAILABLE`` (and a lost connection) forget the coordinator and look it
  up again; ``COORDINATOR_LOAD_IN_PROGRESS`` and ``UNSTABLE_OFFSET_COMMIT`` (a read_committed
  consumer's fetch asks for stable offsets, KIP-447) just retry. A
  commit refused because the generation moved on (``ILLEGAL_GENERATION``,
  ``UNKNOWN_MEMBER_ID``, ``REBALANCE_IN_PROGRESS``, ``FENCED_INSTANCE_ID``) raises
  :class:`CommitFailedError` at once: retrying cannot help.

Everything runs under one deadline (``timeout`` seconds) and raises KafkaTimeoutError after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from aiokafka_ng.cluster import ONCE, ClusterClient, Coordinator, Node, RetryState
from aiokafka_ng.cluster.retry import retrying
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.errors import (
    IllegalGenerationError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    error_for_code,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import FencedInstanceIdError
from aiokafka_ng.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from aiokafka_ng.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from aiokafka_ng.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from aiokafka_ng.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

if TYPE_CHECKING:
    from aiokafka_ng.cluster import ClusterMetadata

__all__ = ["EARLIEST", "LATEST", "EpochEnd", "OffsetsClient", "current_leader_epoch"]

T = TypeVar("T")

EARLIEST = -2  # ListOffsets special timestamps
LATEST = -1

_GENERATION_ERRORS = (
    IllegalGenerationError,
    UnknownMemberIdError,
    RebalanceInProgressError,
    FencedInstanceIdError,
)
_READ_COMMITTED = 1  # isolation_level as the Fetch request carries it
_MAX_OFFSET_FETCH_VERSION = 7  # v8+ batches groups; one group per request is all we need
_MAX_OFFSET_COMMIT_VERSION = 9  # v10 names topics by id
# v3 added replica_id (a consumer's request); Java validates positions only from v3.
_MIN_OFFSET_FOR_LEADER_EPOCH_VERSION = 3


class ListedOffset(NamedTuple):
    """A ListOffsets answer: the offset (-1: no record at or after the timestamp asked), the
    record's timestamp, and the leader epoch of the record at that offset (-1 when the
    broker does not say), which a reset position carries (KIP-320, as Java's)."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


class EpochEnd(NamedTuple):
    """An OffsetForLeaderEpoch answer: asked under ``current_epoch`` (the partition's leader
    epoch in our metadata), the log's largest epoch <= the one asked and where it ends
    (both -1 when the leader does not know)."""

    current_epoch: int
    epoch: int
    end_offset: int
    #: False when the leader offers no OffsetForLeaderEpoch v3+ (not asked: no answer).
    asked: bool = True


def current_leader_epoch(metadata: ClusterMetadata, tp: TopicPartition) -> int:
    """The partition's leader epoch in ``metadata``, -1 when unknown."""
    t = metadata.topics.get(tp.topic)
    p = t.partitions.get(tp.partition) if t is not None else None
    return p.leader_epoch if p is not None else -1


class OffsetsClient:
    """Offset lookups and commits for one consumer (stateless apart from its settings)."""

    def __init__(
        self,
        cluster: ClusterClient,
        *,
        group_id: str | None,
        isolation_level: int,
        backoff: ExponentialBackoff,
        timeout_s: float,
    ) -> None:
        self._cluster = cluster
        self._group_id = group_id
        self._isolation = isolation_level
        self._backoff = backoff
        self._timeout = timeout_s

    # ------------------------------------------------------------------ ListOffsets

    async def list_offsets(
        self,
        timestamps: Mapping[TopicPartition, int],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, ListedOffset]:
        """``{tp: timestamp}`` (or EARLIEST/LATEST) -> ``{tp: ListedOffset}``.

        The offset is -1 when no record has a timestamp at or after the one asked for.
        """
        return await self._at_leaders(
            timestamps, self._list_from, api="ListOffsets", what="list offsets", timeout=timeout
        )

    async def _at_leaders(
        self,
        asks: Mapping[TopicPartition, int],
        ask_node: Callable[
            [int, Mapping[TopicPartition, int]], Awaitable[Mapping[TopicPartition, T | KafkaError]]
        ],
        *,
        api: str,
        what: str,
        timeout: float | None,  # noqa: ASYNC109 (a RetryState budget, as list_offsets')
    ) -> dict[TopicPartition, T]:
        """Each partition's ``asks`` value sent to its leader by ``ask_node`` (ListOffsets,
        OffsetForLeaderEpoch), retried on the one backoff policy until every partition has
        its answer: one round asks every pending partition of its leader; what failed (a
        retriable error, per partition or for a whole node) stays pending. After an
        ``invalid_metadata`` answer (not the leader, a fenced or unknown leader epoch) the
        next round waits for fresh metadata of those topics, as Java's
        ``awaitMetadataUpdate``: asked again with the same leader and epoch, the broker
        would only give the same answer."""
        pending = dict(asks)
        result: dict[TopicPartition, T] = {}
        stale: set[str] = set()

        async def attempt() -> None:
            by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
            for tp, ask in pending.items():
                leader = await self._cluster.leader_for(tp.topic, tp.partition)
                by_leader[leader][tp] = ask
            last: KafkaError | None = None
            for leader, parts in by_leader.items():
                try:
                    done = await ask_node(leader, parts)
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                    continue
                for tp, answer in done.items():
                    if isinstance(answer, KafkaError):
                        last = answer
                        if answer.invalid_metadata:
                            stale.add(tp.topic)
                    else:
                        result[tp] = answer
                        pending.pop(tp)
            if pending:
                raise last or KafkaError(f"{api}: some partitions were not answered")

        async def refresh_stale(error: KafkaError) -> None:
            if stale:
                topics = sorted(stale)
                stale.clear()
                await self._cluster.refresh(topics)

        if pending:
            await retrying(attempt, self._state(timeout), what=what, on_retry=refresh_stale)
        return result

    async def _list_from(
        self, node: int, parts: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ListedOffset | KafkaError]:
        metadata = self._cluster.metadata
        topics: dict[str, list[ListOffsetsPartition]] = defaultdict(list)
        for tp, ts in parts.items():
            # The leader epoch we know (KIP-320, v4+; -1 when unknown), as Java sends it: a
            # leader with a newer epoch answers FENCED_LEADER_EPOCH, one that has not heard
            # of ours yet (a deposed leader) UNKNOWN_LEADER_EPOCH -- both refresh and retry
            # -- instead of answering from a log that may no longer be the partition's.
            topics[tp.topic].append(
                ListOffsetsPartition(
                    partition_index=tp.partition,
                    current_leader_epoch=current_leader_epoch(metadata, tp),
                    timestamp=ts,
                )
            )
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=self._isolation,
            topics=[ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()],
            timeout_ms=int(self._timeout * 1000),
        )
        # Once to this leader: _at_leaders retries what failed, per partition.
        response = await self._cluster.call(request, Node(node), retry=ONCE)
        out: dict[TopicPartition, ListedOffset | KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    error = error_for_code(p.error_code)
                    if error.invalid_metadata:
                        self._cluster.request_update([t.name])
                    if not (error.retriable or error.invalid_metadata):
                        raise error(f"ListOffsets for {t.name}-{p.partition_index}")
                    out[tp] = error(f"ListOffsets for {t.name}-{p.partition_index}")
                else:  # v1+ (v0's list of old-style offsets went with Kafka 4)
                    out[tp] = ListedOffset(p.offset, p.timestamp, p.leader_epoch)
        return out

    # ------------------------------------------------------------------ leader epochs

    async def epoch_end_offsets(
        self,
        epochs: Mapping[TopicPartition, int],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, EpochEnd]:
        """``{tp: leader epoch}`` -> where each epoch ends in its leader's log
        (OffsetForLeaderEpoch)."""
        return await self._at_leaders(
            epochs,
            self._epochs_from,
            api="OffsetForLeaderEpoch",
            what="validate positions",
            timeout=timeout,
        )

    async def _epochs_from(
        self, node: int, parts: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, EpochEnd | KafkaError]:
        metadata = self._cluster.metadata
        current = {tp: current_leader_epoch(metadata, tp) for tp in parts}
        topics: dict[str, list[OffsetForLeaderPartition]] = defaultdict(list)
        for tp, epoch in parts.items():
            topics[tp.topic].append(
                OffsetForLeaderPartition(
                    partition=tp.partition, current_leader_epoch=current[tp], leader_epoch=epoch
                )
            )
        request = OffsetForLeaderEpochRequest(
            replica_id=-1,  # a consumer (Java's CONSUMER_REPLICA_ID)
            topics=[OffsetForLeaderTopic(topic=t, partitions=p) for t, p in topics.items()],
        )
        try:
            response = await self._cluster.call(
                request,
                Node(node),
                retry=ONCE,
                min_version=_MIN_OFFSET_FOR_LEADER_EPOCH_VERSION,
            )
        except UnsupportedVersionError:
            # Below v3 (or not offered at all): not asked, as Java does not ask.
            return {tp: EpochEnd(current[tp], -1, -1, asked=False) for tp in parts}
        out: dict[TopicPartition, EpochEnd | KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                if tp not in current:
                    continue
                if p.error_code:
                    error = error_for_code(p.error_code)
                    if error.invalid_metadata:
                        self._cluster.request_update([t.topic])
                    what = f"OffsetForLeaderEpoch for {t.topic}-{p.partition}"
                    if not (error.retriable or error.invalid_metadata):
                        raise error(what)
                    out[tp] = error(what)
                else:
                    out[tp] = EpochEnd(current[tp], p.leader_epoch, p.end_offset)
        return out

    # ------------------------------------------------------------------ group offsets

    async def fetch_committed(
        self,
        partitions: list[TopicPartition],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        group = self._require_group()
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            topics[tp.topic].append(tp.partition)
        request = OffsetFetchRequest(
            group_id=group,
            topics=[
                OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()
            ],
            # KIP-447, as Java's: a read_committed consumer is not answered an offset a
            # transaction has pending (UNSTABLE_OFFSET_COMMIT, retried) -- it would resume
            # before the offsets that transaction commits and produce its output again.
            require_stable=self._isolation == _READ_COMMITTED,
        )

        def answer(response: OffsetFetchResponse) -> dict[TopicPartition, OffsetAndMetadata | None]:
            if response.error_code:
                raise error_for_code(response.error_code)("OffsetFetch")
            out: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for_code(p.error_code)(
                            f"OffsetFetch for {t.name}-{p.partition_index}"
                        )
                    tp = TopicPartition(t.name, p.partition_index)
                    out[tp] = (
                        None
                        if p.committed_offset < 0
                        else OffsetAndMetadata(
                            p.committed_offset, p.metadata or "", p.committed_leader_epoch
                        )
                    )
            return out

        return await self._cluster.call(
            request,
            Coordinator(group, link=True),
            check=answer,
            max_version=_MAX_OFFSET_FETCH_VERSION,
            state=self._state(timeout),
            what="fetch committed",
        )

    async def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        generation: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """Commit ``offsets`` for the group; CommitFailedError if the generation is stale."""
        group = self._require_group()
        if not offsets:
            return
        topics: dict[str, list[OffsetCommitRequestPartition]] = defaultdict(list)
        for tp, om in offsets.items():
            topics[tp.topic].append(
                OffsetCommitRequestPartition(
                    partition_index=tp.partition,
                    committed_offset=om.offset,
                    committed_leader_epoch=om.leader_epoch,
                    committed_metadata=om.metadata,
                )
            )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=group_instance_id,
            topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in topics.items()],
        )

        def answer(response: OffsetCommitResponse) -> None:
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for_code(p.error_code)(
                            f"OffsetCommit for {t.name}-{p.partition_index}"
                        )

        try:
            await self._cluster.call(
                request,
                Coordinator(group, link=True),
                check=answer,
                max_version=_MAX_OFFSET_COMMIT_VERSION,
                state=self._state(timeout),
                what="offset commit",
            )
        except _GENERATION_ERRORS as exc:
            raise CommitFailedError(f"commit refused: {exc!r}") from exc

    # ------------------------------------------------------------------ helpers

    def _require_group(self) -> str:
        if self._group_id is None:
            from aiokafka_ng.errors import IllegalStateError

            raise IllegalStateError("this operation needs a group_id")
        return self._group_id

    def _state(self, timeout: float | None) -> RetryState:
        return RetryState(self._backoff, timeout=timeout if timeout is not None else self._timeout)
