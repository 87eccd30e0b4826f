"""What a FakeKafka saw: counters and timestamps of requests, errors and connections.

The server reports each event here (:class:`Observations`); :class:`Observers`, a base of
:class:`FakeKafka`, holds the public methods that read it. Times are
``anyio.current_time()``: virtual under a mock clock, so a test on virtual time asserts
gaps between retries exactly. At most ``MAX_TIMES`` timestamps are kept per series (the
newest), so a long run stays bounded."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiokafka_ng.testing.fake._server import FakeNode

__all__ = ["MAX_TIMES", "Observations", "Observers", "errors_in"]

#: Timestamps kept per series (per node and API, per API and partition).
MAX_TIMES = 100_000


def errors_in(message: Any) -> Iterable[int]:
    """Every non-zero ``error_code`` in an answer, at any depth: one per failed item
    (partition, topic, resource, coordinator key), or the answer's top-level one."""
    stack = [message]
    while stack:
        item = stack.pop()
        for f in fields(item):
            value = getattr(item, f.name)
            if f.name == "error_code":
                if value:
                    yield value
            elif isinstance(value, list) and value and is_dataclass(value[0]):
                stack.extend(value)
            elif is_dataclass(value) and not isinstance(value, type):
                stack.append(value)


class Observations:
    """The counters of one FakeKafka (zeroed by :meth:`reset`)."""

    def __init__(self, nodes: Iterable[int]) -> None:
        self._nodes = list(nodes)
        self.reset()

    def reset(self) -> None:
        #: (node, api key, error code) -> items answered with that error.
        self.errors: Counter[tuple[int, int, int]] = Counter()
        #: node -> connections accepted and served.
        self.connections: Counter[int] = Counter()
        #: node -> connection attempts refused (the node down or cut off).
        self.refused: Counter[int] = Counter()
        #: node -> most requests one of its connections held unanswered at once.
        self.max_in_flight: dict[int, int] = dict.fromkeys(self._nodes, 0)
        self.times: dict[tuple[int, int], deque[float]] = {}
        self.partition_times: dict[tuple[int, str, int], deque[float]] = {}

    def request(self, node: int, api_key: int, now: float) -> None:
        _append(self.times, (node, api_key), now)

    def partitions(self, api_key: int, tps: Iterable[tuple[str, int]], now: float) -> None:
        for topic, partition in tps:
            _append(self.partition_times, (api_key, topic, partition), now)

    def answered(self, node: int, api_key: int, response: Any) -> None:
        for code in errors_in(response):
            self.errors[(node, api_key, code)] += 1

    def in_flight(self, node: int, count: int) -> None:
        if count > self.max_in_flight[node]:
            self.max_in_flight[node] = count


def _append(table: dict[Any, deque[float]], key: Any, now: float) -> None:
    times = table.get(key)
    if times is None:
        times = table[key] = deque(maxlen=MAX_TIMES)
    times.append(now)


class Observers:
    """The observer methods of :class:`FakeKafka` (node ids as the cluster numbers them)."""

    # Provided by FakeKafka.
    nodes: dict[int, FakeNode]
    _seen: Observations

    def _node(self, node: int) -> FakeNode:
        raise NotImplementedError

    def _notify(self) -> None:
        raise NotImplementedError

    def requests(self, node: int | None = None) -> Counter[int]:
        """Requests received, by API key (of one node, or all)."""
        if node is not None:
            return Counter(self._node(node).requests)
        total: Counter[int] = Counter()
        for n in self.nodes.values():
            total.update(n.requests)
        return total

    def connection_attempts(self, node: int) -> list[float]:
        """When clients tried to connect to ``node`` (``anyio.current_time()``), refused
        attempts included: a killed or isolated node still sees them."""
        return list(self._node(node).attempts)

    def open_connections(self, node: int | None = None) -> int:
        nodes = self.nodes.values() if node is None else [self._node(node)]
        return sum(len(n.connections) for n in nodes)

    def request_times(self, api_key: int, node: int | None = None) -> list[float]:
        """When each request of ``api_key`` was handled (``anyio.current_time()``), at one
        node or all, in order (the last 100 000 per node and API)."""
        nodes = list(self.nodes) if node is None else [self._node(node).node_id]
        times: list[float] = []
        for n in nodes:
            times.extend(self._seen.times.get((n, api_key), ()))
        return sorted(times)

    def partition_request_times(self, api_key: int, topic: str, partition: int) -> list[float]:
        """When each Produce, Fetch or ListOffsets request naming this partition was handled,
        at any node (the last 100 000): the gaps between one batch's retries."""
        return list(self._seen.partition_times.get((api_key, topic, partition), ()))

    def errors(
        self, api_key: int | None = None, error_code: int | None = None, node: int | None = None
    ) -> int:
        """Items (partitions, topics, resources, or a whole request) answered with an error,
        filtered by API, error code and node."""
        return sum(
            count
            for (n, api, code), count in self._seen.errors.items()
            if (node is None or n == node)
            and (api_key is None or api == api_key)
            and (error_code is None or code == error_code)
        )

    def in_flight(self, node: int | None = None) -> int:
        """The most requests one open connection (to ``node``, or any) has sent and not had
        answered, now; :meth:`wait_until` re-checks it as requests arrive."""
        nodes = self.nodes.values() if node is None else [self._node(node)]
        return max((c.in_flight for n in nodes for c in n.connections), default=0)

    def max_in_flight(self, node: int | None = None) -> int:
        """The most requests one connection (to ``node``, or any) had sent and not yet had
        answered, seen at the node's end: a client's pipelining, measured on the wire."""
        seen = self._seen.max_in_flight
        return seen[self._node(node).node_id] if node is not None else max(seen.values())

    def connections(self, node: int | None = None) -> int:
        """Connections accepted and served (by ``node``, or all)."""
        if node is not None:
            return self._seen.connections[self._node(node).node_id]
        return sum(self._seen.connections.values())

    def refused(self, node: int | None = None) -> int:
        """Connection attempts refused because the node was down or cut off."""
        if node is not None:
            return self._seen.refused[self._node(node).node_id]
        return sum(self._seen.refused.values())

    def reset_counters(self) -> None:
        """Zero :meth:`requests`, :meth:`request_times`, :meth:`partition_request_times`,
        :meth:`errors`, :meth:`max_in_flight`, :meth:`connections`, :meth:`refused` and
        :meth:`connection_attempts`."""
        self._seen.reset()
        for n in self.nodes.values():
            n.requests.clear()
            n.attempts.clear()
        self._notify()
