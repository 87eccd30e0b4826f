"""More admin operations on the in-test fake broker (reasons per test, see TANSU.md)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from admin_fake_broker import FakeCluster

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
from aiokafka_ng.protocol.messages import create_acls as ca
from aiokafka_ng.protocol.messages import delete_topics as dt
from aiokafka_ng.protocol.messages import describe_acls as dsa
from aiokafka_ng.protocol.messages import describe_configs as dc
from aiokafka_ng.protocol.messages import describe_log_dirs as dld
from aiokafka_ng.protocol.messages import describe_producers as dp
from aiokafka_ng.protocol.messages import describe_transactions as dtx
from aiokafka_ng.protocol.messages import elect_leaders as el
from aiokafka_ng.protocol.messages import find_coordinator as fc
from aiokafka_ng.protocol.messages import list_transactions as ltx
from aiokafka_ng.protocol.messages import offset_fetch as ofe

pytestmark = pytest.mark.anyio

DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_ACLS, DESCRIBE_ACLS = 20, 32, 30, 29
ELECT_LEADERS, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 43, 35, 61
LIST_TRANSACTIONS, DESCRIBE_TRANSACTIONS, FIND_COORDINATOR, OFFSET_FETCH = 66, 65, 10, 9

ALICE_READ = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.PREFIXED,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def admin_for(fake: FakeCluster, **config: Any) -> AdminClient:
    return AdminClient(
        bootstrap_servers=fake.bootstrap_servers,
        retry_backoff_ms=20,
        retry_backoff_max_ms=50,
        **config,
    )


async def test_connection_drop_is_retried() -> None:
    """Tansu keeps connections up: the fake drops the first DeleteTopics connection
    mid-request; the operation reconnects, retries and succeeds."""
    fake = FakeCluster()
    calls = []

    def handle(node: int, req: dt.DeleteTopicsRequest, version: int) -> Any:
        calls.append(version)
        if len(calls) == 1:
            return None  # drop the connection instead of answering
        return dt.DeleteTopicsResponse(
            responses=[dt.DeletableTopicResult(name=n.name) for n in req.topics]
        )

    fake.handlers[DELETE_TOPICS] = handle
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.delete_topics(["a", "b"])
    assert results.raise_on_error() == {"a": None, "b": None}
    assert len(calls) == 2


async def test_describe_configs_synonyms_and_sources() -> None:
    """Tansu reports only explicitly set topic keys, no synonyms, and an empty broker
    resource: synonyms/sources/read-only flags are decoded from a canned v4 answer, and the
    broker resource goes to that broker."""
    fake = FakeCluster(node_ids=(1, 2))

    def handle(node: int, req: dc.DescribeConfigsRequest, version: int) -> Any:
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

    fake.handlers[DESCRIBE_CONFIGS] = handle
    broker, topic = ConfigResource.broker(2), ConfigResource.topic("t")
    async with fake.running(), admin_for(fake) as admin:
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
        r for r in fake.requests(DESCRIBE_CONFIGS) if r.request.resources[0].resource_type == 4
    ]
    assert [r.node_id for r in to_broker] == [2]


async def test_create_and_describe_acls() -> None:
    """Tansu answers CreateAcls with a null results array (undecodable): canned answers."""
    fake = FakeCluster()
    other = AclBinding(
        ResourceType.GROUP,
        "g",
        PatternType.LITERAL,
        "User:bob",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.DENY,
    )

    def create(node: int, req: ca.CreateAclsRequest, version: int) -> Any:
        assert [c.resource_pattern_type for c in req.creations] == [4, 3]
        return ca.CreateAclsResponse(
            results=[
                ca.AclCreationResult(),
                ca.AclCreationResult(error_code=42, error_message="bad principal"),
            ]
        )

    def describe(node: int, req: dsa.DescribeAclsRequest, version: int) -> Any:
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

    fake.handlers[CREATE_ACLS] = create
    fake.handlers[DESCRIBE_ACLS] = describe
    async with fake.running(), admin_for(fake) as admin:
        created = await admin.create_acls([ALICE_READ, other])
        found = await admin.describe_acls(
            AclBindingFilter(resource_type=ResourceType.TOPIC, name="orders")
        )
    assert created[ALICE_READ] is None
    assert isinstance(created[other], InvalidRequestError)
    assert found == [ALICE_READ]
    assert fake.requests(CREATE_ACLS)[0].version >= 1  # PREFIXED needs v1 (KIP-290)


async def test_elect_leaders() -> None:
    """Tansu does not advertise ElectLeaders (and has one replica per partition)."""
    fake = FakeCluster(node_ids=(1, 2), controller=2)

    def handle(node: int, req: el.ElectLeadersRequest, version: int) -> Any:
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

    fake.handlers[ELECT_LEADERS] = handle
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.elect_leaders(ElectionType.UNCLEAN, [("t", 0), ("t", 1)])
        everything = await admin.elect_leaders(ElectionType.UNCLEAN)  # every partition
    for r in (results, everything):
        assert r[TopicPartition("t", 0)] is None
        assert isinstance(r[TopicPartition("t", 1)], ElectionNotNeededError)
    first, second = fake.requests(ELECT_LEADERS)
    assert (first.node_id, second.node_id) == (2, 2)  # the controller
    assert second.request.topic_partitions is None


async def test_describe_log_dirs_each_broker() -> None:
    """Tansu does not advertise DescribeLogDirs: each broker is asked for its own dirs."""
    fake = FakeCluster(node_ids=(1, 2))

    def handle(node: int, req: dld.DescribeLogDirsRequest, version: int) -> Any:
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

    fake.handlers[DESCRIBE_LOG_DIRS] = handle
    async with fake.running(), admin_for(fake) as admin:
        results = (await admin.describe_log_dirs()).raise_on_error()
    assert set(results) == {1, 2}
    d1 = results[1]["/data1"]
    assert d1.error is None and d1.replicas[TopicPartition("t", 0)].size == 1234
    assert (d1.total_bytes, d1.usable_bytes) == (10_000, 4_000)
    assert isinstance(results[2]["/data2"].error, KafkaStorageError)


async def test_describe_producers_at_leaders() -> None:
    """Tansu does not advertise DescribeProducers: asked of each partition's leader."""
    fake = FakeCluster(node_ids=(1, 2), topics={"t": 2}, leaders={("t", 0): 1, ("t", 1): 2})

    def handle(node: int, req: dp.DescribeProducersRequest, version: int) -> Any:
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

    fake.handlers[DESCRIBE_PRODUCERS] = handle
    async with fake.running(), admin_for(fake) as admin:
        ok = (await admin.describe_producers([("t", 0), ("t", 1)])).raise_on_error()
    assert ok[TopicPartition("t", 0)][0].producer_id == 1001
    assert ok[TopicPartition("t", 1)][0].producer_id == 1002
    assert ok[TopicPartition("t", 1)][0].current_transaction_start_offset is None


async def test_list_and_describe_transactions() -> None:
    """Tansu does not advertise List/DescribeTransactions: every broker is listed; each
    transactional id is described at its transaction coordinator."""
    fake = FakeCluster(node_ids=(1, 2))

    def listing(node: int, req: ltx.ListTransactionsRequest, version: int) -> Any:
        assert req.state_filters == ["Ongoing"]
        return ltx.ListTransactionsResponse(
            transaction_states=[ltx.TransactionState(f"tx-{node}", 100 + node, "Ongoing")]
        )

    def find(node: int, req: fc.FindCoordinatorRequest, version: int) -> Any:
        assert req.key_type == 1
        return fc.FindCoordinatorResponse(
            coordinators=[
                fc.Coordinator(key=k, node_id=2, host="127.0.0.1", port=fake.ports[2])
                for k in req.coordinator_keys
            ]
        )

    def describe(node: int, req: dtx.DescribeTransactionsRequest, version: int) -> Any:
        return dtx.DescribeTransactionsResponse(
            transaction_states=[
                dtx.TransactionState(
                    transactional_id="tx-1",
                    transaction_state="Ongoing",
                    transaction_timeout_ms=60000,
                    transaction_start_time_ms=5,
                    producer_id=101,
                    producer_epoch=3,
                    topics=[dtx.TopicData("t", [0, 1])],
                ),
                dtx.TransactionState(error_code=105, transactional_id="tx-gone"),
            ]
        )

    fake.handlers[LIST_TRANSACTIONS] = listing
    fake.handlers[FIND_COORDINATOR] = find
    fake.handlers[DESCRIBE_TRANSACTIONS] = describe
    async with fake.running(), admin_for(fake) as admin:
        listed = await admin.list_transactions(states=["Ongoing"])
        described = await admin.describe_transactions(["tx-1", "tx-gone"])
    assert [(t.transactional_id, t.producer_id) for t in listed] == [("tx-1", 101), ("tx-2", 102)]
    tx = described.result("tx-1")
    assert (tx.coordinator_id, tx.producer_epoch) == (2, 3)
    assert tx.topic_partitions == [("t", 0), ("t", 1)]
    assert isinstance(described["tx-gone"], TransactionalIdNotFoundError)
    assert {r.node_id for r in fake.requests(DESCRIBE_TRANSACTIONS)} == {2}


async def test_states_filter_needs_list_groups_v4() -> None:
    """An old broker (ListGroups < v4) cannot filter by state: named UnsupportedVersionError."""
    fake = FakeCluster()
    fake.max_versions[16] = 3
    async with fake.running(), admin_for(fake) as admin:
        with pytest.raises(UnsupportedVersionError, match="list_consumer_groups"):
            await admin.list_consumer_groups(states=["Stable"])


async def test_unknown_topic_and_partition_fail_fast() -> None:
    """Tansu auto-creates any topic a Metadata request names: an unknown topic or partition
    is shown on the fake, where it fails at once (no retry until the timeout)."""
    fake = FakeCluster(topics={"t": 1})
    async with fake.running(), admin_for(fake, default_api_timeout_ms=30000) as admin:
        start = anyio.current_time()
        described = await admin.describe_topics(["t", "missing"])
        offsets = await admin.list_offsets(
            {("missing", 0): ListOffsetsSpec.earliest(), ("t", 5): ListOffsetsSpec.earliest()}
        )
        elapsed = anyio.current_time() - start
    assert described.result("t").partitions[0].partition == 0
    assert isinstance(described["missing"], UnknownTopicOrPartitionError)
    assert isinstance(offsets[TopicPartition("missing", 0)], UnknownTopicOrPartitionError)
    assert "no partition 5" in str(offsets[TopicPartition("t", 5)])
    assert elapsed < 5


async def test_group_offsets_retry_while_coordinator_loads() -> None:
    """COORDINATOR_LOAD_IN_PROGRESS (a coordinator just took over; never seen on Tansu) is
    retried with backoff; the OffsetFetch v8+ per-group layout is decoded."""
    fake = FakeCluster()
    answers = [14, 0]  # loading, then the offsets

    def find(node: int, req: fc.FindCoordinatorRequest, version: int) -> Any:
        return fc.FindCoordinatorResponse(
            coordinators=[
                fc.Coordinator(key=k, node_id=1, host="127.0.0.1", port=fake.ports[1])
                for k in req.coordinator_keys
            ]
        )

    def fetch(node: int, req: ofe.OffsetFetchRequest, version: int) -> Any:
        assert version >= 8 and req.groups[0].group_id == "g"
        code = answers.pop(0)
        return ofe.OffsetFetchResponse(
            groups=[
                ofe.OffsetFetchResponseGroup(
                    group_id="g",
                    error_code=code,
                    topics=[]
                    if code
                    else [
                        ofe.OffsetFetchResponseTopics(
                            name="t",
                            partitions=[
                                ofe.OffsetFetchResponsePartitions(
                                    partition_index=0,
                                    committed_offset=7,
                                    committed_leader_epoch=2,
                                    metadata="m",
                                ),
                                ofe.OffsetFetchResponsePartitions(
                                    partition_index=1, committed_offset=-1
                                ),
                            ],
                        )
                    ],
                )
            ]
        )

    fake.handlers[FIND_COORDINATOR] = find
    fake.handlers[OFFSET_FETCH] = fetch
    async with fake.running(), admin_for(fake) as admin:
        offsets = await admin.list_consumer_group_offsets("g")
    assert offsets == {TopicPartition("t", 0): OffsetAndMetadata(7, "m", 2)}
    assert len(fake.requests(OFFSET_FETCH)) == 2


async def test_group_offsets_before_v8_layout() -> None:
    """A broker with OffsetFetch up to v7 answers at the top level (Tansu offers v9)."""
    fake = FakeCluster()
    fake.max_versions[OFFSET_FETCH] = 7

    def find(node: int, req: fc.FindCoordinatorRequest, version: int) -> Any:
        return fc.FindCoordinatorResponse(
            coordinators=[
                fc.Coordinator(key=k, node_id=1, host="127.0.0.1", port=fake.ports[1])
                for k in req.coordinator_keys
            ]
        )

    def fetch(node: int, req: ofe.OffsetFetchRequest, version: int) -> Any:
        assert version == 7 and req.group_id == "g"
        assert [(t.name, t.partition_indexes) for t in req.topics or ()] == [("t", [3])]
        return ofe.OffsetFetchResponse(
            topics=[
                ofe.OffsetFetchResponseTopic(
                    name="t",
                    partitions=[
                        ofe.OffsetFetchResponsePartition(
                            partition_index=3, committed_offset=11, metadata=None
                        )
                    ],
                )
            ]
        )

    fake.handlers[FIND_COORDINATOR] = find
    fake.handlers[OFFSET_FETCH] = fetch
    async with fake.running(), admin_for(fake) as admin:
        offsets = await admin.list_consumer_group_offsets("g", partitions=[("t", 3)])
    assert offsets == {TopicPartition("t", 3): OffsetAndMetadata(11, "", None)}


async def test_cluster_from_metadata_and_internal_topics() -> None:
    """Tansu offers DescribeCluster and has no internal topics: a broker without
    DescribeCluster is described from Metadata; internal topics are listed only on request."""
    fake = FakeCluster(node_ids=(1, 2), controller=2, topics={"a": 1, "__consumer_offsets": 1})
    fake.missing_apis.add(60)  # DescribeCluster
    default = fake._metadata

    def metadata(node: int, req: Any, version: int) -> Any:
        resp = default(req)
        for t in resp.topics:
            t.is_internal = t.name == "__consumer_offsets"
        return resp

    fake.handlers[3] = metadata
    async with fake.running(), admin_for(fake) as admin:
        cluster = await admin.describe_cluster()
        public = await admin.list_topics()
        everything = await admin.list_topics(include_internal=True)
    assert cluster.cluster_id == "fake-cluster"
    assert [b.node_id for b in cluster.brokers] == [1, 2]
    assert cluster.controller is not None and cluster.controller.node_id == 2
    assert list(public) == ["a"]
    assert list(everything) == ["__consumer_offsets", "a"]
    assert everything["__consumer_offsets"].is_internal
