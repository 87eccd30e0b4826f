"""Protocol side of :class:`~aiokafka_ng.testing.simulator.ClusterSimulator` (no I/O).

Two jobs, both on decoded messages from :mod:`aiokafka_ng.protocol`:

* *Rewriting* responses of the real broker so that they describe the simulated cluster:
  Metadata, DescribeTopicPartitions (leaders, epochs, replicas, brokers, controller),
  DescribeCluster (brokers, controller) and FindCoordinator (coordinator node).
* *Synthesizing* error responses instead of forwarding: whole-request errors (NOT_CONTROLLER,
  injected errors) and per-partition errors for Produce, Fetch and ListOffsets, which can be
  split: the partitions this node may answer are forwarded as a smaller request, the others
  get an error, and the two answers are merged into one response (clients match partitions
  by name and index, never by position).

Everything the rewriting needs to know about the simulated cluster comes through the
:class:`Topology` protocol, so this module has no state of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar
from uuid import UUID

from aiokafka_ng.protocol.errors import NotLeaderOrFollowerError
from aiokafka_ng.protocol.messages import RESPONSE_TYPES
from aiokafka_ng.protocol.messages import fetch as _fetch
from aiokafka_ng.protocol.messages import list_offsets as _lo
from aiokafka_ng.protocol.messages import produce as _produce
from aiokafka_ng.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from aiokafka_ng.protocol.messages.alter_configs import (
    AlterConfigsResourceResponse as _AlterResult,
)
from aiokafka_ng.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from aiokafka_ng.protocol.messages.create_topics import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aiokafka_ng.protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from aiokafka_ng.protocol.messages.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterResponse,
)
from aiokafka_ng.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsResponse,
)
from aiokafka_ng.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokafka_ng.protocol.messages.incremental_alter_configs import (
    AlterConfigsResourceResponse as _IncAlterResult,
)
from aiokafka_ng.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponseTopic,
)
from aiokafka_ng.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from aiokafka_ng.protocol.primitives import ApiMessage

__all__ = [
    "COORDINATOR_APIS",
    "PARTITIONED_APIS",
    "TP",
    "PartitionedApi",
    "Topology",
    "can_answer_with_error",
    "coordinator_key",
    "error_response",
    "rewrite_response",
]

NOT_LEADER_OR_FOLLOWER = NotLeaderOrFollowerError.errno
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
FIND_COORDINATOR, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS = 10, 60, 75

TP = tuple[str, int]
E = TypeVar("E")


class Topology(Protocol):
    """What the codec needs to know about the simulated cluster."""

    @property
    def controller(self) -> int: ...

    def endpoints(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every simulated node."""
        ...

    def leader(self, topic: str, partition: int) -> int: ...

    def leader_epoch(self, topic: str, partition: int) -> int: ...

    def replicas(self, leader: int) -> list[int]: ...

    def coordinator_for(self, key: str) -> int: ...

    def learn_topic(self, name: str, topic_id: UUID, partitions: int) -> None: ...

    def topic_name(self, topic_id: UUID) -> str | None: ...


# ---- rewriting responses ---------------------------------------------------------------------


def _rewrite_partitions(topo: Topology, topic: str, partitions: Sequence[Any]) -> None:
    # Metadata and DescribeTopicPartitions partitions share these field names.
    for p in partitions:
        if p.error_code != 0:
            continue
        leader = topo.leader(topic, p.partition_index)
        p.leader_id = leader
        p.leader_epoch = topo.leader_epoch(topic, p.partition_index)
        p.replica_nodes = topo.replicas(leader)
        p.isr_nodes = list(p.replica_nodes)
        p.offline_replicas = []


def _rewrite_metadata(topo: Topology, resp: MetadataResponse) -> None:
    resp.brokers = [
        MetadataResponseBroker(node_id=n, host=h, port=p) for n, h, p in topo.endpoints()
    ]
    resp.controller_id = topo.controller
    for t in resp.topics:
        if t.name is None:
            continue
        topo.learn_topic(t.name, t.topic_id, len(t.partitions))
        _rewrite_partitions(topo, t.name, t.partitions)


def _rewrite_describe_topic_partitions(
    topo: Topology, resp: DescribeTopicPartitionsResponse
) -> None:
    for t in resp.topics:
        if t.name is not None:
            _rewrite_partitions(topo, t.name, t.partitions)


def _rewrite_describe_cluster(topo: Topology, resp: DescribeClusterResponse) -> None:
    if resp.error_code != 0:
        return
    resp.brokers = [
        DescribeClusterBroker(broker_id=n, host=h, port=p) for n, h, p in topo.endpoints()
    ]
    resp.controller_id = topo.controller


def _rewrite_find_coordinator(
    topo: Topology, req: FindCoordinatorRequest, resp: FindCoordinatorResponse, version: int
) -> None:
    by_id = {n: (h, p) for n, h, p in topo.endpoints()}
    if version < 4:
        if resp.error_code == 0:
            resp.node_id = topo.coordinator_for(req.key)
            resp.host, resp.port = by_id[resp.node_id]
        return
    for c in resp.coordinators:
        if c.error_code == 0:
            c.node_id = topo.coordinator_for(c.key)
            c.host, c.port = by_id[c.node_id]


REWRITTEN_APIS = frozenset(
    {METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS}
)


def rewrite_response(
    topo: Topology, request: ApiMessage | None, response: ApiMessage, version: int
) -> None:
    """Make ``response`` describe the simulated cluster (in place); others are untouched."""
    if isinstance(response, MetadataResponse):
        _rewrite_metadata(topo, response)
    elif isinstance(response, DescribeTopicPartitionsResponse):
        _rewrite_describe_topic_partitions(topo, response)
    elif isinstance(response, DescribeClusterResponse):
        _rewrite_describe_cluster(topo, response)
    elif isinstance(response, FindCoordinatorResponse):
        assert isinstance(request, FindCoordinatorRequest)
        _rewrite_find_coordinator(topo, request, response, version)


# ---- coordinator-bound requests -------------------------------------------------------------

# OffsetCommit, OffsetFetch (v0-7), JoinGroup, Heartbeat, LeaveGroup, SyncGroup: group id;
# InitProducerId, AddOffsetsToTxn, EndTxn: transactional id. Requests whose key is elsewhere
# (OffsetFetch v8+ batches, TxnOffsetCommit, AddPartitionsToTxn) are not checked.
COORDINATOR_APIS = frozenset({8, 9, 11, 12, 13, 14, 22, 25, 26})


def coordinator_key(request: ApiMessage, version: int) -> str | None:
    """The group or transactional id that decides which node must answer, if any."""
    if request.API_KEY in (22, 25, 26):
        key = getattr(request, "transactional_id", None)
    elif request.API_KEY == 9 and version >= 8:
        return None
    else:
        key = getattr(request, "group_id", None)
    return key if isinstance(key, str) else None


# ---- whole-request errors --------------------------------------------------------------------


def _has_top_level_error(api_key: int, version: int | None) -> bool:
    for spec in RESPONSE_TYPES[api_key]._SCHEMA:
        if spec.name == "error_code" and spec.tag is None:
            return version is None or spec.versions[0] <= version <= spec.versions[1]
    return False


_ITEMIZED = {
    METADATA,
    FIND_COORDINATOR,
    8,  # OffsetCommit
    19,  # CreateTopics
    20,  # DeleteTopics
    33,  # AlterConfigs
    37,  # CreatePartitions
    44,  # IncrementalAlterConfigs
}


def can_answer_with_error(api_key: int) -> bool:
    """True if :func:`error_response` can build an error answer for this API."""
    return (
        api_key in _ITEMIZED
        or api_key in PARTITIONED_APIS
        or (api_key in RESPONSE_TYPES and _has_top_level_error(api_key, None))
    )


def error_response(
    topo: Topology, request: ApiMessage, version: int, code: int
) -> ApiMessage | None:
    """An answer to ``request`` in which every item fails with ``code``.

    None when this version of the response has nowhere to put an error code.
    """
    api_key = request.API_KEY
    if api_key in PARTITIONED_APIS:
        adapter = PARTITIONED_APIS[api_key]
        errors = {tp: code for tp in adapter.partitions(topo, request, version)}
        return adapter.error_response(topo, request, version, errors)
    if isinstance(request, MetadataRequest):
        resp = MetadataResponse(
            topics=[
                MetadataResponseTopic(error_code=code, name=t.name, topic_id=t.topic_id)
                for t in request.topics or []
            ]
        )
        _rewrite_metadata(topo, resp)
        return resp
    if isinstance(request, CreateTopicsRequest):
        return CreateTopicsResponse(
            topics=[
                CreatableTopicResult(
                    name=t.name, error_code=code, error_message=None, replication_factor=-1
                )
                for t in request.topics
            ]
        )
    if isinstance(request, DeleteTopicsRequest):
        if version >= 6:
            results = [
                DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=code)
                for t in request.topics
            ]
        else:
            results = [DeletableTopicResult(name=n, error_code=code) for n in request.topic_names]
        return DeleteTopicsResponse(responses=results)
    if isinstance(request, CreatePartitionsRequest):
        return CreatePartitionsResponse(
            results=[
                CreatePartitionsTopicResult(name=t.name, error_code=code) for t in request.topics
            ]
        )
    if isinstance(request, AlterConfigsRequest):
        return AlterConfigsResponse(
            responses=[
                _AlterResult(
                    error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
                )
                for r in request.resources
            ]
        )
    if isinstance(request, IncrementalAlterConfigsRequest):
        return IncrementalAlterConfigsResponse(
            responses=[
                _IncAlterResult(
                    error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
                )
                for r in request.resources
            ]
        )
    if isinstance(request, OffsetCommitRequest):
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )
    if isinstance(request, FindCoordinatorRequest) and version >= 4:
        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code)
                for key in request.coordinator_keys
            ]
        )
    if not _has_top_level_error(api_key, version):
        return None
    generic = RESPONSE_TYPES[api_key]()
    generic.error_code = code  # type: ignore[attr-defined]
    return generic


# ---- partitioned requests: Produce, Fetch, ListOffsets ---------------------------------------


class PartitionedApi(Protocol):
    """Split/answer/merge for a request whose items are topic partitions."""

    def partitions(self, topo: Topology, req: Any, version: int) -> list[TP]: ...

    def keep(self, topo: Topology, req: Any, version: int, keep: set[TP]) -> ApiMessage: ...

    def error_response(
        self, topo: Topology, req: Any, version: int, errors: dict[TP, int]
    ) -> ApiMessage: ...

    def merge(self, forwarded: Any, local: Any) -> ApiMessage: ...


def _endpoints(topo: Topology, nodes: set[int], cls: Callable[..., E]) -> list[E]:
    return [cls(node_id=n, host=h, port=p) for n, h, p in topo.endpoints() if n in nodes]


class _Produce:
    def partitions(self, topo: Topology, req: _produce.ProduceRequest, version: int) -> list[TP]:
        return [(t.name, p.index) for t in req.topic_data for p in t.partition_data]

    def keep(
        self, topo: Topology, req: _produce.ProduceRequest, version: int, keep: set[TP]
    ) -> _produce.ProduceRequest:
        topics = []
        for t in req.topic_data:
            parts = [p for p in t.partition_data if (t.name, p.index) in keep]
            if parts:
                topics.append(dataclasses.replace(t, partition_data=parts))
        return dataclasses.replace(req, topic_data=topics)

    def error_response(
        self, topo: Topology, req: _produce.ProduceRequest, version: int, errors: dict[TP, int]
    ) -> _produce.ProduceResponse:
        hinted: set[int] = set()
        topics = []
        for t in req.topic_data:
            parts = []
            for p in t.partition_data:
                code = errors.get((t.name, p.index))
                if code is None:
                    continue
                r = _produce.PartitionProduceResponse(
                    index=p.index, error_code=code, base_offset=-1, log_start_offset=-1
                )
                if code == NOT_LEADER_OR_FOLLOWER and version >= 10:
                    # KIP-951: tell the client where the partition went.
                    leader = topo.leader(t.name, p.index)
                    r.current_leader = _produce.LeaderIdAndEpoch(
                        leader_id=leader, leader_epoch=topo.leader_epoch(t.name, p.index)
                    )
                    hinted.add(leader)
                parts.append(r)
            if parts:
                topics.append(_produce.TopicProduceResponse(name=t.name, partition_responses=parts))
        return _produce.ProduceResponse(
            responses=topics, node_endpoints=_endpoints(topo, hinted, _produce.NodeEndpoint)
        )

    def merge(
        self, forwarded: _produce.ProduceResponse, local: _produce.ProduceResponse
    ) -> _produce.ProduceResponse:
        by_name = {t.name: t for t in forwarded.responses}
        for t in local.responses:
            if t.name in by_name:
                by_name[t.name].partition_responses.extend(t.partition_responses)
            else:
                forwarded.responses.append(t)
        _merge_endpoints(forwarded.node_endpoints, local.node_endpoints)
        return forwarded


def _merge_endpoints(into: list[Any], extra: list[Any]) -> None:
    known = {e.node_id for e in into}
    into.extend(e for e in extra if e.node_id not in known)


def _fetch_topics(
    topo: Topology, req: _fetch.FetchRequest, version: int
) -> Iterator[tuple[str | None, _fetch.FetchTopic]]:
    for t in req.topics:
        yield (t.topic if version < 13 else topo.topic_name(t.topic_id)), t


class _Fetch:
    # Topics in Fetch v13+ are named by id only; a topic whose id the simulator has not seen
    # in a Metadata response cannot be routed and is always forwarded.

    def partitions(self, topo: Topology, req: _fetch.FetchRequest, version: int) -> list[TP]:
        return [
            (name, p.partition)
            for name, t in _fetch_topics(topo, req, version)
            if name is not None
            for p in t.partitions
        ]

    def keep(
        self, topo: Topology, req: _fetch.FetchRequest, version: int, keep: set[TP]
    ) -> _fetch.FetchRequest:
        topics = []
        for name, t in _fetch_topics(topo, req, version):
            parts = [p for p in t.partitions if name is None or (name, p.partition) in keep]
            if parts:
                topics.append(dataclasses.replace(t, partitions=parts))
        return dataclasses.replace(req, topics=topics)

    def error_response(
        self, topo: Topology, req: _fetch.FetchRequest, version: int, errors: dict[TP, int]
    ) -> _fetch.FetchResponse:
        hinted: set[int] = set()
        topics = []
        for name, t in _fetch_topics(topo, req, version):
            parts = []
            for p in t.partitions:
                code = errors.get((name, p.partition)) if name is not None else None
                if code is None:
                    continue
                r = _fetch.PartitionData(
                    partition_index=p.partition,
                    error_code=code,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    records=b"",
                )
                if name is not None and code == NOT_LEADER_OR_FOLLOWER and version >= 12:
                    leader = topo.leader(name, p.partition)
                    r.current_leader = _fetch.LeaderIdAndEpoch(
                        leader_id=leader, leader_epoch=topo.leader_epoch(name, p.partition)
                    )
                    hinted.add(leader)
                parts.append(r)
            if parts:
                topics.append(
                    _fetch.FetchableTopicResponse(
                        topic=t.topic, topic_id=t.topic_id, partitions=parts
                    )
                )
        return _fetch.FetchResponse(
            error_code=0,
            session_id=0,
            responses=topics,
            node_endpoints=(_endpoints(topo, hinted, _fetch.NodeEndpoint) if version >= 16 else []),
        )

    def merge(
        self, forwarded: _fetch.FetchResponse, local: _fetch.FetchResponse
    ) -> _fetch.FetchResponse:
        by_key = {(t.topic, t.topic_id): t for t in forwarded.responses}
        for t in local.responses:
            existing = by_key.get((t.topic, t.topic_id))
            if existing is not None:
                existing.partitions.extend(t.partitions)
            else:
                forwarded.responses.append(t)
        _merge_endpoints(forwarded.node_endpoints, local.node_endpoints)
        return forwarded


class _ListOffsets:
    def partitions(self, topo: Topology, req: _lo.ListOffsetsRequest, version: int) -> list[TP]:
        return [(t.name, p.partition_index) for t in req.topics for p in t.partitions]

    def keep(
        self, topo: Topology, req: _lo.ListOffsetsRequest, version: int, keep: set[TP]
    ) -> _lo.ListOffsetsRequest:
        topics = []
        for t in req.topics:
            parts = [p for p in t.partitions if (t.name, p.partition_index) in keep]
            if parts:
                topics.append(dataclasses.replace(t, partitions=parts))
        return dataclasses.replace(req, topics=topics)

    def error_response(
        self, topo: Topology, req: _lo.ListOffsetsRequest, version: int, errors: dict[TP, int]
    ) -> _lo.ListOffsetsResponse:
        topics = []
        for t in req.topics:
            parts = [
                _lo.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    error_code=errors[(t.name, p.partition_index)],
                )
                for p in t.partitions
                if (t.name, p.partition_index) in errors
            ]
            if parts:
                topics.append(_lo.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return _lo.ListOffsetsResponse(topics=topics)

    def merge(
        self, forwarded: _lo.ListOffsetsResponse, local: _lo.ListOffsetsResponse
    ) -> _lo.ListOffsetsResponse:
        by_name = {t.name: t for t in forwarded.topics}
        for t in local.topics:
            if t.name in by_name:
                by_name[t.name].partitions.extend(t.partitions)
            else:
                forwarded.topics.append(t)
        return forwarded


PARTITIONED_APIS: dict[int, PartitionedApi] = {
    PRODUCE: _Produce(),
    FETCH: _Fetch(),
    LIST_OFFSETS: _ListOffsets(),
}
