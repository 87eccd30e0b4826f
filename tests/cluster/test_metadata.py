"""Pure tests of the metadata snapshot model and the bootstrap-servers parser."""

from __future__ import annotations

import uuid

import pytest

from aiokafka_ng.cluster import (
    BrokerMetadata,
    ClusterConfig,
    ClusterMetadata,
    parse_bootstrap_servers,
    parse_metadata_response,
)
from aiokafka_ng.errors import (
    ConfigError,
    LeaderNotAvailableError,
    RebootstrapRequiredError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka_ng.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

TOPIC_ID = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")


def _response(*, epoch: int = 5, topic_id: uuid.UUID = TOPIC_ID) -> MetadataResponse:
    return MetadataResponse(
        brokers=[
            MetadataResponseBroker(node_id=1, host="b1", port=9092, rack="r1"),
            MetadataResponseBroker(node_id=2, host="b2", port=9093, rack=None),
            MetadataResponseBroker(node_id=3, host="b3", port=9094, rack="r2"),
        ],
        cluster_id="cid",
        controller_id=2,
        topics=[
            MetadataResponseTopic(
                error_code=0,
                name="events",
                topic_id=topic_id,
                is_internal=False,
                partitions=[
                    MetadataResponsePartition(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=epoch,
                        replica_nodes=[1, 2, 3],
                        isr_nodes=[1, 2],
                        offline_replicas=[3],
                    ),
                    MetadataResponsePartition(
                        error_code=5,  # LEADER_NOT_AVAILABLE
                        partition_index=1,
                        leader_id=-1,
                        leader_epoch=epoch,
                        replica_nodes=[2, 3],
                        isr_nodes=[],
                    ),
                ],
            ),
            MetadataResponseTopic(error_code=3, name="missing"),  # UNKNOWN_TOPIC_OR_PARTITION
            MetadataResponseTopic(error_code=29, name="secret"),  # TOPIC_AUTHORIZATION_FAILED
            MetadataResponseTopic(error_code=0, name="creating"),  # no error, 0 partitions
            MetadataResponseTopic(error_code=0, name="__consumer_offsets", is_internal=True),
        ],
    )


def test_parse_full_response() -> None:
    md = parse_metadata_response(_response())
    assert md.brokers == {
        1: BrokerMetadata(1, "b1", 9092, "r1"),
        2: BrokerMetadata(2, "b2", 9093, None),
        3: BrokerMetadata(3, "b3", 9094, "r2"),
    }
    assert md.controller_id == 2
    assert md.cluster_id == "cid"
    events = md.topics["events"]
    assert events.topic_id == TOPIC_ID
    assert events.error is None
    assert events.ready and not events.complete
    p0, p1 = events.partitions[0], events.partitions[1]
    assert (p0.leader, p0.leader_epoch, p0.replicas, p0.isr, p0.offline_replicas) == (
        1,
        5,
        (1, 2, 3),
        (1, 2),
        (3,),
    )
    assert p0.error is None
    assert p1.leader == -1 and p1.error is LeaderNotAvailableError
    assert events.leader_for(0) == 1
    assert events.leader_for(1) is None
    assert events.leader_for(7) is None
    assert events.available_partitions() == (0,)
    assert md.partitions_for_topic("events") == (0, 1)
    assert md.partitions_led_by(1) == [("events", 0)]

    missing = md.topics["missing"]
    assert missing.error is UnknownTopicOrPartitionError
    assert not missing.ready and not missing.fatal  # retriable: keep retrying
    secret = md.topics["secret"]
    assert secret.error is TopicAuthorizationFailedError and secret.fatal
    assert not md.topics["creating"].ready  # 0 partitions counts as "not there yet"
    assert md.partitions_for_topic("creating") is None
    assert md.topics["__consumer_offsets"].is_internal


@pytest.mark.parametrize("version", range(13))
def test_parse_every_version(version: int) -> None:
    """Decode the same response as each version sends it; absent fields mean "unknown"."""
    data = _response().encode(version)
    md = parse_metadata_response(MetadataResponse.decode(data, version))
    assert set(md.brokers) == {1, 2, 3}
    assert md.brokers[1].host == "b1" and md.brokers[2].port == 9093
    assert md.brokers[1].rack == ("r1" if version >= 1 else None)
    assert md.controller_id == (2 if version >= 1 else None)
    assert md.cluster_id == ("cid" if version >= 2 else None)
    p0 = md.topics["events"].partitions[0]
    assert p0.leader_epoch == (5 if version >= 7 else -1)
    assert p0.offline_replicas == ((3,) if version >= 5 else ())
    assert md.topics["events"].topic_id == (TOPIC_ID if version >= 10 else uuid.UUID(int=0))
    assert md.topics["__consumer_offsets"].is_internal == (version >= 1)
    assert md.topics["missing"].error is UnknownTopicOrPartitionError


def test_merge_keeps_other_topics_and_replaces_brokers() -> None:
    base = ClusterMetadata().merge(parse_metadata_response(_response()))
    assert base.generation == 1
    update = parse_metadata_response(
        MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=9, host="b9", port=1)],
            controller_id=9,
            cluster_id="cid",
            topics=[MetadataResponseTopic(error_code=0, name="new", partitions=[])],
        )
    )
    merged = base.merge(update)
    assert merged.generation == 2
    assert set(merged.brokers) == {9} and merged.controller_id == 9
    assert set(merged.topics) == {
        "events",
        "missing",
        "secret",
        "creating",
        "__consumer_offsets",
        "new",
    }
    assert set(base.merge(update, replace_topics=True).topics) == {"new"}
    # The old snapshot is untouched.
    assert set(base.brokers) == {1, 2, 3}


def test_merge_never_moves_leader_epoch_backwards() -> None:
    """KIP-320: a stale response (older epoch) must not undo what we know."""
    newer = ClusterMetadata().merge(parse_metadata_response(_response(epoch=7)))
    stale = parse_metadata_response(_response(epoch=6))
    merged = newer.merge(stale)
    assert merged.topics["events"].partitions[0].leader_epoch == 7
    fresher = parse_metadata_response(_response(epoch=8))
    assert newer.merge(fresher).topics["events"].partitions[0].leader_epoch == 8


def test_merge_recreated_topic_takes_new_epochs() -> None:
    old = ClusterMetadata().merge(parse_metadata_response(_response(epoch=7)))
    recreated = parse_metadata_response(_response(epoch=0, topic_id=uuid.uuid4()))
    assert old.merge(recreated).topics["events"].partitions[0].leader_epoch == 0


def test_with_leader_hint_only_newer_epoch() -> None:
    md = ClusterMetadata().merge(parse_metadata_response(_response(epoch=5)))
    assert md.with_leader("events", 0, 2, 5) is None  # same epoch: nothing new
    assert md.with_leader("events", 0, 2, 4) is None  # older
    assert md.with_leader("nope", 0, 2, 9) is None
    assert md.with_leader("events", 9, 2, 9) is None
    hinted = md.with_leader("events", 0, 3, 6)
    assert hinted is not None
    p0 = hinted.topics["events"].partitions[0]
    assert (p0.leader, p0.leader_epoch) == (3, 6)
    assert hinted.generation == md.generation + 1
    assert md.topics["events"].partitions[0].leader == 1  # immutable
    # A hint for a partition whose epoch is unknown is taken.
    p1_hint = md.with_leader("events", 1, 2, 5)
    assert p1_hint is None  # epoch 5 known for partition 1 too
    assert md.with_brokers([BrokerMetadata(1, "x", 1)]) is md  # known broker: unchanged
    added = md.with_brokers([BrokerMetadata(4, "b4", 1)])
    assert added.brokers[4].host == "b4"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("h:1", [("h", 1)]),
        ("h1:9092, h2:9093", [("h1", 9092), ("h2", 9093)]),
        ("h1", [("h1", 9092)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("[fe80::1]", [("fe80::1", 9092)]),
        ("::1", [("::1", 9092)]),
        ("127.0.0.1:65535,", [("127.0.0.1", 65535)]),
        (["a:1", "[::1]:2"], [("a", 1), ("::1", 2)]),
    ],
)
def test_parse_bootstrap_servers(text: str | list[str], expected: list[tuple[str, int]]) -> None:
    assert parse_bootstrap_servers(text) == expected


@pytest.mark.parametrize(
    "text", ["", " , ", "h:", "h:0", "h:65536", "h:x", "[::1", "[::1]x", "[nothost]:1", ":9092"]
)
def test_parse_bootstrap_servers_rejects(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bootstrap_servers(text)
    assert "bootstrap_servers" in info.value.errors


def test_cluster_config_requires_servers() -> None:
    with pytest.raises(ConfigError):
        ClusterConfig(bootstrap_servers=[])


def test_a_top_level_error_is_raised_not_read_as_an_empty_cluster() -> None:
    # Metadata v13+: Kafka's whole-request error answer has no brokers and no topics.
    assert set(parse_metadata_response(_response()).brokers) == {1, 2, 3}
    told = _response()
    told.error_code = RebootstrapRequiredError.errno
    with pytest.raises(RebootstrapRequiredError):
        parse_metadata_response(told)
