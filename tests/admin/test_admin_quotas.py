"""Client quotas (KIP-546) on FakeKafka in memory, both APIs scripted: neither Tansu
(TANSU.md) nor FakeKafka models Describe/AlterClientQuotas. The fake decodes our requests
with the codec's server side, so what is asserted is what went over the wire."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.admin import (
    AdminClient,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
)
from aiokafka_ng.errors import InvalidRequestError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import alter_client_quotas as alter
from aiokafka_ng.protocol.messages import describe_client_quotas as describe
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

DESCRIBE, ALTER = 48, 49


def admin_for(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


def test_entities_are_keys() -> None:
    a = ClientQuotaEntity({"user": "alice", "client-id": None})
    assert a == ClientQuotaEntity({"client-id": None, "user": "alice"})
    assert {a: 1}[ClientQuotaEntity({"client-id": None, "user": "alice"})] == 1
    assert a != ClientQuotaEntity({"user": "alice"})
    assert a.entries == {"client-id": None, "user": "alice"}
    with pytest.raises(ValueError):
        ClientQuotaEntity({})


async def test_describe_sends_the_filter_and_decodes_entities() -> None:
    seen: list[describe.DescribeClientQuotasRequest] = []

    def handle(call: Received) -> Any:
        req: describe.DescribeClientQuotasRequest = call.request
        seen.append(req)
        return describe.DescribeClientQuotasResponse(
            entries=[
                describe.EntryData(
                    entity=[describe.EntityData(entity_type="user", entity_name="alice")],
                    values=[describe.ValueData(key="producer_byte_rate", value=1024.0)],
                ),
                describe.EntryData(
                    entity=[
                        describe.EntityData(entity_type="user", entity_name=None),
                        describe.EntityData(entity_type="client-id", entity_name="app"),
                    ],
                    values=[
                        describe.ValueData(key="consumer_byte_rate", value=2048.0),
                        describe.ValueData(key="request_percentage", value=50.0),
                    ],
                ),
            ]
        )

    quota_filter = ClientQuotaFilter.contains_only([
        ClientQuotaFilterComponent.of_entity("user", "alice"),
        ClientQuotaFilterComponent.of_default_entity("client-id"),
        ClientQuotaFilterComponent.of_entity_type("ip"),
    ])  # fmt: skip
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(DESCRIBE, handle)
        quotas = await admin.describe_client_quotas(quota_filter)
        await admin.describe_client_quotas()
    assert quotas == {
        ClientQuotaEntity({"user": "alice"}): {"producer_byte_rate": 1024.0},
        ClientQuotaEntity({"user": None, "client-id": "app"}): {
            "consumer_byte_rate": 2048.0,
            "request_percentage": 50.0,
        },
    }
    first, every = seen
    assert first.strict is True
    assert [(c.entity_type, c.match_type, c.match) for c in first.components] == [
        ("user", 0, "alice"),
        ("client-id", 1, None),
        ("ip", 2, None),
    ]
    assert every.components == [] and every.strict is False


async def test_describe_error_is_raised() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(
            DESCRIBE,
            lambda call: describe.DescribeClientQuotasResponse(
                error_code=InvalidRequestError.errno, error_message="bad filter", entries=None
            ),
        )
        with pytest.raises(InvalidRequestError, match="bad filter"):
            await admin.describe_client_quotas()


async def test_alter_sets_and_removes_per_entity() -> None:
    seen: list[tuple[int, alter.AlterClientQuotasRequest]] = []

    def handle(call: Received) -> Any:
        req: alter.AlterClientQuotasRequest = call.request
        seen.append((call.node, req))
        out = []
        for e in req.entries:
            bad = any(o.key == "bogus" for o in e.ops)
            out.append(
                alter.AlterClientQuotasResponseEntryData(
                    entity=[
                        alter.EntityData(entity_type=x.entity_type, entity_name=x.entity_name)
                        for x in e.entity
                    ],
                    error_code=InvalidRequestError.errno if bad else 0,
                    error_message="unknown quota key" if bad else None,
                )
            )
        return alter.AlterClientQuotasResponse(entries=out)

    alice = ClientQuotaEntity({"user": "alice"})
    app = ClientQuotaEntity({"user": None, "client-id": "app"})
    async with FakeKafka(brokers=2, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.move_controller(2)
        kafka.answer(ALTER, handle)
        results = await admin.alter_client_quotas(
            [
                ClientQuotaAlteration(alice, {"producer_byte_rate": 1e6}),
                ClientQuotaAlteration(alice, {"request_percentage": None}),
                ClientQuotaAlteration(app, {"bogus": 1.0}),
            ],
            validate_only=True,
        )
    assert results.succeeded == {alice: None}
    assert isinstance(results[app], InvalidRequestError)
    ((node, req),) = seen
    assert node == 2 and req.validate_only is True
    first = req.entries[0]
    assert [(e.entity_type, e.entity_name) for e in first.entity] == [("user", "alice")]
    assert [(o.key, o.value, o.remove) for o in first.ops] == [
        ("producer_byte_rate", 1e6, False),
        ("request_percentage", 0.0, True),
    ]


async def test_a_broker_without_the_api_names_the_operation() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        assert not {DESCRIBE, ALTER} & set(kafka.api_versions)  # not modelled: not advertised
        with pytest.raises(UnsupportedVersionError, match="describe_client_quotas"):
            await admin.describe_client_quotas()
        with pytest.raises(UnsupportedVersionError, match="alter_client_quotas"):
            await admin.alter_client_quotas(
                [ClientQuotaAlteration(ClientQuotaEntity({"ip": None}), {"x": 1.0})]
            )
