"""describe/update_features on FakeKafka in memory (Tansu reports no features and has no
UpdateFeatures, TANSU.md; the fake reports its own finalized features, UpdateFeatures is
scripted); list_groups (KIP-1043) against the real broker (type filter included) and, for
types neither Tansu nor FakeKafka runs (share, streams) and the v5 rule, on FakeKafka with
ListGroups scripted."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from confluent_kafka import Producer as CProducer

from aiokafka_ng.admin import (
    AdminClient,
    FeatureMetadata,
    FeatureUpdate,
    GroupListing,
    GroupType,
    NewTopic,
    UpgradeType,
)
from aiokafka_ng.errors import InvalidUpdateVersionError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import list_groups as lgr
from aiokafka_ng.protocol.messages import update_features as uf
from aiokafka_ng.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from aiokafka_ng.testing import FakeKafka, LocalBroker
from aiokafka_ng.testing.fake import Received
from tests.admin.test_admin_broker import _consume, admin_for
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

LIST_GROUPS, UPDATE_FEATURES, API_VERSIONS = 16, 57, 18


def fake_admin(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


async def test_list_groups_of_every_type_against_the_broker(kafka_broker: LocalBroker) -> None:
    topic, group = topic_name("lg-topic"), topic_name("lg")
    bootstrap = kafka_broker.bootstrap_servers
    async with admin_for(kafka_broker) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
        producer = CProducer({"bootstrap.servers": bootstrap})
        producer.produce(topic, b"v", partition=0)
        assert await anyio.to_thread.run_sync(lambda: producer.flush(20)) == 0
        member = await anyio.to_thread.run_sync(_consume, bootstrap, topic, group, 1)
        try:
            listed = {g.group_id: g for g in await admin.list_groups()}
            # Tansu answers ListGroups v5 with type "classic" and, for a group with a
            # member, state "Unknown" (DescribeGroups says "Stable"): the state is not
            # asserted here, the fake-broker test below covers decoding it.
            assert (listed[group].type, listed[group].protocol_type) == (
                GroupType.CLASSIC,
                "consumer",
            )
            only_classic = await admin.list_groups(types=[GroupType.CLASSIC])
            assert group in [g.group_id for g in only_classic]
        finally:
            await anyio.to_thread.run_sync(member.close)


async def test_list_groups_type_filter_and_types() -> None:
    seen: list[tuple[int, list[str]]] = []

    def handle(call: Received) -> Any:
        req: lgr.ListGroupsRequest = call.request
        seen.append((call.version, list(req.types_filter)))
        groups = {
            1: [
                lgr.ListedGroup(
                    group_id="s1", protocol_type="share", group_state="Stable", group_type="share"
                )
            ],
            2: [
                lgr.ListedGroup(
                    group_id="c1",
                    protocol_type="consumer",
                    group_state="Empty",
                    group_type="Classic",
                ),
                lgr.ListedGroup(
                    group_id="k1", protocol_type="streams", group_state="", group_type="streams"
                ),
            ],
        }[call.node]
        return lgr.ListGroupsResponse(groups=groups)

    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.answer(LIST_GROUPS, handle)
        every = await admin.list_groups()
        await admin.list_groups(types=[GroupType.SHARE, "streams"])
    assert every == [
        GroupListing("c1", GroupType.CLASSIC, "consumer", "Empty"),
        GroupListing("k1", GroupType.STREAMS, "streams", None),
        GroupListing("s1", GroupType.SHARE, "share", "Stable"),
    ]
    filtered = [s for s in seen if s[1]]
    assert filtered and all(v >= 5 and t == ["share", "streams"] for v, t in filtered)


async def test_type_filter_needs_list_groups_v5() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.api_versions[LIST_GROUPS] = (kafka.api_versions[LIST_GROUPS][0], 4)
        with pytest.raises(Exception) as info:
            await admin.list_groups(types=["share"])
    errors = getattr(info.value, "errors", {}) or {0: info.value}
    assert all(isinstance(e, UnsupportedVersionError) for e in errors.values())
    assert "ListGroupsRequest v5" in str(next(iter(errors.values())))


async def test_features_described_and_updated() -> None:
    # UpdateFeatures v0-1 answer per feature (v2 does not: see the next test).
    seen: list[tuple[int, int, uf.UpdateFeaturesRequest]] = []

    def update(call: Received) -> Any:
        req: uf.UpdateFeaturesRequest = call.request
        seen.append((call.node, call.version, req))
        return uf.UpdateFeaturesResponse(
            results=[
                uf.UpdatableFeatureResult(
                    feature=f.feature,
                    error_code=InvalidUpdateVersionError.errno if f.max_version_level > 20 else 0,
                )
                for f in req.feature_updates
            ]
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.move_controller(2)
        kafka.answer(UPDATE_FEATURES, update)
        kafka.api_versions[UPDATE_FEATURES] = (0, 1)
        features = await admin.describe_features()
        results = await admin.update_features(
            {
                "metadata.version": FeatureUpdate(20),
                "kraft.version": FeatureUpdate(0, UpgradeType.UNSAFE_DOWNGRADE),
                "group.version": FeatureUpdate(99),
            },
            validate_only=True,
        )
    # What the fake's ApiVersions v3+ reports: a Kafka 4 cluster's defaults.
    assert features == FeatureMetadata(
        {"group.version": (1, 1), "transaction.version": (2, 2)},
        1,
        {"group.version": (0, 1), "transaction.version": (0, 2)},
    )
    assert results.succeeded == {"metadata.version": None, "kraft.version": None}
    assert isinstance(results["group.version"], InvalidUpdateVersionError)
    ((node, version, req),) = seen
    assert node == 2 and version == 1 and req.validate_only is True
    assert [(f.feature, f.max_version_level, f.upgrade_type) for f in req.feature_updates] == [
        ("metadata.version", 20, 1),
        ("kraft.version", 0, 3),
        ("group.version", 99, 1),
    ]


async def test_a_broker_naming_no_features_is_an_empty_answer() -> None:
    # ApiVersions without the v3 feature fields filled in (a broker before KIP-584's
    # features, or one with none finalized): an empty, well-formed description.
    def no_features(call: Received) -> ApiVersionsResponse:
        return ApiVersionsResponse(
            api_keys=[ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(kafka.api_versions.items())]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.answer(API_VERSIONS, no_features)
        async with fake_admin(kafka) as admin:
            features = await admin.describe_features()
    assert features == FeatureMetadata({}, None, {})
    assert kafka.received(API_VERSIONS)  # answered by the script


async def test_update_features_v2_is_all_or_nothing() -> None:
    answers = iter([
        uf.UpdateFeaturesResponse(),
        uf.UpdateFeaturesResponse(
            error_code=InvalidUpdateVersionError.errno, error_message="too new"
        ),
    ])  # fmt: skip
    async with FakeKafka(brokers=1, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.answer(UPDATE_FEATURES, lambda call: next(answers))
        ok = await admin.update_features({"group.version": FeatureUpdate(1)})
        bad = await admin.update_features(
            {"group.version": FeatureUpdate(9), "share.version": FeatureUpdate(9)}
        )
    assert [r.version for r in kafka.received(UPDATE_FEATURES)] == [2, 2]
    assert ok.raise_on_error() == {"group.version": None}
    assert all(isinstance(e, InvalidUpdateVersionError) for e in bad.failed.values())
    assert set(bad.failed) == {"group.version", "share.version"}
