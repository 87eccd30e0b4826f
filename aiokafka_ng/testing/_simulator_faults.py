"""The fault controls of the cluster simulator: delays, cuts, black holes, reordering, errors.

:class:`SimulatorFaults` is a base class of
:class:`~aiokafka_ng.testing.simulator.ClusterSimulator`; it holds no state of its own. The
settings live on each :class:`~aiokafka_ng.testing._simulator_conn.Node` (and a per-connection
cut rule on each :class:`~aiokafka_ng.testing._simulator_conn.SimConnection`), and the
connection's pump and writer read them as each request and response passes, so a control acts
at once on current connections and on future ones.

Where a fault acts:

* On a request, when its whole frame has been read (after it is counted): the black hole
  swallows it; then the request cuts (:meth:`~SimulatorFaults.cut_after`) count it and may
  close the connection, with or without forwarding it first.
* On a response, when it is next in request order: it is held for the node's delay (the
  larger of :meth:`~SimulatorFaults.delay` for all APIs and for its own API, re-read whenever
  a setting changes, so a delay set to 0 releases held responses at once), then the black
  hole drops it, a garbage shot replaces it, a swap holds it until the next one has been
  written, and the byte cut may truncate it and close the connection.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Literal

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import RequestHeader, decode_request
from aiokafka_ng.protocol.messages.produce import ProduceRequest
from aiokafka_ng.testing._simulator_codec import PARTITIONED_APIS, can_answer_with_error
from aiokafka_ng.testing._simulator_conn import Cut, Node, Plan
from aiokafka_ng.testing._simulator_routing import Injection, Match

if TYPE_CHECKING:
    from aiokafka_ng.testing._simulator_conn import SimConnection

__all__ = ["CutScope", "SimulatorFaults", "passthrough_plan"]

#: Which connections a request cut closes: all of the node's, the one that carried the
#: request, or each connection after its own count.
CutScope = Literal["node", "connection", "each"]


def passthrough_plan(header: RequestHeader, frame: bytes) -> Plan:
    """Forward untouched; only an ``acks=0`` Produce is known to get no answer."""
    if header.api_key != 0:
        return Plan(forward=frame)
    try:
        request = decode_request(memoryview(frame)[4:])[1]
    except ProtocolError:
        return Plan(forward=frame)  # let the broker judge it
    acks0 = isinstance(request, ProduceRequest) and request.acks == 0
    return Plan(forward=frame, expects_response=not acks0)


class SimulatorFaults:
    """Fault controls of :class:`~aiokafka_ng.testing.ClusterSimulator` (see the module)."""

    # Provided by ClusterSimulator.
    _nodes: list[Node]
    _injections: list[Injection]

    def _node(self, node: int) -> Node:
        if not 0 <= node < len(self._nodes):
            raise ValueError(f"no simulated node {node} (nodes are {self.nodes})")
        return self._nodes[node]

    @property
    def nodes(self) -> list[int]:
        """Node ids, ``[0, 1, ..., brokers-1]``."""
        return [n.node_id for n in self._nodes]

    def _notify(self) -> None:
        raise NotImplementedError  # ClusterSimulator's

    # ---- controls -------------------------------------------------------------------------

    def delay(self, node: int, ms: float, *, api_key: int | None = None) -> None:
        """Hold each response of ``node`` ``ms`` after it is ready (0 stops); with
        ``api_key``, only responses to that API (e.g. Metadata = 3; the larger of the two
        delays applies).

        Requests keep flowing meanwhile, so a pipelining client builds up requests in flight.
        Responses stay in order, so later ones wait behind a held one. A change applies to
        responses already held, too.
        """
        n = self._node(node)
        seconds = max(0.0, ms) / 1000
        if api_key is None:
            n.delay = seconds
        elif seconds:
            n.api_delays[api_key] = seconds
        else:
            n.api_delays.pop(api_key, None)
        self._notify()

    def cut_after(
        self,
        node: int,
        requests: int,
        *,
        forward_last: bool = True,
        repeat: bool = False,
        scope: CutScope = "node",
    ) -> None:
        """Close client connections of ``node`` after ``requests`` more requests.

        ``scope``: ``"node"`` closes all of the node's connections when its
        ``requests``-th request from now has been read (a broker dying); ``"connection"``
        only the connection that carried that request; ``"each"`` closes every current
        connection after its own ``requests``-th request from now and every new one after
        its ``requests``-th, until :meth:`clear_faults`.

        ``forward_last``: that request is still handled (the broker acts on it, the client
        never sees the answer) or dropped. ``repeat``: re-arm after each cut, until
        :meth:`clear_faults` (``"each"`` always does).
        """
        if requests < 1:
            raise ValueError("requests must be >= 1")
        n = self._node(node)
        if scope == "each":
            n.each_cut = Cut(requests, requests, forward_last, "connection")
            for conn in n.conns:
                conn.cut_rule = n.each_cut.fresh()
        else:
            n.cut = Cut(requests, requests if repeat else None, forward_last, scope)

    def cut_after_bytes(self, node: int, n: int) -> None:
        """Close the connection of ``node`` that writes the ``n``-th byte of responses from
        now, after exactly ``n`` bytes: a response cut off in the middle. One shot."""
        if n < 0:
            raise ValueError("n must be >= 0")
        self._node(node).byte_cut = n

    def black_hole(self, node: int, on: bool = True) -> None:
        """While on, ``node`` reads requests but forwards none and drops every response: the
        client sees its requests in flight forever (connections stay open)."""
        self._node(node).black_hole = on
        self._notify()

    def swap_next_responses(self, node: int) -> None:
        """The next two responses on one connection of ``node`` (the first to deliver one)
        are written in swapped order. The first is held until the second is ready: a client
        that waits for the first answer before sending again stalls until it times out."""
        self._node(node).swaps += 1

    def inject(
        self,
        api_key: int,
        error_code: int,
        times: int | None = 1,
        match: Match = None,
    ) -> Injection:
        """Answer matching requests with ``error_code`` instead of forwarding them.

        ``match``: None (every request of this API), a node id (requests to that node), or,
        for Produce/Fetch/ListOffsets, a predicate ``(topic, partition) -> bool`` choosing
        the partitions that fail (the rest of the request is forwarded). ``times``: how many
        requests to hit (None: until :meth:`clear_injections`). Partitions another node
        leads get NOT_LEADER_OR_FOLLOWER first and do not use up a hit.
        """
        if not can_answer_with_error(api_key):
            raise ValueError(f"cannot synthesize an error response for API {api_key}")
        if callable(match) and api_key not in PARTITIONED_APIS:
            raise ValueError("a (topic, partition) predicate needs Produce, Fetch or ListOffsets")
        if isinstance(match, bool):
            raise TypeError("match is a node id, a (topic, partition) predicate or None")
        if isinstance(match, int):
            self._node(match)
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        rule = Injection(api_key, error_code, times, match)
        self._injections.append(rule)
        return rule

    def clear_injections(self) -> None:
        self._injections.clear()

    def inject_garbage(self, node: int, times: int = 1, api_key: int | None = None) -> None:
        """Replace ``node``'s next ``times`` responses (of ``api_key`` only, if given) with a
        well-framed response carrying the right correlation id and an undecodable body."""
        self._node(node).garbage.extend([api_key] * times)

    def clear_faults(self) -> None:
        """Undo delays, cuts, black holes, swaps, garbage and injections and restart every
        node (not moves)."""
        for n in self._nodes:
            n.alive = True
            n.delay = 0.0
            n.api_delays.clear()
            n.cut = n.each_cut = n.byte_cut = None
            n.black_hole = False
            n.swaps = 0
            n.garbage.clear()
            for conn in n.conns:
                conn.cut_rule = None
        self._injections.clear()
        self._notify()

    # ---- hooks for SimConnection ----------------------------------------------------------

    def _take_cut(self, conn: SimConnection) -> tuple[bool, bool] | None:
        """None: no request cut fires on this request; else ``(forward, whole_node)``: whether
        to forward the request first, and whether to close all of the node's connections."""
        fired: tuple[bool, bool] | None = None
        node = conn.node
        for rule in (conn.cut_rule, node.cut):
            if rule is None:
                continue
            rule.remaining -= 1
            if rule.remaining > 0:
                continue
            if rule.every is not None:
                rule.remaining = rule.every
            elif rule is node.cut:
                node.cut = None
            else:
                conn.cut_rule = None
            forward, whole = fired or (True, False)
            fired = (forward and rule.forward_last, whole or rule.scope == "node")
        return fired

    def _cut_node(self, node: Node, reason: str) -> None:
        for conn in list(node.conns):
            conn.cut(reason)
        self._notify()

    def _maybe_garbage(self, node: Node, header: RequestHeader, frame: bytes) -> bytes:
        if not node.garbage:
            return frame
        wanted = node.garbage[0]
        if wanted is not None and wanted != header.api_key:
            return frame
        node.garbage.popleft()
        # Correlation id, then one byte: too short for any response header+body to decode.
        return struct.pack(">ii", 5, header.correlation_id) + b"\xff"
