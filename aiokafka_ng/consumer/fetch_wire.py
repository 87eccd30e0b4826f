"""One Fetch on the wire: which broker it goes to, what it asks, what its answer holds.

Requests are sessionless (session id 0, epoch -1) and list the partitions in the order the
fetcher gives them (least recently served first: brokers fill a response in request order,
see the fetcher's *Fairness*). Fetch v13+ names topics by id; when a topic's id is not
known (metadata from a broker without ids) the request falls back to v12, which names
them. A v13+ answer's topic ids are mapped back to names through the metadata.

*Trimming* (:func:`keep_batches`). Brokers may answer with more than the fetch reserved
(KIP-74 lets the first batch exceed the limit; some brokers ignore limits), so a
partition's data is kept batch by batch while it fits in what is left of the reservation;
the rest is dropped and fetched again later from the same position (the kept bytes are
copied out of a trimmed response, so the memory held is the memory counted). The one
exception is a single batch larger than the whole budget when nothing else is buffered: it
is kept, or the consumer could never make progress.

*Partition errors* (:func:`partition_error`). ``invalid_metadata`` errors (NOT_LEADER,
FENCED_LEADER_EPOCH, ...) ask the cluster for a metadata refresh and apply any KIP-951
leader hint (the new epoch then has the position validated, see :mod:`.positions`);
other retriable errors (UNKNOWN_LEADER_EPOCH: the broker is behind our metadata) back the
partition off; OFFSET_OUT_OF_RANGE resets by
``auto_offset_reset`` (or, with "none", raises OffsetOutOfRangeError to the application);
anything else is raised to the application on its next poll.
"""

from __future__ import annotations

import logging
import uuid

import anyio

from aiokafka_ng.cluster import BrokerMetadata, ClusterClient, ClusterMetadata
from aiokafka_ng.cluster.topics import topic_names_by_id
from aiokafka_ng.consumer.buffer import batch_error
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.state import PartitionState
from aiokafka_ng.errors import OffsetOutOfRangeError, error_for_code
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    NodeEndpoint,
    PartitionData,
)
from aiokafka_ng.protocol.records import RecordBatch, iter_batches

__all__ = [
    "at_log_end",
    "fetch_node",
    "fetch_request",
    "fetch_start",
    "keep_batches",
    "partition_answers",
    "partition_error",
]

# The fetcher's logger: these lines are the fetcher's, as they were before this module
# was split out of it (log filters select them by that name).
log = logging.getLogger("aiokafka_ng.consumer.fetcher")

_ZERO_UUID_INT = 0
_MAX_NAMED_FETCH_VERSION = 12  # v13+ names topics by id


def fetch_request(
    parts: list[PartitionState],
    metadata: ClusterMetadata,
    version: int,
    *,
    max_bytes: int,
    partition_max_bytes: int,
    max_wait_ms: int,
    min_bytes: int,
    isolation_level: int,
    rack_id: str,
) -> tuple[FetchRequest, int]:
    """The Fetch for ``parts`` at their positions, and the version to send it with
    (``version``, or v12 when a topic id is unknown)."""
    topic_ids = {}
    for s in parts:
        t = metadata.topics.get(s.tp.topic)
        topic_ids[s.tp.topic] = t.topic_id if t is not None else None
    if version > _MAX_NAMED_FETCH_VERSION and any(
        i is None or i.int == _ZERO_UUID_INT for i in topic_ids.values()
    ):
        version = _MAX_NAMED_FETCH_VERSION
    topics: dict[str, list[FetchPartition]] = {}
    for s in parts:
        fetch_offset, last_fetched_epoch = fetch_start(s)
        topics.setdefault(s.tp.topic, []).append(
            FetchPartition(
                partition=s.tp.partition,
                # The leader epoch the position is known good under (KIP-320): a broker
                # in a newer epoch fences the fetch until the position is validated.
                current_leader_epoch=s.seen_epoch,
                fetch_offset=fetch_offset,
                # v12+: the broker checks its log holds this epoch up to fetch_offset and
                # answers a diverging epoch if not (see .positions, *Validation*).
                last_fetched_epoch=last_fetched_epoch,
                partition_max_bytes=partition_max_bytes,
            )
        )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchTopic(topic=name, topic_id=topic_ids[name] or _zero_uuid(), partitions=ps)
            for name, ps in topics.items()
        ],
        rack_id=rack_id,
    )
    return request, version


def partition_answers(
    response: FetchResponse, version: int, metadata: ClusterMetadata
) -> dict[TopicPartition, PartitionData]:
    """The answer's partitions by name (v13+ answers name topics by id)."""
    names_by_id = {}
    if version > _MAX_NAMED_FETCH_VERSION:
        names_by_id = topic_names_by_id(metadata.topics.values())
    answers: dict[TopicPartition, PartitionData] = {}
    for t in response.responses:
        name = names_by_id.get(t.topic_id, t.topic) if names_by_id else t.topic
        for part in t.partitions:
            answers[TopicPartition(name, part.partition_index)] = part
    return answers


def fetch_node(state: PartitionState, metadata: ClusterMetadata, now: float) -> int | None:
    """The broker to fetch ``state`` from: its leader, or the replica the leader named
    (KIP-392: the closest one) while that advice holds; None while the leader is unknown."""
    leader = metadata.leader_for(state.tp.topic, state.tp.partition)
    if leader is None:
        return None
    replica = state.preferred_replica
    if replica >= 0 and now < state.preferred_until and replica in metadata.brokers:
        return replica
    return leader


def fetch_start(state: PartitionState) -> tuple[int, int]:
    """Where the next fetch of ``state`` starts and the leader epoch of the record before
    it: the end of what is buffered (a fetch ahead, see the fetcher's *Fetching ahead*),
    else the application's position."""
    buf = state.buffer
    if buf is not None and buf.epoch == state.epoch:
        return buf.end_offset, buf.end_epoch
    return state.position or 0, state.leader_epoch


def at_log_end(state: PartitionState) -> bool:
    """Fetched up to the high watermark the last response gave (nothing to fetch now)."""
    return state.highwater is not None and fetch_start(state)[0] >= state.highwater


def keep_batches(
    data: bytes,
    tp: TopicPartition,
    position: int,
    budget: int,
    *,
    alone: bool,
    verify_crc: bool,
) -> tuple[list[RecordBatch], int, ProtocolError | None]:
    """The batches of ``data`` past ``position`` that fit in ``budget`` (see *Trimming*;
    ``alone``: nothing else is buffered or reserved), their size in bytes, and the error
    naming a malformed first batch (None when some batches, or none at all, were good)."""
    kept: list[RecordBatch] = []
    size = 0
    begin = 0  # the kept batches are data[begin:begin + size] (batches are contiguous)
    try:
        for batch in iter_batches(data, verify_crc=verify_crc):
            n = batch.size_in_bytes
            if batch.next_offset <= position:
                begin += n
                continue
            if size + n > budget and not (alone and not kept):
                break
            kept.append(batch)
            size += n
    except ProtocolError as exc:  # CorruptRecordError, malformed batch
        # Batches before the bad one are kept; it is fetched again once they are taken.
        if not kept:
            # The bad batch starts where the skipped ones end: name its base offset.
            at = int.from_bytes(data[begin : begin + 8], "big", signed=True)
            offset = at if len(data) >= begin + 8 else position
            return [], 0, batch_error(exc, tp.topic, tp.partition, offset)
    if kept and size < len(data):
        # Kept batches reference their buffer: hold a copy of just the kept bytes, so
        # the memory held is what the budget counts (not the whole trimmed response).
        kept = list(iter_batches(data[begin : begin + size], verify_crc=False))
    return kept, size, None


def partition_error(
    state: PartitionState,
    p: PartitionData,
    endpoints: dict[int, NodeEndpoint],
    cluster: ClusterClient,
    backoff: ExponentialBackoff,
    auto_offset_reset: str,
) -> bool:
    """Act on ``p``'s error code (see *Partition errors*); True when ``state.error`` now
    holds an error for the application."""
    error = error_for_code(p.error_code)
    tp = state.tp
    if error is OffsetOutOfRangeError:
        if auto_offset_reset == "none":
            state.error = OffsetOutOfRangeError(
                f"offset {state.position} is out of range for {tp.topic}-{tp.partition}"
            )
            return True
        log.info(
            "offset %s out of range for %s-%s; resetting to %s",
            state.position, tp.topic, tp.partition, auto_offset_reset,
        )  # fmt: skip
        state.request_reset(auto_offset_reset)
        return False
    if error.invalid_metadata or error.retriable:
        leader = p.current_leader
        if leader.leader_id >= 0 and leader.leader_epoch >= 0:  # KIP-951 hint
            e = endpoints.get(leader.leader_id)
            broker = None if e is None else BrokerMetadata(e.node_id, e.host, e.port, e.rack)
            cluster.update_leader(
                tp.topic, tp.partition, leader.leader_id, leader.leader_epoch, broker
            )
        if error.invalid_metadata:
            cluster.request_update([tp.topic])
        state.failures += 1
        delay = backoff.backoff_s(state.failures)
        state.retry_at = anyio.current_time() + delay
        log.debug(
            "fetch %s-%s: %s, retried in %.3f s", tp.topic, tp.partition, error.__name__, delay
        )
        return False
    state.error = error(f"fetch {tp.topic}-{tp.partition}")
    return True


def _zero_uuid() -> uuid.UUID:
    return uuid.UUID(int=0)
