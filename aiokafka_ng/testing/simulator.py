"""ClusterSimulator: one real broker presented as an N-broker Kafka cluster, with faults.

Usage::

    async with LocalBroker() as broker, ClusterSimulator(broker, brokers=3) as sim:
        client = make_client(bootstrap_servers=sim.bootstrap_servers)
        sim.move_leader("events", 0, to_node=2)     # node of the old leader now answers
                                                    # NOT_LEADER_OR_FOLLOWER for events-0
        sim.inject(0, 19, times=3)                   # Produce: NOT_ENOUGH_REPLICAS x3
        sim.kill(1); sim.restart(1)
        await sim.wait_until(lambda: sim.requests[2][0] >= 10)   # 10 Produce at node 2

Controls and counters belong to the event loop running the simulator: from a worker thread
(e.g. a blocking client under ``anyio.to_thread``) call them through
``anyio.from_thread.run_sync``.

Theory of operation
-------------------
Node ids are ``0 .. brokers-1``; node ``i`` listens on its own 127.0.0.1 port
(``sim.ports[i]``). Every client connection to a node gets its own upstream connection to
the real broker (see :mod:`aiokafka_ng.testing._simulator_conn`), so responses come back in
request order and correlation ids are never rewritten.

Requests are forwarded as raw bytes unless the simulator has a reason to look at them:

* Metadata, DescribeTopicPartitions, DescribeCluster and FindCoordinator answers are decoded
  and rewritten to name the simulated nodes: the leader of partition ``p`` is
  ``p % brokers`` until :meth:`move_leader` moves it, replicas and ISR are all nodes
  (leader first), the leader epoch starts at 0 and grows by one per move, the controller is
  node 0 until :meth:`move_controller`, and the coordinator of a group or transactional id is
  ``crc32(key) % brokers`` until :meth:`move_coordinator`.
* Produce, Fetch and ListOffsets are decoded and checked partition by partition: a partition
  whose leader is another node gets NOT_LEADER_OR_FOLLOWER (with the KIP-951 current-leader
  hint and node endpoint from Produce v10 / Fetch v12 (leader) and v16 (endpoints)), as do
  partitions hit by an :meth:`inject` rule. When only some partitions fail, the others are
  forwarded as a smaller request with the same correlation id and the two answers merged.
  A Produce with ``acks=0`` that would fail is answered by closing the connection, as Kafka
  does (there is no response to carry the error). Tansu 0.6.0 answers ``acks=0`` Produce
  requests, unlike Kafka; the simulator swallows those answers, so clients see Kafka's
  behaviour.
* Idempotent producers: Produce batches get Kafka's per-partition producer-epoch checks, and
  an epoch the client bumped itself (KIP-360) is accepted as Kafka accepts it, by mapping it
  onto a fresh producer id from the real broker (Tansu 0.6.0 fences such a bump); see
  :mod:`aiokafka_ng.testing._simulator_producers`. InitProducerId answers are watched.
* Controller-bound admin requests (CreateTopics, DeleteTopics, CreatePartitions,
  ElectLeaders, Alter/ListPartitionReassignments by default) sent to a node that is not the
  controller get NOT_CONTROLLER for every item; group and transaction requests sent to a
  node that is not their coordinator get NOT_COORDINATOR.

With ``passthrough=True`` none of this happens: every node forwards requests and answers
untouched (the broker's own node ids and addresses reach the client, so after bootstrap it
connects to the broker directly unless the broker advertises a simulator port), and only
the faults below act: a plain fault-injecting TCP proxy. (Tansu's answer to an ``acks=0``
Produce is still swallowed, so clients see Kafka's behaviour there too.)

Faults: :meth:`kill` closes a node's connections and accepts-and-closes new ones until
:meth:`restart` (each accept is timestamped in ``connection_attempts``); :meth:`delay` holds
a node's responses (all, or one API's); :meth:`cut_after` closes connections after N more
requests, :meth:`cut_after_bytes` in the middle of a response; :meth:`black_hole` swallows
requests and responses; :meth:`swap_next_responses` reorders two responses;
:meth:`inject_garbage` replaces responses with a frame no schema decodes (see
:mod:`aiokafka_ng.testing._simulator_faults`). All of it is bounded: loopback only,
``max_connections`` in total.
"""

from __future__ import annotations

import random
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Protocol, Self
from uuid import UUID

import anyio
import anyio.abc

from aiokafka_ng.protocol.framing import RequestHeader
from aiokafka_ng.testing._simulator_codec import TP
from aiokafka_ng.testing._simulator_conn import Node, Plan, SimConnection
from aiokafka_ng.testing._simulator_faults import SimulatorFaults, passthrough_plan
from aiokafka_ng.testing._simulator_producers import ProducerEpochs
from aiokafka_ng.testing._simulator_routing import Injection, plan_request

__all__ = ["BrokerAddress", "ClusterSimulator", "Injection", "SimConnection"]

LOOPBACK = "127.0.0.1"
#: CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, AlterPartitionReassignments,
#: ListPartitionReassignments: sent to the controller by Kafka's admin clients.
DEFAULT_CONTROLLER_APIS = frozenset({19, 20, 37, 43, 45, 46})
_MAX_TIMES = 100_000  # request timestamps kept per (node, api)


class BrokerAddress(Protocol):
    """Anything with a loopback ``host`` and a ``port``, e.g. a LocalBroker."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def _loopback(broker: BrokerAddress) -> tuple[str, int]:
    host = str(broker.host)
    if host not in (LOOPBACK, "localhost"):
        raise ValueError(f"the upstream broker must be on {LOOPBACK}, not {host}")
    return (LOOPBACK, int(broker.port))


class ClusterSimulator(SimulatorFaults):
    """Present one real broker (``.host``/``.port``, e.g. a LocalBroker) as ``brokers`` nodes.

    Args:
        broker: the real broker; must listen on 127.0.0.1.
        brokers: number of simulated nodes (ids ``0..brokers-1``), 1 to 64.
        seed: seeds the random choices of :meth:`move_leader` (``to_node=None``) and
            :meth:`move_random_leader`.
        controller_apis: API keys answered NOT_CONTROLLER by non-controller nodes.
        enforce_coordinators: group and transaction requests (JoinGroup, Heartbeat,
            OffsetCommit, EndTxn, ...) sent to a node that is not the coordinator of their
            group/transactional id get NOT_COORDINATOR, as in Kafka.
        max_connections: client connections open at once over all nodes; more are closed.
        upstream_linger: seconds a closed connection's upstream side may wait for answers to
            requests already forwarded.
        passthrough: forward everything untouched (no rewriting, routing checks or
            injections; the fault controls still act), see the module docstring.
    """

    def __init__(
        self,
        broker: BrokerAddress,
        brokers: int = 3,
        *,
        seed: int | None = None,
        controller_apis: Iterable[int] | None = None,
        enforce_coordinators: bool = True,
        max_connections: int = 256,
        upstream_linger: float = 2.0,
        passthrough: bool = False,
    ) -> None:
        if not 1 <= brokers <= 64:
            raise ValueError("brokers must be between 1 and 64")
        self.upstream = _loopback(broker)
        self.passthrough = passthrough
        self.max_connections = max_connections
        self.enforce_coordinators = enforce_coordinators
        self.upstream_linger = upstream_linger
        self.controller_apis = frozenset(
            DEFAULT_CONTROLLER_APIS if controller_apis is None else controller_apis
        )
        self._nodes = [Node(i) for i in range(brokers)]
        self._rng = random.Random(seed)
        self._controller = 0
        self._leaders: dict[TP, int] = {}
        self._epochs: dict[TP, int] = {}
        self._coordinators: dict[str, int] = {}
        self._coordinator_keys: set[str] = set()
        self._topic_ids: dict[UUID, str] = {}
        self._partition_counts: dict[str, int] = {}
        self._injections: list[Injection] = []
        #: Kafka's producer-epoch rules; ``.bumps`` counts client-side epoch bumps mapped
        #: onto a fresh producer id (Tansu fences them, see _simulator_producers).
        self.producer_epochs = ProducerEpochs(self.upstream)
        self._changed = anyio.Event()
        self._next_conn_id = 0
        self._serving = 0  # connections past the limit check, until their sockets close
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        # ---- counters (reset_counters() zeroes them) ----
        #: requests[node][api_key]: requests read from clients.
        self.requests: dict[int, Counter[int]] = {n: Counter() for n in self.nodes}
        #: connections[node]: client connections accepted and served.
        self.connections: dict[int, int] = dict.fromkeys(self.nodes, 0)
        #: refused[node]: connections accepted and closed at once (killed node or over limit).
        self.refused: dict[int, int] = dict.fromkeys(self.nodes, 0)
        #: connection_attempts[node]: ``time.monotonic()`` of every accept, refused ones too
        #: (the last 100 000).
        self.connection_attempts: dict[int, deque[float]] = {
            n: deque(maxlen=_MAX_TIMES) for n in self.nodes
        }
        #: max_in_flight_by_node[node]: most requests awaiting a response on one connection.
        self.max_in_flight_by_node: dict[int, int] = dict.fromkeys(self.nodes, 0)
        #: errors_answered[(node, api_key, error_code)]: partitions/requests answered with an
        #: error by the simulator (not leader, not controller, injected).
        self.errors_answered: Counter[tuple[int, int, int]] = Counter()
        self.leader_moves = 0
        self.upstream_failures = 0
        self._times: dict[tuple[int, int], deque[float]] = {}
        self._partition_times: dict[tuple[int, str, int], deque[float]] = {}

    def __repr__(self) -> str:
        alive = [n.node_id for n in self._nodes if n.alive]
        return (
            f"<ClusterSimulator nodes={len(self._nodes)} alive={alive} "
            f"controller={self._controller} upstream={self.upstream[1]}>"
        )

    # ---- addresses ------------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        """Listening port of each node, indexed by node id."""
        return [n.port for n in self._nodes]

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:p0,127.0.0.1:p1,..."``."""
        return ",".join(f"{LOOPBACK}:{n.port}" for n in self._nodes)

    def address(self, node: int) -> str:
        """``"127.0.0.1:<port>"`` of one node."""
        return f"{LOOPBACK}:{self._node(node).port}"

    # ---- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            listeners = []
            for node in self._nodes:
                multi = await anyio.create_tcp_listener(local_host=LOOPBACK, local_port=0)
                await stack.enter_async_context(multi)
                (listener,) = multi.listeners
                assert isinstance(listener, anyio.abc.SocketListener)
                node.port = listener.extra(anyio.abc.SocketAttribute.local_port)
                listeners.append((node, listener))
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            for node, listener in listeners:
                self._tg.start_soon(self._accept_loop, node, listener)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None and self._tg is not None
        self._tg.cancel_scope.cancel()
        stack, self._stack = self._stack, None
        return await stack.__aexit__(exc_type, exc, tb)

    async def _accept_loop(self, node: Node, listener: anyio.abc.SocketListener) -> None:
        assert self._tg is not None
        while True:
            client = await listener.accept()
            self.connection_attempts[node.node_id].append(time.monotonic())
            try:
                await self._tg.start(self._serve, node, client)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await client.aclose()  # idempotent: maybe the task already owns it
                raise

    async def _serve(
        self,
        node: Node,
        client: anyio.abc.SocketStream,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with client:
            task_status.started()
            if not node.alive or self._serving >= self.max_connections:
                self.refused[node.node_id] += 1
                self._notify()
                return
            self._serving += 1
            try:
                await self._serve_accepted(node, client)
            finally:
                self._serving -= 1
                self._notify()

    async def _serve_accepted(self, node: Node, client: anyio.abc.SocketStream) -> None:
        upstream: anyio.abc.SocketStream | None = None
        with anyio.move_on_after(5):
            try:
                upstream = await anyio.connect_tcp(*self.upstream)
            except OSError:
                pass
        if upstream is None:
            self.upstream_failures += 1
            self._notify()
            return
        async with upstream:
            if not node.alive:  # killed while connecting
                self.refused[node.node_id] += 1
                self._notify()
                return
            self._next_conn_id += 1
            conn = SimConnection(self, node, self._next_conn_id, client, upstream)
            node.conns.add(conn)
            self.connections[node.node_id] += 1
            self._notify()
            try:
                await conn.run()
            finally:
                node.conns.discard(conn)
                self._notify()

    def set_upstream(self, broker: BrokerAddress) -> None:
        """Send new connections to another broker from now on (current ones stay): the
        same addresses, a new cluster behind them."""
        self.upstream = _loopback(broker)
        self.producer_epochs = ProducerEpochs(self.upstream)

    # ---- topology -------------------------------------------------------------------------

    @property
    def controller(self) -> int:
        """The node Metadata and DescribeCluster name as controller."""
        return self._controller

    def move_controller(self, to_node: int) -> None:
        """Make ``to_node`` the controller; the others answer NOT_CONTROLLER from now on."""
        self._controller = self._node(to_node).node_id
        self._notify()

    def endpoints(self) -> list[tuple[int, str, int]]:
        return [(n.node_id, LOOPBACK, n.port) for n in self._nodes]

    def leader(self, topic: str, partition: int) -> int:
        """Current leader node of a partition (default ``partition % brokers``)."""
        found = self._leaders.get((topic, partition))
        return partition % len(self._nodes) if found is None else found

    def leader_epoch(self, topic: str, partition: int) -> int:
        """Leader epoch reported for a partition: 0, plus one per move."""
        return self._epochs.get((topic, partition), 0)

    def replicas(self, leader: int) -> list[int]:
        return [leader, *(n for n in self.nodes if n != leader)]

    def move_leader(self, topic: str, partition: int, to_node: int | None = None) -> int:
        """Move a partition's leadership and bump its leader epoch; return the new leader.

        ``to_node=None`` picks another node at random (live ones preferred). From now on the
        old leader answers Produce/Fetch/ListOffsets for it with NOT_LEADER_OR_FOLLOWER.
        """
        old = self.leader(topic, partition)
        if to_node is None:
            others = [n.node_id for n in self._nodes if n.node_id != old]
            live = [n for n in others if self._nodes[n].alive]
            if not others:
                return old
            to_node = self._rng.choice(live or others)
        new = self._node(to_node).node_id
        if new != old:
            self._leaders[(topic, partition)] = new
            self._epochs[(topic, partition)] = self.leader_epoch(topic, partition) + 1
            self.leader_moves += 1
            self._notify()
        return new

    def move_random_leader(self, topic: str | None = None) -> tuple[str, int, int] | None:
        """Move one random partition (of ``topic``, or of any non-internal topic seen in a
        Metadata response) to another random node; return (topic, partition, new leader)."""
        topics = [
            t
            for t, count in sorted(self._partition_counts.items())
            if count > 0 and (t == topic if topic is not None else not t.startswith("__"))
        ]
        if not topics:
            return None
        chosen = self._rng.choice(topics)
        partition = self._rng.randrange(self._partition_counts[chosen])
        return chosen, partition, self.move_leader(chosen, partition)

    def known_partitions(self) -> dict[str, int]:
        """Partition count of every topic seen in a Metadata response so far."""
        return dict(self._partition_counts)

    def learn_topic(self, name: str, topic_id: UUID, partitions: int) -> None:
        if topic_id.int:
            self._topic_ids[topic_id] = name
        self._partition_counts[name] = partitions

    def topic_name(self, topic_id: UUID) -> str | None:
        return self._topic_ids.get(topic_id)

    def coordinator_for(self, key: str) -> int:
        """Node reported by FindCoordinator for a group or transactional id."""
        self._coordinator_keys.add(key)
        found = self._coordinators.get(key)
        return zlib.crc32(key.encode()) % len(self._nodes) if found is None else found

    def move_coordinator(self, key: str, to_node: int) -> None:
        """Make ``to_node`` the coordinator of ``key`` (a group or transactional id): the old
        one answers NOT_COORDINATOR from now on."""
        self._coordinators[key] = self._node(to_node).node_id

    # ---- faults ---------------------------------------------------------------------------

    def kill(self, node: int, *, failover: bool = False) -> None:
        """Close every connection of ``node``; accept-and-close new ones until restart.

        Metadata keeps listing the node (its leaderships stay unless moved), so clients see
        a broker they cannot reach, as after a crash before the controller reacts.

        ``failover``: also move the leadership of every partition it leads (of the topics
        seen in Metadata so far), the controller role and the coordinators of the keys seen
        in FindCoordinator to random live nodes, as a real cluster would; by default they
        stay, and clients see their leader unreachable.
        """
        n = self._node(node)
        n.alive = False
        live = [x.node_id for x in self._nodes if x.alive]
        if failover and live:
            for topic, count in sorted(self._partition_counts.items()):
                for partition in range(count):
                    if self.leader(topic, partition) == node:
                        self.move_leader(topic, partition, self._rng.choice(live))
            if self._controller == node:
                self._controller = self._rng.choice(live)
            for key in sorted(self._coordinator_keys):
                if self.coordinator_for(key) == node:
                    self._coordinators[key] = self._rng.choice(live)
        self._cut_node(n, "node killed")

    def restart(self, node: int) -> None:
        """Serve connections to ``node`` again."""
        self._node(node).alive = True
        self._notify()

    def alive(self, node: int) -> bool:
        return self._node(node).alive

    # ---- counters and waiting -------------------------------------------------------------

    @property
    def max_in_flight(self) -> int:
        """Most requests seen awaiting a response on one connection, over all nodes."""
        return max(self.max_in_flight_by_node.values())

    def partition_request_times(self, api_key: int, topic: str, partition: int) -> list[float]:
        """``time.monotonic()`` of each Produce/Fetch/ListOffsets request naming this
        partition, at any node (the last 100 000): retry gaps of one partition's batches."""
        return list(self._partition_times.get((api_key, topic, partition), ()))

    def request_times(self, api_key: int, node: int | None = None) -> list[float]:
        """``time.monotonic()`` of each request of ``api_key`` read (from one node or all),
        in order; the last 100 000 per node and API are kept."""
        nodes = self.nodes if node is None else [node]
        times: list[float] = []
        for n in nodes:
            times.extend(self._times.get((n, api_key), ()))
        return sorted(times)

    @property
    def upstream_connections(self) -> int:
        """Connections still holding an upstream socket, including closed ones whose
        forwarded requests are still being answered (0: the broker has seen everything)."""
        return self._serving

    def open_connections(self, node: int | None = None) -> int:
        nodes = self._nodes if node is None else [self._node(node)]
        return sum(len(n.conns) for n in nodes)

    def connection_list(self, node: int | None = None) -> list[SimConnection]:
        """Open connections (for their per-connection counters), oldest first."""
        nodes = self._nodes if node is None else [self._node(node)]
        return sorted((c for n in nodes for c in n.conns), key=lambda c: c.id)

    def errors(
        self, api_key: int | None = None, error_code: int | None = None, node: int | None = None
    ) -> int:
        """How many partitions/requests the simulator answered with an error (filtered)."""
        return sum(
            count
            for (n, api, code), count in self.errors_answered.items()
            if (node is None or n == node)
            and (api_key is None or api == api_key)
            and (error_code is None or code == error_code)
        )

    def reset_counters(self) -> None:
        for n in self.nodes:
            self.requests[n].clear()
            self.connections[n] = self.refused[n] = 0
            self.connection_attempts[n].clear()
            self.max_in_flight_by_node[n] = 0
        self.errors_answered.clear()
        self._times.clear()
        self._partition_times.clear()
        self.leader_moves = self.upstream_failures = 0
        self._notify()

    async def wait_until(self, predicate: Callable[[], bool], within: float | None = 10.0) -> None:
        """Return once ``predicate()`` holds, re-checked on every change of the counters or
        connections. Raises TimeoutError after ``within`` seconds (None: no limit)."""
        with anyio.fail_after(within):
            while not predicate():
                await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # ---- hooks for SimConnection ----------------------------------------------------------

    def _count_request(self, node: Node, api_key: int) -> None:
        self.requests[node.node_id][api_key] += 1
        times = self._times.get((node.node_id, api_key))
        if times is None:
            times = self._times[(node.node_id, api_key)] = deque(maxlen=_MAX_TIMES)
        times.append(time.monotonic())
        self._notify()

    def _count_partitions(self, api_key: int, parts: list[TP]) -> None:
        now = time.monotonic()
        table = self._partition_times
        for topic, partition in parts:
            key = (api_key, topic, partition)
            times = table.get(key)
            if times is None:
                times = table[key] = deque(maxlen=_MAX_TIMES)
            times.append(now)

    def _note_in_flight(self, node: Node, in_flight: int) -> None:
        if in_flight > self.max_in_flight_by_node[node.node_id]:
            self.max_in_flight_by_node[node.node_id] = in_flight

    async def _plan(self, node: Node, header: RequestHeader, frame: bytes) -> Plan:
        if self.passthrough:
            return passthrough_plan(header, frame)
        decoded = None
        if header.api_key == 0:  # Produce: fresh producer ids for client-bumped epochs
            decoded = await self.producer_epochs.prepare_frame(frame)
        return plan_request(self, node, header, frame, decoded)
