"""examples/fastapi_app against the real local broker: publish, fire-and-forget, health,
and shutdown delivering what fire-and-forget left queued."""

from __future__ import annotations

import importlib.util
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.errors import KafkaTimeoutError
from aiokafka_ng.testing import LocalBroker
from tests.helpers import free_port

APP_PATH = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app" / "app.py"


def load_app_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_example_app", APP_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_app(bootstrap: str, topic: str, **config: Any) -> FastAPI:
    app = load_app_module().create_app(bootstrap, topic, **config)
    assert isinstance(app, FastAPI)
    return app


async def read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        parts = await consumer.partitions_for_topic(topic)
        consumer.assign(TopicPartition(topic, p) for p in parts)
        with anyio.fail_after(30):
            while len(out) < expected:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend((r.key, r.value) for r in records)
    return out


def test_test_client_publish_fire_and_forget_health(kafka_broker: Any) -> None:
    topic = f"api-{uuid.uuid4().hex[:8]}"
    app = make_app(kafka_broker.bootstrap_servers, topic)
    with TestClient(app) as client:
        # The app starts without waiting for Kafka; /health is 503 until bootstrap is done.
        assert client.portal is not None
        client.portal.call(app.state.producer.wait_ready, 30)
        resp = client.get("/health")
        nodes = 1 if isinstance(kafka_broker, LocalBroker) else len(kafka_broker.cluster.brokers)
        assert resp.status_code == 200 and resp.json()["brokers"] == nodes
        resp = client.post("/events", json={"key": "user-1", "value": "signed up"})
        assert resp.status_code == 201
        body = resp.json()
        assert body["topic"] == topic and body["offset"] == 0
        resp = client.post("/events/fire-and-forget", json={"value": "clicked"})
        assert resp.status_code == 202 and resp.json() == {"queued": True}
        assert client.post("/events", json={"key": 1}).status_code == 422
    got = anyio.run(read_all, kafka_broker.bootstrap_servers, topic, 2)
    assert sorted(v for _, v in got) == [b"clicked", b"signed up"]
    assert (b"user-1", b"signed up") in got


@pytest.mark.anyio
async def test_async_client_shutdown_flushes_pending_records(kafka_broker: Any) -> None:
    topic = f"api-{uuid.uuid4().hex[:8]}"
    # A long linger keeps fire-and-forget records queued in the producer: only the
    # shutdown's flush can deliver them before the linger would.
    app = make_app(kafka_broker.bootstrap_servers, topic, linger_ms=20000)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            for i in range(50):
                resp = await client.post(
                    "/events/fire-and-forget", json={"key": f"k{i % 3}", "value": f"v{i}"}
                )
                assert resp.status_code == 202
            producer = app.state.producer
            assert producer.statistics()["memory"] is not None
        started = time.monotonic()
    shutdown_s = time.monotonic() - started
    assert shutdown_s < 15, f"shutdown waited for linger_ms ({shutdown_s:.1f} s)"
    got = await read_all(kafka_broker.bootstrap_servers, topic, 50)
    assert sorted(v for _, v in got) == sorted(f"v{i}".encode() for i in range(50))


@pytest.mark.anyio
async def test_health_reports_503_when_the_broker_is_gone(fresh_kafka_broker: Any) -> None:
    broker = fresh_kafka_broker
    app = make_app(broker.bootstrap_servers, "health-topic")
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://app")
    async with app.router.lifespan_context(app), client:
        await app.state.producer.wait_ready(timeout=30)
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/health?deep=true")).json()["cluster_id"]
        await broker.stop()
        with anyio.fail_after(20):
            resp = await client.get("/health?deep=true")
        assert resp.status_code == 503
        assert "kafka unavailable" in resp.json()["detail"]


@pytest.mark.anyio
async def test_app_starts_without_kafka_and_health_says_so() -> None:
    port = free_port()
    app = make_app(f"127.0.0.1:{port}", "health-topic")
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://app")
    started = time.monotonic()
    async with app.router.lifespan_context(app), client:
        assert time.monotonic() - started < 2  # the lifespan did not wait for Kafka
        with pytest.raises(KafkaTimeoutError):
            await app.state.producer.wait_ready(timeout=0.3)
        resp = await client.get("/health")
        assert resp.status_code == 503
        assert f"127.0.0.1:{port}" in resp.json()["detail"]


@pytest.mark.anyio
async def test_outage_answers_503_in_time_and_shutdown_is_bounded(
    fresh_kafka_broker: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Before close_timeout_ms and send_and_wait(timeout=), POST /events hung for
    # delivery_timeout_ms (120 s) and the lifespan's exit (uvicorn's SIGINT) for ~118 s.
    broker = fresh_kafka_broker
    monkeypatch.setenv("KAFKA_PUBLISH_TIMEOUT", "0.5")
    app = make_app(broker.bootstrap_servers, f"api-{uuid.uuid4().hex[:8]}", close_timeout_ms=1000)
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://app")
    with anyio.fail_after(30):
        async with app.router.lifespan_context(app), client:
            assert (await client.post("/events", json={"value": "up"})).status_code == 201
            await broker.stop()
            resp = await client.post("/events/fire-and-forget", json={"value": "queued"})
            assert resp.status_code == 202
            t0 = time.monotonic()
            resp = await client.post("/events", json={"value": "down"})
            assert time.monotonic() - t0 < 0.5 + 2
            assert resp.status_code == 503 and "SendTimeoutError" in resp.json()["detail"]
            started = time.monotonic()
    shutdown_s = time.monotonic() - started
    assert shutdown_s < 1 + 2, shutdown_s
    failures = [r.getMessage() for r in caplog.records if "fire-and-forget" in r.getMessage()]
    assert len(failures) == 1 and "closed before the record was delivered" in failures[0]
