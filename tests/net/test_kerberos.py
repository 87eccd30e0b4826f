"""SASL GSSAPI (RFC 4752) with real Kerberos: a KDC on loopback (k5test + Debian's krb5-kdc),
real tickets, the client's keytab or ticket cache.

The broker side is FakeKafka in memory, its SaslHandshake and SaslAuthenticate scripted
with a GSS-API acceptor from the service's keytab (real Kerberos, our acceptor): it lets a
test offer a security layer Kafka never would. Real time, not virtual: the KDC answers over
real sockets. The same client runs against Apache Kafka in
tests/kafka/test_kafka_kerberos.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import k5test
import pytest

from aiokafka_ng.errors import SaslAuthenticationFailedError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.net.sasl import SaslConfig
from aiokafka_ng.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from aiokafka_ng.protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received
from tests.helpers import require_kerberos

require_kerberos()  # the gssapi package (imported where used) and the KDC binaries


class Realm:
    def __init__(self, realm: Any, service_keytab: str, client_keytab: str) -> None:
        self.realm = realm
        self.service_keytab = service_keytab
        self.client_keytab = client_keytab


@pytest.fixture(scope="module")
def realm() -> Iterator[Realm]:
    krb = k5test.K5Realm(
        portbase=61000 + os.getpid() % 200 * 10,  # above the ephemeral range, < 65536
        krb5_conf={"libdefaults": {"rdns": "false", "dns_canonicalize_hostname": "false"}},
    )
    try:
        krb.addprinc("kafka/127.0.0.1")
        service_keytab = os.path.join(krb.tmpdir, "kafka.keytab")
        krb.extract_keytab("kafka/127.0.0.1", service_keytab)
        krb.addprinc("svc-client")
        client_keytab = os.path.join(krb.tmpdir, "client.keytab")
        krb.extract_keytab("svc-client", client_keytab)
        saved = dict(os.environ)
        os.environ.update(krb.env)  # KRB5_CONFIG, KRB5CCNAME (the kinit'd user's cache)
        try:
            yield Realm(krb, service_keytab, client_keytab)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    finally:
        krb.stop()


#: One connection's acceptor state: the GSS-API context, and what the client chose.
Session = dict[str, Any]


def gssapi_broker(kafka: FakeKafka, service_keytab: str, *, layers: int = 1) -> dict[int, Session]:
    """Make ``kafka`` accept GSSAPI like Kafka's broker (JDK SaslServer, qop=auth): context
    tokens, then a wrapped security layer offer. Returns each connection's session
    (``Received.connection``), which records the client's principal and chosen layer."""
    import gssapi

    sessions: dict[int, Session] = {}

    def handshake(call: Received) -> ApiMessage:
        assert isinstance(call.request, SaslHandshakeRequest)
        return SaslHandshakeResponse(mechanisms=["GSSAPI"])

    def authenticate(call: Received) -> ApiMessage:
        request = call.request
        assert isinstance(request, SaslAuthenticateRequest)
        state = sessions.setdefault(call.connection, {})
        if "ctx" not in state:
            creds = gssapi.Credentials(usage="accept", store={"keytab": service_keytab})
            state["ctx"] = gssapi.SecurityContext(creds=creds, usage="accept")
        ctx = state["ctx"]
        assert isinstance(ctx, gssapi.SecurityContext)
        if "offered" in state:  # the client's wrapped layer choice
            choice = ctx.unwrap(request.auth_bytes).message
            state["choice"] = choice
            state["principal"] = str(ctx.initiator_name)
            return SaslAuthenticateResponse(auth_bytes=b"")
        if not ctx.complete:
            out = ctx.step(request.auth_bytes)
            if out:
                return SaslAuthenticateResponse(auth_bytes=out)
        state["offered"] = True
        offer = bytes([layers, 0, 0x10, 0])  # layers, max buffer 4096
        return SaslAuthenticateResponse(auth_bytes=ctx.wrap(offer, False).message)

    kafka.answer(SaslHandshakeRequest.API_KEY, handshake)
    kafka.answer(SaslAuthenticateRequest.API_KEY, authenticate)
    return sessions


def kerberos_config(kafka: FakeKafka, **kerberos: Any) -> ConnectionConfig:
    sasl = SaslConfig("GSSAPI", **kerberos)
    return ConnectionConfig(sasl=sasl, request_timeout_s=10, transport=kafka.transport)


def address(kafka: FakeKafka) -> tuple[str, int]:
    # The service principal is kafka/127.0.0.1: the client names the host it connects to.
    return "127.0.0.1", kafka.nodes[1].port


@pytest.mark.anyio
async def test_login_from_the_ticket_cache(realm: Realm) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        sessions = gssapi_broker(kafka, realm.service_keytab)
        async with connect(*address(kafka), kerberos_config(kafka)) as conn:
            assert not conn.closed
    (state,) = sessions.values()
    assert state["principal"] == "user@KRBTEST.COM"
    assert state["choice"] == b"\x01\x00\x00\x00"  # no security layer, no authzid


@pytest.mark.anyio
async def test_login_from_a_keytab(realm: Realm) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        sessions = gssapi_broker(kafka, realm.service_keytab)
        config = kerberos_config(
            kafka,
            kerberos_principal="svc-client@KRBTEST.COM",
            kerberos_keytab=realm.client_keytab,
            kerberos_ccache=f"MEMORY:{os.getpid()}",
        )
        async with connect(*address(kafka), config):
            pass
    (state,) = sessions.values()
    assert state["principal"] == "svc-client@KRBTEST.COM"


@pytest.mark.anyio
async def test_server_demanding_a_security_layer_is_refused(realm: Realm) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        gssapi_broker(kafka, realm.service_keytab, layers=4)
        with pytest.raises(SaslAuthenticationFailedError, match="confidentiality"):
            async with connect(*address(kafka), kerberos_config(kafka)):
                pass


@pytest.mark.anyio
async def test_unknown_service_principal_is_a_named_error(realm: Realm) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        gssapi_broker(kafka, realm.service_keytab)
        config = kerberos_config(kafka, kerberos_service_name="nosuch")
        with pytest.raises(SaslAuthenticationFailedError, match="GSSAPI") as info:
            async with connect(*address(kafka), config):
                pass
        assert not info.value.retriable
        # Refused at the client: no token for an unknown service reached the broker.
        assert kafka.received(SaslAuthenticateRequest.API_KEY) == []


def test_java_krb5_properties_and_aiokafka_keywords_reach_the_sasl_config() -> None:
    from aiokafka_ng.compat import translate_config
    from aiokafka_ng.config import ClientConfig

    config = ClientConfig.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.service.name": "kafka-prod",
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required "
            'useKeyTab=true storeKey=true keyTab="/etc/security/app.keytab" '
            'principal="app@EXAMPLE.COM";',
        }
    )
    sasl = config.connection_config().sasl
    assert sasl is not None and sasl.mechanism == "GSSAPI"
    assert (sasl.kerberos_service_name, sasl.kerberos_principal, sasl.kerberos_keytab) == (
        "kafka-prod",
        "app@EXAMPLE.COM",
        "/etc/security/app.keytab",
    )
    # aiokafka's names (ignored before GSSAPI existed) now mean what they say.
    kwargs = translate_config(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "GSSAPI",
            "sasl_kerberos_service_name": "kafka2",
            "sasl_kerberos_domain_name": "brokers.example.com",
        }
    )
    sasl = ClientConfig(**kwargs).connection_config().sasl
    assert sasl is not None
    assert (sasl.kerberos_service_name, sasl.kerberos_host) == ("kafka2", "brokers.example.com")


def test_gssapi_without_the_package_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from aiokafka_ng.config import ClientConfig
    from aiokafka_ng.errors import ConfigError

    real = importlib.util.find_spec
    # Simulates an install without the [gssapi] extra (this venv has it).
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gssapi" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"aiokafka-ng\[gssapi\]"):
        ClientConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI")
    with pytest.raises(ConfigError, match="sasl_kerberos_principal"):
        ClientConfig(
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI", sasl_kerberos_keytab="/k"
        )
