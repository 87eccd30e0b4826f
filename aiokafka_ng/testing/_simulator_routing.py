"""Routing of one request inside the cluster simulator: forward, rewrite, split or answer.

:func:`plan_request` looks at a request read by a simulated node and returns a
:class:`~aiokafka_ng.testing._simulator_conn.Plan`. In order:

1. Produce, Fetch and ListOffsets are decoded and checked per partition: partitions another
   node leads get NOT_LEADER_OR_FOLLOWER; then each matching :class:`Injection` rule (oldest
   first) fails the partitions it matches that are still fine, and uses up one hit if it
   failed any. No failures: the original bytes are forwarded (the fast path). All failed:
   answered locally. Some failed: the rest is forwarded as a reduced request with the same
   correlation id and the broker's answer is merged with the local errors.
2. Controller-bound APIs at a node that is not the controller: NOT_CONTROLLER for every item;
   group/transaction requests at a node that is not their coordinator: NOT_COORDINATOR.
3. The oldest injection rule for the API (and node) answers the whole request.
4. Metadata, DescribeTopicPartitions, DescribeCluster, FindCoordinator: forwarded, answer
   rewritten. Everything else: forwarded untouched, never decoded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aiokafka_ng.protocol.errors import (
    NotControllerError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    ProtocolError,
)
from aiokafka_ng.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from aiokafka_ng.protocol.messages import RESPONSE_TYPES
from aiokafka_ng.protocol.messages.init_producer_id import InitProducerIdResponse
from aiokafka_ng.protocol.messages.produce import ProduceRequest
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing._simulator_codec import (
    COORDINATOR_APIS,
    FIND_COORDINATOR,
    PARTITIONED_APIS,
    REWRITTEN_APIS,
    TP,
    coordinator_key,
    error_response,
    rewrite_response,
)
from aiokafka_ng.testing._simulator_conn import Node, Plan

if TYPE_CHECKING:
    from aiokafka_ng.testing.simulator import ClusterSimulator

__all__ = ["Injection", "Match", "plan_request"]

NOT_LEADER_OR_FOLLOWER = NotLeaderOrFollowerError.errno
NOT_CONTROLLER = NotControllerError.errno
NOT_COORDINATOR = NotCoordinatorError.errno
INIT_PRODUCER_ID = 22

Match = int | Callable[[str, int], bool] | None


class Injection:
    """One :meth:`ClusterSimulator.inject` rule; ``hits`` counts the requests it answered."""

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


def plan_request(
    sim: ClusterSimulator,
    node: Node,
    header: RequestHeader,
    frame: bytes,
    decoded: ApiMessage | None = None,
) -> Plan:
    """Decide what ``node`` does with one request (``frame`` includes the size prefix;
    ``decoded``: the request, if the caller decoded it already)."""
    api = header.api_key
    if api in PARTITIONED_APIS:
        return _plan_partitioned(sim, node, header, frame, decoded)
    if api in sim.controller_apis and node.node_id != sim.controller:
        planned = _answer_all(sim, node, header, frame, NOT_CONTROLLER)
        if planned is not None:
            return planned
    if api in COORDINATOR_APIS and sim.enforce_coordinators:
        planned = _check_coordinator(sim, node, header, frame)
        if planned is not None:
            return planned
    rules = _rules(sim, node, api)
    if rules:  # the oldest matching rule answers the whole request
        planned = _answer_all(sim, node, header, frame, rules[0].error_code)
        if planned is not None:
            rules[0].consume()
            return planned
    if api == INIT_PRODUCER_ID:
        return Plan(forward=frame, transform=_init_watcher(sim, header))
    if api not in REWRITTEN_APIS:
        return Plan(forward=frame)
    request: ApiMessage | None = None
    if api == FIND_COORDINATOR:  # v0-3 answers do not repeat the key
        try:
            request = decode_request(memoryview(frame)[4:])[1]
        except ProtocolError:
            return Plan(forward=frame)
    return Plan(forward=frame, transform=_rewriter(sim, header, request))


def _rules(sim: ClusterSimulator, node: Node, api: int) -> list[Injection]:
    if not sim._injections:
        return []
    sim._injections = [r for r in sim._injections if r.active]
    return [r for r in sim._injections if r.api_key == api and r.for_node(node.node_id)]


def _check_coordinator(
    sim: ClusterSimulator, node: Node, header: RequestHeader, frame: bytes
) -> Plan | None:
    try:
        request = decode_request(memoryview(frame)[4:])[1]
    except ProtocolError:
        return None
    key = coordinator_key(request, header.api_version)
    if key is None or sim.coordinator_for(key) == node.node_id:
        return None
    return _answer_all(sim, node, header, frame, NOT_COORDINATOR, request)


def _answer_all(
    sim: ClusterSimulator,
    node: Node,
    header: RequestHeader,
    frame: bytes,
    code: int,
    request: ApiMessage | None = None,
) -> Plan | None:
    if request is None:
        try:
            request = decode_request(memoryview(frame)[4:])[1]
        except ProtocolError:
            return None
    response = error_response(sim, request, header.api_version, code)
    if response is None:
        return None
    sim.errors_answered[(node.node_id, header.api_key, code)] += 1
    return Plan(local=encode_response(response, header.api_version, header.correlation_id))


def _rewriter(
    sim: ClusterSimulator, header: RequestHeader, request: ApiMessage | None
) -> Callable[[bytes], bytes]:
    response_type = RESPONSE_TYPES[header.api_key]
    version = header.api_version

    def transform(payload: bytes) -> bytes:
        cid, response = decode_response(response_type, version, payload)
        rewrite_response(sim, request, response, version)
        return encode_response(response, version, cid)

    return transform


def _init_watcher(sim: ClusterSimulator, header: RequestHeader) -> Callable[[bytes], bytes]:
    version = header.api_version

    def watch(payload: bytes) -> bytes:
        _, response = decode_response(InitProducerIdResponse, version, payload)
        sim.producer_epochs.learn_init(response)
        return struct.pack(">i", len(payload)) + payload  # relayed as it came

    return watch


def _plan_partitioned(
    sim: ClusterSimulator,
    node: Node,
    header: RequestHeader,
    frame: bytes,
    decoded: ApiMessage | None,
) -> Plan:
    adapter = PARTITIONED_APIS[header.api_key]
    version = header.api_version
    request = decoded
    if request is None:
        try:
            request = decode_request(memoryview(frame)[4:])[1]
        except ProtocolError:
            return Plan(forward=frame)  # let the real broker judge it
    acks0 = isinstance(request, ProduceRequest) and request.acks == 0
    parts = adapter.partitions(sim, request, version)
    sim._count_partitions(header.api_key, parts)
    errors: dict[TP, int] = {
        tp: NOT_LEADER_OR_FOLLOWER for tp in parts if sim.leader(*tp) != node.node_id
    }
    for rule in _rules(sim, node, header.api_key):
        hit = False
        for tp in parts:
            if tp not in errors and rule.matches(node.node_id, tp):
                errors[tp] = rule.error_code
                hit = True
        if hit:
            rule.consume()
    rewritten = isinstance(request, ProduceRequest) and _apply_epoch_rules(sim, request, errors)
    if not errors:
        if rewritten:
            frame = encode_request(request, version, header.correlation_id, header.client_id)
        return Plan(forward=frame, expects_response=not acks0)
    for code in errors.values():
        sim.errors_answered[(node.node_id, header.api_key, code)] += 1
    if acks0:
        # No response could carry the error: Kafka closes the connection instead.
        return Plan(close=True)
    local = adapter.error_response(sim, request, version, errors)
    reduced = adapter.keep(sim, request, version, {tp for tp in parts if tp not in errors})
    if _is_empty(reduced):
        return Plan(local=encode_response(local, version, header.correlation_id))
    response_type = RESPONSE_TYPES[header.api_key]

    def merge(payload: bytes) -> bytes:
        cid, forwarded = decode_response(response_type, version, payload)
        return encode_response(adapter.merge(forwarded, local), version, cid)

    forward = encode_request(reduced, version, header.correlation_id, header.client_id)
    return Plan(forward=forward, transform=merge)


def _apply_epoch_rules(
    sim: ClusterSimulator, request: ProduceRequest, errors: dict[TP, int]
) -> bool:
    """Kafka's producer-epoch checks (and the bumped-epoch mapping) for every partition that
    is about to be forwarded; True if a partition's records were rewritten."""
    rewritten = False
    for t in request.topic_data:
        for p in t.partition_data:
            tp = (t.name, p.index)
            if tp in errors or not p.records:
                continue
            verdict = sim.producer_epochs.admit(tp, p.records)
            if isinstance(verdict, int):
                errors[tp] = verdict
            elif verdict is not None:
                p.records = verdict
                rewritten = True
    return rewritten


def _is_empty(request: ApiMessage) -> bool:
    items: Sequence[object] = (
        getattr(request, "topic_data", None) or getattr(request, "topics", None) or ()
    )
    return not items
