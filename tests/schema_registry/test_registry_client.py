"""SchemaRegistryClient against the real registry (Apicurio, the session's fixture), and its
auth, retries and secrets through httpx's transport seam (against Apicurio's own, OIDC-backed
auth: test_registry_auth.py)."""

from __future__ import annotations

import json
import logging
import socket
import uuid

import httpx
import pytest

from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.schema_registry import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryAuthError,
    RegistryUnreachableError,
    Schema,
    SchemaNotFoundError,
    SchemaReference,
    SchemaRegistryClient,
    SubjectNotFoundError,
    VersionNotFoundError,
)
from aiokafka_ng.testing import SchemaRegistry

pytestmark = pytest.mark.anyio


def _subject(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:10]}"


def _record(name: str, *fields: tuple[str, object], namespace: str = "test") -> Schema:
    body = {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "fields": [{"name": n, "type": t} for n, t in fields],
    }
    return Schema(json.dumps(body))


USER_V1 = _record("User", ("name", "string"))
USER_V2 = Schema(
    json.dumps(
        {
            "type": "record",
            "name": "User",
            "namespace": "test",
            "fields": [
                {"name": "name", "type": "string"},
                {"name": "age", "type": "int", "default": 0},
            ],
        }
    )
)
USER_BAD = _record("User", ("name", "int"))


async def test_register_lookup_versions_and_caches(schema_registry: SchemaRegistry) -> None:
    subject = _subject("users-value")
    async with SchemaRegistryClient(schema_registry.url) as client:
        first = await client.register(subject, USER_V1)
        assert await client.register(subject, USER_V1) == first  # cached, and the same id
        second = await client.register(subject, USER_V2)
        assert second != first
        assert await client.get_versions(subject) == [1, 2]
        assert subject in await client.get_subjects()
        found = await client.lookup(subject, USER_V1)
        assert (found.schema_id, found.subject, found.version) == (first, subject, 1)
        latest = await client.get_latest_version(subject)
        assert (latest.schema_id, latest.version) == (second, 2)
        assert json.loads(latest.schema.schema_str) == json.loads(USER_V2.schema_str)
        assert (await client.get_version(subject, 1)).schema_id == first
        assert json.loads((await client.get_schema(first)).schema_str) == json.loads(
            USER_V1.schema_str
        )
        assert (subject, 1) in await client.get_schema_versions(first)
    # A new client (empty caches) reads the same ids from the registry.
    async with SchemaRegistryClient(schema_registry.url) as fresh:
        assert fresh.cached_schema(first) is None
        assert json.loads((await fresh.get_schema(second)).schema_str) == json.loads(
            USER_V2.schema_str
        )
        assert fresh.cached_schema(second) is not None


async def test_a_lookup_keeps_the_schema_type(schema_registry: SchemaRegistry) -> None:
    # Apicurio's answer to a lookup leaves schemaType out; what the lookup cached (and the
    # version read from that cache) is still the JSON schema asked with, not Avro.
    subject = _subject("typed-value")
    schema = Schema('{"type":"object","properties":{"a":{"type":"integer"}}}', "JSON")
    async with SchemaRegistryClient(schema_registry.url) as client:
        await client.register(subject, schema)
        async with SchemaRegistryClient(schema_registry.url) as other:
            found = await other.lookup(subject, schema)
            assert found.schema.schema_type == "JSON"
            assert (await other.get_version(subject, found.version)).schema.schema_type == "JSON"
            assert (await other.get_schema(found.schema_id)).schema_type == "JSON"


async def test_named_errors(schema_registry: SchemaRegistry) -> None:
    subject = _subject("errors-value")
    async with SchemaRegistryClient(schema_registry.url) as client:
        with pytest.raises(SubjectNotFoundError, match=subject) as no_subject:
            await client.get_versions(subject)
        assert no_subject.value.subject == subject
        assert no_subject.value.error_code == 40401
        await client.register(subject, USER_V1)
        with pytest.raises(VersionNotFoundError, match="Version 7"):
            await client.get_version(subject, 7)
        with pytest.raises(SchemaNotFoundError):
            await client.lookup(subject, _record("Other", ("x", "long")))
        with pytest.raises(SchemaNotFoundError, match="987654"):
            await client.get_schema(987654)
        with pytest.raises(InvalidSchemaError):
            await client.register(subject, Schema("this is no schema"))


async def test_compatibility_settings_checks_and_refusal(schema_registry: SchemaRegistry) -> None:
    subject = _subject("compat-value")
    async with SchemaRegistryClient(schema_registry.url) as client:
        await client.register(subject, USER_V1)
        assert await client.set_compatibility("backward", subject) == "BACKWARD"
        assert await client.get_compatibility(subject) == "BACKWARD"
        assert await client.get_compatibility() in ("NONE", "BACKWARD")
        assert await client.check_compatibility(subject, USER_V2)
        verdict = await client.check_compatibility(subject, USER_BAD)
        assert not verdict
        assert verdict.is_compatible is False
        with pytest.raises(IncompatibleSchemaError) as refused:
            await client.register(subject, USER_BAD)
        assert refused.value.subject == subject
        assert subject in str(refused.value)
        assert "STRING" in refused.value.reason  # the registry's own words on the field
        assert await client.get_versions(subject) == [1]
        with pytest.raises(ValueError, match="unknown compatibility level"):
            await client.set_compatibility("SIDEWAYS", subject)


async def test_references(schema_registry: SchemaRegistry) -> None:
    address_subject = _subject("address")
    person_subject = _subject("person-value")
    address = _record("Address", ("city", "string"), namespace="ex")
    person = Schema(
        json.dumps(
            {
                "type": "record",
                "name": "Person",
                "namespace": "ex",
                "fields": [{"name": "home", "type": "ex.Address"}],
            }
        ),
        references=(SchemaReference("ex.Address", address_subject, 1),),
    )
    async with SchemaRegistryClient(schema_registry.url) as client:
        await client.register(address_subject, address)
        person_id = await client.register(person_subject, person)
        assert await client.get_referenced_by(address_subject, 1) == [person_id]
    async with SchemaRegistryClient(schema_registry.url) as fresh:
        fetched = await fresh.get_schema(person_id)
        assert fetched.references == (SchemaReference("ex.Address", address_subject, 1),)
        latest = await fresh.get_latest_version(person_subject)
        assert latest.schema.references == fetched.references


async def test_tls(schema_registry: SchemaRegistry) -> None:
    subject = _subject("tls-value")
    async with SchemaRegistryClient(
        schema_registry.tls_url, ssl_context=schema_registry.ssl_context()
    ) as client:
        schema_id = await client.register(subject, USER_V1)
        assert (await client.lookup(subject, USER_V1)).schema_id == schema_id
    # Without the registry's CA the certificate is refused at once: no retry can help.
    async with SchemaRegistryClient(schema_registry.tls_url, retries=5) as untrusting:
        with pytest.raises(RegistryUnreachableError, match="failed TLS verification") as info:
            await untrusting.get_subjects()
    assert "CERTIFICATE_VERIFY_FAILED" in str(info.value)


async def test_unreachable_after_the_retries() -> None:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fast = ExponentialBackoff(1, 2)
    async with SchemaRegistryClient(f"http://127.0.0.1:{port}", retries=2, backoff=fast) as client:
        with pytest.raises(RegistryUnreachableError) as info:
            await client.get_schema(1)
    message = str(info.value)
    assert "fetching schema id 1" in message
    assert f"127.0.0.1:{port}" in message
    assert "after 3 tries" in message
    assert "ConnectError" in message


# -- through the transport seam: auth headers, retries on 5xx, secrets --------------------------


class Recorder:
    """An httpx transport that answers from a script and records every request."""

    def __init__(self, *answers: tuple[int, object]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return httpx.Response(status, json=body)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


async def test_basic_auth_from_the_url_never_shown() -> None:
    recorder = Recorder((200, ["a"]))
    client = SchemaRegistryClient(
        "https://alice:s3cr%40t@registry.example:8081/", transport=recorder.transport()
    )
    async with client:
        assert await client.get_subjects() == ["a"]
    auth = recorder.requests[0].headers["Authorization"]
    assert auth == httpx.BasicAuth("alice", "s3cr@t")._auth_header  # decoded from the URL
    assert str(recorder.requests[0].url) == "https://registry.example:8081/subjects"
    assert client.url == "https://registry.example:8081"
    assert "s3cr" not in repr(client)
    assert "alice" not in repr(client)
    assert "basic" in repr(client)


async def test_bearer_token_provider_asked_per_request_and_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder((401, {"message": "bad token", "error_code": 401}))
    tokens = iter(["tok-secret-1", "tok-secret-2"])

    async def token() -> str:
        return next(tokens)

    caplog.set_level(logging.DEBUG)
    async with SchemaRegistryClient(
        "http://registry.example", bearer_token=token, transport=recorder.transport()
    ) as client:
        with pytest.raises(RegistryAuthError) as first:
            await client.get_subjects()
        with pytest.raises(RegistryAuthError):
            await client.get_versions("s")
    assert [r.headers["Authorization"] for r in recorder.requests] == [
        "Bearer tok-secret-1",
        "Bearer tok-secret-2",
    ]
    assert first.value.status == 401
    assert "refused the credentials" in str(first.value)
    for text in (str(first.value), repr(client), caplog.text):
        assert "tok-secret" not in text


async def test_5xx_retried_on_the_backoff_then_answered(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(
        (503, {"message": "storage busy", "error_code": 50003}),
        (502, {"message": "gateway"}),
        (200, {"schema": '"string"'}),
    )
    caplog.set_level(logging.DEBUG, logger="aiokafka_ng.schema_registry")
    async with SchemaRegistryClient(
        "http://u:pw-secret@registry.example",
        retries=2,
        backoff=ExponentialBackoff(1, 2),
        transport=recorder.transport(),
    ) as client:
        schema = await client.get_schema(5)
        assert schema == Schema('"string"')
        assert client.cached_schema(5) == schema
        await client.get_schema(5)  # cached: no request
    assert len(recorder.requests) == 3
    assert "storage busy" in caplog.text  # each retry is logged ...
    assert "pw-secret" not in caplog.text  # ... without the credentials


async def test_5xx_on_every_try_is_unreachable_naming_the_last_answer() -> None:
    recorder = Recorder((500, {"message": "boom", "error_code": 50001}))
    async with SchemaRegistryClient(
        "http://registry.example",
        basic_auth=("bob", "hunter2"),
        retries=1,
        backoff=ExponentialBackoff(1, 2),
        transport=recorder.transport(),
    ) as client:
        with pytest.raises(RegistryUnreachableError) as info:
            await client.register("orders-value", USER_V1)
    assert len(recorder.requests) == 2
    message = str(info.value)
    assert "registering a schema under subject 'orders-value'" in message
    assert "HTTP 500: boom" in message
    assert "hunter2" not in message


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        SchemaRegistryClient("http://r", basic_auth=("a", "b"), bearer_token="t")
    with pytest.raises(ValueError, match="http:// or https://"):
        SchemaRegistryClient("ftp://r")
