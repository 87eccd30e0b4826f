"""Helpers for the tests that run against the real Apache Kafka cluster (``kafka_cluster``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiokafka_ng.admin import AdminClient, NewTopic
from aiokafka_ng.testing import KafkaCluster


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin_for(cluster: KafkaCluster, **config: Any) -> AdminClient:
    config.setdefault("bootstrap_servers", cluster.bootstrap_servers)
    return AdminClient(default_api_timeout_ms=30000, **config)


@asynccontextmanager
async def new_topic(
    cluster: KafkaCluster, partitions: int = 1, replicas: int = 3, **configs: str
) -> AsyncIterator[str]:
    """A fresh topic (deleted afterwards); ``configs`` use ``_`` for ``.``."""
    name = unique("k")
    topic_configs = {key.replace("_", "."): value for key, value in configs.items()}
    async with admin_for(cluster) as admin:
        (
            await admin.create_topics([NewTopic(name, partitions, replicas, topic_configs=topic_configs)])
        ).raise_on_error()
        try:
            yield name
        finally:
            await admin.delete_topics([name])
