"""FakeKafka: an in-process Kafka cluster for tests, reached over TCP or in memory.

Usage::

    async with FakeKafka(brokers=3) as kafka:
        kafka.create_topic("events", partitions=3)
        async with Producer(**kafka.client_config()) as producer:   # in memory
            await producer.send_and_wait("events", b"v")
        kafka.kill(1)                       # partitions node 1 led elect another replica
        kafka.inject(0, 6, times=2)         # the next two Produce: NOT_LEADER_OR_FOLLOWER
        kafka.records("events", 0)          # what the log holds, for assertions

Any Kafka client (confluent-kafka, aiokafka, the Java client) reaches it over TCP at
``kafka.bootstrap_servers``; aiokafka_ng clients can also connect in memory through the
``transport`` setting (:meth:`FakeKafka.client_config` gives both), which is what makes a
test on virtual time exact: no socket, so no wait the event loop's clock does not see.

Theory of operation
-------------------
State lives in a :class:`~aiokafka_ng.testing.fake._cluster.FakeCluster` (synchronous);
each client connection is served by a task that answers one request at a time: it handles
a request, writes the answer and only then takes the next one -- as a Kafka broker mutes a
connection while one of its requests is being processed, so answers are in request order
and a long-poll Fetch holds up the requests behind it on that connection. A second task
reads the requests as they arrive and queues them, so the requests a client has in flight
are seen at the node (:meth:`FakeKafka.in_flight`). Produce with ``acks=0`` gets no
answer (an error closes the connection instead, as Kafka does).

Time is ``anyio.current_time()`` (virtual under a mock clock) for waits and deadlines;
record timestamps the broker assigns (LogAppendTime) use ``wall_clock`` (default
``time.time``), since clients compare them with their own wall clock.

Faults act on the serving tasks: a killed node refuses new connections and closes its
open ones, and the cluster elects new leaders for its partitions (:meth:`kill`); an isolated
node keeps its roles but is unreachable (:meth:`isolate`); :meth:`move_leader` is a clean
election (leader epoch + 1, same log) and :meth:`truncate` an unclean one (leader epoch + 1,
the log cut: KIP-320's log truncation); :meth:`delay`,
:meth:`black_hole`, :meth:`cut_after`, :meth:`cut_after_bytes`, :meth:`inject_garbage`,
:meth:`swap_next_responses` and :meth:`inject` change what a node answers and when;
:meth:`require_rebootstrap` sends KIP-1102's REBOOTSTRAP_REQUIRED in Metadata answers.
:meth:`answer` lets a test answer an API key itself (one the model lacks, or a modelled one
answered otherwise for a while; rules in :mod:`._scripted`). What the nodes saw is counted in
:mod:`._observe` (:meth:`requests`, :meth:`request_times`, :meth:`errors`,
:meth:`max_in_flight`, ...), and :meth:`received` lists every request they got, decoded.
Everything is loopback-only and bounded by ``max_connections``.
"""

from __future__ import annotations

import errno
import itertools
import math
import random
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from uuid import UUID

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import FrameReader, decode_request, encode_response
from aiokafka_ng.protocol.messages import REQUEST_TYPES
from aiokafka_ng.protocol.messages.api_versions import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from aiokafka_ng.protocol.messages.metadata import MetadataResponse, MetadataResponseTopic
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.protocol.record_reader import Record, iter_batches
from aiokafka_ng.testing.fake import _codes as E
from aiokafka_ng.testing.fake import _handlers as H
from aiokafka_ng.testing.fake._cluster import Broker, FakeCluster, Topic
from aiokafka_ng.testing.fake._cuts import Cut, CutScope, fire
from aiokafka_ng.testing.fake._inject import PARTITIONED_APIS, Injection, Match, error_response
from aiokafka_ng.testing.fake._memory import MemoryByteStream, stream_pair
from aiokafka_ng.testing.fake._observe import Observations, Observers
from aiokafka_ng.testing.fake._raw import RawFrames
from aiokafka_ng.testing.fake._scripted import (
    Answer,
    Handler,
    Received,
    Script,
    ScriptMatch,
    Scripts,
    advertised,
    frame_body,
)

__all__ = ["FakeKafka", "FakeNode"]

LOOPBACK = "127.0.0.1"
PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
_SIZE = struct.Struct(">i")
_STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.IncompleteRead,
    OSError,
)
MAX_FRAME = 100 * 1024 * 1024
#: The highest level of each feature the fake models (Kafka 4's for these two).
_MAX_LEVELS = {"transaction.version": 2, "group.version": 1}


class _Close(Exception):
    """Drop the connection now (a fault, or Kafka closing it)."""


@dataclass(slots=True, eq=False)
class FakeNode:
    """One broker's serving side: its address and the faults set on it."""

    node_id: int
    port: int
    isolated: bool = False
    black_hole: bool = False
    delay_s: float = 0.0
    api_delays: dict[int, float] = field(default_factory=dict)
    cut: Cut | None = None  # a request cut of scope "node" or "connection" (cut_after)
    each_cut: Cut | None = None  # the rule each connection gets a copy of (scope "each")
    cut_after_bytes: int | None = None  # response bytes left before a connection is cut
    garbage: deque[int | None] = field(default_factory=deque)  # API keys (None: any)
    swaps: int = 0  # answer pairs still to write in swapped order
    connections: set[_Conn] = field(default_factory=set)
    requests: Counter[int] = field(default_factory=Counter)
    #: A crash the cluster has not noticed yet (kill's ``failover_after``), else None.
    crash: object | None = None
    #: ``anyio.current_time()`` of every connection attempt, refused ones included.
    attempts: list[float] = field(default_factory=list)


class _Conn:
    __slots__ = (
        "cut_rule",
        "held",
        "in_flight",
        "node",
        "number",
        "scope",
        "stream",
        "swallowing",
    )

    def __init__(self, node: FakeNode, stream: anyio.abc.ByteStream, number: int) -> None:
        self.node = node
        self.number = number  # Received.connection
        self.stream = stream
        self.scope = anyio.CancelScope()
        #: A request was swallowed by a black hole: answer nothing more on this connection
        #: (answering later requests would skip one, which no network does).
        self.swallowing = False
        #: Requests read and not answered yet (the client's requests in flight).
        self.in_flight = 0
        #: This connection's own request cut (``cut_after(scope="each")``).
        self.cut_rule = None if node.each_cut is None else node.each_cut.fresh()
        #: An answer held back to be written after the next one (``swap_next_responses``).
        self.held: bytes | RawFrames | None = None

    def cut(self) -> None:
        if isinstance(self.stream, MemoryByteStream):
            self.stream.close_now()
        self.scope.cancel()


class FakeKafka(Observers):
    """An in-process Kafka cluster of ``brokers`` nodes (ids ``1..brokers``).

    Args:
        brokers: number of broker nodes.
        tcp: also listen on 127.0.0.1 (a free port per node) so that any client can connect;
            False serves only the in-memory transport (no socket at all).
        default_partitions: partitions of an auto-created topic, or of a CreateTopics
            request that asks for the broker default (-1).
        auto_create_topics: Kafka's ``auto.create.topics.enable`` (default true).
        cluster_id: what Metadata and DescribeCluster report.
        group_initial_rebalance_delay_ms: Kafka's ``group.initial.rebalance.delay.ms``
            (Kafka's default is 3000; 0 here, as test configurations usually set).
        transaction_version: the cluster's finalized ``transaction.version`` (KIP-890): 2,
            a Kafka 4 cluster's default (Produce v12 adds partitions itself, EndTxn v5 bumps
            the epoch), or 1 (clients add partitions with AddPartitionsToTxn).
        wall_clock: the clock of broker-assigned timestamps (seconds since the epoch).
        max_connections: connections accepted in all (a bound for runaway clients).
        seed: seeds the random choices of :meth:`move_random_leader`.
        max_received: requests :meth:`received` keeps, the latest (None: every one). A
            bound, so that a long-lived fake (a soak, a user's service test) does not
            grow with every request.
        racks: node id -> its ``broker.rack``, which Metadata and DescribeCluster report
            (nodes not named have none).
    """

    def __init__(
        self,
        brokers: int = 3,
        *,
        tcp: bool = True,
        default_partitions: int = 1,
        auto_create_topics: bool = True,
        cluster_id: str = "fake-kafka-cluster",
        group_initial_rebalance_delay_ms: int = 0,
        transaction_version: int = 2,
        wall_clock: Callable[[], float] = time.time,
        max_connections: int = 10_000,
        seed: int | None = None,
        max_received: int | None = 100_000,
        racks: Mapping[int, str] | None = None,
    ) -> None:
        if not 1 <= brokers <= 64:
            raise ValueError("brokers must be between 1 and 64")
        self._tcp = tcp
        self._wall_clock = wall_clock
        self._max_connections = max_connections
        self._accepted = 0
        self._rng = random.Random(seed)
        # Ports: real ones once listening (tcp), else stand-ins only the transport knows.
        self.nodes: dict[int, FakeNode] = {
            n: FakeNode(n, 0 if tcp else 19092 + n) for n in range(1, brokers + 1)
        }
        self.cluster = FakeCluster(
            [
                Broker(n, LOOPBACK, node.port, rack=(racks or {}).get(n))
                for n, node in self.nodes.items()
            ],
            cluster_id=cluster_id,
            default_partitions=default_partitions,
            auto_create_topics=auto_create_topics,
        )
        self._group_delay_ms = group_initial_rebalance_delay_ms
        self._features_epoch = 1
        if transaction_version not in (1, 2):
            raise ValueError("transaction_version is 1 or 2")
        self._transaction_version = transaction_version
        #: The cluster's finalized feature levels (KIP-584), as a Kafka 4 cluster made with
        #: its defaults has them; ApiVersions v3+ reports them.
        self.features: dict[str, int] = {
            "transaction.version": transaction_version,
            "group.version": 1,
        }
        self._injections: list[Injection] = []
        self._seen = Observations(self.nodes)
        self._scripts = Scripts(max_received)
        self._conn_numbers = itertools.count(1)
        self._tg: anyio.abc.TaskGroup | None = None
        self._listeners: list[anyio.abc.Listener[Any]] = []
        self._appended: anyio.Event | None = None
        self._changed: anyio.Event | None = None
        self._components = self._build_components()
        self._handled: dict[int, Callable[..., Any]] = {}
        for component in self._components:
            for key in component.API_KEYS:
                self._handled[key] = component.handle
        keys = {PRODUCE, FETCH, API_VERSIONS, *H.HANDLERS, *self._handled}
        self.api_versions = H.supported_versions(keys)
        if transaction_version < 2:
            # Kafka offers the KIP-890 part 2 versions only from transaction.version 2.
            for key, top in ((0, 11), (24, 4), (26, 4), (28, 4)):
                lo, hi = self.api_versions[key]
                self.api_versions[key] = (lo, min(hi, top))

    def _build_components(self) -> list[Any]:
        from aiokafka_ng.testing.fake._groups import GroupCoordinator
        from aiokafka_ng.testing.fake._transactions import TransactionCoordinator

        self.transactions = TransactionCoordinator(
            self.cluster,
            wall_clock=self._wall_clock,
            transaction_version=self._transaction_version,
        )
        # OffsetFetch(require_stable) asks the transaction coordinator for pending offsets.
        self.groups = GroupCoordinator(
            self.cluster,
            initial_rebalance_delay_ms=self._group_delay_ms,
            pending_txn_offsets=self.transactions.pending_offsets,
        )
        return [self.groups, self.transactions]

    def __repr__(self) -> str:
        live = sum(b.alive for b in self.cluster.brokers.values())
        return (
            f"<FakeKafka brokers={len(self.nodes)} live={live} topics={len(self.cluster.topics)}>"
        )

    # ---- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._appended = anyio.Event()
        self._changed = anyio.Event()
        try:
            if self._tcp:
                for node in self.nodes.values():
                    multi = await anyio.create_tcp_listener(local_host=LOOPBACK, local_port=0)
                    self._listeners.append(multi)
                    (listener,) = multi.listeners
                    assert isinstance(listener, anyio.abc.SocketListener)
                    node.port = listener.extra(anyio.abc.SocketAttribute.local_port)
                    self.cluster.brokers[node.node_id].port = node.port
                    tg.start_soon(self._accept_loop, tg, node, listener)
        except BaseException:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            for listener in self._listeners:
                await listener.aclose()
        self._listeners.clear()
        await tg.__aexit__(None, None, None)

    # ---- addresses -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{LOOPBACK}:{node.port}" for node in self.nodes.values())

    def client_config(self, *, memory: bool = True) -> dict[str, Any]:
        """Keyword arguments that point an aiokafka_ng client at this cluster: in memory
        (``transport``) by default, over TCP with ``memory=False``."""
        config: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers}
        if memory:
            config["transport"] = self.transport
        elif not self._tcp:
            raise ValueError("this FakeKafka was made with tcp=False")
        return config

    async def transport(self, host: str, port: int) -> anyio.abc.ByteStream:
        """Open an in-memory connection to the node at ``host:port`` (the ``transport``
        setting of aiokafka_ng's clients). Refused like TCP when the node is down."""
        node = next((n for n in self.nodes.values() if n.port == port), None)
        if host not in (LOOPBACK, "localhost") or node is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"no fake broker at {host}:{port}")
        if self._tg is None:
            raise RuntimeError("FakeKafka is not running (use it with 'async with')")
        await anyio.lowlevel.checkpoint()
        node.attempts.append(anyio.current_time())
        if not self._reachable(node):
            self._seen.refused[node.node_id] += 1
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"broker {node.node_id} is down")
        self._count_accept()
        client, server = stream_pair()
        self._tg.start_soon(self._serve, node, server)
        return client

    def _reachable(self, node: FakeNode) -> bool:
        return self.cluster.brokers[node.node_id].alive and not node.isolated

    def _count_accept(self) -> None:
        self._accepted += 1
        if self._accepted > self._max_connections:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "FakeKafka max_connections reached")

    async def _accept_loop(
        self, tg: anyio.abc.TaskGroup, node: FakeNode, listener: anyio.abc.SocketListener
    ) -> None:
        port = node.port
        while True:
            try:
                stream = await listener.accept()
            except (anyio.ClosedResourceError, OSError):
                return
            # Whoever has the listener's port now (swap_addresses moves nodes between them).
            node = next((n for n in self.nodes.values() if n.port == port), node)
            node.attempts.append(anyio.current_time())
            try:
                self._count_accept()
            except ConnectionRefusedError:
                await stream.aclose()
                continue
            if not self._reachable(node):
                self._seen.refused[node.node_id] += 1
                await stream.aclose()
                continue
            tg.start_soon(self._serve, node, stream)

    # ---- serving ---------------------------------------------------------------------------

    async def _serve(self, node: FakeNode, stream: anyio.abc.ByteStream) -> None:
        conn = _Conn(node, stream, next(self._conn_numbers))
        node.connections.add(conn)
        self._seen.connections[node.node_id] += 1
        # One task reads requests as they come (so the requests a client has in flight are
        # seen and counted), this one answers them one at a time, in order.
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        try:
            with conn.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read_requests, conn, send)
                    try:
                        async with receive:
                            async for frame in receive:
                                await self._answer(conn, frame)
                    except (*_STREAM_ERRORS, ProtocolError, _Close):
                        pass
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except _STREAM_ERRORS:
                    pass
            # Only now: a test waiting for open_connections() == 0 finds the sockets closed.
            node.connections.discard(conn)
            self._notify()

    async def _read_requests(self, conn: _Conn, frames_out: MemoryObjectSendStream[bytes]) -> None:
        frames = FrameReader(MAX_FRAME)
        async with frames_out:
            try:
                while True:
                    frame = frames.next_frame()
                    if frame is None:
                        frames.feed(await conn.stream.receive())
                        continue
                    conn.in_flight += 1
                    self._seen.in_flight(conn.node.node_id, conn.in_flight)
                    frames_out.send_nowait(frame)
                    self._notify()
            except (*_STREAM_ERRORS, ProtocolError):
                pass  # the requests read so far are still answered, as after EOF

    async def _answer(self, conn: _Conn, frame: bytes) -> None:
        node = conn.node
        if not self._reachable(node):
            raise _Close
        if node.black_hole or conn.swallowing:
            conn.swallowing = True
            return
        header, request = decode_request(frame)  # ProtocolError: drop the connection
        api_key, version = header.api_key, header.api_version
        now = anyio.current_time()
        node.requests[api_key] += 1
        call = Received(
            node.node_id,
            conn.number,
            api_key,
            version,
            request,
            now,
            header.correlation_id,
            header.client_id,
        )
        self._scripts.log.append(call)
        self._seen.request(node.node_id, api_key, now)
        if api_key in PARTITIONED_APIS:
            named = PARTITIONED_APIS[api_key].partitions(self, request, version)
            self._seen.partitions(api_key, named, now)
        self._notify()
        self._apply_cuts(conn, call)
        response = await self._respond(node, call)
        delay = node.api_delays.get(api_key, node.delay_s)
        if delay > 0:
            await anyio.sleep(delay)
        if response is None:
            conn.in_flight -= 1
            return  # acks=0
        if not self._reachable(node):
            raise _Close
        payload: bytes | RawFrames
        if isinstance(response, RawFrames):  # a script's bytes, written as they are
            payload = response
        elif isinstance(response, bytes):  # a script's hand-written body
            payload = frame_body(api_key, version, header.correlation_id, response)
        else:
            self._seen.answered(node.node_id, api_key, response)
            payload = encode_response(response, version, header.correlation_id)
        if node.garbage and node.garbage[0] in (None, api_key):
            node.garbage.popleft()
            # The right correlation id, then one byte: too short for any answer to decode.
            payload = struct.pack(">ii", 5, header.correlation_id) + b"\xff"
        if node.swaps and conn.held is None:
            node.swaps -= 1
            conn.held = payload  # written after the next answer
            return
        await self._write(conn, payload)
        conn.in_flight -= 1
        if conn.held is not None:
            held, conn.held = conn.held, None
            await self._write(conn, held)
            conn.in_flight -= 1

    def _apply_cuts(self, conn: _Conn, call: Received) -> None:
        """Count the request against the cut rules; raise _Close if one fires."""
        node = conn.node
        conn_rule, node_rule = conn.cut_rule, node.cut
        fired_conn, conn.cut_rule = fire(conn_rule)
        fired_node, node.cut = fire(node_rule)
        fired = [r for r, hit in ((conn_rule, fired_conn), (node_rule, fired_node)) if hit and r]
        if not fired:
            return
        if all(r.forward_last for r in fired) and self._tg is not None:
            # The broker acts on the request; its answer goes nowhere.
            self._tg.start_soon(self._respond_unseen, node, call)
        if any(r.scope == "node" for r in fired):
            self._cut_node(node)
        raise _Close

    async def _respond_unseen(self, node: FakeNode, call: Received) -> None:
        try:
            await self._respond(node, call)
        except _Close:
            pass  # the connection is gone already

    async def _write(self, conn: _Conn, payload: bytes | RawFrames) -> None:
        if isinstance(payload, RawFrames):
            for piece in payload.pieces():
                await self._write(conn, piece)
            return
        node = conn.node
        if node.cut_after_bytes is not None:
            left = node.cut_after_bytes
            if len(payload) >= left:
                node.cut_after_bytes = None
                if left:
                    await conn.stream.send(payload[:left])
                raise _Close
            node.cut_after_bytes = left - len(payload)
        await conn.stream.send(payload)

    async def _respond(self, node: FakeNode, call: Received) -> Answer:
        api_key, version, request = call.api_key, call.version, call.request
        lo_hi = self.api_versions.get(api_key)
        script = self._scripts.find(call)
        if api_key == API_VERSIONS and script is not None:
            return await self._scripted(script, call)
        if api_key == API_VERSIONS:
            if lo_hi is None or version > lo_hi[1]:
                # Kafka answers an ApiVersions it cannot parse in v0, with its versions: the
                # body is v0 whatever the request's version (a body, so it is not encoded at
                # the request's; ApiVersions' response header is v0 at every version).
                resp = H.api_versions(self.api_versions, request, 0)
                resp.error_code = E.UNSUPPORTED_VERSION
                self._seen.answered(node.node_id, api_key, resp)
                return resp.encode(0)
            assert isinstance(request, ApiVersionsRequest)
            if (
                version >= 5
                and request.cluster_id is not None
                and (
                    request.cluster_id != self.cluster.cluster_id or request.node_id != node.node_id
                )
            ):
                # KIP-1242, as Kafka 4.4: the client meant another node (or cluster).
                resp = ApiVersionsResponse(error_code=E.REBOOTSTRAP_REQUIRED)
                self._seen.answered(node.node_id, api_key, resp)
                return resp
            resp = H.api_versions(self.api_versions, request, version)
            resp.supported_features = [
                SupportedFeatureKey(name=name, min_version=0, max_version=_MAX_LEVELS[name])
                for name in sorted(self.features)
            ]
            resp.finalized_features_epoch = self._features_epoch
            resp.finalized_features = [
                FinalizedFeatureKey(name=name, min_version_level=level, max_version_level=level)
                for name, level in sorted(self.features.items())
            ]
            return resp
        if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1]:
            raise _Close  # Kafka closes a connection that sends a version it lacks
        injected = self._injected(node, api_key, version, request)
        if injected is not None:
            if api_key == PRODUCE and getattr(request, "acks", 1) == 0:
                raise _Close
            return injected
        if script is not None:
            return await self._scripted(script, call)
        return await self._model(node, call)

    async def _model(self, node: FakeNode, call: Received) -> ApiMessage | None:
        """The model's answer to ``call`` (also :meth:`model_answer`'s)."""
        api_key, version, request = call.api_key, call.version, call.request
        cluster = self.cluster
        if api_key == PRODUCE:
            now_ms = int(self._wall_clock() * 1000)
            response = H.produce(
                cluster,
                node.node_id,
                version,
                request,
                now_ms,
                verify_txn=self.transactions.verify_produce,
            )
            self._data_changed()
            if getattr(request, "acks", 1) == 0:
                if any(p.error_code for t in response.responses for p in t.partition_responses):
                    raise _Close
                return None
            if getattr(request, "acks", 1) == -1:
                await self._wait_committed(request, response)
            return response
        if api_key == FETCH:
            return await self._fetch(node, version, request)
        sync = H.HANDLERS.get(api_key)
        if sync is not None:
            answer = sync(cluster, node.node_id, version, request)
            self._data_changed()
            return answer
        handler = self._handled.get(api_key)
        if handler is None:
            # Advertised for a script that no longer answers: a test's mistake, said loudly.
            raise AssertionError(f"FakeKafka has no answer for API key {api_key} (v{version})")
        answer = await handler(node.node_id, version, request)
        self._data_changed()
        return answer  # type: ignore[no-any-return]

    async def _wait_committed(self, request: Any, response: Any) -> None:
        """acks=all: hold the answer until every appended batch is below its partition's
        high watermark, at most the request's ``timeout_ms``; a batch still above it then
        gets REQUEST_TIMED_OUT -- written, not acknowledged, as Kafka's purgatory answers."""
        waiting = []
        for t in response.responses:
            topic = (
                self.cluster.topics.get(t.name) if t.name else self.cluster.topic_by_id(t.topic_id)
            )
            for r in t.partition_responses:
                p = None if topic is None else self.cluster.partition(topic.name, r.index)
                if p is not None and r.error_code == E.NONE and r.base_offset >= 0:
                    waiting.append((p.log, r))
        deadline = anyio.current_time() + max(0, request.timeout_ms) / 1000
        while True:
            appended = self._appended
            assert appended is not None
            pending = [(log, r) for log, r in waiting if r.base_offset >= log.high_watermark]
            left = deadline - anyio.current_time()
            if not pending:
                return
            if left <= 0:
                for _log, r in pending:
                    r.error_code = E.code("REQUEST_TIMED_OUT")
                    r.base_offset = -1
                return
            with anyio.move_on_after(left):
                await appended.wait()

    async def _fetch(self, node: FakeNode, version: int, request: Any) -> ApiMessage:
        deadline = anyio.current_time() + max(0, request.max_wait_ms) / 1000
        while True:
            appended = self._appended
            assert appended is not None
            # Transactions past their timeout are aborted before the last stable offset is read.
            self.transactions.catch_up()
            result = H.fetch(self.cluster, node.node_id, version, request)
            enough = result.bytes_found >= max(1, request.min_bytes) or result.has_error
            left = deadline - anyio.current_time()
            if enough or left <= 0 or not self._reachable(node):
                return result.response
            with anyio.move_on_after(left):
                await appended.wait()

    async def _scripted(self, script: Script, call: Received) -> Answer:
        answer = await self._scripts.run(script, call)
        if answer is None:
            raise _Close  # the script drops the connection
        self._data_changed()  # a script may have changed the model (a moved controller)
        return answer

    def _injected(
        self, node: FakeNode, api_key: int, version: int, request: ApiMessage
    ) -> ApiMessage | None:
        for rule in self._injections:
            if not (rule.active and rule.api_key == api_key and rule.for_node(node.node_id)):
                continue
            if api_key in PARTITIONED_APIS and callable(rule.match):
                adapter = PARTITIONED_APIS[api_key]
                tps = adapter.partitions(self, request, version)
                hit = {tp: rule.error_code for tp in tps if rule.matches(node.node_id, tp)}
                if not hit:
                    continue
                if len(hit) != len(tps):
                    # Some partitions fail, the others are answered for real: not modelled
                    # for one request (Kafka answers every partition in one go); fail them all.
                    hit = {tp: rule.error_code for tp in tps}
                rule.consume()
                return adapter.error_response(self, request, version, hit)
            response = error_response(self, request, version, rule.error_code)
            if response is None:
                continue
            rule.consume()
            return response
        return None

    # ---- change notification ---------------------------------------------------------------

    def _data_changed(self) -> None:
        if self._appended is not None:
            self._appended.set()
            self._appended = anyio.Event()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[], bool], within: float | None = 10.0) -> None:
        """Wait until ``predicate()`` holds, re-checked after every request any node gets and
        every connection that closes (``within``: seconds on the event loop's clock, virtual
        under a mock clock)."""
        with anyio.fail_after(within):
            while not predicate():
                assert self._changed is not None
                await self._changed.wait()

    # ---- Topology (for the error answers of _inject) --------------------------------------

    @property
    def controller(self) -> int:
        return self.cluster.controller_id

    def endpoints(self) -> list[tuple[int, str, int]]:
        return [(n, b.host, b.port) for n, b in sorted(self.cluster.brokers.items())]

    def leader(self, topic: str, partition: int) -> int:
        p = self.cluster.partition(topic, partition)
        return -1 if p is None else p.leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        p = self.cluster.partition(topic, partition)
        return -1 if p is None else p.leader_epoch

    def coordinator_for(self, key: str) -> int:
        return self.cluster.coordinator(key)

    def topic_name(self, topic_id: UUID) -> str | None:
        topic = self.cluster.topic_by_id(topic_id)
        return None if topic is None else topic.name

    # ---- test-facing state -----------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        *,
        configs: dict[str, str] | None = None,
    ) -> Topic:
        """Create a topic now (as an admin client would, without a request)."""
        problem = H.topic_name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        if name in self.cluster.topics:
            raise ValueError(f"topic {name!r} already exists")
        return self.cluster.create_topic(name, partitions, replication_factor, configs=configs)

    def records(self, topic: str, partition: int) -> list[Record]:
        """Every data record the partition's log holds (control records left out)."""
        p = self.cluster.partition(topic, partition)
        if p is None:
            raise KeyError(f"no partition {topic}-{partition}")
        out: list[Record] = []
        for info in p.log.batches:
            if info.control:
                continue
            for batch in iter_batches(info.data, verify_crc=False):
                out.extend(r for r in batch.records() if r.offset >= p.log.log_start_offset)
        return out

    def end_offset(self, topic: str, partition: int) -> int:
        p = self.cluster.partition(topic, partition)
        if p is None:
            raise KeyError(f"no partition {topic}-{partition}")
        return p.log.high_watermark

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets: (topic, partition) -> offset."""
        return {tp: entry[0] for tp, entry in self.cluster.offsets.get(group, {}).items()}

    # ---- faults -----------------------------------------------------------------------------

    def _node(self, node: int) -> FakeNode:
        try:
            return self.nodes[node]
        except KeyError:
            raise ValueError(f"no node {node} (nodes: {sorted(self.nodes)})") from None

    def _cut_node(self, node: FakeNode) -> None:
        for conn in list(node.connections):
            conn.cut()

    def kill(self, node: int, *, failover_after: float = 0.0) -> None:
        """Stop ``node``: its connections close, new ones are refused, and each partition it
        led elects the next live replica (leader epoch + 1), or has no leader.

        ``failover_after`` (seconds): a crash rather than a clean stop. The node is gone at
        once, but the cluster notices only that much later (Kafka's controller waits for
        ``broker.session.timeout.ms``, 9 s by default): until then Metadata still names it
        leader of its partitions and lists it; then the partitions elect, as above."""
        n = self._node(node)
        if failover_after > 0:
            if self._tg is None:
                raise RuntimeError("FakeKafka is not running (use it with 'async with')")
            crash = object()
            n.crash = crash
            n.isolated = True
            self._cut_node(n)
            # Partitions it follows stop committing: it is in their ISR and cannot fetch.
            for topic in self.cluster.topics.values():
                for p in topic.partitions:
                    if node in p.replicas and p.leader not in (node, -1) and p.log.hw_limit is None:
                        p.log.hw_limit = p.log.high_watermark
            self._tg.start_soon(self._fail_over, n, failover_after, crash)
            self._notify()
            return
        self.cluster.kill(node)
        self._cut_node(n)
        self._data_changed()
        self._notify()

    async def _fail_over(self, n: FakeNode, delay: float, crash: object) -> None:
        await anyio.sleep(delay)
        if n.crash is crash:  # not restarted meanwhile
            n.crash = None
            n.isolated = False
            self.kill(n.node_id)  # fenced: out of every ISR, its partitions elect
            self._release_high_watermarks()

    def _release_high_watermarks(self) -> None:
        """No crash is pending: high watermarks move to the log ends again (the fenced
        follower left the ISR, or it came back and caught up), and waiting produces end."""
        if any(n.crash is not None for n in self.nodes.values()):
            return
        for topic in self.cluster.topics.values():
            for p in topic.partitions:
                p.log.hw_limit = None
        self._data_changed()

    def restart(self, node: int) -> None:
        """Start ``node`` again (its log is kept; it leads partitions left leaderless)."""
        n = self._node(node)
        if n.crash is not None:  # back before the cluster noticed: nothing moved
            n.crash = None
            n.isolated = False
            self._release_high_watermarks()
        self.cluster.restart(node)
        self._notify()

    def alive(self, node: int) -> bool:
        return self.cluster.brokers[self._node(node).node_id].alive

    def isolate(self, node: int, on: bool = True) -> None:
        """Cut the clients off ``node`` (connections closed and refused) while the cluster
        still sees it alive: it keeps leading its partitions, as behind a network partition
        between the client and one broker."""
        n = self._node(node)
        n.isolated = on
        if on:
            self._cut_node(n)
        self._notify()

    def move_leader(self, topic: str, partition: int, to_node: int | None = None) -> int:
        """Make ``to_node`` (default: the next live replica) the partition's leader; the
        epoch goes up by one. Returns the new leader."""
        p = self.cluster.partition(topic, partition)
        if p is None:
            raise KeyError(f"no partition {topic}-{partition}")
        if to_node is None:
            live = [n for n in p.replicas if n != p.leader and self.alive(n)]
            if not live:
                raise ValueError(f"{topic}-{partition} has no other live replica")
            to_node = live[0]
        self._node(to_node)
        if to_node not in p.replicas:
            p.replicas.append(to_node)
        self.cluster.set_leader(p, to_node)
        self._data_changed()
        return to_node

    def move_random_leader(self, topic: str | None = None) -> tuple[str, int, int] | None:
        """Move one partition, chosen at random (of ``topic``, or of any topic whose name
        does not start with ``__``), to another live node chosen at random (the ``seed``
        of the constructor seeds both): (topic, partition, new leader), or None when there
        is no such partition or no other live node."""
        names = sorted(
            t for t in self.cluster.topics if (t == topic if topic else not t.startswith("__"))
        )
        if not names:
            return None
        chosen = self.cluster.topics[names[self._rng.randrange(len(names))]]
        p = chosen.partitions[self._rng.randrange(len(chosen.partitions))]
        others = [n for n in sorted(self.nodes) if n != p.leader and self.alive(n)]
        if not others:
            return None
        to_node = others[self._rng.randrange(len(others))]
        return chosen.name, p.index, self.move_leader(chosen.name, p.index, to_node)

    def truncate(self, topic: str, partition: int, to_offset: int) -> int:
        """An unclean leader election: the partition's log loses everything from
        ``to_offset`` on (a batch boundary), as when a replica that had only that much
        becomes leader (the next live replica, or the same node when there is no other).
        The leader epoch goes up by one and starts at ``to_offset``: later appends are
        written in it, so a consumer that read past ``to_offset`` can tell (KIP-320:
        OffsetForLeaderEpoch, a Fetch's diverging epoch). Committed offsets are kept, as
        they live elsewhere. Returns the new leader."""
        p = self.cluster.partition(topic, partition)
        if p is None:
            raise KeyError(f"no partition {topic}-{partition}")
        self.cluster.truncate(p, to_offset)
        self._data_changed()
        return p.leader

    def move_coordinator(self, key: str, to_node: int) -> None:
        """Group or transactional id ``key`` is coordinated by ``to_node`` from now on."""
        self._node(to_node)
        self.cluster.coordinator_overrides[key] = to_node
        self.groups.wake()  # a JoinGroup/SyncGroup parked on the old node: NOT_COORDINATOR

    def swap_addresses(self, a: int, b: int) -> None:
        """Nodes ``a`` and ``b`` trade addresses, as two pods whose IPs were swapped: new
        connections to ``a``'s old address reach ``b`` and the reverse, and Metadata
        advertises each at its new address. Open connections stay with the node they
        reached. A client that connects by stale metadata reaches the wrong node; with
        ApiVersions v5 it names the node it meant and is answered REBOOTSTRAP_REQUIRED
        (KIP-1242), as Kafka 4.4 answers."""
        na, nb = self._node(a), self._node(b)
        na.port, nb.port = nb.port, na.port
        self.cluster.brokers[a].port = na.port
        self.cluster.brokers[b].port = nb.port

    def move_controller(self, to_node: int) -> None:
        self._node(to_node)
        self.cluster.controller_id = to_node

    def delay(self, node: int, ms: float, *, api_key: int | None = None) -> None:
        """Hold each answer of ``node`` (of one API, if given) ``ms`` before writing it."""
        n = self._node(node)
        if api_key is None:
            n.delay_s = ms / 1000
        else:
            n.api_delays[api_key] = ms / 1000

    def black_hole(self, node: int, on: bool = True) -> None:
        """``node`` reads requests and never answers them; a connection that lost a request
        so stays silent after ``on=False`` too (new connections are answered again)."""
        self._node(node).black_hole = on

    def cut_after(
        self,
        node: int,
        requests: int,
        *,
        forward_last: bool = False,
        repeat: bool = False,
        scope: CutScope = "node",
    ) -> None:
        """Close connections of ``node`` when it gets its ``requests``-th next request
        (``requests=1``: the next one), which is not answered.

        ``scope``: ``"node"`` closes all of the node's connections (a broker dying);
        ``"connection"`` only the one that carried that request; ``"each"`` closes every
        connection, current and new, after its own ``requests``-th request from now, until
        :meth:`clear_faults`. ``forward_last``: the node still handles that request (a
        Produce is written, the client never hears so) instead of dropping it unseen.
        ``repeat``: re-arm after each cut, until :meth:`clear_faults` (``"each"`` always
        does)."""
        if requests < 1:
            raise ValueError("requests must be >= 1")
        n = self._node(node)
        if scope == "each":
            n.each_cut = Cut(requests, requests, forward_last, "connection")
            for conn in n.connections:
                conn.cut_rule = n.each_cut.fresh()
        else:
            n.cut = Cut(requests, requests if repeat else None, forward_last, scope)

    def cut_after_bytes(self, node: int, n: int) -> None:
        """Close the connection that writes the ``n``-th next response byte of ``node``,
        mid-response."""
        self._node(node).cut_after_bytes = n

    def inject(
        self, api_key: int, error_code: int, times: int | None = 1, match: Match = None
    ) -> Injection:
        """Answer requests of ``api_key`` with ``error_code``, doing nothing else.

        ``match``: None (any node), a node id, or for Produce/Fetch/ListOffsets a predicate
        ``(topic, partition) -> bool``; ``times``: requests to hit (None: until
        :meth:`clear_faults`)."""
        if api_key not in REQUEST_TYPES:
            raise ValueError(f"unknown API key {api_key}")
        if isinstance(match, int) and not isinstance(match, bool):
            self._node(match)
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        rule = Injection(api_key, error_code, times, match)
        self._injections.append(rule)
        return rule

    def require_rebootstrap(self, *, times: int | None = 1, node: int | None = None) -> Script:
        """Answer the next ``times`` Metadata requests (at ``node``, if given) as a broker
        that wants the client to bootstrap again (KIP-1102): Kafka's whole-request error
        answer, no brokers and every topic asked for failing, with REBOOTSTRAP_REQUIRED as
        the top-level error code (Metadata v13+; an older version has no field for it and
        shows only the topics' errors). Kafka 4.4 itself sends the code only in ApiVersions
        v5 answers (KIP-1242, a cluster or node id that does not match); this stands for a
        broker that sends it in Metadata. Returns the rule (``cancel()`` ends it early)."""
        code = E.REBOOTSTRAP_REQUIRED

        def answer(call: Received) -> MetadataResponse:
            topics = call.request.topics or []
            return MetadataResponse(
                error_code=code,
                topics=[
                    MetadataResponseTopic(error_code=code, name=t.name or "", topic_id=t.topic_id)
                    for t in topics
                ],
            )

        return self.answer(METADATA, answer, times=times, match=node)

    def inject_garbage(self, node: int, times: int = 1, api_key: int | None = None) -> None:
        """Replace ``node``'s next ``times`` answers (of ``api_key`` only, if given) with a
        well-framed answer carrying the right correlation id and a body no schema decodes."""
        if times < 1:
            raise ValueError("times must be >= 1")
        self._node(node).garbage.extend([api_key] * times)

    def swap_next_responses(self, node: int) -> None:
        """Write the next two answers on one connection of ``node`` (the first to answer)
        in swapped order: the first is held until the second is ready, so a client that
        waits for the first answer before sending again waits until it times out."""
        self._node(node).swaps += 1

    def clear_injections(self) -> None:
        """Remove every :meth:`inject` rule (other faults stay)."""
        self._injections.clear()

    def answer(
        self,
        api_key: int,
        handler: Handler,
        *,
        times: int | None = None,
        match: ScriptMatch = None,
    ) -> Script:
        """Answer requests of ``api_key`` with ``handler`` instead of the model.

        ``handler(received)`` gets the :class:`Received` request (``request``, ``version``,
        ``node``, ``connection``, ``correlation_id``) and returns a response message
        (encoded at the request's version), ``bytes`` (the response body, framed here),
        :class:`RawFrames` (bytes written as they are: an answer wrong in its framing or
        correlation id), None (close the connection unanswered), or an awaitable of one of
        these. ``times``: requests to answer (None:
        every one, until :meth:`clear_faults` or the rule's ``cancel()``); ``match``: a node
        id, or a predicate on the :class:`Received` request. Rules are tried in the order
        they were added, after :meth:`inject`'s; a request none matches goes to the model.

        An API the fake does not model is advertised in ApiVersions from now on, over the
        codec's stable versions; edit :attr:`api_versions` to cap or remove an API."""
        if isinstance(match, int) and not isinstance(match, bool):
            self._node(match)
        rule = self._scripts.add(api_key, handler, times, match)
        self.api_versions.setdefault(api_key, advertised(api_key))
        return rule

    async def model_answer(self, call: Received) -> ApiMessage | None:
        """What the model answers ``call``, a request a script got (side effects included,
        e.g. a topic auto-created): for a script that holds the answer (awaits an event
        first) or edits it (a topic's error code, a partition's leader) before returning
        it. None for a Produce with ``acks=0``."""
        return await self._model(self._node(call.node), call)

    def received(self, api_key: int | None = None, *, node: int | None = None) -> list[Received]:
        """Every request the nodes received (of one API key, at one node, if given), decoded,
        in arrival order: what went over the wire, for assertions. Only the latest
        ``max_received`` (100,000 by default) are kept."""
        return self._scripts.received(api_key, node)

    def clear_faults(self) -> None:
        """Undo every fault but kills and leader moves (scripted answers included)."""
        self._injections.clear()
        self._scripts.rules.clear()
        for n in self.nodes.values():
            n.black_hole = False
            n.isolated = False
            n.delay_s = 0.0
            n.api_delays.clear()
            n.cut = n.each_cut = None
            n.cut_after_bytes = None
            n.garbage.clear()
            n.swaps = 0
            for conn in n.connections:
                conn.cut_rule = None
        self._notify()
