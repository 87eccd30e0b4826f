"""``ProducerStatistics``: the producer's ``statistics()`` snapshot.

A frozen dataclass like the consumer's and the admin client's (the common part is
:class:`~aiokafka_ng.cluster.ClientStatistics`), and also a read-only
``Mapping[str, Any]`` over its fields: ``statistics()`` returned a plain dict before, and
``stats["records_sent"]``, ``stats.get(...)``, ``dict(stats)`` keep working with the same keys
and values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from aiokafka_ng.cluster import ClientStatistics
from aiokafka_ng.cluster.telemetry import MetricKind, connection_table
from aiokafka_ng.producer.memory import MemoryPoolStatistics

if TYPE_CHECKING:
    from aiokafka_ng.cluster import ClientRuntime
    from aiokafka_ng.producer.parts import Parts

__all__ = ["TELEMETRY_METRICS", "ProducerStatistics", "collect"]

_SUM, _GAUGE = MetricKind.SUM, MetricKind.GAUGE

#: KIP-714's names (after ``org.apache.kafka.``) of the statistics that mean what Java's
#: producer metric of that name means (``producer-metrics`` group); see
#: :mod:`aiokafka_ng.cluster.telemetry`. Our request latency is over the producer's life,
#: Java's over its last two 30 s windows.
TELEMETRY_METRICS = {
    "records_sent": ("producer.record.send.total", _SUM),
    "records_failed": ("producer.record.error.total", _SUM),
    "splits": ("producer.batch.split.total", _SUM),
    "memory.total": ("producer.buffer.total.bytes", _GAUGE),
    "memory.available": ("producer.buffer.available.bytes", _GAUGE),
    "memory.waiters": ("producer.waiting.threads", _GAUGE),
    "memory.timeouts": ("producer.buffer.exhausted.total", _SUM),
    "in_flight_requests": ("producer.requests.in.flight", _GAUGE),
    "request_latency_ms.avg": ("producer.request.latency.avg", _GAUGE),
    "request_latency_ms.max": ("producer.request.latency.max", _GAUGE),
    **connection_table("producer"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerStatistics(ClientStatistics, Mapping[str, Any]):
    memory: MemoryPoolStatistics
    senders: dict[int, int]  # requests sent, by broker node id
    records_sent: int
    records_failed: int
    batches_sent: int
    buffer_bytes_used: int
    request_latency_ms: dict[str, float]  # {"count", "avg", "max"}
    in_flight_batches: int
    in_flight_requests: int
    in_flight_by_node: dict[int, int]
    retries: int
    splits: int
    expired_batches: int
    producer_id: int | None
    producer_id_resets: int
    transaction_state: str | None

    # Mapping's read access (the dict statistics() returned before): every field by name.
    def __getitem__(self, key: str) -> Any:
        if key not in _KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)


_KEYS: dict[str, None] = dict.fromkeys(f.name for f in dataclasses.fields(ProducerStatistics))


def collect(parts: Parts, runtime: ClientRuntime) -> ProducerStatistics:
    """The snapshot of a producer made of ``parts`` (``Producer.statistics``), the common
    part from its ``runtime``: reads counters only, so it never blocks and works in any
    state."""
    by_node = parts.senders.by_node
    return runtime.statistics(
        ProducerStatistics,
        senders={n: s.requests for n, s in by_node.items()},
        in_flight_requests=sum(s.requests_in_flight for s in by_node.values()),
        in_flight_by_node={n: s.requests_in_flight for n, s in by_node.items()},
        transaction_state=None if parts.txn is None else parts.txn.state.value,
        **parts.engine.statistics(),
    )
