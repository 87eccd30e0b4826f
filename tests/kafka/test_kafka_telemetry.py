"""KIP-714 on Apache Kafka: a client-metrics subscription, a broker-side receiver, and the
Java client's pushes as the reference for ours.

The receiver is ``tests/kafka/java/TelemetryReceiver.java``, compiled here against the
cluster's jars and loaded into a one-node cluster of this module as a metrics reporter; it
writes every push it gets to a file, which the test decodes with ``opentelemetry-proto``.
The subscription is made with our admin client (IncrementalAlterConfigs on a
CLIENT_METRICS resource), as ``kafka-configs --entity-type client-metrics`` makes it.

The Java producer, consumer and admin client (``Interop.java``) push to the same receiver;
every metric name we push must be one Java pushes, with the same OTLP kind.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from aiokafka_ng import Consumer, Producer, ShareConsumer
from aiokafka_ng.admin import (
    AdminClient,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
)
from aiokafka_ng.admin.models import AlterConfigOpType
from aiokafka_ng.testing import KafkaCluster, KafkaClusterError, ensure_jars, find_java
from tests.kafka.helpers import admin_for, unique
from tests.kafka.test_java_interop import run_java
from tests.kafka.test_kafka_oauth import require_kafka

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

RECEIVER = Path(__file__).parent / "java" / "TelemetryReceiver.java"
PREFIXES = "org.apache.kafka.producer.,org.apache.kafka.consumer."
ADMIN_PREFIX = "org.apache.kafka.admin.client."


@pytest.fixture
def anyio_backend() -> str:
    # One backend: the broker's side is what is under test here; the client's behaviour
    # runs on both backends in tests/cluster/test_telemetry.py.
    return "asyncio"


@pytest.fixture(scope="module")
def telemetry_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KafkaCluster, Path]]:
    require_kafka(request)
    work = tmp_path_factory.mktemp("telemetry")
    classes = work / "classes"
    libs = ensure_jars()
    javac = Path(os.path.realpath(find_java())).with_name("javac")
    subprocess.run(
        [str(javac), "-d", str(classes), "-cp", f"{libs}/*", str(RECEIVER)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    received = work / "received.jsonl"
    cluster = KafkaCluster(
        brokers=1,
        tls=False,
        heap="256m",
        broker_properties={
            "metric.reporters": "TelemetryReceiver",
            "telemetry.receiver.file": str(received),
        },
        extra_classpath=[classes],
    )
    try:
        cluster.start_sync()
    except KafkaClusterError as exc:
        pytest.fail(f"the telemetry Kafka cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster, received
    finally:
        cluster.stop_sync()


def pushes(received: Path, client_id: str) -> list[dict[str, Any]]:
    if not received.exists():
        return []
    out = []
    for line in received.read_text().splitlines():
        push = json.loads(line)
        if push["client_id"] == client_id:
            push["metrics"] = decode(base64.b64decode(push["data"]))
            out.append(push)
    return out


def decode(data: bytes) -> dict[str, tuple[str, float]]:
    """{name: (kind, value of the first point)} of one MetricsData; a sum's kind names its
    temporality ("sum/delta", "sum/cumulative")."""
    out: dict[str, tuple[str, float]] = {}
    for rm in metrics_pb2.MetricsData.FromString(data).resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind == "sum":
                    delta = (
                        m.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
                    )
                    kind += "/delta" if delta else "/cumulative"
                points = getattr(m, m.WhichOneof("data")).data_points
                p = points[0]
                out[m.name] = (kind, p.as_int if p.HasField("as_int") else p.as_double)
    return out


def node_ids(pushes: list[dict[str, Any]], name: str) -> set[str]:
    """The ``node_id`` attributes of a per-broker metric's points, over pushes."""
    out = set()
    for push in pushes:
        data = metrics_pb2.MetricsData.FromString(base64.b64decode(push["data"]))
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        for point in m.gauge.data_points:
                            out.update(
                                a.value.string_value for a in point.attributes if a.key == "node_id"
                            )
    return out


def total(pushes: list[dict[str, Any]], name: str) -> float:
    """A sum over pushes: Kafka subscribes with delta temporality."""
    values = [g["metrics"][name] for g in pushes if name in g["metrics"]]
    assert {kind for kind, _ in values} == {"sum/delta"}
    return sum(value for _, value in values)


async def wait_for(received: Path, client_id: str, predicate: Any) -> list[dict[str, Any]]:
    with anyio.fail_after(60):
        while True:
            got = pushes(received, client_id)
            if predicate(got):
                return got
            await anyio.sleep(0.2)  # the receiver is another process: its file is polled


async def subscribe(cluster: KafkaCluster, prefixes: str) -> None:
    """A client-metrics subscription of every client to ``prefixes``, every second."""
    async with admin_for(cluster) as admin:
        subscription = ConfigResource(ConfigResourceType.CLIENT_METRICS, unique("sub"))
        ops = [
            AlterConfigOp("metrics", prefixes, AlterConfigOpType.SET),
            AlterConfigOp("interval.ms", "1000", AlterConfigOpType.SET),
        ]
        (await admin.incremental_alter_configs({subscription: ops})).raise_on_error()
        # Applied through the metadata log: a client subscribing before the broker has it
        # would be told "nothing" and ask again only after the default 5 minutes.
        with anyio.fail_after(30):
            while True:
                described = (await admin.describe_configs([subscription])).result(subscription)
                entry = described.get("metrics")
                if entry is not None and entry.value == prefixes:
                    break
                await anyio.sleep(0.1)


def names(pushes: list[dict[str, Any]]) -> dict[str, str]:
    """{metric name: kind} over pushes."""
    return {n: kind for g in pushes for n, (kind, _) in g["metrics"].items()}


async def test_our_pushes_reach_the_broker_with_javas_metric_names(
    telemetry_cluster: tuple[KafkaCluster, Path],
) -> None:
    cluster, received = telemetry_cluster
    topic = unique("telemetry")
    async with admin_for(cluster) as admin:
        (await admin.create_topics([NewTopic(topic, 2, 1)])).raise_on_error()
    await subscribe(cluster, PREFIXES)

    ours = unique("ours-producer")
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, client_id=ours) as p:
        for i in range(5):
            await p.send_and_wait(topic, b"v%d" % i, partition=i % 2)
        # Two interval pushes while running (the first after 0.5-1.5 s), then close's.
        await wait_for(received, ours, lambda got: len(got) >= 2)
        instance = await p.client_instance_id(timeout=10)
    ours_pushes = await wait_for(received, ours, lambda got: any(g["terminating"] for g in got))
    assert ours_pushes[-1]["terminating"]
    assert not any(g["terminating"] for g in ours_pushes[:-1])
    # Kafka prints a Uuid as URL-safe base64 without padding.
    assert instance is not None
    kafka_uuid = base64.urlsafe_b64encode(instance.bytes).rstrip(b"=").decode()
    assert {g["instance_id"] for g in ours_pushes} == {kafka_uuid}
    last = ours_pushes[-1]["metrics"]
    assert total(ours_pushes, "org.apache.kafka.producer.record.send.total") == 5
    assert all(name.startswith("org.apache.kafka.producer.") for name in last)

    our_consumer = unique("ours-consumer")
    async with Consumer(
        topic,
        bootstrap_servers=cluster.bootstrap_servers,
        client_id=our_consumer,
        auto_offset_reset="earliest",
    ) as c:
        for _ in range(5):
            await c.getone()
        await wait_for(received, our_consumer, lambda got: len(got) >= 1)
    consumer_pushes = await wait_for(
        received, our_consumer, lambda got: any(g["terminating"] for g in got)
    )
    assert (
        total(consumer_pushes, "org.apache.kafka.consumer.fetch.manager.records.consumed.total")
        == 5
    )

    our_share = unique("ours-share")
    async with ShareConsumer(
        topic,
        group_id=unique("sg"),
        bootstrap_servers=cluster.bootstrap_servers,
        client_id=our_share,
    ) as sc:
        await sc.wait_for_assignment(timeout=30)
        await wait_for(received, our_share, lambda got: len(got) >= 1)
    share_pushes = await wait_for(
        received, our_share, lambda got: any(g["terminating"] for g in got)
    )

    # The reference: Java's producer and consumer, pushing to the same receiver.
    java_producer, java_consumer = unique("java-producer"), unique("java-consumer")
    record = {"key": None, "value": base64.b64encode(b"j").decode(), "headers": []}
    await run_java(
        cluster,
        [
            {
                "op": "produce",
                "topic": topic,
                "client_id": java_producer,
                "records": [record] * 5,
                "hold_ms": 2500,
            },
            {"op": "consume", "topic": topic, "client_id": java_consumer, "count": 10},
        ],
    )
    # Java's producer pushed while it was held open; its close() sent no terminating push
    # in our runs (its consumer's did), so only a push is waited for.
    java_p = await wait_for(received, java_producer, lambda got: len(got) >= 1)
    java_c = await wait_for(received, java_consumer, lambda got: any(g["terminating"] for g in got))
    java_p_names, java_c_names = names(java_p), names(java_c)
    ours_p_names, ours_c_names = names(ours_pushes), names(consumer_pushes)
    lines = []
    for title, mine, java in (
        ("producer", ours_p_names, java_p_names),
        ("consumer", ours_c_names, java_c_names),
    ):
        lines.append(f"## {title}: {len(mine)} ours, {len(java)} Java's")
        lines.extend(
            f"{name}\t{mine.get(name, '-')}\t{java.get(name, '-')}"
            for name in sorted(set(mine) | set(java))
        )
    # The side-by-side table of issue 51's note, when asked for.
    report = os.environ.get("TELEMETRY_REPORT")
    if report:
        await anyio.Path(report).write_text("\n".join(lines) + "\n")
    # Every name we push is one Java pushes, with the same kind (sum or gauge).
    assert {n: java_p_names.get(n) for n in ours_p_names} == ours_p_names
    assert {n: java_c_names.get(n) for n in ours_c_names} == ours_c_names
    # Java's share consumer pushes its connections as a consumer's (consumer.connection.*).
    ours_share_names = names(share_pushes)
    assert "org.apache.kafka.consumer.connection.count" in ours_share_names
    assert {n: java_c_names.get(n) for n in ours_share_names} == ours_share_names
    assert total(java_p, "org.apache.kafka.producer.record.send.total") == 5


async def test_our_admin_client_pushes_javas_admin_metric_names(
    telemetry_cluster: tuple[KafkaCluster, Path],
) -> None:
    cluster, received = telemetry_cluster
    await subscribe(cluster, ADMIN_PREFIX)
    ours = unique("ours-admin")
    async with AdminClient(
        bootstrap_servers=cluster.bootstrap_servers, client_id=ours, enable_metrics_push=True
    ) as admin:
        for _ in range(3):
            await admin.describe_cluster()
            await admin.list_topics()
        instance = await admin.client_instance_id(timeout=10)
        await wait_for(received, ours, lambda got: len(got) >= 1)
        latency = admin.statistics().request_latency_ms_by_node
    ours_pushes = await wait_for(received, ours, lambda got: any(g["terminating"] for g in got))
    assert ours_pushes[-1]["terminating"]
    assert not any(g["terminating"] for g in ours_pushes[:-1])
    assert instance is not None
    kafka_uuid = base64.urlsafe_b64encode(instance.bytes).rstrip(b"=").decode()
    assert {g["instance_id"] for g in ours_pushes} == {kafka_uuid}

    # The reference: Java's Admin (with enable.metrics.push=true), same receiver.
    java_admin = unique("java-admin")
    (line,) = await run_java(
        cluster, [{"op": "admin", "client_id": java_admin, "rounds": 3, "hold_ms": 2500}]
    )
    java_pushes = await wait_for(received, java_admin, lambda got: len(got) >= 1)
    assert {g["instance_id"] for g in java_pushes} == {line["instance_id"]}

    mine, java = names(ours_pushes), names(java_pushes)
    latency_avg = ADMIN_PREFIX + "node.request.latency.avg"
    assert mine == {
        ADMIN_PREFIX + "connection.count": "gauge",
        ADMIN_PREFIX + "connection.creation.total": "sum/delta",
        latency_avg: "gauge",
        ADMIN_PREFIX + "node.request.latency.max": "gauge",
    }
    # Every name we push is one Java pushes, with the same kind (sum or gauge).
    assert {n: java.get(n) for n in mine} == mine
    # Per broker, with Java's attribute: the brokers our operations reached.
    assert node_ids(ours_pushes, latency_avg) == {f"node-{n}" for n in latency}
    assert node_ids(ours_pushes, latency_avg) & node_ids(java_pushes, latency_avg)
    assert total(ours_pushes, ADMIN_PREFIX + "connection.creation.total") >= 1
    report = os.environ.get("TELEMETRY_REPORT")
    if report:
        lines = [f"## admin: {len(mine)} ours, {len(java)} Java's"]
        lines.extend(
            f"{name}\t{mine.get(name, '-')}\t{java.get(name, '-')}"
            for name in sorted(set(mine) | set(java))
        )
        async with await anyio.open_file(report, "a") as out:
            await out.write("\n".join(lines) + "\n")
