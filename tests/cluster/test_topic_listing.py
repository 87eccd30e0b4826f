"""The cluster's topics as a whole (``aiokafka_ng.cluster.topics``): what a listing shows,
as the consumer's ``topics()`` and the admin client's ``list_topics`` list, and naming topic
ids the metadata cache does not know yet. On FakeKafka in memory; a topic's error in the
all-topics answer is scripted on the model's own answer."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aiokafka_ng import AdminClient, Consumer
from aiokafka_ng.cluster import Cluster
from aiokafka_ng.cluster.topics import resolve_topic_ids
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.protocol.messages.metadata import MetadataResponse
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

METADATA = 3
TOPIC_AUTHORIZATION_FAILED = 29


def script_listing(kafka: FakeKafka, *, refused: str, internal: str) -> None:
    """All-topics Metadata answers name ``refused`` with TOPIC_AUTHORIZATION_FAILED (as a
    broker does for a topic the client may see exists but not describe) and ``internal``
    as internal (the fake lists none of its own)."""

    async def answer(call: Received) -> Any:
        response = await kafka.model_answer(call)
        assert isinstance(response, MetadataResponse)
        for t in response.topics:
            if t.name == refused:
                t.error_code = TOPIC_AUTHORIZATION_FAILED
                t.partitions = []
            t.is_internal = t.name == internal
        return response

    kafka.answer(METADATA, answer, match=lambda call: call.request.topics is None)


async def test_a_listing_leaves_out_topics_with_an_error_and_internal_ones() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        for name in ("a", "secret", "offsets"):
            kafka.create_topic(name)
        script_listing(kafka, refused="secret", internal="offsets")
        async with Consumer(**kafka.client_config()) as consumer:
            assert await consumer.topics() == {"a"}
        config = {**kafka.client_config(), "exclude_internal_topics": False}
        async with Consumer(**config) as consumer:
            assert await consumer.topics() == {"a", "offsets"}
        async with AdminClient(**kafka.client_config()) as admin:
            assert list(await admin.list_topics()) == ["a"]
            assert list(await admin.list_topics(include_internal=True)) == ["a", "offsets"]


async def test_topic_ids_the_cache_does_not_know_are_asked_for() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("known")
        config = ProducerConfig(**kafka.client_config()).cluster_config()
        async with Cluster(config) as cluster:
            await cluster.wait_for_topics(["known"])
            known = kafka.cluster.topics["known"].topic_id
            assert await resolve_topic_ids(cluster, {known}) == {known: "known"}
            # A topic created since: named by refreshing the topics it can be, when the
            # caller knows them (only those asked for) ...
            new = kafka.create_topic("new").topic_id
            before = len(kafka.received(METADATA))
            names = await resolve_topic_ids(cluster, {new}, among=["known", "new"])
            assert names[new] == "new"
            asked = kafka.received(METADATA)[before:]
            assert asked and all(x.request.topics is not None for x in asked)
            # ... or else by listing every topic.
            other = kafka.create_topic("other").topic_id
            before = len(kafka.received(METADATA))
            names = await resolve_topic_ids(cluster, {other})
            assert names[other] == "other" and names[known] == "known"
            assert any(x.request.topics is None for x in kafka.received(METADATA)[before:])
            # An id no topic has is left out, not an error.
            nobody = uuid.UUID(int=7)
            assert nobody not in await resolve_topic_ids(cluster, {nobody})
