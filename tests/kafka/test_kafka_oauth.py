"""SASL OAUTHBEARER against Apache Kafka 4: unsecured JWS, OIDC + JWKS (KIP-768), KIP-368.

One single-node cluster for this module (its SASL listeners need OAuth settings, a JWKS
endpoint that is up before the broker starts, and short sessions, none of which the shared
3-node cluster has): SASL_PLAINTEXT validates with Kafka's unsecured-JWS validator, SASL_SSL
with ``OAuthBearerValidatorCallbackHandler`` against the JWKS of a small identity provider on
127.0.0.1 (tests/kafka/oidc_server.py), and OAUTHBEARER sessions last at most
``REAUTH_MS``, so every long-lived connection must re-authenticate (KIP-368).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import NewTopic, TopicPartition
from aiokafka_ng.errors import SaslAuthenticationFailedError
from aiokafka_ng.net.oauth import OAuthBearerToken, UnsecuredTokenProvider
from aiokafka_ng.testing import (
    OAUTH_ALLOWED_URLS,
    KafkaCluster,
    KafkaClusterError,
    oauth_properties,
)
from aiokafka_ng.testing._kafka_jars import missing_tools
from aiokafka_ng.testing.pytest_plugin import _kafka_mode
from tests.kafka.helpers import unique
from tests.kafka.oidc_server import AUDIENCE, ISSUER, IdentityProvider

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

REAUTH_MS = 3000
CLIENTS = {"app": "app-secret", "streamer": "streamer-secret"}


def require_kafka(request: pytest.FixtureRequest) -> None:
    """The same rules as the plugin's kafka_cluster fixture: skip only when told to."""
    mode = _kafka_mode(request.config)
    if mode == "off":
        pytest.skip("Apache Kafka tests are off (--kafka=off)")
    missing = missing_tools()
    if missing is not None:
        if mode == "auto":
            pytest.skip(f"no Apache Kafka here: {missing}")
        pytest.fail(f"Apache Kafka is required: {missing}")


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider(CLIENTS)
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def oauth_cluster(request: pytest.FixtureRequest, idp: IdentityProvider) -> Iterator[KafkaCluster]:
    require_kafka(request)
    cluster = KafkaCluster(
        brokers=1,
        broker_properties=oauth_properties(
            jwks_url=idp.jwks_url, audience=AUDIENCE, issuer=ISSUER, reauth_ms=REAUTH_MS
        ),
        java_options=[f"-D{OAUTH_ALLOWED_URLS}={idp.jwks_url}"],
    )
    try:
        cluster.start_sync()
    except KafkaClusterError as exc:
        pytest.fail(f"the OAuth Kafka cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop_sync()


def unsecured(cluster: KafkaCluster, provider: Any) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
    }


def oidc(cluster: KafkaCluster, idp: IdentityProvider, client: str, secret: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.bootstrap_for("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": cluster.ssl_context(),
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauthbearer_token_endpoint_url": idp.token_url,
        "sasl_oauthbearer_client_id": client,
        "sasl_oauthbearer_client_secret": secret,
        "sasl_oauthbearer_scope": "kafka",
    }


async def round_trip(config: dict[str, Any], records: int = 1) -> list[bytes]:
    """Admin creates a topic, the producer writes ``records``, a consumer reads them back:
    each client logs in with ``config``."""
    topic = unique("oauth")
    async with admin_for_config(config) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
    async with Producer(acks="all", **config) as producer:
        for i in range(records):
            await producer.send(topic, str(i).encode(), partition=0)
        await producer.flush()
    return await read_all(config, topic, records)


def admin_for_config(config: dict[str, Any]) -> Any:
    from aiokafka_ng.admin import AdminClient

    return AdminClient(default_api_timeout_ms=30000, **config)


async def read_all(config: dict[str, Any], topic: str, count: int) -> list[bytes]:
    async with Consumer(auto_offset_reset="earliest", **config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        with anyio.fail_after(60):
            while len(values) < count:
                batches = await consumer.getmany(timeout_ms=500)
                values += [r.value for batch in batches.values() for r in batch]
    return values


async def test_unsecured_jws_logs_in_producer_consumer_admin(oauth_cluster: KafkaCluster) -> None:
    config = unsecured(oauth_cluster, UnsecuredTokenProvider("alice", lifetime_s=600))
    assert await round_trip(config) == [b"0"]


async def test_oidc_client_credentials_log_in_through_jwks(
    oauth_cluster: KafkaCluster, idp: IdentityProvider
) -> None:
    before = idp.issued["app"]
    config = oidc(oauth_cluster, idp, "app", CLIENTS["app"])
    assert await round_trip(config, records=3) == [b"0", b"1", b"2"]
    # Each client's provider fetched its token once for all of its connections.
    assert 1 <= idp.issued["app"] - before <= 3


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
async def test_jwt_bearer_and_client_assertion_log_in_through_kafkas_validator(
    oauth_cluster: KafkaCluster, idp: IdentityProvider, tmp_path: Path, algorithm: str
) -> None:
    """KIP-1139 and KIP-1258: assertions signed with our key (the IdP verifies them), the
    IdP's tokens for them validated by Kafka's own JWKS validator: producer, consumer and
    admin log in with each."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key: Any = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if algorithm == "RS256"
        else ec.generate_private_key(ec.SECP256R1())
    )
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    issuer, robot = unique("issuer"), unique("robot")  # the module's IdP outlives a backend
    idp.trusted_issuers[issuer] = (key.public_key(), algorithm)
    idp.assertion_clients[robot] = (key.public_key(), algorithm)
    signing = {
        "bootstrap_servers": oauth_cluster.bootstrap_for("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": oauth_cluster.ssl_context(),
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauthbearer_token_endpoint_url": idp.token_url,
        "sasl_oauthbearer_assertion_private_key_file": str(pem),
        "sasl_oauthbearer_assertion_algorithm": algorithm,
        "sasl_oauthbearer_assertion_claim_aud": idp.token_url,
    }
    jwt_bearer = {
        **signing,
        "sasl_oauthbearer_grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "sasl_oauthbearer_assertion_claim_iss": issuer,
        "sasl_oauthbearer_assertion_claim_sub": "alice",
    }
    assert await round_trip(jwt_bearer) == [b"0"]
    assert idp.issued["alice"] >= 1
    client_assertion = {
        **signing,
        "sasl_oauthbearer_client_id": robot,
        "sasl_oauthbearer_assertion_claim_iss": robot,
        "sasl_oauthbearer_assertion_claim_sub": robot,
    }
    assert await round_trip(client_assertion) == [b"0"]
    assert idp.issued[robot] >= 1


async def test_wrong_secret_is_a_named_error_from_the_first_attempt(
    oauth_cluster: KafkaCluster, idp: IdentityProvider
) -> None:
    """Admin, producer and consumer each surface the IdP's refusal from their first token
    request. (Their metadata refresher keeps retrying in the background with backoff, as
    Java's clients do, until they are closed: a bounded handful, never a storm.)"""
    config = oidc(oauth_cluster, idp, "app", "not-the-secret")
    before = idp.requests["app"]
    with anyio.fail_after(10), pytest.raises(SaslAuthenticationFailedError) as info:
        async with admin_for_config(config) as admin:
            await admin.list_topics()
    assert "invalid_client" in str(info.value) and "not-the-secret" not in str(info.value)
    with anyio.fail_after(10), pytest.raises(SaslAuthenticationFailedError, match="invalid_client"):
        async with Producer(**config) as producer:
            await producer.send_and_wait(unique("never"), b"x")
    with anyio.fail_after(10), pytest.raises(SaslAuthenticationFailedError, match="invalid_client"):
        async with Consumer(group_id=unique("g"), **config) as consumer:
            consumer.subscribe([unique("never")])
            await consumer.getmany(timeout_ms=5000)
    assert 3 <= idp.requests["app"] - before <= 9


async def test_expired_token_is_refused_by_the_broker_once(
    oauth_cluster: KafkaCluster, idp: IdentityProvider
) -> None:
    calls: list[float] = []

    def expired() -> OAuthBearerToken:
        calls.append(time.time())
        # Signed by the IdP's key, so only the expiry is wrong (past the 30 s clock skew).
        return OAuthBearerToken.from_jwt(idp.token_for("app", 60, issued_at=time.time() - 3600))

    config = {
        "bootstrap_servers": oauth_cluster.bootstrap_for("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": oauth_cluster.ssl_context(),
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": expired,
    }
    with anyio.fail_after(30), pytest.raises(SaslAuthenticationFailedError) as info:
        async with admin_for_config(config) as admin:
            await admin.list_topics()
    # The broker's RFC 7628 error JSON reaches the error; the first attempt raised it (a
    # background metadata retry may have asked once more before the admin closed).
    assert "invalid_token" in str(info.value)
    assert 1 <= len(calls) <= 3


async def test_revoked_principal_is_refused_once(
    oauth_cluster: KafkaCluster, idp: IdentityProvider
) -> None:
    client = unique("mallory")  # its own: the module's IdP outlives one backend's run
    idp.clients[client] = "mallory-secret"
    config = oidc(oauth_cluster, idp, client, "mallory-secret")
    async with admin_for_config(config) as admin:
        assert isinstance(await admin.list_topics(), dict)
    idp.revoked.add(client)
    before = idp.requests[client]
    with anyio.fail_after(30), pytest.raises(SaslAuthenticationFailedError, match="revoked"):
        async with admin_for_config(config) as admin:
            await admin.list_topics()
    assert 1 <= idp.requests[client] - before <= 3


async def test_token_expiring_mid_stream_is_refreshed_without_losing_records(
    oauth_cluster: KafkaCluster, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """6 s tokens, 3 s sessions: while 1,000 records are produced over ~12 s the producer's
    connection re-authenticates several times on the live socket and the provider fetches
    new tokens at least twice; every record arrives once."""
    caplog.set_level(logging.DEBUG, logger="aiokafka_ng.net.connection")
    idp.lifetime_s["streamer"] = 6
    config = oidc(oauth_cluster, idp, "streamer", CLIENTS["streamer"])
    topic = unique("stream")
    async with admin_for_config(config) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
    issued_before = idp.issued["streamer"]
    sent = 0
    async with Producer(acks="all", **config) as producer:
        with anyio.fail_after(120):
            # Paced, not synchronised: the records must span several sessions and tokens.
            while sent < 1000 or idp.issued["streamer"] - issued_before < 3:
                await producer.send_and_wait(topic, str(sent).encode(), partition=0)
                sent += 1
                if sent % 10 == 0:
                    await anyio.sleep(0.12)
    reauths = [r for r in caplog.records if r.getMessage().startswith("re-authenticated to")]
    # A broker closes a connection used after its session expired: "closed by the broker".
    closed = [r.getMessage() for r in caplog.records if "by the broker" in r.getMessage()]
    assert len(reauths) >= 2, "the producer's connection never re-authenticated"
    assert closed == []
    assert idp.issued["streamer"] - issued_before >= 3  # the first token + two refreshes
    values = await read_all(config, topic, sent)
    assert values == [str(i).encode() for i in range(sent)]


def test_the_docs_unsecured_example_runs_as_written(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/security.md's runnable OAUTHBEARER example, as written: its own one-node
    cluster, a login with an unsigned token and one record delivered."""
    require_kafka(request)
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    (block,) = [b for b in blocks if "anyio.run(main)" in b]
    exec(block, {"__name__": "docs_example"})
    assert capsys.readouterr().out.strip() == "delivered at offset 0"


def test_cli_command_config_with_java_oauth_properties(
    oauth_cluster: KafkaCluster,
    idp: IdentityProvider,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The CLI's --command-config takes the Java client's OIDC properties (KIP-768): the
    OAuthBearerLoginModule line, the token endpoint and the Java login handler's name."""
    from aiokafka_ng.cli import main

    def properties(secret: str) -> str:
        path = tmp_path / f"client-{secret}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=OAUTHBEARER\n"
            f"sasl.oauthbearer.token.endpoint.url={idp.token_url}\n"
            "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
            "OAuthBearerLoginCallbackHandler\n"
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer."
            f'OAuthBearerLoginModule required clientId="app" clientSecret="{secret}" '
            'scope="kafka";\n'
            f"ssl.truststore.location={oauth_cluster.ca_file}\n"
            "ssl.truststore.type=PEM\n"
        )
        return str(path)

    topic = unique("cli")
    bootstrap = ["-b", oauth_cluster.bootstrap_for("SASL_SSL")]
    good = ["--command-config", properties(CLIENTS["app"]), *bootstrap]
    assert main(["topics", "create", topic, *good]) == 0
    assert main(["topics", "list", *good]) == 0
    assert topic in capsys.readouterr().out.split()
    bad = ["--command-config", properties("wrong-secret-value"), *bootstrap]
    assert main(["topics", "list", *bad]) != 0
    err = capsys.readouterr().err
    assert "invalid_client" in err and "wrong-secret-value" not in err


async def test_aiokafka_token_provider_through_compat(
    oauth_cluster: KafkaCluster, idp: IdentityProvider
) -> None:
    """Code written for aiokafka -- an AbstractTokenProvider subclass passed as
    sasl_oauth_token_provider -- logs in through aiokafka_ng.compat unchanged (JWKS listener)."""
    from aiokafka.abc import AbstractTokenProvider

    from aiokafka_ng.compat import AIOKafkaProducer

    class IdpTokens(AbstractTokenProvider):
        async def token(self) -> str:
            return idp.token_for("aiokafka-user", 300)

    producer = AIOKafkaProducer(
        bootstrap_servers=oauth_cluster.bootstrap_for("SASL_SSL"),
        security_protocol="SASL_SSL",
        ssl_context=oauth_cluster.ssl_context(),
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=IdpTokens(),
    )
    topic = unique("compat")
    await producer.start()
    try:
        with anyio.fail_after(30):
            metadata = await producer.send_and_wait(topic, b"from aiokafka code")
    finally:
        await producer.stop()
    assert metadata.offset == 0
