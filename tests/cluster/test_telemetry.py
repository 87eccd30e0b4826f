"""KIP-714 client metrics push, against FakeKafka on virtual time.

The broker's side is a small model scripted with ``FakeKafka.answer`` (API 71 and 72; a
scripted API is advertised, an unscripted one is not -- as a Kafka broker without a
telemetry plugin advertises neither): it hands out a subscription, keeps what is pushed and
answers errors on demand. The pushed payloads are decompressed and decoded with
``opentelemetry-proto``, the reference protobuf code, not ours.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from aiokafka_ng import Consumer, Producer, ShareConsumer
from aiokafka_ng.admin import AdminClient
from aiokafka_ng.errors import ConfigError, IllegalStateError
from aiokafka_ng.protocol.compression import decompress
from aiokafka_ng.protocol.messages import share_fetch as sf
from aiokafka_ng.protocol.messages.get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsResponse,
)
from aiokafka_ng.protocol.messages.push_telemetry import PushTelemetryResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received
from tests.consumer.test_share_consumer import SHARE_FETCH, coordinator

pytestmark = pytest.mark.anyio

GET, PUSH = 71, 72
LIST_GROUPS = 16
INSTANCE = uuid.UUID("0123456789abcdef0123456789abcdef")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@dataclass
class Push:
    at: float
    instance: uuid.UUID
    subscription_id: int
    terminating: bool
    compression: int
    size: int
    data: metrics_pb2.MetricsData

    def metrics(self) -> dict[str, metrics_pb2.Metric]:
        return {
            m.name: m
            for rm in self.data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }

    def value(self, name: str) -> float:
        m = self.metrics()[name]
        point = (m.sum if m.HasField("sum") else m.gauge).data_points[0]
        return point.as_int if point.HasField("as_int") else point.as_double

    def resource(self) -> dict[str, str]:
        (rm,) = self.data.resource_metrics
        return {kv.key: kv.value.string_value for kv in rm.resource.attributes}


@dataclass
class TelemetryBroker:
    """The broker's side of KIP-714, as ClientMetricsManager answers it."""

    metrics: list[str] = field(default_factory=lambda: ["*"])
    interval_ms: int = 10_000
    compression: list[int] = field(default_factory=lambda: [4, 3, 1, 2])  # zstd first
    max_bytes: int = 1024 * 1024
    delta: bool = False
    subscription_id: int = 7
    gets: list[tuple[float, uuid.UUID]] = field(default_factory=list)
    pushes: list[Push] = field(default_factory=list)
    push_errors: list[int] = field(default_factory=list)  # answered in turn, then NONE
    _changed: anyio.Event | None = None

    async def until(self, pushes: int = 0, gets: int = 0) -> None:
        """Wait until the broker got that many pushes and subscription requests."""
        while len(self.pushes) < pushes or len(self.gets) < gets:
            self._changed = anyio.Event()
            await self._changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def install(self, kafka: FakeKafka) -> None:
        kafka.answer(GET, self.get)
        kafka.answer(PUSH, self.push)

    def get(self, call: Received) -> GetTelemetrySubscriptionsResponse:
        asked = call.request.client_instance_id
        self.gets.append((anyio.current_time(), asked))
        self._notify()
        return GetTelemetrySubscriptionsResponse(
            client_instance_id=INSTANCE if asked == uuid.UUID(int=0) else asked,
            subscription_id=self.subscription_id,
            accepted_compression_types=self.compression,
            push_interval_ms=self.interval_ms,
            telemetry_max_bytes=self.max_bytes,
            delta_temporality=self.delta,
            requested_metrics=self.metrics,
        )

    def push(self, call: Received) -> PushTelemetryResponse:
        r = call.request
        if r.subscription_id != self.subscription_id:
            return PushTelemetryResponse(error_code=117)  # UNKNOWN_SUBSCRIPTION_ID
        raw = decompress(r.compression_type, r.metrics)
        self.pushes.append(
            Push(
                anyio.current_time(),
                r.client_instance_id,
                r.subscription_id,
                r.terminating,
                r.compression_type,
                len(r.metrics),
                metrics_pb2.MetricsData.FromString(raw),
            )
        )
        self._notify()
        code = self.push_errors.pop(0) if self.push_errors else 0
        return PushTelemetryResponse(error_code=code)


async def test_the_producer_pushes_on_the_interval_with_the_first_push_jittered() -> None:
    broker = TelemetryBroker(metrics=["org.apache.kafka.producer."])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config(), transactional_id=None) as producer:
            for i in range(3):
                await (await producer.send("t", b"v%d" % i))
            # Java's clientInstanceId: the id the broker assigned, once subscribed.
            assert await producer.client_instance_id(timeout=30) == INSTANCE
            started = anyio.current_time()
            await broker.until(pushes=3)
            first, second, third = broker.pushes[:3]
            sub_at = broker.gets[0][0]
            # KIP-714: the first push after a random 0.5-1.5 of the interval, then every one.
            assert 5.0 <= first.at - sub_at <= 15.0
            assert second.at - first.at == pytest.approx(10.0, abs=0.01)
            assert third.at - second.at == pytest.approx(10.0, abs=0.01)
            assert started < third.at
        # The broker's first choice (zstd) compresses, the instance id is the assigned one.
        assert {p.compression for p in broker.pushes} == {4}
        assert {p.instance for p in broker.pushes} == {INSTANCE}
        assert [g[1] for g in broker.gets] == [uuid.UUID(int=0)]
        m = first.metrics()
        assert set(m) >= {
            "org.apache.kafka.producer.record.send.total",
            "org.apache.kafka.producer.buffer.total.bytes",
            "org.apache.kafka.producer.buffer.available.bytes",
            "org.apache.kafka.producer.connection.count",
            "org.apache.kafka.producer.metadata.age",
        }
        assert all(name.startswith("org.apache.kafka.producer.") for name in m)
        sent = m["org.apache.kafka.producer.record.send.total"]
        assert sent.HasField("sum") and sent.sum.is_monotonic
        assert sent.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
        assert sent.sum.data_points[0].as_int == 3
        assert sent.sum.data_points[0].start_time_unix_nano > 0
        assert m["org.apache.kafka.producer.buffer.total.bytes"].HasField("gauge")
        assert first.value("org.apache.kafka.producer.buffer.total.bytes") == 32 * 1024 * 1024
        # The last push is the terminating one, sent by close().
        assert broker.pushes[-1].terminating
        assert not any(p.terminating for p in broker.pushes[:-1])


async def test_delta_temporality_pushes_what_changed_since_the_last_push() -> None:
    broker = TelemetryBroker(metrics=["org.apache.kafka.producer.record."], delta=True)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()) as producer:
            for _ in range(3):
                await (await producer.send("t", b"v"))
            await broker.until(pushes=1)
            for _ in range(2):
                await (await producer.send("t", b"v"))
            await broker.until(pushes=3)
    name = "org.apache.kafka.producer.record.send.total"
    values = [p.value(name) for p in broker.pushes]
    assert values[:3] == [3, 2, 0]
    first, second = (p.metrics()[name].sum for p in broker.pushes[:2])
    assert first.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    # A delta's interval starts where the previous one ended.
    assert second.data_points[0].start_time_unix_nano == first.data_points[0].time_unix_nano


async def test_deltas_add_up_across_a_changed_subscription() -> None:
    # A receiver summing the deltas must count every record once, also when the client
    # subscribed again in between (the ledger of what was pushed is kept).
    broker = TelemetryBroker(metrics=["org.apache.kafka.producer.record."], delta=True)
    name = "org.apache.kafka.producer.record.send.total"
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()) as producer:
            for _ in range(3):
                await (await producer.send("t", b"v"))
            await broker.until(pushes=1)
            broker.subscription_id = 9
            await broker.until(gets=2)
            for _ in range(4):
                await (await producer.send("t", b"v"))
            await broker.until(pushes=3)
    assert len(broker.gets) == 2
    assert sum(p.value(name) for p in broker.pushes) == 7


async def test_an_unknown_subscription_resubscribes_at_once_with_the_instance_id() -> None:
    broker = TelemetryBroker()
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()):
            await broker.until(pushes=1)
            changed_at = anyio.current_time()
            broker.subscription_id = 8  # the operator changed the subscription
            broker.metrics = ["org.apache.kafka.producer.buffer."]
            await broker.until(pushes=2)
    assert len(broker.gets) == 2
    regot_at, instance = broker.gets[1]
    assert instance == INSTANCE  # the client keeps its instance id
    assert regot_at - changed_at <= 10.5  # at the refused push, not an interval later
    assert set(broker.pushes[1].metrics()) <= {
        "org.apache.kafka.producer.buffer.total.bytes",
        "org.apache.kafka.producer.buffer.available.bytes",
        "org.apache.kafka.producer.buffer.exhausted.total",
    }
    assert broker.pushes[1].subscription_id == 8


async def test_an_invalid_record_answer_disables_telemetry() -> None:
    broker = TelemetryBroker(push_errors=[87])  # INVALID_RECORD
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()) as producer:
            await broker.until(pushes=1)
            await anyio.sleep(600)
            assert len(broker.pushes) == 1 and len(broker.gets) == 1
            engine_state = producer.statistics()  # the producer itself is fine
            assert engine_state.state == "running"
    assert len(broker.pushes) == 1  # no terminating push either


async def test_too_large_and_throttled_resubscribe_after_the_interval() -> None:
    broker = TelemetryBroker(push_errors=[118])  # TELEMETRY_TOO_LARGE
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()):
            await broker.until(gets=2)
    assert broker.gets[1][0] - broker.pushes[0].at == pytest.approx(10.0, abs=0.01)


async def test_pushes_are_cut_to_the_brokers_max_bytes() -> None:
    broker = TelemetryBroker(compression=[0], max_bytes=200)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()):
            await broker.until(pushes=1)
    push = broker.pushes[0]
    assert push.compression == 0
    assert 0 < push.size <= 200
    assert 0 < len(push.metrics()) < 10


async def test_no_subscription_costs_one_request_per_interval_and_no_wake_ups() -> None:
    broker = TelemetryBroker(metrics=[], interval_ms=300_000)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with Producer(**kafka.client_config()):
            await anyio.sleep(1)
            with virtual_time.count_loop_turns() as turns:
                await anyio.sleep(60)
            assert turns.count <= 3, turns.count
            await anyio.sleep(600)
    assert broker.pushes == []
    times = [at for at, _ in broker.gets]
    assert len(times) == 3
    assert times[1] - times[0] == pytest.approx(300.0, abs=0.01)


async def test_nothing_is_sent_to_brokers_without_the_api_or_when_switched_off() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        async with Producer(**kafka.client_config()) as producer:
            await (await producer.send("t", b"v"))
            await anyio.sleep(900)
            assert await producer.client_instance_id(timeout=1) is None
        assert kafka.received(GET) == [] and kafka.received(PUSH) == []
        broker = TelemetryBroker()
        broker.install(kafka)
        async with Producer(**kafka.client_config(), enable_metrics_push=False) as off:
            await anyio.sleep(60)
            with pytest.raises(IllegalStateError, match="enable_metrics_push"):
                await off.client_instance_id()
        async with Consumer(**kafka.client_config(), enable_metrics_push=False):
            await anyio.sleep(60)
        assert broker.gets == [] and broker.pushes == []


async def test_the_consumer_pushes_its_metrics() -> None:
    broker = TelemetryBroker(metrics=["org.apache.kafka.consumer."], compression=[1])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("c", partitions=2)
        async with Producer(**kafka.client_config(), enable_metrics_push=False) as producer:
            for i in range(4):
                await producer.send_and_wait("c", b"v", partition=i % 2)
        broker.install(kafka)
        async with Consumer(
            "c",
            **kafka.client_config(),
            group_id="g",
            group_instance_id="gi",
            client_rack="r1",
            auto_offset_reset="earliest",
        ) as consumer:
            for _ in range(4):
                await consumer.getone()
            await broker.until(pushes=1)
    push = broker.pushes[0]
    assert push.compression == 1
    assert push.value("org.apache.kafka.consumer.fetch.manager.records.consumed.total") == 4
    assert push.value("org.apache.kafka.consumer.coordinator.assigned.partitions") == 2
    assert push.value("org.apache.kafka.consumer.fetch.manager.fetch.total") >= 1
    assert "org.apache.kafka.consumer.connection.count" in push.metrics()
    assert push.resource() == {"group_id": "g", "group_instance_id": "gi", "client_rack": "r1"}
    assert broker.pushes[-1].terminating


def test_enable_metrics_push_is_validated() -> None:
    with pytest.raises(ConfigError, match="enable_metrics_push"):
        Producer(enable_metrics_push="perhaps")  # type: ignore[arg-type]
    off = Producer.from_properties({"enable.metrics.push": "false"})
    assert off.config.enable_metrics_push is False
    assert Producer().config.enable_metrics_push is True
    assert Consumer().config.enable_metrics_push is True
    # The admin client's is off by default, as Java's Admin's (KIP-1076).
    assert AdminClient().config.enable_metrics_push is False
    on = AdminClient.from_properties({"enable.metrics.push": "true"})
    assert on.config.enable_metrics_push is True


async def test_the_share_consumer_pushes_its_connection_metrics() -> None:
    # Java's share consumer pushes its connections under consumer.* (as seen from Kafka
    # 4.4's receiver); that is what our share consumer's statistics measure alike.
    broker = TelemetryBroker(metrics=["org.apache.kafka.consumer."])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        coordinator(kafka)
        kafka.answer(SHARE_FETCH, lambda call: sf.ShareFetchResponse())
        broker.install(kafka)
        async with ShareConsumer("t", group_id="sg", **kafka.client_config()) as c:
            await c.wait_for_assignment(timeout=10)
            assert await c.client_instance_id(timeout=10) == INSTANCE
            await broker.until(pushes=1)
    assert set(broker.pushes[0].metrics()) == {
        "org.apache.kafka.consumer.connection.count",
        "org.apache.kafka.consumer.connection.creation.total",
    }
    assert broker.pushes[0].resource() == {"group_id": "sg"}
    assert broker.pushes[-1].terminating


def node_points(push: Push, name: str) -> dict[str, float]:
    """{node_id attribute: value} of a per-broker metric (one Metric per broker)."""
    out: dict[str, float] = {}
    for rm in push.data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    (point,) = m.gauge.data_points
                    (attr,) = point.attributes
                    assert attr.key == "node_id"
                    value = point.as_int if point.HasField("as_int") else point.as_double
                    out[attr.value.string_value] = value
    return out


async def test_the_admin_client_pushes_its_connections_and_latency_by_broker() -> None:
    broker = TelemetryBroker(metrics=["org.apache.kafka.admin.client."])
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        broker.install(kafka)
        first, second = sorted(kafka.nodes)
        kafka.delay(first, 40, api_key=LIST_GROUPS)
        kafka.delay(second, 70, api_key=LIST_GROUPS)
        async with AdminClient(**kafka.client_config(), enable_metrics_push=True) as admin:
            await admin.list_consumer_groups()  # ListGroups: a request to every broker
            assert await admin.client_instance_id(timeout=30) == INSTANCE
            latency = admin.statistics().request_latency_ms_by_node
            await broker.until(pushes=2)
            assert admin.statistics().request_latency_ms_by_node == latency  # nothing sent since
    # The broker's interval, as for every client.
    assert broker.pushes[1].at - broker.pushes[0].at == pytest.approx(10.0, abs=0.01)
    # The slowest request to each broker was its ListGroups, held that long (virtual time).
    assert latency[first]["max"] == pytest.approx(40)
    assert latency[second]["max"] == pytest.approx(70)
    assert 0 < latency[first]["avg"] <= 40 and 0 < latency[second]["avg"] <= 70
    push = broker.pushes[0]
    m = push.metrics()
    assert set(m) == {
        "org.apache.kafka.admin.client.connection.count",
        "org.apache.kafka.admin.client.connection.creation.total",
        "org.apache.kafka.admin.client.node.request.latency.avg",
        "org.apache.kafka.admin.client.node.request.latency.max",
    }
    assert m["org.apache.kafka.admin.client.connection.count"].HasField("gauge")
    assert m["org.apache.kafka.admin.client.connection.creation.total"].sum.is_monotonic
    assert push.value("org.apache.kafka.admin.client.connection.creation.total") >= 2
    # One point per broker, named as Java names its node metrics.
    avg = node_points(push, "org.apache.kafka.admin.client.node.request.latency.avg")
    assert avg == {f"node-{n}": pytest.approx(s["avg"]) for n, s in latency.items()}
    top = node_points(push, "org.apache.kafka.admin.client.node.request.latency.max")
    assert top == {f"node-{n}": pytest.approx(s["max"]) for n, s in latency.items()}
    assert push.resource() == {}
    assert broker.pushes[-1].terminating
    assert not any(p.terminating for p in broker.pushes[:-1])


async def test_the_admin_client_pushes_nothing_by_default() -> None:
    broker = TelemetryBroker(metrics=["org.apache.kafka.admin.client."])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        async with AdminClient(**kafka.client_config()) as admin:
            await admin.list_topics()
            await anyio.sleep(900)
            with pytest.raises(IllegalStateError, match="enable_metrics_push"):
                await admin.client_instance_id()
        assert broker.gets == [] and broker.pushes == []


@pytest.mark.parametrize("subscribed", [False, True])
async def test_a_short_admin_command_closes_without_waiting_unless_subscribed(
    subscribed: bool,
) -> None:
    # A CLI command's life: one operation, then close. Each answer takes 50 ms: close
    # waits for one (the terminating push) only when a subscription matched this client.
    broker = TelemetryBroker(metrics=["org.apache.kafka.admin.client."] if subscribed else [])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        (node,) = kafka.nodes
        kafka.delay(node, 50)
        admin = AdminClient(**kafka.client_config(), enable_metrics_push=True)
        async with admin:
            await admin.list_topics()
            # The broker's answer has come (with a subscription for nothing, or not).
            assert await admin.client_instance_id(timeout=10) == INSTANCE
            closing = anyio.current_time()
        closed = anyio.current_time() - closing
    assert len(broker.gets) == 1
    if subscribed:
        assert [p.terminating for p in broker.pushes] == [True]
        assert closed == pytest.approx(0.05, abs=0.005)
    else:
        assert broker.pushes == []
        assert closed < 0.001


async def test_a_subscription_still_unanswered_does_not_hold_close() -> None:
    broker = TelemetryBroker(metrics=["org.apache.kafka.admin.client."])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        broker.install(kafka)
        (node,) = kafka.nodes
        kafka.delay(node, 5000, api_key=GET)
        async with AdminClient(**kafka.client_config(), enable_metrics_push=True):
            await broker.until(gets=1)  # asked; the answer is held
            closing = anyio.current_time()
        assert anyio.current_time() - closing < 0.001
        await anyio.sleep(10)
        assert broker.pushes == []
