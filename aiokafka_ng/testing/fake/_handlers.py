"""Answers of one fake broker to the data-plane and admin requests: decoded request in,
response object out, on :class:`~aiokafka_ng.testing.fake._cluster.FakeCluster`'s state.

Each handler answers as a Kafka 4.x broker (KRaft) answers the request version it got:

* Metadata lists the live brokers, the controller, and per partition its leader, leader
  epoch, replicas, ISR and offline replicas; an unknown topic is created when the request
  allows it and the cluster auto-creates; either way that answer is
  ``UNKNOWN_TOPIC_OR_PARTITION``, as Kafka 4.4 answers while the creation propagates.
* Produce, Fetch, ListOffsets and DeleteRecords check partition by partition: unknown topic
  (``UNKNOWN_TOPIC_ID`` for topics named by id), not the leader (``NOT_LEADER_OR_FOLLOWER``
  with KIP-951's current-leader hint and the leader's endpoint), leader epoch fencing
  (KIP-320: ``FENCED_LEADER_EPOCH`` below the current epoch, ``UNKNOWN_LEADER_EPOCH`` above).
* Fetch v12+ with a ``last_fetched_epoch`` checks it against the leader epoch cache: where
  the log diverged from what the client read, the answer carries ``diverging_epoch``
  (the epoch and its end offset) and no records, as Kafka answers a truncated follower.
* OffsetForLeaderEpoch answers the end offset of an epoch from the partition's leader
  epoch cache (KIP-101, KIP-320), fenced like Fetch.
* Admin requests (CreateTopics, DeleteTopics, CreatePartitions) are accepted by any broker,
  since KRaft brokers forward them to the controller.
* Fetch sessions (KIP-227) are declined: every answer carries session id 0, which tells the
  client to send full fetches, as a broker with no free session slot does.

Fetch's long poll (``min_bytes`` / ``max_wait_ms``) is the server's job: :func:`fetch`
answers at once and reports how many bytes it found, and the server waits for an append or
the deadline before asking again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.messages import fetch as _fetch
from aiokafka_ng.protocol.messages import list_offsets as _lo
from aiokafka_ng.protocol.messages import metadata as _md
from aiokafka_ng.protocol.messages import offset_for_leader_epoch as _ofle
from aiokafka_ng.protocol.messages import produce as _produce
from aiokafka_ng.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from aiokafka_ng.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from aiokafka_ng.protocol.messages.create_topics import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aiokafka_ng.protocol.messages.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from aiokafka_ng.protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from aiokafka_ng.protocol.messages.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from aiokafka_ng.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.protocol.record_reader import iter_batches
from aiokafka_ng.testing.fake import _codes as E
from aiokafka_ng.testing.fake._cluster import FakeCluster, Partition, Topic

__all__ = ["HANDLERS", "FetchResult", "api_versions", "supported_versions"]

_LEADER_EPOCH = struct.Struct(">i")
_UUID_ZERO = UUID(int=0)
LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_TOPIC_NAME = 249

#: Topic configs the fake reads as numbers: a value that is not one is INVALID_CONFIG.
NUMERIC_CONFIGS = ("max.message.bytes",)

#: Every topic config name Kafka 4.4 knows (its ``LogConfig.configNames()``: TopicConfig's
#: names and the internal ``internal.segment.bytes``); CreateTopics with any other name is
#: INVALID_CONFIG ("Unknown topic config name"), as Kafka 4.4 answered.
TOPIC_CONFIG_NAMES = frozenset(
    {
        "cleanup.policy",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.type",
        "compression.zstd.level",
        "delete.retention.ms",
        "errors.deadletterqueue.group.enable",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "internal.segment.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "max.compaction.lag.ms",
        "max.decompressed.message.bytes",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.copy.lag.bytes",
        "remote.copy.lag.ms",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
    }
)

#: Append errors Kafka answers with a log start offset of -1 (see :func:`produce`).
_UNREADABLE_BATCH = frozenset({E.MESSAGE_TOO_LARGE, E.CORRUPT_MESSAGE, E.INVALID_RECORD})

#: Requests whose latest version Kafka 4.4's request schema calls unstable
#: (``latestVersionUnstable``, which the response schema does not carry): it advertised
#: InitProducerId only up to v5 (v6 is KIP-939's two-phase commit).
_UNSTABLE_LATEST = frozenset({22})

#: ListOffsets' special timestamps.
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5


def topic_name_problem(name: str) -> str | None:
    """Kafka's ``Topic.validate``: why ``name`` is not a legal topic name, or None."""
    if not name:
        return "the topic name is empty"
    if name in (".", ".."):
        return f"the topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"the topic name is longer than {MAX_TOPIC_NAME} characters"
    if not set(name) <= LEGAL_TOPIC_CHARS:
        return (
            f"the topic name {name!r} has characters other than ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return None


# ---- ApiVersions ---------------------------------------------------------------------------


def supported_versions(api_keys: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(min, max) per API key: the generated schemas' range (Kafka's own, from the pinned
    kafka-clients jar) up to the schema's last stable version, as a Kafka broker of that
    release advertises. (The request classes' MAX_STABLE_VERSION is the client's own cap,
    tools/protocol_caps.py; the response classes keep the schema's.) Kafka 4 also lists
    Produce v0-v2 for old librdkafka clients; the generated codec starts at v3."""
    out: dict[int, tuple[int, int]] = {}
    for key in sorted(api_keys):
        req, resp = REQUEST_TYPES[key], RESPONSE_TYPES[key]
        hi = min(req.MAX_VERSION, resp.MAX_STABLE_VERSION)
        if key in _UNSTABLE_LATEST:
            hi = min(hi, req.MAX_VERSION - 1)
        out[key] = (req.MIN_VERSION, hi)
    return out


def api_versions(
    versions: dict[int, tuple[int, int]], request: ApiVersionsRequest, version: int
) -> ApiVersionsResponse:
    keys = [
        ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in versions.items()
    ]
    return ApiVersionsResponse(error_code=E.NONE, api_keys=keys)


# ---- helpers ---------------------------------------------------------------------------


def _leader_problem(cluster: FakeCluster, node_id: int, p: Partition) -> int:
    if p.leader == -1:
        return E.LEADER_NOT_AVAILABLE
    return E.NONE if p.leader == node_id else E.NOT_LEADER_OR_FOLLOWER


def _epoch_problem(p: Partition, current_leader_epoch: int) -> int:
    if current_leader_epoch < 0:
        return E.NONE
    if current_leader_epoch < p.leader_epoch:
        return E.FENCED_LEADER_EPOCH
    if current_leader_epoch > p.leader_epoch:
        return E.UNKNOWN_LEADER_EPOCH
    return E.NONE


def _endpoints(cluster: FakeCluster, nodes: set[int], cls: Callable[..., Any]) -> list[Any]:
    return [
        cls(node_id=n, host=b.host, port=b.port, rack=b.rack)
        for n, b in sorted(cluster.brokers.items())
        if n in nodes and b.alive
    ]


# ---- Metadata --------------------------------------------------------------------------


def metadata(
    cluster: FakeCluster, node_id: int, version: int, request: _md.MetadataRequest
) -> _md.MetadataResponse:
    resp = _md.MetadataResponse(
        brokers=[
            _md.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in sorted(cluster.brokers.values(), key=lambda b: b.node_id)
            if b.alive
        ],
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
    )
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        resp.topics = [
            _topic_metadata(cluster, t) for t in cluster.topics.values() if not t.internal
        ]
        return resp
    allow_create = request.allow_auto_topic_creation if version >= 4 else True
    for item in wanted:
        if item.name is None:
            found = cluster.topic_by_id(item.topic_id)
            if found is None:
                resp.topics.append(
                    _md.MetadataResponseTopic(
                        error_code=E.UNKNOWN_TOPIC_ID, name=None, topic_id=item.topic_id
                    )
                )
            else:
                resp.topics.append(_topic_metadata(cluster, found))
            continue
        topic = cluster.topics.get(item.name)
        if topic is not None:
            resp.topics.append(_topic_metadata(cluster, topic))
            continue
        code = E.UNKNOWN_TOPIC_OR_PARTITION
        if topic_name_problem(item.name) is not None:
            code = E.INVALID_TOPIC_EXCEPTION
        elif allow_create and cluster.auto_create_topics:
            cluster.create_topic(item.name)
            code = E.UNKNOWN_TOPIC_OR_PARTITION  # Kafka 4.4's answer while it creates it
        resp.topics.append(_md.MetadataResponseTopic(error_code=code, name=item.name))
    return resp


def _topic_metadata(cluster: FakeCluster, topic: Topic) -> _md.MetadataResponseTopic:
    parts = []
    for p in topic.partitions:
        isr = p.isr(cluster)
        parts.append(
            _md.MetadataResponsePartition(
                error_code=E.LEADER_NOT_AVAILABLE if p.leader == -1 else E.NONE,
                partition_index=p.index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=isr,
                offline_replicas=[n for n in p.replicas if n not in isr],
            )
        )
    return _md.MetadataResponseTopic(
        error_code=E.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=parts,
    )


# ---- Produce ---------------------------------------------------------------------------


#: ``(transactional_id, producer_id, epoch, topic, partition, produce_version=) -> error``:
#: the transaction coordinator's check of a transactional batch before its append (KIP-890).
TxnCheck = Callable[..., int]


def _txn_header(records: bytes) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch, None for anything else."""
    try:
        first = next(iter_batches(records, verify_crc=False), None)
    except Exception:
        return None  # the append names what is wrong with it
    if first is None or not first.is_transactional:
        return None
    return first.producer_id, first.producer_epoch


def produce(
    cluster: FakeCluster,
    node_id: int,
    version: int,
    request: _produce.ProduceRequest,
    now_ms: int,
    *,
    verify_txn: TxnCheck | None = None,
) -> _produce.ProduceResponse:
    """Appends what this node leads; the response even for acks=0 (the server drops it).
    A transactional batch is first checked by ``verify_txn`` (the partition must be in the
    producer's transaction, or Produce v12+ adds it: KIP-890)."""
    hinted: set[int] = set()
    out = _produce.ProduceResponse()
    for t in request.topic_data:
        topic = cluster.topic_by_id(t.topic_id) if version >= 13 else cluster.topics.get(t.name)
        unknown = E.UNKNOWN_TOPIC_ID if version >= 13 else E.UNKNOWN_TOPIC_OR_PARTITION
        result = _produce.TopicProduceResponse(name=t.name, topic_id=t.topic_id)
        out.responses.append(result)
        for pd in t.partition_data:
            r = _produce.PartitionProduceResponse(
                index=pd.index, base_offset=-1, log_start_offset=-1
            )
            result.partition_responses.append(r)
            if request.acks not in (-1, 0, 1):
                r.error_code = E.INVALID_REQUIRED_ACKS
                continue
            p = None if topic is None else cluster.partition(topic.name, pd.index)
            if topic is None or p is None:
                r.error_code = unknown if topic is None else E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            problem = _leader_problem(cluster, node_id, p)
            if problem:
                r.error_code = problem
                if problem == E.NOT_LEADER_OR_FOLLOWER and p.leader >= 0:
                    r.current_leader = _produce.LeaderIdAndEpoch(
                        leader_id=p.leader, leader_epoch=p.leader_epoch
                    )
                    hinted.add(p.leader)
                continue
            records = pd.records or b""
            txn = _txn_header(records) if verify_txn is not None else None
            if txn is not None and verify_txn is not None:
                if request.transactional_id is None:
                    r.error_code = E.INVALID_RECORD
                    r.error_message = "a transactional batch in a Produce with no transactional id"
                    continue
                code = verify_txn(
                    request.transactional_id, txn[0], txn[1], topic.name, pd.index,
                    produce_version=version,
                )  # fmt: skip
                if code:
                    r.error_code = code
                    continue
            done = p.log.append(records, now_ms=now_ms, leader_epoch=p.leader_epoch)
            r.error_code = done.error_code
            r.error_message = done.message
            # A batch Kafka cannot take as a batch (too large, corrupt, invalid: its
            # RecordTooLarge/CorruptRecord exceptions) is answered with a log start of -1;
            # one the producer state refuses (sequence, epoch) with the partition's log
            # start, as Kafka 4.4 answered.
            if done.error_code not in _UNREADABLE_BATCH:
                r.log_start_offset = p.log.log_start_offset
            if done.error_code == E.NONE:
                r.base_offset = done.base_offset
                r.log_append_time_ms = done.log_append_time
    if version >= 10:
        out.node_endpoints = _endpoints(cluster, hinted, _produce.NodeEndpoint)
    return out


# ---- Fetch -----------------------------------------------------------------------------


@dataclass(slots=True)
class FetchResult:
    response: _fetch.FetchResponse
    bytes_found: int
    #: True when some partition answered with an error: Kafka answers at once then.
    has_error: bool


def fetch(
    cluster: FakeCluster, node_id: int, version: int, request: _fetch.FetchRequest
) -> FetchResult:
    out = _fetch.FetchResponse(session_id=0)
    if request.session_id != 0:
        out.error_code = E.code("FETCH_SESSION_ID_NOT_FOUND")
        return FetchResult(out, 0, True)
    read_committed = request.isolation_level == 1
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    found = 0
    has_error = False
    hinted: set[int] = set()
    for t in request.topics:
        topic = cluster.topic_by_id(t.topic_id) if version >= 13 else cluster.topics.get(t.topic)
        result = _fetch.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id)
        out.responses.append(result)
        for fp in t.partitions:
            pd = _fetch.PartitionData(
                partition_index=fp.partition,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                records=None,
            )
            result.partitions.append(pd)
            p = None if topic is None else cluster.partition(topic.name, fp.partition)
            if topic is None or p is None:
                pd.error_code = (
                    E.UNKNOWN_TOPIC_ID
                    if topic is None and version >= 13
                    else E.UNKNOWN_TOPIC_OR_PARTITION
                )
                has_error = True
                continue
            # Consumers may fetch from any live replica (KIP-392); the fake has no follower lag.
            serves = node_id in p.replicas and p.leader >= 0 and cluster.brokers[node_id].alive
            code = (E.NONE if serves else _leader_problem(cluster, node_id, p)) or _epoch_problem(
                p, fp.current_leader_epoch
            )
            if code:
                pd.error_code = code
                has_error = True
                if code == E.NOT_LEADER_OR_FOLLOWER and p.leader >= 0:
                    pd.current_leader = _fetch.LeaderIdAndEpoch(
                        leader_id=p.leader, leader_epoch=p.leader_epoch
                    )
                    hinted.add(p.leader)
                continue
            log = p.log
            if version >= 12 and fp.last_fetched_epoch >= 0:
                # KIP-320/KIP-595 (Kafka's Partition.readRecords): the log must hold the
                # epoch the client last fetched up to its fetch offset, or the answer names
                # where they diverge instead of records.
                epoch, end = log.end_offset_for(fp.last_fetched_epoch)
                if end < 0 or epoch < 0 or fp.fetch_offset < log.log_start_offset:
                    pd.error_code = E.OFFSET_OUT_OF_RANGE
                    has_error = True
                    continue
                if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
                    pd.diverging_epoch = _fetch.EpochEndOffset(epoch=epoch, end_offset=end)
                    pd.high_watermark = log.high_watermark
                    pd.last_stable_offset = log.last_stable_offset
                    pd.log_start_offset = log.log_start_offset
                    pd.records = b""
                    has_error = True  # Kafka answers a diverging epoch at once
                    continue
            if not log.log_start_offset <= fp.fetch_offset <= log.log_end_offset:
                pd.error_code = E.OFFSET_OUT_OF_RANGE  # watermarks stay -1, as Kafka's
                has_error = True
                continue
            pd.high_watermark = log.high_watermark
            pd.last_stable_offset = log.last_stable_offset
            pd.log_start_offset = log.log_start_offset
            upto = log.last_stable_offset if read_committed else log.high_watermark
            limit = min(fp.partition_max_bytes, budget)
            chunks = log.read(fp.fetch_offset, limit, upto, min_one=found == 0)
            data = b"".join(chunks)
            pd.records = data
            if read_committed:
                end = fp.fetch_offset + 1
                if chunks:
                    end = (
                        log.batches[
                            log.first_batch_index(fp.fetch_offset) + len(chunks) - 1
                        ].last_offset
                        + 1
                    )
                pd.aborted_transactions = [
                    _fetch.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in log.aborted_between(fp.fetch_offset, end)
                ]
            else:
                pd.aborted_transactions = None
            found += len(data)
            budget -= len(data)
    if version >= 16:
        out.node_endpoints = _endpoints(cluster, hinted, _fetch.NodeEndpoint)
    return FetchResult(out, found, has_error)


# ---- ListOffsets ------------------------------------------------------------------------


def list_offsets(
    cluster: FakeCluster, node_id: int, version: int, request: _lo.ListOffsetsRequest
) -> _lo.ListOffsetsResponse:
    out = _lo.ListOffsetsResponse()
    read_committed = request.isolation_level == 1
    for t in request.topics:
        result = _lo.ListOffsetsTopicResponse(name=t.name)
        out.topics.append(result)
        for lp in t.partitions:
            r = _lo.ListOffsetsPartitionResponse(
                partition_index=lp.partition_index, timestamp=-1, offset=-1, leader_epoch=-1
            )
            result.partitions.append(r)
            p = cluster.partition(t.name, lp.partition_index)
            if p is None:
                r.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            code = _leader_problem(cluster, node_id, p) or _epoch_problem(
                p, lp.current_leader_epoch
            )
            if code:
                r.error_code = code
                continue
            log = p.log
            ts = lp.timestamp
            if ts == LATEST:
                r.offset = log.last_stable_offset if read_committed else log.high_watermark
                r.leader_epoch = p.leader_epoch
            elif ts in (EARLIEST, EARLIEST_LOCAL):
                r.offset = log.log_start_offset
                r.leader_epoch = _epoch_at(p, log.log_start_offset)
            elif ts == EARLIEST_PENDING_UPLOAD:
                pass  # no tiered storage: nothing is pending upload (offset -1)
            elif ts == MAX_TIMESTAMP:
                best = log.max_timestamp()
                if best is not None:
                    r.offset, r.timestamp = best
                    r.leader_epoch = _epoch_at(p, r.offset)
            elif ts < 0:
                r.error_code = E.UNSUPPORTED_VERSION if ts < EARLIEST_PENDING_UPLOAD else E.NONE
            else:
                hit = log.offset_for_timestamp(ts)
                if hit is not None:
                    r.offset, r.timestamp = hit
                    r.leader_epoch = _epoch_at(p, r.offset)
    return out


# ---- OffsetForLeaderEpoch ---------------------------------------------------------------


def offset_for_leader_epoch(
    cluster: FakeCluster, node_id: int, version: int, request: _ofle.OffsetForLeaderEpochRequest
) -> _ofle.OffsetForLeaderEpochResponse:
    """Per partition, as Kafka's ``Partition.lastOffsetForLeaderEpoch`` for a consumer: the
    client's current leader epoch is checked first (FENCED/UNKNOWN_LEADER_EPOCH), then that
    this node leads the partition; the answer is the end offset of the requested epoch (or
    of the largest epoch below it) from the leader epoch cache
    (:meth:`~aiokafka_ng.testing.fake._log.PartitionLog.end_offset_for`)."""
    out = _ofle.OffsetForLeaderEpochResponse()
    for t in request.topics:
        result = _ofle.OffsetForLeaderTopicResult(topic=t.topic)
        out.topics.append(result)
        for op in t.partitions:
            r = _ofle.EpochEndOffset(partition=op.partition)
            result.partitions.append(r)
            p = cluster.partition(t.topic, op.partition)
            if p is None:
                r.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            code = _epoch_problem(p, op.current_leader_epoch) or _leader_problem(
                cluster, node_id, p
            )
            if code:
                r.error_code = E.NOT_LEADER_OR_FOLLOWER if code == E.LEADER_NOT_AVAILABLE else code
                continue
            r.leader_epoch, r.end_offset = p.log.end_offset_for(op.leader_epoch)
    return out


def _epoch_at(p: Partition, offset: int) -> int:
    """The leader epoch the batch holding ``offset`` was written in (the current epoch for
    the log end)."""
    log = p.log
    i = log.first_batch_index(offset)
    if i >= len(log.batches):
        return p.leader_epoch
    (epoch,) = _LEADER_EPOCH.unpack_from(log.batches[i].data, 12)
    return int(epoch)


# ---- admin -----------------------------------------------------------------------------


def create_topics(
    cluster: FakeCluster, node_id: int, version: int, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    out = CreateTopicsResponse()
    names = [t.name for t in request.topics]
    duplicated = {n for n in names if names.count(n) > 1}
    for name in sorted(duplicated):
        # Kafka answers a topic named twice once, with INVALID_REQUEST, and creates neither.
        out.topics.append(
            CreatableTopicResult(
                name=name,
                num_partitions=-1,
                replication_factor=-1,
                error_code=E.INVALID_REQUEST,
                error_message=f"Create topics request from client contains duplicate topic {name}",
            )
        )
    for t in request.topics:
        if t.name in duplicated:
            continue
        r = CreatableTopicResult(name=t.name, num_partitions=-1, replication_factor=-1)
        out.topics.append(r)
        problem = topic_name_problem(t.name)
        if problem is not None:
            r.error_code, r.error_message = E.INVALID_TOPIC_EXCEPTION, problem
            continue
        if t.name in cluster.topics:
            r.error_code, r.error_message = (
                E.TOPIC_ALREADY_EXISTS,
                f"Topic '{t.name}' already exists.",
            )
            continue
        # Kafka's controller checks the configs before the partitions and replicas.
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        unknown = [c.name for c in t.configs if c.name not in TOPIC_CONFIG_NAMES]
        bad = [k for k in NUMERIC_CONFIGS if k in configs and not configs[k].lstrip("-").isdigit()]
        if unknown:
            r.error_code = E.code("INVALID_CONFIG")
            r.error_message = f"Unknown topic config name: {unknown[0]}"
            continue
        if bad:
            r.error_code = E.code("INVALID_CONFIG")
            r.error_message = f"Invalid value {configs[bad[0]]} for configuration {bad[0]}"
            continue
        if t.assignments:
            count, rf = len(t.assignments), len(t.assignments[0].broker_ids)
        else:
            count = cluster.default_partitions if t.num_partitions == -1 else t.num_partitions
            rf = (
                min(3, len(cluster.brokers)) if t.replication_factor == -1 else t.replication_factor
            )
        if count < 1:
            r.error_code, r.error_message = (
                E.INVALID_PARTITIONS,
                "Number of partitions must be larger than 0.",
            )
            continue
        if rf < 1:
            r.error_code, r.error_message = (
                E.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0.",
            )
            continue
        if rf > len(cluster.live_brokers()):
            r.error_code = E.INVALID_REPLICATION_FACTOR
            r.error_message = (
                f"Unable to replicate the partition {rf} time(s): The target replication factor "
                f"of {rf} cannot be reached because only {len(cluster.live_brokers())} broker(s) "
                "are registered."
            )
            continue
        r.num_partitions, r.replication_factor = count, rf
        r.configs = [CreatableTopicConfigs(name=k, value=v) for k, v in sorted(configs.items())]
        if request.validate_only:
            continue
        topic = cluster.create_topic(t.name, count, rf, configs=configs)
        if t.assignments:
            for a, p in zip(t.assignments, topic.partitions, strict=True):
                cluster.assign(p, a.broker_ids)
        r.topic_id = topic.topic_id
    return out


def delete_topics(
    cluster: FakeCluster, node_id: int, version: int, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    out = DeleteTopicsResponse()
    items: list[tuple[str | None, UUID]] = (
        [(t.name, t.topic_id) for t in request.topics]
        if version >= 6
        else [(n, _UUID_ZERO) for n in request.topic_names]
    )
    for name, topic_id in items:
        topic = cluster.topics.get(name) if name is not None else cluster.topic_by_id(topic_id)
        r = DeletableTopicResult(name=name, topic_id=topic_id)
        out.responses.append(r)
        if topic is None:
            r.error_code = E.UNKNOWN_TOPIC_OR_PARTITION if name is not None else E.UNKNOWN_TOPIC_ID
            continue
        r.name, r.topic_id = topic.name, topic.topic_id
        del cluster.topics[topic.name]
    return out


def create_partitions(
    cluster: FakeCluster, node_id: int, version: int, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    out = CreatePartitionsResponse()
    for t in request.topics:
        r = CreatePartitionsTopicResult(name=t.name)
        out.results.append(r)
        topic = cluster.topics.get(t.name)
        if topic is None:
            r.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
            r.error_message = f"The topic '{t.name}' does not exist."
            continue
        have = len(topic.partitions)
        if t.count <= have:
            r.error_code = E.INVALID_PARTITIONS
            r.error_message = (
                f"The topic {t.name} currently has {have} partition(s); "
                f"{t.count} would not be an increase."
            )
            continue
        if t.assignments:
            rf = len(topic.partitions[0].replicas)
            bad = len(t.assignments) != t.count - have or any(
                len(a.broker_ids) != rf
                or len(set(a.broker_ids)) != rf
                or not set(a.broker_ids) <= set(cluster.brokers)
                for a in t.assignments
            )
            if bad:
                r.error_code = E.code("INVALID_REPLICA_ASSIGNMENT")
                r.error_message = (
                    f"Increasing the number of partitions by {t.count - have} needs that many "
                    f"assignments of {rf} existing brokers each."
                )
                continue
        if not request.validate_only:
            cluster.add_partitions(topic, t.count)
            for a, p in zip(t.assignments or [], topic.partitions[have:], strict=False):
                cluster.assign(p, a.broker_ids)
    return out


def delete_records(
    cluster: FakeCluster, node_id: int, version: int, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    out = DeleteRecordsResponse()
    for t in request.topics:
        result = DeleteRecordsTopicResult(name=t.name)
        out.topics.append(result)
        for dp in t.partitions:
            r = DeleteRecordsPartitionResult(partition_index=dp.partition_index, low_watermark=-1)
            result.partitions.append(r)
            p = cluster.partition(t.name, dp.partition_index)
            if p is None:
                r.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            code = _leader_problem(cluster, node_id, p)
            if code:
                r.error_code = code
                continue
            before = p.log.high_watermark if dp.offset == -1 else dp.offset
            if not 0 <= before <= p.log.high_watermark:
                r.error_code = E.OFFSET_OUT_OF_RANGE
                continue
            p.log.delete_records(before)
            r.low_watermark = p.log.log_start_offset
    return out


def describe_cluster(
    cluster: FakeCluster, node_id: int, version: int, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    brokers = [
        DescribeClusterBroker(
            broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=not b.alive
        )
        for b in sorted(cluster.brokers.values(), key=lambda b: b.node_id)
        if b.alive or (version >= 2 and request.include_fenced_brokers)
    ]
    return DescribeClusterResponse(
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        brokers=brokers,
        endpoint_type=request.endpoint_type if version >= 1 else 1,
    )


def find_coordinator(
    cluster: FakeCluster, node_id: int, version: int, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    transaction = request.key_type == 1
    keys = request.coordinator_keys if version >= 4 else [request.key]
    found = []
    for key in keys:
        node = cluster.coordinator(key, transaction=transaction)
        if node < 0:
            found.append(
                Coordinator(
                    key=key, node_id=-1, host="", port=-1, error_code=E.COORDINATOR_NOT_AVAILABLE
                )
            )
        else:
            b = cluster.brokers[node]
            found.append(Coordinator(key=key, node_id=node, host=b.host, port=b.port))
    if version >= 4:
        return FindCoordinatorResponse(coordinators=found)
    c = found[0]
    return FindCoordinatorResponse(
        error_code=c.error_code, node_id=c.node_id, host=c.host, port=c.port
    )


#: Synchronous handlers by API key: ``(cluster, node_id, version, request) -> response``.
#: Produce and Fetch are called by the server directly (time, waiting).
HANDLERS: dict[int, Callable[[FakeCluster, int, int, Any], ApiMessage]] = {
    2: list_offsets,
    3: metadata,
    10: find_coordinator,
    19: create_topics,
    20: delete_topics,
    21: delete_records,
    23: offset_for_leader_epoch,
    37: create_partitions,
    60: describe_cluster,
}
