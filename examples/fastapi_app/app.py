"""FastAPI + aiokafka_ng: one producer for the app's lifetime.

Run it (``pip install fastapi uvicorn``)::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 uvicorn examples.fastapi_app.app:app

Endpoints:

* ``POST /events`` -- publish and wait for the broker's acknowledgement; answers 201 with
  the record's partition and offset (503 if it could not be delivered, or not confirmed
  within ``KAFKA_PUBLISH_TIMEOUT`` seconds, default 5: a request must not hang for the
  producer's ``delivery_timeout_ms`` while Kafka is down).
* ``POST /events/fire-and-forget`` -- queue the record and answer 202 at once. ``await
  producer.send()`` returns as soon as the record is in the producer's buffer; delivery
  happens in the background, and shutting the app down delivers whatever is still queued
  (leaving ``async with Producer(...)`` flushes).
* ``GET /health`` -- the producer's ``status()``: no I/O, no waiting; 200 once a broker
  answered and the last metadata request succeeded, 503 (with the reason) otherwise. The
  clients start without the cluster, so the app comes up even while Kafka is down and
  ``/health`` says so. ``GET /health?deep=true`` also asks the cluster for its brokers
  through the admin client (503 if it does not answer within two seconds).

The producer and the admin client are opened in the lifespan, so every request shares them
and shutdown closes them in order.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from aiokafka_ng.admin import AdminClient
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import DeliveryFuture, Producer

log = logging.getLogger(__name__)


def _log_failure(fut: DeliveryFuture) -> None:
    exc = fut.exception()
    if exc is not None:
        log.error("fire-and-forget record to %s failed: %s", fut.topic, exc)


class Event(BaseModel):
    value: str
    key: str | None = None


def create_app(
    bootstrap_servers: str | None = None, topic: str | None = None, **producer_config: Any
) -> FastAPI:
    """The app; settings default to ``KAFKA_BOOTSTRAP_SERVERS`` and ``KAFKA_TOPIC``."""
    servers = bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    events_topic = topic or os.environ.get("KAFKA_TOPIC", "events")
    publish_timeout = float(os.environ.get("KAFKA_PUBLISH_TIMEOUT", "5"))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.admin = await stack.enter_async_context(
                AdminClient(bootstrap_servers=servers)
            )
            # Entered last, left first: the producer's flush on shutdown runs while the
            # rest of the app is still there.
            app.state.producer = await stack.enter_async_context(
                Producer(bootstrap_servers=servers, **producer_config)
            )
            yield

    app = FastAPI(title="aiokafka_ng example", lifespan=lifespan)

    @app.exception_handler(KafkaError)
    async def kafka_unavailable(request: Request, exc: KafkaError) -> JSONResponse:
        return JSONResponse({"detail": f"{type(exc).__name__}: {exc}"}, status_code=503)

    @app.post("/events", status_code=201)
    async def publish(event: Event, request: Request) -> dict[str, Any]:
        producer: Producer = request.app.state.producer
        meta = await producer.send_and_wait(
            events_topic,
            event.value.encode(),
            key=event.key.encode() if event.key else None,
            timeout=publish_timeout,  # SendTimeoutError -> 503 (the record stays queued)
        )
        return {"topic": meta.topic, "partition": meta.partition, "offset": meta.offset}

    @app.post("/events/fire-and-forget", status_code=202)
    async def publish_later(event: Event, request: Request) -> dict[str, Any]:
        producer: Producer = request.app.state.producer
        fut = await producer.send(
            events_topic, event.value.encode(), key=event.key.encode() if event.key else None
        )
        # Nobody awaits this future; a callback makes sure a failure is at least logged.
        fut.add_done_callback(_log_failure)
        return {"queued": True}

    @app.get("/health")
    async def health(request: Request, deep: bool = False) -> dict[str, Any]:
        status = request.app.state.producer.status()
        if not status.ready:
            reason = status.last_error or f"no answer from {status.bootstrap_servers} yet"
            raise HTTPException(503, f"kafka unavailable: {reason}")
        body: dict[str, Any] = {"status": "ok", "brokers": len(status.brokers)}
        if deep:
            admin: AdminClient = request.app.state.admin
            try:
                cluster = await admin.describe_cluster(timeout_ms=2000)
            except KafkaError as exc:
                raise HTTPException(503, f"kafka unavailable: {type(exc).__name__}") from exc
            body.update(brokers=len(cluster.brokers), cluster_id=cluster.cluster_id)
        return body

    return app


app = create_app()
