"""More admin operations on FakeKafka, in memory, on virtual time (why not on Tansu: per
test, see TANSU.md). What FakeKafka models comes from the model; the rest is scripted with
``FakeKafka.answer``."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ConfigSource,
    ElectionType,
    ListOffsetsSpec,
    OffsetAndMetadata,
    PatternType,
    ResourceType,
    TopicPartition,
)
from aiokafka_ng.errors import (
    ElectionNotNeededError,
    InvalidRequestError,
    KafkaStorageError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol.messages import create_acls as ca
from aiokafka_ng.protocol.messages import describe_acls as dsa
from aiokafka_ng.protocol.messages import describe_configs as dc
from aiokafka_ng.protocol.messages import describe_log_dirs as dld
from aiokafka_ng.protocol.messages import describe_producers as dp
from aiokafka_ng.protocol.messages import elect_leaders as el
from aiokafka_ng.protocol.messages import metadata as md
from aiokafka_ng.protocol.messages import offset_fetch as ofe
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_ACLS, DESCRIBE_ACLS = 20, 32, 30, 29
ELECT_LEADERS, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 43, 35, 61
LIST_TRANSACTIONS, DESCRIBE_TRANSACTIONS, OFFSET_FETCH, METADATA = 66, 65, 9, 3
LIST_GROUPS, DESCRIBE_CLUSTER = 16, 60

ALICE_READ = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.PREFIXED,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def admin_for(kafka: FakeKafka, **config: Any) -> AdminClient:
    return AdminClient(
        **kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50, **config
    )


async def test_connection_drop_is_retried() -> None:
    """Tansu keeps connections up: the fake drops the first DeleteTopics connection
    mid-request; the operation reconnects, retries and succeeds."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("a")
        kafka.create_topic("b")
        kafka.answer(DELETE_TOPICS, lambda call: None, times=1)  # drop instead of answering
        async with admin_for(kafka) as admin:
            results = await admin.delete_topics(["a", "b"])
    assert results.raise_on_error() == {"a": None, "b": None}
    first, second = kafka.received(DELETE_TOPICS)
    assert first.connection != second.connection  # retried on a new connection
    assert not kafka.cluster.topics  # the model deleted them


async def test_describe_configs_synonyms_and_sources() -> None:
    """Tansu reports only explicitly set topic keys, no synonyms, and an empty broker
    resource: synonyms/sources/read-only flags are decoded from a canned v4 answer, and the
    broker resource goes to that broker."""

    def handle(call: Received) -> Any:
        req: dc.DescribeConfigsRequest = call.request
        assert req.include_synonyms
        results = []
        for r in req.resources:
            if r.resource_type == 4:  # broker
                configs = [
                    dc.DescribeConfigsResourceResult(
                        name="log.retention.ms",
                        value="86400000",
                        read_only=False,
                        config_source=2,
                        synonyms=[
                            dc.DescribeConfigsSynonym("log.retention.ms", "86400000", 2),
                            dc.DescribeConfigsSynonym("log.retention.hours", "168", 4),
                        ],
                        config_type=5,
                    ),
                    dc.DescribeConfigsResourceResult(
                        name="ssl.key.password", value=None, is_sensitive=True, config_source=4
                    ),
                ]
            else:
                configs = [
                    dc.DescribeConfigsResourceResult(
                        name="cleanup.policy", value="delete", read_only=False, config_source=5
                    )
                ]
            results.append(
                dc.DescribeConfigsResult(
                    resource_type=r.resource_type, resource_name=r.resource_name, configs=configs
                )
            )
        return dc.DescribeConfigsResponse(results=results)

    broker, topic = ConfigResource.broker(2), ConfigResource.topic("t")
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.answer(DESCRIBE_CONFIGS, handle)
        async with admin_for(kafka) as admin:
            results = await admin.describe_configs([broker, topic], include_synonyms=True)
    ok = results.raise_on_error()
    retention = ok[broker]["log.retention.ms"]
    assert retention.source is ConfigSource.DYNAMIC_BROKER_CONFIG
    assert not retention.is_default
    assert [(s.name, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG),
    ]
    assert ok[broker]["ssl.key.password"].is_sensitive
    assert ok[broker]["ssl.key.password"].value is None
    assert ok[topic]["cleanup.policy"].is_default
    to_broker = [
        r for r in kafka.received(DESCRIBE_CONFIGS) if r.request.resources[0].resource_type == 4
    ]
    assert [r.node for r in to_broker] == [2]


async def test_create_and_describe_acls() -> None:
    """Tansu answers CreateAcls with a null results array (undecodable): canned answers."""
    other = AclBinding(
        ResourceType.GROUP,
        "g",
        PatternType.LITERAL,
        "User:bob",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.DENY,
    )

    def create(call: Received) -> Any:
        req: ca.CreateAclsRequest = call.request
        assert [c.resource_pattern_type for c in req.creations] == [4, 3]
        return ca.CreateAclsResponse(
            results=[
                ca.AclCreationResult(),
                ca.AclCreationResult(error_code=42, error_message="bad principal"),
            ]
        )

    def describe(call: Received) -> Any:
        req: dsa.DescribeAclsRequest = call.request
        assert (req.resource_type_filter, req.resource_name_filter) == (2, "orders")
        return dsa.DescribeAclsResponse(
            resources=[
                dsa.DescribeAclsResource(
                    resource_type=2,
                    resource_name="orders",
                    pattern_type=4,
                    acls=[dsa.AclDescription("User:alice", "*", 3, 3)],
                )
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(CREATE_ACLS, create)
        kafka.answer(DESCRIBE_ACLS, describe)
        created = await admin.create_acls([ALICE_READ, other])
        found = await admin.describe_acls(
            AclBindingFilter(resource_type=ResourceType.TOPIC, name="orders")
        )
    assert created[ALICE_READ] is None
    assert isinstance(created[other], InvalidRequestError)
    assert found == [ALICE_READ]
    assert kafka.received(CREATE_ACLS)[0].version >= 1  # PREFIXED needs v1 (KIP-290)


async def test_elect_leaders() -> None:
    """Tansu does not advertise ElectLeaders (and has one replica per partition)."""

    def handle(call: Received) -> Any:
        req: el.ElectLeadersRequest = call.request
        assert req.election_type == 1
        return el.ElectLeadersResponse(
            replica_election_results=[
                el.ReplicaElectionResult(
                    topic="t",
                    partition_result=[
                        el.PartitionResult(partition_id=0),
                        el.PartitionResult(partition_id=1, error_code=84),
                    ],
                )
            ]
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.move_controller(2)
        kafka.answer(ELECT_LEADERS, handle)
        results = await admin.elect_leaders(ElectionType.UNCLEAN, [("t", 0), ("t", 1)])
        everything = await admin.elect_leaders(ElectionType.UNCLEAN)  # every partition
    for r in (results, everything):
        assert r[TopicPartition("t", 0)] is None
        assert isinstance(r[TopicPartition("t", 1)], ElectionNotNeededError)
    first, second = kafka.received(ELECT_LEADERS)
    assert (first.node, second.node) == (2, 2)  # the controller
    assert second.request.topic_partitions is None


async def test_describe_log_dirs_each_broker() -> None:
    """Tansu does not advertise DescribeLogDirs: each broker is asked for its own dirs."""

    def handle(call: Received) -> Any:
        req: dld.DescribeLogDirsRequest = call.request
        node = call.node
        assert req.topics is None  # all of them
        return dld.DescribeLogDirsResponse(
            results=[
                dld.DescribeLogDirsResult(
                    log_dir=f"/data{node}",
                    error_code=0 if node == 1 else 56,
                    topics=[
                        dld.DescribeLogDirsTopic(
                            name="t",
                            partitions=[dld.DescribeLogDirsPartition(0, 1234, 0, False)],
                        )
                    ],
                    total_bytes=10_000,
                    usable_bytes=4_000,
                )
            ]
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(DESCRIBE_LOG_DIRS, handle)
        results = (await admin.describe_log_dirs()).raise_on_error()
    assert set(results) == {1, 2}
    d1 = results[1]["/data1"]
    assert d1.error is None and d1.replicas[TopicPartition("t", 0)].size == 1234
    assert (d1.total_bytes, d1.usable_bytes) == (10_000, 4_000)
    assert isinstance(results[2]["/data2"].error, KafkaStorageError)


async def test_describe_producers_at_leaders() -> None:
    """Tansu does not advertise DescribeProducers: asked of each partition's leader."""

    def handle(call: Received) -> Any:
        req: dp.DescribeProducersRequest = call.request
        node = call.node
        (t,) = req.topics
        return dp.DescribeProducersResponse(
            topics=[
                dp.TopicResponse(
                    name=t.name,
                    partitions=[
                        dp.PartitionResponse(
                            partition_index=p,
                            active_producers=[dp.ProducerState(producer_id=1000 + node)],
                        )
                        for p in t.partition_indexes
                    ],
                )
            ]
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.create_topic("t", 2, 1)
        kafka.move_leader("t", 0, 1)
        kafka.move_leader("t", 1, 2)
        kafka.answer(DESCRIBE_PRODUCERS, handle)
        ok = (await admin.describe_producers([("t", 0), ("t", 1)])).raise_on_error()
    assert ok[TopicPartition("t", 0)][0].producer_id == 1001
    assert ok[TopicPartition("t", 1)][0].producer_id == 1002
    assert ok[TopicPartition("t", 1)][0].current_transaction_start_offset is None


async def test_list_and_describe_transactions() -> None:
    """Tansu does not advertise List/DescribeTransactions: every broker is listed; each
    transactional id is described at its transaction coordinator (the model's: two
    producers with an ongoing transaction each)."""
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", 2)
        kafka.move_coordinator("tx-1", 2)
        kafka.move_coordinator("tx-2", 1)
        config = kafka.client_config()
        async with (
            Producer(**config, transactional_id="tx-1") as one,
            Producer(**config, transactional_id="tx-2") as two,
            admin_for(kafka) as admin,
        ):
            for producer, partitions in ((one, (0, 1)), (two, (1,))):
                producer.begin_transaction()
                for p in partitions:
                    await producer.send_and_wait("t", b"v", partition=p)
            listed = await admin.list_transactions(states=["Ongoing"])
            described = await admin.describe_transactions(["tx-1", "tx-gone"])
            await one.abort_transaction()
            await two.abort_transaction()
    assert [t.transactional_id for t in listed] == ["tx-1", "tx-2"]
    assert len({t.producer_id for t in listed}) == 2
    tx = described.result("tx-1")
    assert (tx.coordinator_id, tx.state, tx.producer_epoch) == (2, "Ongoing", 0)
    assert tx.producer_id == next(t.producer_id for t in listed if t.transactional_id == "tx-1")
    assert tx.topic_partitions == [("t", 0), ("t", 1)]
    assert isinstance(described["tx-gone"], TransactionalIdNotFoundError)
    assert {r.node for r in kafka.received(LIST_TRANSACTIONS)} == {1, 2}  # every broker
    asked = {
        tid: r.node
        for r in kafka.received(DESCRIBE_TRANSACTIONS)
        for tid in r.request.transactional_ids
    }
    assert asked == {"tx-1": 2, "tx-gone": kafka.coordinator_for("tx-gone")}


async def test_states_filter_needs_list_groups_v4() -> None:
    """An old broker (ListGroups < v4) cannot filter by state: named UnsupportedVersionError."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.api_versions[LIST_GROUPS] = (kafka.api_versions[LIST_GROUPS][0], 3)
        async with admin_for(kafka) as admin:
            with pytest.raises(UnsupportedVersionError, match="list_consumer_groups"):
                await admin.list_consumer_groups(states=["Stable"])
    assert kafka.received(LIST_GROUPS) == []


async def test_unknown_topic_and_partition_fail_fast() -> None:
    """Tansu auto-creates any topic a Metadata request names: an unknown topic or partition
    is shown on the fake, where it fails at once (no retry until the timeout)."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 1)
        async with admin_for(kafka, default_api_timeout_ms=30000) as admin:
            start = anyio.current_time()
            described = await admin.describe_topics(["t", "missing"])
            offsets = await admin.list_offsets(
                {("missing", 0): ListOffsetsSpec.earliest(), ("t", 5): ListOffsetsSpec.earliest()}
            )
            elapsed = anyio.current_time() - start
    assert described.result("t").partitions[0].partition == 0
    assert isinstance(described["missing"], UnknownTopicOrPartitionError)
    # Said as the topic's absence, not the code's "does not host this topic-partition".
    assert "topic 'missing' does not exist" in str(described["missing"])
    assert isinstance(offsets[TopicPartition("missing", 0)], UnknownTopicOrPartitionError)
    assert "no partition 5" in str(offsets[TopicPartition("t", 5)])
    assert elapsed < 1  # virtual seconds: a retry until the 30 s timeout would show
    assert "missing" not in kafka.cluster.topics  # the admin's Metadata does not create it


async def test_group_offsets_retry_while_coordinator_loads() -> None:
    """COORDINATOR_LOAD_IN_PROGRESS (a coordinator just took over; never seen on Tansu) is
    retried with backoff; the OffsetFetch v8+ per-group layout is decoded, a partition
    without a committed offset left out."""

    def loading(call: Received) -> Any:
        return ofe.OffsetFetchResponse(
            groups=[
                ofe.OffsetFetchResponseGroup(group_id=g.group_id, error_code=14)
                for g in call.request.groups
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 2)
        async with admin_for(kafka) as admin:
            await admin.alter_consumer_group_offsets(
                "g", {TopicPartition("t", 0): OffsetAndMetadata(7, "m", 2)}
            )
            # inject has no OffsetFetch v8+ layout (the error is per group): scripted once.
            kafka.answer(OFFSET_FETCH, loading, times=1)
            offsets = await admin.list_consumer_group_offsets("g")
            some = await admin.list_consumer_group_offsets(
                "g", partitions=[TopicPartition("t", 0), TopicPartition("t", 1)]
            )
    assert offsets == {TopicPartition("t", 0): OffsetAndMetadata(7, "m", 2)}
    assert some == offsets  # t-1 has no committed offset (-1): left out
    first, second, _ = kafka.received(OFFSET_FETCH)
    assert first.version >= 8 and first.request.groups[0].group_id == "g"
    assert second.at - first.at >= 0.016  # backed off (20 ms, -20% jitter) before retrying


async def test_group_offsets_before_v8_layout() -> None:
    """A broker with OffsetFetch up to v7 answers at the top level (Tansu offers v9)."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 4)
        kafka.api_versions[OFFSET_FETCH] = (kafka.api_versions[OFFSET_FETCH][0], 7)
        async with admin_for(kafka) as admin:
            await admin.alter_consumer_group_offsets("g", {TopicPartition("t", 3): 11})
            offsets = await admin.list_consumer_group_offsets("g", partitions=[("t", 3)])
    assert offsets == {TopicPartition("t", 3): OffsetAndMetadata(11, "", None)}
    (sent,) = kafka.received(OFFSET_FETCH)
    assert sent.version == 7 and sent.request.group_id == "g"
    assert [(t.name, t.partition_indexes) for t in sent.request.topics or ()] == [("t", [3])]


async def test_cluster_from_metadata_and_internal_topics() -> None:
    """Tansu offers DescribeCluster and has no internal topics: a broker without
    DescribeCluster is described from Metadata; internal topics are listed only on request.
    (FakeKafka's Metadata leaves internal topics out of an all-topics answer, so this one
    is scripted: two topics, one internal.)"""
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.move_controller(2)
        del kafka.api_versions[DESCRIBE_CLUSTER]

        def metadata(call: Received) -> Any:
            return md.MetadataResponse(
                brokers=[
                    md.MetadataResponseBroker(node_id=n, host=host, port=port)
                    for n, host, port in kafka.endpoints()
                ],
                cluster_id="fake-cluster",
                controller_id=kafka.controller,
                topics=[
                    md.MetadataResponseTopic(name=name, is_internal=name.startswith("__"))
                    for name in ("a", "__consumer_offsets")
                ],
            )

        kafka.answer(METADATA, metadata)
        async with admin_for(kafka) as admin:
            cluster = await admin.describe_cluster()
            public = await admin.list_topics()
            everything = await admin.list_topics(include_internal=True)
    assert cluster.cluster_id == "fake-cluster"
    assert [b.node_id for b in cluster.brokers] == [1, 2]
    assert cluster.controller is not None and cluster.controller.node_id == 2
    assert list(public) == ["a"]
    assert list(everything) == ["__consumer_offsets", "a"]
    assert everything["__consumer_offsets"].is_internal
    assert kafka.received(DESCRIBE_CLUSTER) == []
