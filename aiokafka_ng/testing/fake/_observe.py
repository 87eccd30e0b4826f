"""What a FakeKafka saw: counters and timestamps of requests, errors and connections.

The server reports each event here (:class:`Observations`); :class:`FakeKafka`'s observer
methods read it. Times are ``anyio.current_time()``: virtual under a mock clock, so a test
on virtual time asserts gaps between retries exactly. At most ``MAX_TIMES`` timestamps are
kept per series (the newest), so a long run stays bounded.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import fields, is_dataclass
from typing import Any

__all__ = ["MAX_TIMES", "Observations", "errors_in"]

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
