"""SASL and TLS against a real 3-node Apache Kafka cluster.

Tansu offers no usable SASL or TLS (TANSU.md), so logins, wrong passwords, SCRAM
credentials made through the admin client and certificate checks were shown only against
in-repo fakes before.
"""

from __future__ import annotations

import ssl
from typing import Any

import anyio
import pytest
import trustme

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import (
    NewTopic,
    ScramMechanism,
    TopicPartition,
    UserScramCredentialUpsertion,
)
from aiokafka_ng.errors import SaslAuthenticationFailedError, SslAuthenticationError
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def sasl(
    cluster: KafkaCluster, mechanism: str, user: str, password: str, listener: str
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap_for(listener),
        "security_protocol": listener,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }
    if listener == "SASL_SSL":
        config["ssl_context"] = cluster.ssl_context()
    return config


async def round_trip(config: dict[str, Any], cluster: KafkaCluster) -> None:
    """Create a topic, produce one record and read it back, all with ``config``."""
    topic = unique("sec")
    async with admin_for(cluster, **config) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 3)])).raise_on_error()
    async with Producer(acks="all", **config) as producer:
        await producer.send_and_wait(topic, b"secret", partition=0)
    async with Consumer(auto_offset_reset="earliest", **config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with anyio.fail_after(20):
            records: list[Any] = []
            while not records:
                batches = await consumer.getmany(timeout_ms=500)
                records = [r for batch in batches.values() for r in batch]
    assert [r.value for r in records] == [b"secret"]
    async with admin_for(cluster) as admin:
        await admin.delete_topics([topic])


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_sasl_login_and_round_trip(kafka_cluster: KafkaCluster, mechanism: str) -> None:
    password = kafka_cluster.users["alice"]
    await round_trip(
        sasl(kafka_cluster, mechanism, "alice", password, "SASL_PLAINTEXT"), kafka_cluster
    )


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_wrong_password_is_an_authentication_error(
    kafka_cluster: KafkaCluster, mechanism: str
) -> None:
    config = sasl(kafka_cluster, mechanism, "alice", "not-her-password", "SASL_PLAINTEXT")
    with anyio.fail_after(20), pytest.raises(SaslAuthenticationFailedError):
        async with admin_for(kafka_cluster, **config) as admin:
            await admin.list_topics()


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
async def test_scram_credentials_made_by_the_admin_client_log_in(
    kafka_cluster: KafkaCluster, mechanism: ScramMechanism
) -> None:
    user, password = unique("user"), "made-by-admin"
    name = mechanism.name.replace("_", "-")
    async with admin_for(kafka_cluster) as admin:
        (
            await admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(user, mechanism, password, iterations=8192)]
            )
        ).raise_on_error()
        described = (
            await eventually(
                lambda: admin.describe_user_scram_credentials([user]),
                lambda r: user in r.succeeded,
            )
        ).result(user)
    assert [(c.mechanism, c.iterations) for c in described.credential_infos] == [(mechanism, 8192)]
    # The controller has the credential at once; each broker learns it from the metadata
    # log, so a login may be refused for a moment: retry a bounded number of times.
    config = sasl(kafka_cluster, name, user, password, "SASL_PLAINTEXT")
    with anyio.fail_after(20):
        while True:
            try:
                async with admin_for(kafka_cluster, **config) as admin:
                    listed = await admin.list_topics()
                break
            except SaslAuthenticationFailedError:
                await anyio.sleep(0.2)
    assert isinstance(listed, dict)
    wrong = sasl(kafka_cluster, name, user, "guess", "SASL_PLAINTEXT")
    with anyio.fail_after(20), pytest.raises(SaslAuthenticationFailedError):
        async with admin_for(kafka_cluster, **wrong) as admin:
            await admin.list_topics()


async def test_tls_with_hostname_verification(kafka_cluster: KafkaCluster) -> None:
    """The brokers' certificate names 127.0.0.1 and localhost; the default context checks
    both the chain and the name."""
    context = kafka_cluster.ssl_context()
    assert context.check_hostname and context.verify_mode is ssl.CERT_REQUIRED
    config = {
        "bootstrap_servers": kafka_cluster.bootstrap_for("SSL"),
        "security_protocol": "SSL",
        "ssl_context": context,
    }
    await round_trip(config, kafka_cluster)


async def test_tls_with_a_wrong_ca_fails_cleanly(kafka_cluster: KafkaCluster) -> None:
    other = trustme.CA()
    context = ssl.create_default_context()
    other.configure_trust(context)
    config = {
        "bootstrap_servers": kafka_cluster.bootstrap_for("SSL"),
        "security_protocol": "SSL",
        "ssl_context": context,
    }
    # Not retried until the bootstrap deadline: the same certificate fails every time.
    with anyio.fail_after(10), pytest.raises(SslAuthenticationError) as info:
        async with admin_for(kafka_cluster, **config) as admin:
            await admin.list_topics()
    assert "certificate verification failed" in str(info.value)
    assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)


async def test_sasl_ssl_scram_round_trip(kafka_cluster: KafkaCluster) -> None:
    password = kafka_cluster.users["alice"]
    config = sasl(kafka_cluster, "SCRAM-SHA-512", "alice", password, "SASL_SSL")
    await round_trip(config, kafka_cluster)


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_producer_with_a_wrong_password_fails_its_records_at_once(
    kafka_cluster: KafkaCluster, idempotent: bool
) -> None:
    """Records waiting for metadata (or a producer id) fail with the authentication error,
    as in Java's Sender, not after delivery_timeout_ms (120 s): without idempotence nothing
    but the metadata refresh talks to the broker, so the cluster has to pass the error on."""
    config = sasl(kafka_cluster, "SCRAM-SHA-256", "alice", "not-her-password", "SASL_PLAINTEXT")
    async with Producer(enable_idempotence=idempotent, close_timeout_ms=1000, **config) as p:
        with anyio.fail_after(20), pytest.raises(SaslAuthenticationFailedError):
            await p.send_and_wait(unique("sec"), b"never")
