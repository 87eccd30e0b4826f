"""Bad input, one table: each case fails at once with a named error, client-side (nothing
is sent), and what else was asked for in the same call still happens. Against the real
broker (Tansu); create_partitions' "does not grow" check reads Tansu's metadata (Tansu does
not advertise CreatePartitions, so the valid item's broker answer is not asserted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from aiokafka_ng.admin import AdminClient, NewPartitions, NewTopic
from aiokafka_ng.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
)
from aiokafka_ng.producer import Producer
from tests.helpers import topic_name
from tests.kafka.helpers import eventually

pytestmark = pytest.mark.anyio


SEND_CASES: list[tuple[str, dict[str, Any], type[BaseException], str]] = [
    ("negative timestamp", {"timestamp_ms": -5}, ValueError, "timestamp_ms must be >= 0"),
    ("timestamp not int", {"timestamp_ms": 1.5}, TypeError, "timestamp_ms must be an int"),
    ("header key not str", {"headers": [(b"k", b"v")]}, TypeError, "headers must be"),
    ("header value not bytes", {"headers": [("k", 5)]}, TypeError, "headers must be"),
    ("negative partition", {"partition": -2}, TypeError, "partition must be"),
    ("value not bytes", {"value": "text"}, TypeError, "value must be bytes"),
    ("key not bytes", {"key": 7}, TypeError, "key must be bytes"),
    ("bad topic name", {"topic": "no spaces"}, InvalidTopicError, "invalid topic name"),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "match"), SEND_CASES, ids=[c[0] for c in SEND_CASES]
)
async def test_send_rejects(
    kafka_broker: Any, case: str, kwargs: dict[str, Any], error: type[BaseException], match: str
) -> None:
    topic = topic_name("in")
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        good = await producer.send(topic, b"before", partition=0)
        args = {"topic": topic, "value": b"v", **kwargs}
        with pytest.raises(error, match=match):
            await producer.send(**args)
        if "headers" not in args:  # the bulk path (no headers) checks the same
            with pytest.raises(error, match=match):
                await producer.send_batch(
                    args["topic"],
                    [args["value"]],
                    keys=[args["key"]] if "key" in args else None,
                    partition=args.get("partition"),
                    timestamp_ms=args.get("timestamp_ms"),
                )
        after = await producer.send(topic, b"after", partition=0)
        assert (await good).offset == 0 and (await after).offset == 1  # nothing else lost


TOPIC_CASES: list[tuple[str, Callable[[str], NewTopic], type[BaseException]]] = [
    ("zero partitions", lambda n: NewTopic(n, num_partitions=0), InvalidPartitionsError),
    ("partitions below -1", lambda n: NewTopic(n, num_partitions=-3), InvalidPartitionsError),
    (
        "zero replication",
        lambda n: NewTopic(n, 1, replication_factor=0),
        InvalidReplicationFactorError,
    ),
    (
        "replication below -1",
        lambda n: NewTopic(n, 1, replication_factor=-2),
        InvalidReplicationFactorError,
    ),
    (
        "replication beyond int16",
        lambda n: NewTopic(n, 1, replication_factor=40000),
        InvalidReplicationFactorError,
    ),
    (
        "partitions not an int",
        lambda n: NewTopic(n, num_partitions="3"),  # type: ignore[arg-type]
        InvalidPartitionsError,
    ),
    (
        "assignments with counts",
        lambda n: NewTopic(n, 2, 1, replica_assignments={0: [1]}),
        InvalidRequestError,
    ),
    (
        "uneven assignments",
        lambda n: NewTopic(n, replica_assignments={0: [1], 1: [1, 2]}),
        InvalidReplicationFactorError,
    ),
    ("bad name", lambda n: NewTopic("bad name!"), InvalidTopicError),
]


@pytest.mark.parametrize(("case", "make", "error"), TOPIC_CASES, ids=[c[0] for c in TOPIC_CASES])
async def test_create_topics_rejects(
    kafka_broker: Any, case: str, make: Callable[[str], NewTopic], error: type[BaseException]
) -> None:
    bad_topic = make(topic_name("in"))
    ok = topic_name("in")
    async with AdminClient(bootstrap_servers=kafka_broker.bootstrap_servers) as admin:
        results = await admin.create_topics([bad_topic, NewTopic(ok, 2)])
        with pytest.raises(error):
            results.result(bad_topic.name)
        assert results.result(ok).num_partitions == 2  # the good one was created
        assert bad_topic.name not in await admin.list_topics()


async def test_create_partitions_rejects_counts_that_do_not_grow(kafka_broker: Any) -> None:
    topic = topic_name("in")
    async with AdminClient(bootstrap_servers=kafka_broker.bootstrap_servers) as admin:
        (await admin.create_topics([NewTopic(topic, 3)])).raise_on_error()
        # The client checks the count against its metadata first; on Kafka that metadata may
        # not show the new topic yet (each node applies it a moment apart), and then the
        # broker's own refusal, in its own words, is what comes back.
        cases = (
            (3, "already has 3 partition"),
            # Ours, or Kafka's KRaft controller's ("... 2 would not be an increase").
            (2, "only grows|would not be an increase"),
            (0, "positive"),
        )
        for count, match in cases:
            results = await admin.create_partitions({topic: NewPartitions(count)})
            with pytest.raises(InvalidPartitionsError, match=match):
                results.result(topic)
        # Read back from any node: on Kafka it may not have applied the new topic yet.
        described = await eventually(
            lambda: admin.describe_topics([topic]), lambda r: topic in r.succeeded
        )
        assert len(described.result(topic).partitions) == 3
