"""Delegation tokens (KIP-48) on FakeKafka in memory, the token APIs scripted: neither Tansu
(TANSU.md) nor FakeKafka issues tokens. The fake decodes our requests with the codec's
server side."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.admin import AdminClient, DelegationToken, TokenInformation
from aiokafka_ng.errors import DelegationTokenExpiredError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import create_delegation_token as cdt
from aiokafka_ng.protocol.messages import describe_delegation_token as ddt
from aiokafka_ng.protocol.messages import expire_delegation_token as edt
from aiokafka_ng.protocol.messages import renew_delegation_token as rdt
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
SECRET = b"hmac-SENTINEL-91"


def admin_for(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


async def test_token_lifecycle_and_hmac_stays_out_of_reprs() -> None:
    seen: list[Any] = []

    def create(call: Received) -> Any:
        req: cdt.CreateDelegationTokenRequest = call.request
        seen.append(req)
        return cdt.CreateDelegationTokenResponse(
            principal_type="User",
            principal_name="alice",
            issue_timestamp_ms=1000,
            expiry_timestamp_ms=2000,
            max_timestamp_ms=3000,
            token_id="tok-1",
            hmac=SECRET,
        )

    def renew(call: Received) -> Any:
        req: rdt.RenewDelegationTokenRequest = call.request
        seen.append(req)
        return rdt.RenewDelegationTokenResponse(expiry_timestamp_ms=2500)

    def expire(call: Received) -> Any:
        req: edt.ExpireDelegationTokenRequest = call.request
        seen.append(req)
        if req.hmac != SECRET:
            return edt.ExpireDelegationTokenResponse(error_code=DelegationTokenExpiredError.errno)
        return edt.ExpireDelegationTokenResponse(expiry_timestamp_ms=1500)

    def describe(call: Received) -> Any:
        req: ddt.DescribeDelegationTokenRequest = call.request
        seen.append(req)
        return ddt.DescribeDelegationTokenResponse(
            tokens=[
                ddt.DescribedDelegationToken(
                    principal_type="User",
                    principal_name="alice",
                    issue_timestamp=1000,
                    expiry_timestamp=2500,
                    max_timestamp=3000,
                    token_id="tok-1",
                    hmac=SECRET,
                    renewers=[
                        ddt.DescribedDelegationTokenRenewer(
                            principal_type="User", principal_name="ops"
                        )
                    ],
                )
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        for key, handler in (
            (CREATE, create),
            (RENEW, renew),
            (EXPIRE, expire),
            (DESCRIBE, describe),
        ):
            kafka.answer(key, handler)
        token = await admin.create_delegation_token(["User:ops"], max_lifetime_ms=3_600_000)
        assert await admin.renew_delegation_token(token.hmac, 500) == 2500
        described = await admin.describe_delegation_token(["User:alice"])
        assert await admin.expire_delegation_token(token.hmac) == 1500
        with pytest.raises(DelegationTokenExpiredError):
            await admin.expire_delegation_token(b"other")
    info = TokenInformation("tok-1", "User:alice", "User:alice", ["User:ops"], 1000, 2000, 3000)
    assert token == DelegationToken(info, SECRET)
    assert described == [
        DelegationToken(
            TokenInformation("tok-1", "User:alice", "User:alice", ["User:ops"], 1000, 2500, 3000),
            SECRET,
        )
    ]
    for shown in (repr(token), str(token), repr(described), *map(repr, seen)):
        assert "SENTINEL" not in shown
    created, renewed, asked = seen[0], seen[1], seen[2]
    assert [(r.principal_type, r.principal_name) for r in created.renewers] == [("User", "ops")]
    assert created.max_lifetime_ms == 3_600_000
    assert (renewed.hmac, renewed.renew_period_ms) == (SECRET, 500)
    assert [(o.principal_type, o.principal_name) for o in asked.owners] == [("User", "alice")]


async def test_principals_are_checked_and_missing_apis_named() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        assert not {CREATE, RENEW, EXPIRE, DESCRIBE} & set(kafka.api_versions)  # not modelled
        with pytest.raises(ValueError, match="Type:name"):
            await admin.create_delegation_token(["alice"])
        with pytest.raises(UnsupportedVersionError, match="create_delegation_token"):
            await admin.create_delegation_token()
        with pytest.raises(UnsupportedVersionError, match="describe_delegation_token"):
            await admin.describe_delegation_token()
