"""aiokafka_ng.observability: snapshots flattened, exported to Prometheus and OpenTelemetry,
read from real clients on the local broker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.observability import (
    PrometheusCollector,
    Sample,
    StatisticsSource,
    instrument_opentelemetry,
    samples,
    snapshot,
)
from aiokafka_ng.producer import Producer


class _TP(NamedTuple):
    topic: str
    partition: int


@dataclass
class _Inner:
    used: int
    ratio: float
    state: str


def test_samples_flatten_nested_snapshots() -> None:
    stats = {
        "memory": _Inner(used=10, ratio=0.5, state="ok"),
        "senders": {111: 3, 112: 4},
        "assignment": (_TP("t", 0), _TP("t", 1)),
        "producer_id": None,
        "closed": True,
    }
    assert samples(stats) == [
        Sample("memory.used", (), 10.0),
        Sample("memory.ratio", (), 0.5),
        Sample("senders", (("key", "111"),), 3.0),
        Sample("senders", (("key", "112"),), 4.0),
        Sample("assignment.count", (), 2.0),
        Sample("closed", (), 1.0),
    ]


class _Broken:
    def statistics(self) -> Any:
        raise RuntimeError("not started")


@pytest.mark.anyio
async def test_prometheus_and_opentelemetry_read_live_clients(kafka_broker: Any) -> None:
    topic = f"obs-{uuid.uuid4().hex[:8]}"
    servers = kafka_broker.bootstrap_servers
    async with Producer(bootstrap_servers=servers) as producer:
        for i in range(20):
            await producer.send(topic, b"v%d" % i)
        await producer.flush()
        flat = snapshot(producer)
        assert flat["memory.total"] == producer.config.buffer_memory
        assert any(k.startswith("senders{key=") and v >= 1 for k, v in flat.items())

        async with Consumer(bootstrap_servers=servers, auto_offset_reset="earliest") as consumer:
            consumer.assign(
                [TopicPartition(topic, p) for p in await producer.partitions_for(topic)]
            )
            got = 0
            while got < 20:
                got += sum(len(r) for r in (await consumer.getmany(timeout_ms=1000)).values())

            clients: dict[str, StatisticsSource] = {
                "orders": producer,
                "reader": consumer,
                "broken": _Broken(),
            }
            registry = CollectorRegistry()
            registry.register(PrometheusCollector(clients))
            text = generate_latest(registry).decode()
            assert 'aiokafka_ng_memory_total{client="orders"} 3.3554432e+07' in text
            assert 'aiokafka_ng_senders{client="orders",key="' in text
            assert 'aiokafka_ng_fetcher_fetch_requests{client="reader"}' in text
            assert 'client="broken"' not in text

            reader = InMemoryMetricReader()
            provider = MeterProvider(metric_readers=[reader])
            try:
                gauges = instrument_opentelemetry(provider.get_meter("test"), clients)
                assert gauges
                data = reader.get_metrics_data()
                assert data is not None
                points: dict[tuple[str, Any], Any] = {
                    (m.name, (p.attributes or {}).get("client")): getattr(p, "value", None)
                    for rm in data.resource_metrics
                    for sm in rm.scope_metrics
                    for m in sm.metrics
                    for p in m.data.data_points
                }
            finally:
                provider.shutdown()
            assert points[("aiokafka_ng.memory.total", "orders")] == producer.config.buffer_memory
            assert points[("aiokafka_ng.assignment.count", "reader")] >= 1
    # A closed consumer still reports its last counters (every client answers in any state).
    text = generate_latest(registry).decode()
    assert 'aiokafka_ng_fetcher_records_consumed{client="reader"} 20.0' in text
