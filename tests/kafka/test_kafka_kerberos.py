"""SASL GSSAPI (Kerberos) against Apache Kafka 4.4, with a KDC the tests start on loopback.

The realm is k5test's (MIT krb5's own test harness driving Debian's krb5-kdc binaries, which
the project's setup installs: ``apt-get install krb5-kdc krb5-admin-server``). One
single-node cluster for the module: its SASL_PLAINTEXT listener also offers GSSAPI, the
broker logging in as ``kafka/127.0.0.1`` from a keytab; the shared 3-node cluster has no
Kerberos (and no KDC to log in to).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import anyio
import k5test
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import AdminClient, NewTopic, TopicPartition
from aiokafka_ng.errors import SaslAuthenticationFailedError
from aiokafka_ng.testing import KafkaCluster, KafkaClusterError, kerberos_properties
from tests.helpers import require_kerberos
from tests.kafka.helpers import unique
from tests.kafka.test_kafka_oauth import require_kafka

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]
require_kerberos()


class Realm:
    def __init__(self, krb: Any) -> None:
        self.krb = krb

    def keytab_for(self, name: str) -> str:
        self.krb.addprinc(name)
        path = os.path.join(self.krb.tmpdir, f"{name.replace('/', '_')}.keytab")
        self.krb.extract_keytab(name, path)
        return path


@pytest.fixture(scope="module")
def realm(request: pytest.FixtureRequest) -> Iterator[Realm]:
    require_kafka(request)
    krb = k5test.K5Realm(
        portbase=63000 + os.getpid() % 200 * 10,  # above the ephemeral range, < 65536
        krb5_conf={"libdefaults": {"rdns": "false", "dns_canonicalize_hostname": "false"}},
    )
    saved = dict(os.environ)
    os.environ.update(krb.env)  # KRB5_CONFIG and the kinit'd user@KRBTEST.COM's cache
    try:
        yield Realm(krb)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        krb.stop()


@pytest.fixture(scope="module")
def kerberos_cluster(realm: Realm) -> Iterator[KafkaCluster]:
    principal = f"kafka/127.0.0.1@{realm.krb.realm}"
    keytab = realm.keytab_for("kafka/127.0.0.1")
    cluster = KafkaCluster(
        brokers=1,
        broker_properties=kerberos_properties(keytab=keytab, principal=principal),
        java_options=[f"-Djava.security.krb5.conf={realm.krb.env['KRB5_CONFIG']}"],
    )
    try:
        cluster.start_sync()
    except KafkaClusterError as exc:
        pytest.fail(f"the Kerberos Kafka cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop_sync()


def gssapi(cluster: KafkaCluster, **kerberos: Any) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "GSSAPI",
        **kerberos,
    }


async def round_trip(config: dict[str, Any]) -> list[bytes]:
    topic = unique("krb")
    async with AdminClient(default_api_timeout_ms=30000, **config) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
    async with Producer(acks="all", **config) as producer:
        await producer.send_and_wait(topic, b"kerberised", partition=0)
    async with Consumer(auto_offset_reset="earliest", **config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        with anyio.fail_after(30):
            while not values:
                batches = await consumer.getmany(timeout_ms=500)
                values = [r.value for batch in batches.values() for r in batch]
    return values


async def test_ticket_cache_login_for_producer_consumer_admin(
    kerberos_cluster: KafkaCluster,
) -> None:
    assert await round_trip(gssapi(kerberos_cluster)) == [b"kerberised"]


async def test_keytab_login_for_producer_consumer_admin(
    kerberos_cluster: KafkaCluster, realm: Realm
) -> None:
    name = unique("svc")
    config = gssapi(
        kerberos_cluster,
        sasl_kerberos_principal=f"{name}@{realm.krb.realm}",
        sasl_kerberos_keytab=realm.keytab_for(name),
        sasl_kerberos_ccache=f"MEMORY:{name}",
    )
    assert await round_trip(config) == [b"kerberised"]


async def test_revoked_principal_is_a_named_error(
    kerberos_cluster: KafkaCluster, realm: Realm
) -> None:
    name = unique("gone")
    keytab = realm.keytab_for(name)
    realm.krb.run_kadminl(f"modprinc -allow_tix {name}")  # the KDC no longer issues tickets
    config = gssapi(
        kerberos_cluster,
        sasl_kerberos_principal=f"{name}@{realm.krb.realm}",
        sasl_kerberos_keytab=keytab,
        sasl_kerberos_ccache=f"MEMORY:{name}",
    )
    with anyio.fail_after(20), pytest.raises(SaslAuthenticationFailedError, match="GSSAPI"):
        async with AdminClient(default_api_timeout_ms=30000, **config) as admin:
            await admin.list_topics()


async def test_stale_keytab_is_a_named_error(kerberos_cluster: KafkaCluster, realm: Realm) -> None:
    name = unique("stale")
    keytab = realm.keytab_for(name)
    realm.krb.run_kadminl(f"cpw -randkey {name}")  # the key in the keytab is now wrong
    config = gssapi(
        kerberos_cluster,
        sasl_kerberos_principal=f"{name}@{realm.krb.realm}",
        sasl_kerberos_keytab=keytab,
        sasl_kerberos_ccache=f"MEMORY:{name}",
    )
    with anyio.fail_after(20), pytest.raises(SaslAuthenticationFailedError, match="GSSAPI"):
        async with Producer(**config) as producer:
            await producer.send_and_wait(unique("never"), b"x")
