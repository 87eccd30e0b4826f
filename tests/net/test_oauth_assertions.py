"""KIP-1139 (the jwt-bearer grant) and KIP-1258 (client assertions, ``private_key_jwt``):
assertions signed RS256 and ES256 with the user's key, sent to the tests' identity provider
(tests/kafka/oidc_server.py, a real HTTP server on 127.0.0.1), which verifies each
signature, ``alg``, ``aud`` and times as an IdP does before it issues a token. The same
providers log in to Apache Kafka in tests/kafka/test_kafka_oauth.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from aiokafka_ng.config import ClientConfig
from aiokafka_ng.errors import ConfigError, SaslAuthenticationFailedError
from aiokafka_ng.net.assertion import JwtAssertion, read_assertion_file
from aiokafka_ng.net.oauth import jwt_claims
from aiokafka_ng.net.oidc import ClientCredentialsTokenProvider, JwtBearerTokenProvider
from tests.kafka.oidc_server import CLIENT_ASSERTION, ISSUER, JWT_BEARER, IdentityProvider

pytestmark = pytest.mark.anyio
PASSPHRASE = "key-pass-do-not-print"


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider({"app": "app-secret"})
    provider.start()
    yield provider
    provider.stop()


def new_key(algorithm: str) -> Any:
    if algorithm == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_file(tmp_path: Path, key: Any, passphrase: str | None = None) -> str:
    """``key`` as a PKCS#8 PEM file, as Java's sasl.oauthbearer.assertion.private.key.file."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if passphrase is None
        else serialization.BestAvailableEncryption(passphrase.encode())
    )
    path = tmp_path / f"key-{id(key)}.pem"
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return str(path)


def replace(path: str, source: str) -> None:
    """``path`` gets ``source``'s content and a modification time of its own (however fast
    the rewrite, the reader sees a change)."""
    Path(path).write_bytes(Path(source).read_bytes())
    os.utime(path, ns=(1, 1))


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
async def test_jwt_bearer_grant_with_a_signed_assertion(
    idp: IdentityProvider, tmp_path: Path, algorithm: str
) -> None:
    key = new_key(algorithm)
    idp.trusted_issuers["svc-issuer"] = (key.public_key(), algorithm)
    assertion = JwtAssertion(
        key_file(tmp_path, key),
        algorithm=algorithm,  # type: ignore[arg-type]
        issuer="svc-issuer",
        subject="alice",
        audience=idp.token_url,
        include_jti=True,
    )
    provider = JwtBearerTokenProvider(idp.token_url, assertion, scope="kafka")
    token = await provider()
    assert (jwt_claims(token.value) or {})["sub"] == "alice"  # the IdP signed in the sub
    ((grant, header, claims, form),) = idp.assertions
    assert grant == JWT_BEARER and form == {"grant_type", "assertion", "scope"}
    assert header == {"alg": algorithm, "typ": "JWT"}
    # Java's DynamicAssertionJwtTemplate: exp = iat + 300, nbf = iat - 60, a jti on request.
    assert claims["exp"] - claims["iat"] == 300 and claims["iat"] - claims["nbf"] == 60
    assert len(claims["jti"]) == 36
    assert (claims["iss"], claims["sub"], claims["aud"]) == ("svc-issuer", "alice", idp.token_url)


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
async def test_client_credentials_authenticated_by_an_assertion(
    idp: IdentityProvider, tmp_path: Path, algorithm: str
) -> None:
    key = new_key(algorithm)
    idp.assertion_clients["robot"] = (key.public_key(), algorithm)
    config = ClientConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_endpoint_url=idp.token_url,
        sasl_oauthbearer_client_id="robot",
        sasl_oauthbearer_assertion_private_key_file=key_file(tmp_path, key, PASSPHRASE),
        sasl_oauthbearer_assertion_private_key_passphrase=PASSPHRASE,
        sasl_oauthbearer_assertion_algorithm=algorithm,
        sasl_oauthbearer_assertion_claim_iss="robot",
        sasl_oauthbearer_assertion_claim_sub="robot",
        sasl_oauthbearer_assertion_claim_aud=ISSUER,
    )
    provider = config.oauth_token_provider()
    assert isinstance(provider, ClientCredentialsTokenProvider)
    token = await provider()
    assert (jwt_claims(token.value) or {})["sub"] == "robot"
    ((grant, _, claims, form),) = idp.assertions
    # No secret, no Basic header (the IdP refuses two client authentications).
    assert grant == "client_credentials"
    assert form == {"client_assertion_type", "client_assertion", "grant_type", "client_id"}
    assert claims["aud"] == ISSUER
    assert PASSPHRASE not in repr(config) and PASSPHRASE not in repr(provider)


async def test_a_key_the_idp_does_not_know_is_refused_once(
    idp: IdentityProvider, tmp_path: Path
) -> None:
    registered, other = new_key("RS256"), new_key("RS256")
    idp.assertion_clients["robot"] = (registered.public_key(), "RS256")
    assertion = JwtAssertion(
        key_file(tmp_path, other), issuer="robot", subject="robot", audience=idp.token_url
    )
    provider = ClientCredentialsTokenProvider(idp.token_url, "robot", client_assertion=assertion)
    with pytest.raises(SaslAuthenticationFailedError, match="bad signature"):
        await provider()
    assert idp.rejections == ["bad signature"] and provider.requests == 1


async def test_an_expired_or_misaddressed_assertion_is_refused(
    idp: IdentityProvider, tmp_path: Path
) -> None:
    key = new_key("ES256")
    idp.trusted_issuers["svc"] = (key.public_key(), "ES256")
    path = key_file(tmp_path, key)
    long_ago = JwtAssertion(
        path, algorithm="ES256", issuer="svc", subject="a", audience=ISSUER, clock=lambda: 1e9
    )
    with pytest.raises(SaslAuthenticationFailedError, match="expired"):
        await JwtBearerTokenProvider(idp.token_url, long_ago)()
    elsewhere = JwtAssertion(path, algorithm="ES256", issuer="svc", subject="a", audience="x")
    with pytest.raises(SaslAuthenticationFailedError, match="aud"):
        await JwtBearerTokenProvider(idp.token_url, elsewhere)()
    # ES256 asked for, RS256 registered: the alg is checked, not just the signature.
    idp.trusted_issuers["svc"] = (key.public_key(), "RS256")
    right = JwtAssertion(path, algorithm="ES256", issuer="svc", subject="a", audience=ISSUER)
    with pytest.raises(SaslAuthenticationFailedError, match="alg"):
        await JwtBearerTokenProvider(idp.token_url, right)()


async def test_template_file_layers_under_the_times_and_a_rotated_key_is_reread(
    idp: IdentityProvider, tmp_path: Path
) -> None:
    first, second = new_key("RS256"), new_key("RS256")
    template = tmp_path / "template.json"
    template.write_text(
        json.dumps(
            {
                "header": {"kid": "key-1", "alg": "none"},
                "payload": {"sub": "from-template", "tenant": "t1", "exp": 1},
            }
        )
    )
    path = key_file(tmp_path, first)
    assertion = JwtAssertion(
        path, issuer="svc", subject="static", audience=ISSUER, template_file=str(template)
    )
    idp.trusted_issuers["svc"] = (first.public_key(), "RS256")
    provider = JwtBearerTokenProvider(idp.token_url, assertion)
    await provider()
    (_, header, claims, _) = idp.assertions[-1]
    assert header == {"kid": "key-1", "alg": "RS256", "typ": "JWT"}  # alg/typ win
    assert claims["sub"] == "from-template" and claims["tenant"] == "t1"  # over the static
    assert claims["exp"] == claims["iat"] + 300  # the times win over the template
    # The key file is replaced (rotation): the next assertion is signed with the new key.
    replace(path, key_file(tmp_path, second))
    idp.trusted_issuers["svc"] = (second.public_key(), "RS256")
    provider.invalidate()
    await provider()
    assert len(idp.assertions) == 2


async def test_an_assertion_file_is_sent_as_it_is(idp: IdentityProvider, tmp_path: Path) -> None:
    key = new_key("RS256")
    idp.trusted_issuers["ext"] = (key.public_key(), "RS256")
    made_elsewhere = JwtAssertion(
        key_file(tmp_path, key), issuer="ext", subject="bob", audience=ISSUER
    )()
    path = tmp_path / "assertion.jwt"
    path.write_text(made_elsewhere + "\n")
    config = ClientConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_endpoint_url=idp.token_url,
        sasl_oauthbearer_grant_type=JWT_BEARER,
        sasl_oauthbearer_assertion_file=str(path),
    )
    token = await config.oauth_token_provider()()
    assert (jwt_claims(token.value) or {})["sub"] == "bob"
    path.write_text("not a jwt")
    with pytest.raises(ValueError, match="JWS"):
        read_assertion_file(str(path))()


def test_assertion_settings_are_checked_by_name(tmp_path: Path) -> None:
    base: dict[str, Any] = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauthbearer_token_endpoint_url": "http://idp/token",
    }
    with pytest.raises(ConfigError) as ei:
        ClientConfig(**base, sasl_oauthbearer_grant_type=JWT_BEARER)
    assert set(ei.value.errors) == {"sasl_oauthbearer_assertion_private_key_file"}
    with pytest.raises(ConfigError) as ei:
        ClientConfig(
            **base,
            sasl_oauthbearer_client_id="a",
            sasl_oauthbearer_client_secret="b",
            sasl_oauthbearer_assertion_private_key_file="k.pem",
        )
    assert set(ei.value.errors) == {"sasl_oauthbearer_client_secret"}
    with pytest.raises(ConfigError) as ei:
        ClientConfig(
            **base,
            sasl_oauthbearer_assertion_private_key_file="k.pem",
            sasl_oauthbearer_assertion_algorithm="HS256",
            sasl_oauthbearer_assertion_claim_exp_seconds=86401,
        )
    assert set(ei.value.errors) == {
        "sasl_oauthbearer_assertion_algorithm",
        "sasl_oauthbearer_assertion_claim_exp_seconds",
    }
    # Java's names, from properties.
    config = ClientConfig.from_properties(
        {
            **{k.replace("_", "."): v for k, v in base.items()},
            "sasl.oauthbearer.grant.type": JWT_BEARER,
            "sasl.oauthbearer.assertion.private.key.file": "k.pem",
            "sasl.oauthbearer.assertion.algorithm": "ES256",
            "sasl.oauthbearer.assertion.claim.jti.include": "true",
        }
    )
    assert config.sasl_oauthbearer_assertion_claim_jti_include is True
    assert isinstance(config.oauth_token_provider(), JwtBearerTokenProvider)
    # Java picks the grant with its retriever class.
    java = ClientConfig.from_properties(
        {
            **{k.replace("_", "."): v for k, v in base.items()},
            "sasl.oauthbearer.jwt.retriever.class": "org.apache.kafka.common.security."
            "oauthbearer.JwtBearerJwtRetriever",
            "sasl.oauthbearer.assertion.private.key.file": "k.pem",
            "sasl.oauthbearer.assertion.algorithm": "es256",  # any case, as Java
        }
    )
    assert java.sasl_oauthbearer_grant_type == JWT_BEARER
    assert java.sasl_oauthbearer_assertion_algorithm == "ES256"
    with pytest.raises(ConfigError, match="retriever"):
        ClientConfig.from_properties({"sasl.oauthbearer.jwt.retriever.class": "com.example.R"})
    assert CLIENT_ASSERTION.endswith("jwt-bearer")
