"""SASL OAUTHBEARER: the client message, token providers, OIDC client credentials, KIP-368.

Broker-facing parts run against FakeKafka in memory, its SaslHandshake and SaslAuthenticate
scripted (``FakeKafka.answer``): Tansu has no working SASL (/work/shared/TANSU.md), and a
fake is the only way to script a session lifetime of a few milliseconds and check every
frame on the wire. The re-authentication tests run on virtual time, so the sessions they
wait out cost no wall time. The same paths run against Apache Kafka in
tests/kafka/test_kafka_oauth.py. The OIDC token endpoint is a real HTTP server on
127.0.0.1 (the standard library's), not a fake of urllib.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from aiokafka_ng.config import ClientConfig
from aiokafka_ng.errors import KafkaConnectionError, SaslAuthenticationFailedError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.net.oauth import (
    OAuthBearerMechanism,
    OAuthBearerToken,
    UnsecuredTokenProvider,
    client_first_message,
    jwt_claims,
    obtain_token,
)
from aiokafka_ng.net.oidc import ClientCredentialsTokenProvider
from aiokafka_ng.net.sasl import SaslConfig
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiokafka_ng.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from aiokafka_ng.protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

SASL_HANDSHAKE_KEY = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE_KEY = SaslAuthenticateRequest.API_KEY
SECRET = "s3cr3t-do-not-print"
METADATA_KEY = MetadataRequest.API_KEY

#: Tests on virtual time: every byte they wait for comes from FakeKafka in memory and
#: nothing of theirs runs in another thread (the clock would jump past it). The others run
#: on real time: the OIDC endpoint answers from a thread, the MSK signer may run in one.
VIRTUAL_TIME = {
    "test_reauthentication_keeps_in_flight_requests_and_the_connection",
    "test_failed_reauthentication_closes_with_the_named_error",
}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    if request.function.__name__ in VIRTUAL_TIME:
        return virtual_time.backend(request.param)
    return str(request.param)


# ------------------------------------------------------------------------ client message


def test_client_first_message_is_rfc7628_with_extensions() -> None:
    message = client_first_message("abc.def.", {"logicalCluster": "lkc-1", "traceId": "x y"})
    assert message == b"n,,\x01auth=Bearer abc.def.\x01logicalCluster=lkc-1\x01traceId=x y\x01\x01"
    assert client_first_message("t", {}, "bob=,x").startswith(b"n,a=bob=3D=2Cx,\x01")
    with pytest.raises(SaslAuthenticationFailedError, match="extension name"):
        client_first_message("t", {"auth": "x"})
    with pytest.raises(SaslAuthenticationFailedError, match="extension name"):
        client_first_message("t", {"bad_key": "x"})
    with pytest.raises(SaslAuthenticationFailedError, match="allow"):
        client_first_message("t", {"k": "\x00"})
    with pytest.raises(SaslAuthenticationFailedError, match="not a valid bearer") as info:
        client_first_message(f"has space {SECRET}", {})
    assert SECRET not in str(info.value)


def test_mechanism_answers_error_json_with_kvsep() -> None:
    ok = OAuthBearerMechanism("tok")
    ok.start()
    assert ok.step(b"") is None and ok.complete
    failed = OAuthBearerMechanism("tok")
    failed.start()
    assert failed.step(b'{"status":"invalid_token"}') == b"\x01"
    assert failed.server_error == '{"status":"invalid_token"}' and not failed.complete
    with pytest.raises(SaslAuthenticationFailedError, match="invalid_token"):
        failed.step(b"")


# ------------------------------------------------------------------------ token providers


class AiokafkaShaped:
    """aiokafka's AbstractTokenProvider shape: async token(), extensions()."""

    async def token(self) -> str:
        return UnsecuredTokenProvider("alice", lifetime_s=60)().value

    def extensions(self) -> dict[str, str]:
        return {"tenant": "t1"}


@pytest.mark.anyio
async def test_every_provider_shape_gives_a_token_with_expiry() -> None:
    unsecured = UnsecuredTokenProvider("alice", lifetime_s=60)
    sync_token = await obtain_token(unsecured)
    assert jwt_claims(sync_token.value) == {
        "iat": pytest.approx(time.time(), abs=5),
        "exp": pytest.approx(time.time() + 60, abs=5),
        "sub": "alice",
    }
    assert sync_token.expires_at == pytest.approx(time.time() + 60, abs=5)

    async def async_provider() -> OAuthBearerToken:
        return OAuthBearerToken("opaque", 123.0, {"a": "b"})

    assert await obtain_token(async_provider) == OAuthBearerToken("opaque", 123.0, {"a": "b"})
    from_str = await obtain_token(lambda: sync_token.value)
    assert from_str.expires_at == pytest.approx(sync_token.expires_at)
    assert (await obtain_token(lambda: "opaque-token")).expires_at is None
    shaped = await obtain_token(AiokafkaShaped())
    assert shaped.extensions == {"tenant": "t1"} and jwt_claims(shaped.value) is not None
    # aiokafka's own base class, as aiokafka users subclass it.
    from aiokafka.abc import AbstractTokenProvider

    class Theirs(AbstractTokenProvider):
        async def token(self) -> str:
            return "their-token"

    assert (await obtain_token(Theirs())).value == "their-token"


@pytest.mark.anyio
async def test_a_failing_provider_is_a_named_error_without_its_message() -> None:
    def broken() -> str:
        raise RuntimeError(f"could not use {SECRET}")

    with pytest.raises(SaslAuthenticationFailedError, match="RuntimeError") as info:
        await obtain_token(broken)
    assert SECRET not in str(info.value)
    with pytest.raises(SaslAuthenticationFailedError, match="int"):
        await obtain_token(lambda: 42)


# ------------------------------------------------------------------------ against a fake broker


def oauth_broker(
    kafka: FakeKafka, *, lifetime_ms: int | tuple[int, ...] = 0, valid: set[str] | None = None
) -> dict[int, list[dict[str, str]]]:
    """Make ``kafka`` authenticate OAUTHBEARER like Kafka: error JSON, then error 58 after the
    client's ^A. ``valid``: accepted subjects (None: all). ``lifetime_ms``: the session
    lifetime each login gets, or one per successive login on a connection (the last one
    repeated). Returns the client messages' fields, per connection (``Received.connection``)."""
    lifetimes = lifetime_ms if isinstance(lifetime_ms, tuple) else (lifetime_ms,)
    messages: dict[int, list[dict[str, str]]] = {}

    def handshake(call: Received) -> ApiMessage:
        assert isinstance(call.request, SaslHandshakeRequest)
        return SaslHandshakeResponse(mechanisms=["OAUTHBEARER"])

    def authenticate(call: Received) -> ApiMessage:
        request = call.request
        assert isinstance(request, SaslAuthenticateRequest)
        data = request.auth_bytes
        if data == b"\x01":
            return SaslAuthenticateResponse(error_code=58, error_message="invalid token")
        fields = dict(p.split("=", 1) for p in data.decode().split("\x01")[1:] if p)
        logins = messages.setdefault(call.connection, [])
        logins.append(fields)
        subject = (jwt_claims(fields["auth"].removeprefix("Bearer ")) or {}).get("sub")
        if valid is not None and subject not in valid:
            return SaslAuthenticateResponse(auth_bytes=b'{"status":"invalid_token"}')
        lifetime = lifetimes[min(len(logins), len(lifetimes)) - 1]
        return SaslAuthenticateResponse(session_lifetime_ms=lifetime)

    kafka.answer(SASL_HANDSHAKE_KEY, handshake)
    kafka.answer(SASL_AUTHENTICATE_KEY, authenticate)
    return messages


def oauth_config(
    provider: Any, kafka: FakeKafka | None = None, **extensions: str
) -> ConnectionConfig:
    """In memory to ``kafka`` when given, else over TCP."""
    sasl = SaslConfig("OAUTHBEARER", token_provider=provider, extensions=extensions)
    transport = None if kafka is None else kafka.transport
    return ConnectionConfig(sasl=sasl, request_timeout_s=10, transport=transport)


def address(kafka: FakeKafka) -> tuple[str, int]:
    return "127.0.0.1", kafka.nodes[1].port


@pytest.mark.anyio
async def test_login_sends_token_and_extensions() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        messages = oauth_broker(kafka)
        config = oauth_config(UnsecuredTokenProvider("alice"), kafka, logicalCluster="lkc-1")
        async with connect(*address(kafka), config) as conn:
            assert not conn.closed
        ((message,),) = messages.values()
        assert message["logicalCluster"] == "lkc-1"
        assert message["auth"].startswith("Bearer ")


@pytest.mark.anyio
async def test_rejected_token_surfaces_the_error_json_in_one_attempt() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        oauth_broker(kafka, valid={"bob"})
        config = oauth_config(UnsecuredTokenProvider("x"), kafka)
        with anyio.fail_after(5), pytest.raises(SaslAuthenticationFailedError) as info:
            async with connect(*address(kafka), config):
                pass
        assert '{"status":"invalid_token"}' in str(info.value) and not info.value.retriable
        assert len(kafka.connection_attempts(1)) == 1
        sent = kafka.received(SASL_AUTHENTICATE_KEY)
        assert [(r.connection, r.version) for r in sent] == [(1, 2), (1, 2)]  # token, ^A


#: The login's session in the re-authentication test: re-authentication is due after 85-95 %
#: of it (on virtual time, so exactly then, with no wall time spent).
LOGIN_SESSION_MS = 1000


@pytest.mark.anyio
async def test_reauthentication_keeps_in_flight_requests_and_the_connection() -> None:
    calls: list[float] = []

    def provider() -> OAuthBearerToken:
        calls.append(anyio.current_time())
        return UnsecuredTokenProvider(f"alice{len(calls)}")()

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        # The login's session ends after LOGIN_SESSION_MS; the re-authentication's never.
        messages = oauth_broker(kafka, lifetime_ms=(LOGIN_SESSION_MS, 0))

        async def held_until_reauthentication(call: Received) -> Any:
            # Kafka answers strictly in arrival order: the first Metadata (and so the second,
            # behind it) is answered only once the re-authentication's SaslHandshake has
            # arrived behind both: three requests on the wire, unanswered.
            await kafka.wait_until(lambda: kafka.in_flight(1) == 3)
            return await kafka.model_answer(call)

        kafka.answer(METADATA_KEY, held_until_reauthentication, times=1)
        async with connect(*address(kafka), oauth_config(provider, kafka)) as conn:
            # Two requests on the wire, unanswered, when re-authentication becomes due.
            first = await conn.submit(MetadataRequest(topics=[]))
            second = await conn.submit(MetadataRequest(topics=[]))
            await anyio.sleep(LOGIN_SESSION_MS / 1000)  # the session is over
            third = await conn.submit(MetadataRequest(topics=[]))
            for pending in (first, second, third):
                assert isinstance(await pending.wait(), MetadataResponse)
            assert not conn.closed
        sent = [r for r in kafka.received() if r.api_key != 18]
        assert {r.connection for r in kafka.received()} == {1}  # one connection throughout
    assert [type(r.request).__name__ for r in sent] == [
        "SaslHandshakeRequest",  # the login
        "SaslAuthenticateRequest",
        "MetadataRequest",
        "MetadataRequest",
        "SaslHandshakeRequest",  # the re-authentication, behind two unanswered requests
        "SaslAuthenticateRequest",
        "MetadataRequest",  # the request that found re-authentication due
    ]
    assert kafka.max_in_flight(1) == 3
    assert len(calls) == 2  # a fresh token for the re-authentication...
    subjects = [jwt_claims(m["auth"].removeprefix("Bearer ")) or {} for m in messages[1]]
    assert [c.get("sub") for c in subjects] == ["alice1", "alice2"]  # ...sent on the wire


@pytest.mark.anyio
async def test_failed_reauthentication_closes_with_the_named_error() -> None:
    subjects = iter(["alice", "revoked"])
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        oauth_broker(kafka, lifetime_ms=1, valid={"alice"})
        provider = lambda: UnsecuredTokenProvider(next(subjects))()  # noqa: E731
        async with connect(*address(kafka), oauth_config(provider, kafka)) as conn:
            await anyio.sleep(0.005)
            with pytest.raises(SaslAuthenticationFailedError, match="invalid_token"):
                await conn.send(MetadataRequest(topics=[]))
            assert conn.closed
            with pytest.raises(KafkaConnectionError):
                await conn.send(MetadataRequest(topics=[]))
        # One connection: the login, then the re-authentication's handshake, token and ^A.
        assert [r.api_key for r in kafka.received() if r.api_key != 18] == [
            SASL_HANDSHAKE_KEY,
            SASL_AUTHENTICATE_KEY,
            SASL_HANDSHAKE_KEY,
            SASL_AUTHENTICATE_KEY,
            SASL_AUTHENTICATE_KEY,
        ]
        assert {r.connection for r in kafka.received()} == {1}
        assert kafka.received(3) == []  # the Metadata never reached the broker


# ------------------------------------------------------------------------ OIDC token endpoint


class TokenEndpoint:
    """A real HTTP token endpoint on 127.0.0.1 with scripted statuses."""

    def __init__(self) -> None:
        self.statuses: list[int] = []  # consumed per request; empty: 200
        self.requests: list[tuple[str, str]] = []  # (Authorization, body)
        self.expires_in: int | None = 300
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                outer.requests.append((self.headers["Authorization"], body))
                status = outer.statuses.pop(0) if outer.statuses else 200
                if status == 200:
                    answer: dict[str, Any] = {
                        "access_token": "opaque-access-token",
                        "token_type": "Bearer",
                    }
                    if outer.expires_in is not None:
                        answer["expires_in"] = outer.expires_in
                else:
                    answer = {"error": "invalid_client", "error_description": "bad secret"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    ep = TokenEndpoint()
    thread = threading.Thread(target=ep.server.serve_forever, daemon=True)
    thread.start()
    yield ep
    ep.server.shutdown()
    ep.server.server_close()
    thread.join()


@pytest.mark.anyio
async def test_client_credentials_fetches_once_and_caches(endpoint: TokenEndpoint) -> None:
    provider = ClientCredentialsTokenProvider(endpoint.url, "my-app", SECRET, scope="kafka")
    first = await provider()
    again = await provider()
    assert first is again and first.value == "opaque-access-token"
    assert first.expires_at == pytest.approx(time.time() + 300, abs=10)
    ((authorization, body),) = endpoint.requests
    assert authorization == "Basic " + base64.b64encode(f"my-app:{SECRET}".encode()).decode()
    assert body == "grant_type=client_credentials&scope=kafka"
    assert SECRET not in repr(provider)


@pytest.mark.anyio
async def test_refused_client_is_final_after_one_request(endpoint: TokenEndpoint) -> None:
    endpoint.statuses = [401, 401]
    provider = ClientCredentialsTokenProvider(endpoint.url, "my-app", SECRET)
    with pytest.raises(SaslAuthenticationFailedError, match="invalid_client: bad secret") as info:
        await provider()
    assert not info.value.retriable and SECRET not in str(info.value)
    assert len(endpoint.requests) == 1


@pytest.mark.anyio
async def test_unavailable_endpoint_is_retried_with_backoff(endpoint: TokenEndpoint) -> None:
    endpoint.statuses = [503, 503]
    provider = ClientCredentialsTokenProvider(
        endpoint.url, "my-app", SECRET, retry_backoff_ms=1, retry_backoff_max_ms=50
    )
    assert (await provider()).value == "opaque-access-token"
    assert len(endpoint.requests) == 3
    endpoint.statuses = [503] * 100
    provider.invalidate()
    with pytest.raises(KafkaConnectionError, match="HTTP 503") as info:
        await provider()
    assert info.value.retriable and len(endpoint.requests) < 3 + 100


@pytest.mark.anyio
async def test_token_without_expiry_is_refused(endpoint: TokenEndpoint) -> None:
    endpoint.expires_in = None
    provider = ClientCredentialsTokenProvider(endpoint.url, "my-app", SECRET)
    with pytest.raises(SaslAuthenticationFailedError, match="expires_in"):
        await provider()


# ------------------------------------------------------------------------ configuration


def test_java_properties_build_the_oidc_provider_and_hide_the_secret() -> None:
    config = ClientConfig.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.login.callback.handler.class": "org.apache.kafka.common.security."
            "oauthbearer.OAuthBearerLoginCallbackHandler",
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            f'OAuthBearerLoginModule required clientId="app" clientSecret="{SECRET}" '
            'scope="kafka.read" extension_logicalCluster="lkc-1";',
        }
    )
    provider = config.oauth_token_provider()
    assert isinstance(provider, ClientCredentialsTokenProvider)
    assert (provider.client_id, provider.scope) == ("app", "kafka.read")
    sasl = config.connection_config().sasl
    assert sasl is not None and sasl.extensions == {"logicalCluster": "lkc-1"}
    assert SECRET not in repr(config) and SECRET not in repr(sasl)
    assert SECRET not in str(config.model_dump())


def test_oauth_settings_are_checked_by_name() -> None:
    from aiokafka_ng.errors import ConfigError

    base = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"}
    with pytest.raises(ConfigError, match="sasl_oauth_token_provider"):
        ClientConfig(**base)
    with pytest.raises(ConfigError, match="sasl_oauthbearer_client_secret"):
        ClientConfig(
            **base, sasl_oauthbearer_token_endpoint_url="http://x", sasl_oauthbearer_client_id="a"
        )
    with pytest.raises(ConfigError, match="http"):
        ClientConfig(
            **base,
            sasl_oauthbearer_token_endpoint_url="ftp://x",
            sasl_oauthbearer_client_id="a",
            sasl_oauthbearer_client_secret="b",
        )
    with pytest.raises(ConfigError, match=r"sasl\.login\.callback"):
        ClientConfig.from_properties({"sasl.login.callback.handler.class": "com.example.Mine"})
    unsecured = ClientConfig.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";',
        }
    )
    assert isinstance(unsecured.oauth_token_provider(), UnsecuredTokenProvider)
