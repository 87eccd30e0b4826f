"""SchemaRegistryClient against Apicurio Registry with its authentication on: the registry
validates OIDC bearer tokens against a real identity provider's JWKS (tests/kafka/oidc_server.py),
and trades HTTP basic credentials (a client id and secret) at that provider for a token.

Authorized calls succeed, with a fixed token, with a token provider of
:mod:`aiokafka_ng.net.oidc` and with basic auth; a missing, forged, expired or misaddressed
token, or a wrong secret, fails with :class:`RegistryAuthError` naming what was refused and
never quoting the credential."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from aiokafka_ng.net.oidc import ClientCredentialsTokenProvider
from aiokafka_ng.schema_registry import (
    AvroDeserializer,
    AvroSerializer,
    RegistryAuthError,
    Schema,
    SchemaRegistryClient,
)
from tests.kafka.oidc_server import AUDIENCE, ISSUER, IdentityProvider
from tests.schema_registry.conftest import OIDC_CLIENTS, OidcRegistry

pytestmark = pytest.mark.anyio

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "auth",
    "fields": [{"name": "id", "type": "long"}],
}


def _topic() -> str:
    return f"auth-{uuid.uuid4().hex[:10]}"


def _claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "app", "iat": now, "exp": now + 300} | changes


async def _round_trip(client: SchemaRegistryClient, idp: IdentityProvider) -> None:
    """Register through a serializer, list the subject's versions, and decode the record
    with another client (its own token): the schema is read back by id."""
    topic = _topic()
    serializer = await AvroSerializer.create(client, ORDER, topic=topic)
    payload = serializer({"id": 42})
    assert payload is not None
    assert await client.get_versions(f"{topic}-value") == [1]
    token = idp.token_for("reader", 300)
    async with SchemaRegistryClient(client.url, bearer_token=token) as reader:
        assert await AvroDeserializer(reader).deserialize(payload) == {"id": 42}


@pytest.fixture
def oidc(schema_registry_oidc: OidcRegistry) -> OidcRegistry:
    return schema_registry_oidc


async def test_a_token_of_the_idp_is_taken(oidc: OidcRegistry) -> None:
    token = oidc.idp.token_for("app", 300)
    async with SchemaRegistryClient(oidc.registry.url, bearer_token=token) as client:
        await _round_trip(client, oidc.idp)


async def test_an_oidc_token_provider_is_the_bearer_token(oidc: OidcRegistry) -> None:
    provider = ClientCredentialsTokenProvider(oidc.idp.token_url, "app", OIDC_CLIENTS["app"])
    issued = oidc.idp.issued["app"]
    async with SchemaRegistryClient(oidc.registry.url, bearer_token=provider) as client:
        await _round_trip(client, oidc.idp)
        assert isinstance(await client.get_subjects(), list)
    # The provider's cached token served every request: one token for all of them.
    assert oidc.idp.issued["app"] == issued + 1


async def test_basic_auth_is_traded_for_a_token_at_the_idp(oidc: OidcRegistry) -> None:
    async with SchemaRegistryClient(
        oidc.registry.url, basic_auth=("reader", OIDC_CLIENTS["reader"])
    ) as client:
        await _round_trip(client, oidc.idp)
    # Only the registry asks the IdP's token endpoint for "reader" (the test's own
    # tokens are signed directly); it caches the token for a few minutes after that.
    assert oidc.idp.issued["reader"] >= 1


async def test_no_credentials_are_refused_saying_none_were_given(oidc: OidcRegistry) -> None:
    async with SchemaRegistryClient(oidc.registry.url, retries=0) as client:
        with pytest.raises(RegistryAuthError) as info:
            await client.get_subjects()
    assert info.value.status == 401
    assert "listing subjects" in str(info.value)
    assert "asks for credentials and none were given" in str(info.value)


def _forged_token(oidc: OidcRegistry, how: str) -> str:
    idp = oidc.idp
    if how == "expired":
        return idp.token_for("app", 60, issued_at=time.time() - 3600)
    if how == "other-audience":
        return idp.sign(_claims(aud="not-the-registry"))
    if how == "other-issuer":
        return idp.sign(_claims(iss="https://elsewhere.test"))
    if how == "other-key":
        stranger = IdentityProvider({})
        stranger.start()
        try:
            return stranger.sign(_claims())
        finally:
            stranger.stop()
    if how == "bad-signature":
        head, body, signature = idp.token_for("app", 300).split(".")
        return f"{head}.{body}.{signature[::-1]}"
    assert how == "not-a-jwt"
    return "opaque-" + uuid.uuid4().hex


@pytest.mark.parametrize(
    "how",
    ["expired", "other-audience", "other-issuer", "other-key", "bad-signature", "not-a-jwt"],
)
async def test_a_bad_token_is_refused_and_never_shown(oidc: OidcRegistry, how: str) -> None:
    token = _forged_token(oidc, how)
    async with SchemaRegistryClient(oidc.registry.url, bearer_token=token, retries=0) as client:
        with pytest.raises(RegistryAuthError) as info:
            await client.register(_topic() + "-value", Schema(json.dumps(ORDER)))
    assert info.value.status == 401
    message = str(info.value)
    assert "refused the credentials (bearer auth)" in message
    assert "registering a schema under subject" in message
    assert token not in message
    assert token.split(".")[-1] not in message


async def test_a_wrong_client_secret_is_refused_and_never_shown(oidc: OidcRegistry) -> None:
    async with SchemaRegistryClient(
        oidc.registry.url, basic_auth=("app", "not-the-secret"), retries=0
    ) as client:
        with pytest.raises(RegistryAuthError) as info:
            await client.get_subjects()
    assert info.value.status == 401
    assert "refused the credentials (basic auth)" in str(info.value)
    assert "not-the-secret" not in str(info.value)
    assert "not-the-secret" not in repr(client)
