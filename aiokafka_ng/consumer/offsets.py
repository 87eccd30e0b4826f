"""Offset requests: ListOffsets (to the leaders), OffsetFetch and OffsetCommit (to the group
coordinator), each retried with the shared :class:`ExponentialBackoff`.

Retry rules, as the Java client applies them:

* ListOffsets: per-partition ``invalid_metadata`` errors (not leader, unknown partition,
  fenced/unknown leader epoch) refresh metadata and retry that partition; other retriable
  errors retry; anything else is raised. A connection failure retries the whole node.
* OffsetFetch/OffsetCommit: ``NOT_COORDINATOR``/``COORDINATOR_NOT_AVAILABLE`` (and a lost
  connection) forget the coordinator and look it up again; ``COORDINATOR_LOAD_IN_PROGRESS``
  and ``UNSTABLE_OFFSET_COMMIT`` just retry. A commit refused because the generation moved
  on (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``, ``REBALANCE_IN_PROGRESS``,
  ``FENCED_INSTANCE_ID``) raises :class:`CommitFailedError` at once: retrying cannot help.

Everything runs under one deadline (``timeout`` seconds) and raises KafkaTimeoutError after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import anyio

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.errors import (
    IllegalGenerationError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
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
)
from aiokafka_ng.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic

__all__ = ["EARLIEST", "LATEST", "OffsetsClient"]

EARLIEST = -2  # ListOffsets special timestamps
LATEST = -1

_GENERATION_ERRORS = (
    IllegalGenerationError,
    UnknownMemberIdError,
    RebalanceInProgressError,
    FencedInstanceIdError,
)
_MAX_OFFSET_FETCH_VERSION = 7  # v8+ batches groups; one group per request is all we need


class OffsetsClient:
    """Offset lookups and commits for one consumer (stateless apart from its settings)."""

    def __init__(
        self,
        cluster: Cluster,
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
    ) -> dict[TopicPartition, tuple[int, int]]:
        """``{tp: timestamp}`` (or EARLIEST/LATEST) -> ``{tp: (offset, timestamp)}``.

        The offset is -1 when no record has a timestamp at or after the one asked for.
        """
        pending = dict(timestamps)
        result: dict[TopicPartition, tuple[int, int]] = {}
        failures = 0
        with _deadline(timeout if timeout is not None else self._timeout, "list offsets"):
            while pending:
                by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
                for tp, ts in pending.items():
                    leader = await self._cluster.leader_for(tp.topic, tp.partition)
                    by_leader[leader][tp] = ts
                retry = False
                for leader, parts in by_leader.items():
                    try:
                        done = await self._list_from(leader, parts)
                    except KafkaError as exc:
                        if not exc.retriable:
                            raise
                        retry = True
                        continue
                    for tp, answer in done.items():
                        if isinstance(answer, tuple):
                            result[tp] = answer
                            pending.pop(tp)
                        else:
                            retry = True
                if pending and retry:
                    failures += 1
                    await anyio.sleep(self._backoff.backoff_s(failures))
        return result

    async def _list_from(
        self, node: int, parts: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        conn = await self._cluster.connection(node)
        version = conn.version_for(ListOffsetsRequest)
        topics: dict[str, list[ListOffsetsPartition]] = defaultdict(list)
        for tp, ts in parts.items():
            topics[tp.topic].append(
                ListOffsetsPartition(partition_index=tp.partition, timestamp=ts)
            )
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=self._isolation,
            topics=[ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()],
            timeout_ms=int(self._timeout * 1000),
        )
        response = await conn.send(request, version=version)
        out: dict[TopicPartition, tuple[int, int] | None] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    error = error_for_code(p.error_code)
                    if error.invalid_metadata:
                        self._cluster.request_update([t.name])
                    if not (error.retriable or error.invalid_metadata):
                        raise error(f"ListOffsets for {t.name}-{p.partition_index}")
                    out[tp] = None
                else:  # v1+ (v0's list of old-style offsets went with Kafka 4)
                    out[tp] = (p.offset, p.timestamp)
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
        )
        failures = 0
        with _deadline(timeout if timeout is not None else self._timeout, "fetch committed"):
            while True:
                try:
                    response = await self._to_coordinator(
                        request, max_version=_MAX_OFFSET_FETCH_VERSION
                    )
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
                except KafkaError as exc:
                    self._on_coordinator_error(exc)
                    failures += 1
                    await anyio.sleep(self._backoff.backoff_s(failures))

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
        failures = 0
        with _deadline(timeout if timeout is not None else self._timeout, "offset commit"):
            while True:
                try:
                    response = await self._to_coordinator(request, max_version=9)
                    for t in response.topics:
                        for p in t.partitions:
                            if p.error_code:
                                raise error_for_code(p.error_code)(
                                    f"OffsetCommit for {t.name}-{p.partition_index}"
                                )
                    return
                except _GENERATION_ERRORS as exc:
                    raise CommitFailedError(f"commit refused: {exc!r}") from exc
                except KafkaError as exc:
                    self._on_coordinator_error(exc)
                    failures += 1
                    await anyio.sleep(self._backoff.backoff_s(failures))

    # ------------------------------------------------------------------ helpers

    def _require_group(self) -> str:
        if self._group_id is None:
            from aiokafka_ng.errors import IllegalStateError

            raise IllegalStateError("this operation needs a group_id")
        return self._group_id

    async def _to_coordinator(self, request: Any, *, max_version: int) -> Any:
        assert self._group_id is not None
        node = await self._cluster.coordinator(self._group_id)
        conn = await self._cluster.connection(node)
        version = min(conn.version_for(type(request)), max_version)
        return await conn.send(request, version=version)

    def _on_coordinator_error(self, exc: KafkaError) -> None:
        """Forget the coordinator when it moved or failed; raise what retrying cannot fix."""
        if not exc.retriable:
            raise exc
        assert self._group_id is not None
        self._cluster.invalidate_coordinator(self._group_id)


class _deadline:
    """``fail_after`` raising KafkaTimeoutError (never anyio's TimeoutError)."""

    __slots__ = ("_scope", "_what")

    def __init__(self, seconds: float, what: str) -> None:
        self._scope = anyio.CancelScope(deadline=anyio.current_time() + seconds)
        self._what = what

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(self, *exc_info: Any) -> bool | None:
        swallowed = self._scope.__exit__(*exc_info)
        if self._scope.cancelled_caught:
            raise KafkaTimeoutError(f"timed out: {self._what}") from None
        return swallowed
