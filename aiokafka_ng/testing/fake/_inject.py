"""Injected errors: :meth:`FakeKafka.inject` rules, and the error answers they give.

:func:`error_response` builds an answer to any request in which every item (partition,
topic, resource, coordinator key) fails with one error code, or the top-level error code
for the APIs whose answers have one; Produce, Fetch and ListOffsets answers carry the
KIP-951 current-leader hint with NOT_LEADER_OR_FOLLOWER, as Kafka's do. No I/O and no
state: what it needs of the cluster comes through :class:`Topology`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar
from uuid import UUID

from aiokafka_ng.protocol.errors import NotLeaderOrFollowerError
from aiokafka_ng.protocol.messages import RESPONSE_TYPES
from aiokafka_ng.protocol.messages import add_partitions_to_txn as _apt
from aiokafka_ng.protocol.messages import fetch as _fetch
from aiokafka_ng.protocol.messages import list_offsets as _lo
from aiokafka_ng.protocol.messages import offset_fetch as _of
from aiokafka_ng.protocol.messages import produce as _produce
from aiokafka_ng.protocol.messages import txn_offset_commit as _toc
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

__all__ = ["PARTITIONED_APIS", "TP", "Injection", "Match", "Topology", "error_response"]

NOT_LEADER_OR_FOLLOWER = NotLeaderOrFollowerError.errno
PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2

TP = tuple[str, int]
#: Which requests an injection hits: any (None), one node's (its id), or for Produce, Fetch
#: and ListOffsets those naming a partition the predicate ``(topic, partition)`` accepts.
Match = int | Callable[[str, int], bool] | None
E = TypeVar("E")


class Injection:
    """One :meth:`FakeKafka.inject` rule; ``hits`` counts the requests it answered."""

    __slots__ = ("api_key", "error_code", "hits", "match", "remaining")

    def __init__(self, api_key: int, error_code: int, times: int | None, match: Match) -> None:
        self.api_key = api_key
        self.error_code = error_code
        self.remaining = times
        self.match = match
        self.hits = 0

    def __repr__(self) -> str:
        return (
            f"<Injection api={self.api_key} error={self.error_code} hits={self.hits} "
            f"remaining={'inf' if self.remaining is None else self.remaining}>"
        )

    @property
    def active(self) -> bool:
        return self.remaining is None or self.remaining > 0

    def for_node(self, node: int) -> bool:
        return not isinstance(self.match, int) or self.match == node

    def matches(self, node: int, tp: TP) -> bool:
        if callable(self.match):
            return bool(self.match(*tp))
        return self.match is None or self.match == node

    def consume(self) -> None:
        self.hits += 1
        if self.remaining is not None:
            self.remaining -= 1


class Topology(Protocol):
    """What the error answers need to know about the cluster."""

    @property
    def controller(self) -> int: ...

    def endpoints(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every node."""
        ...

    def leader(self, topic: str, partition: int) -> int: ...

    def leader_epoch(self, topic: str, partition: int) -> int: ...

    def topic_name(self, topic_id: UUID) -> str | None: ...


def _has_top_level_error(api_key: int, version: int) -> bool:
    for spec in RESPONSE_TYPES[api_key]._SCHEMA:
        if spec.name == "error_code" and spec.tag is None:
            return spec.versions[0] <= version <= spec.versions[1]
    return False


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
        return MetadataResponse(
            brokers=[
                MetadataResponseBroker(node_id=n, host=h, port=p) for n, h, p in topo.endpoints()
            ],
            controller_id=topo.controller,
            topics=[
                MetadataResponseTopic(error_code=code, name=t.name, topic_id=t.topic_id)
                for t in request.topics or []
            ],
        )
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
    if isinstance(request, _of.OffsetFetchRequest) and version >= 8:
        # v8+ answers per group (KIP-709); no top-level error code.
        return _of.OffsetFetchResponse(
            groups=[
                _of.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                for g in request.groups
            ]
        )
    if isinstance(request, _toc.TxnOffsetCommitRequest):
        return _toc.TxnOffsetCommitResponse(
            topics=[
                _toc.TxnOffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        _toc.TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )
    if isinstance(request, _apt.AddPartitionsToTxnRequest) and version <= 3:
        # v0-3 (a client's own request) answer per partition; v4+ (brokers') has a top level.
        return _apt.AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                _apt.AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        _apt.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=code
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.v3_and_below_topics
            ]
        )
    if not _has_top_level_error(api_key, version):
        return None
    generic = RESPONSE_TYPES[api_key]()
    generic.error_code = code  # type: ignore[attr-defined]
    return generic


# ---- partitioned requests: Produce, Fetch, ListOffsets ---------------------------------------


class PartitionedApi(Protocol):
    """The partitions a request names, and an answer failing some of them."""

    def partitions(self, topo: Topology, req: Any, version: int) -> list[TP]: ...

    def error_response(
        self, topo: Topology, req: Any, version: int, errors: dict[TP, int]
    ) -> ApiMessage: ...


def _endpoints(topo: Topology, nodes: set[int], cls: Callable[..., E]) -> list[E]:
    return [cls(node_id=n, host=h, port=p) for n, h, p in topo.endpoints() if n in nodes]


class _Produce:
    def partitions(self, topo: Topology, req: _produce.ProduceRequest, version: int) -> list[TP]:
        return [
            (t.name or topo.topic_name(t.topic_id) or "", p.index)
            for t in req.topic_data
            for p in t.partition_data
        ]

    def error_response(
        self, topo: Topology, req: _produce.ProduceRequest, version: int, errors: dict[TP, int]
    ) -> _produce.ProduceResponse:
        hinted: set[int] = set()
        topics = []
        for t in req.topic_data:
            name = t.name or topo.topic_name(t.topic_id) or ""
            parts = []
            for p in t.partition_data:
                code = errors.get((name, p.index))
                if code is None:
                    continue
                r = _produce.PartitionProduceResponse(
                    index=p.index, error_code=code, base_offset=-1, log_start_offset=-1
                )
                if code == NOT_LEADER_OR_FOLLOWER and version >= 10:
                    # KIP-951: tell the client where the partition went.
                    leader = topo.leader(name, p.index)
                    r.current_leader = _produce.LeaderIdAndEpoch(
                        leader_id=leader, leader_epoch=topo.leader_epoch(name, p.index)
                    )
                    hinted.add(leader)
                parts.append(r)
            if parts:
                topics.append(
                    _produce.TopicProduceResponse(
                        name=t.name, topic_id=t.topic_id, partition_responses=parts
                    )
                )
        return _produce.ProduceResponse(
            responses=topics, node_endpoints=_endpoints(topo, hinted, _produce.NodeEndpoint)
        )


def _fetch_topics(
    topo: Topology, req: _fetch.FetchRequest, version: int
) -> Iterator[tuple[str | None, _fetch.FetchTopic]]:
    for t in req.topics:
        yield (t.topic if version < 13 else topo.topic_name(t.topic_id)), t


class _Fetch:
    def partitions(self, topo: Topology, req: _fetch.FetchRequest, version: int) -> list[TP]:
        return [
            (name, p.partition)
            for name, t in _fetch_topics(topo, req, version)
            if name is not None
            for p in t.partitions
        ]

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


class _ListOffsets:
    def partitions(self, topo: Topology, req: _lo.ListOffsetsRequest, version: int) -> list[TP]:
        return [(t.name, p.partition_index) for t in req.topics for p in t.partitions]

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


PARTITIONED_APIS: dict[int, PartitionedApi] = {
    PRODUCE: _Produce(),
    FETCH: _Fetch(),
    LIST_OFFSETS: _ListOffsets(),
}
