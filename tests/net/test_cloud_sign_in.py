"""Built-in cloud token providers: AWS MSK IAM (the standard credential chain, the SigV4
presigned token) and Azure managed identity (IMDS), against loopback stand-ins that check
what the real endpoints check (tests/net/cloud_standins.py); the MSK token byte for byte
against AWS's own signer (aws-msk-iam-sasl-signer-python) for the same credentials and
clock; and a broker that checks the token's signature as MSK does before it lets a
connection in."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiokafka_ng.errors import SaslAuthenticationFailedError
from aiokafka_ng.net.aws import AwsCredentials, MskIamTokenProvider, aws_credentials, msk_iam_token
from aiokafka_ng.net.azure import AzureImdsTokenProvider
from aiokafka_ng.net.connection import connect
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
from tests.net.cloud_standins import CloudEndpoints, verify_msk_token
from tests.net.test_oauth import address, oauth_config

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
NOTHING = {"AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture
def cloud() -> Iterator[CloudEndpoints]:
    with CloudEndpoints() as endpoints:
        yield endpoints


def no_files(tmp_path: Path) -> dict[str, str]:
    return {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
    }


# ----------------------------------------------------------------------- the MSK token


@pytest.mark.parametrize("session_token", [None, "FwoGZXIvYXdzE+/token=="])
def test_msk_token_is_aws_signers_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, session_token: str | None
) -> None:
    import botocore.auth
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider as signer

    at = dt.datetime(2026, 3, 1, 12, 30, 15)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: at)
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    if session_token:
        monkeypatch.setenv("AWS_SESSION_TOKEN", session_token)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    theirs, their_expiry_ms = signer.generate_auth_token("us-east-1")
    ours, expiry = msk_iam_token(
        "us-east-1",
        AwsCredentials("AKIDEXAMPLE", SECRET, session_token),
        now=at.replace(tzinfo=dt.UTC).timestamp(),
        user_agent=signer.__get_user_agent__(),
    )
    assert ours == theirs
    assert expiry * 1000 == their_expiry_ms


def msk_broker(kafka: FakeKafka, secrets: dict[str, str]) -> list[dict[str, str]]:
    """SASL at ``kafka`` as MSK does it: the token's SigV4 signature recomputed with the
    key's secret; a failure is the error JSON, then error 58 after the client's ^A."""
    checked: list[dict[str, str]] = []

    def handshake(call: Received) -> ApiMessage:
        assert isinstance(call.request, SaslHandshakeRequest)
        return SaslHandshakeResponse(mechanisms=["OAUTHBEARER"])

    def authenticate(call: Received) -> ApiMessage:
        assert isinstance(call.request, SaslAuthenticateRequest)
        data = call.request.auth_bytes
        if data == b"\x01":
            return SaslAuthenticateResponse(error_code=58, error_message="Access denied")
        fields = dict(p.split("=", 1) for p in data.decode().split("\x01")[1:] if p)
        try:
            params = verify_msk_token(
                fields["auth"].removeprefix("Bearer "), secrets, region="eu-west-1"
            )
        except ValueError:
            return SaslAuthenticateResponse(auth_bytes=b'{"status":"invalid_token"}')
        checked.append(params)
        return SaslAuthenticateResponse(session_lifetime_ms=0)

    kafka.answer(SaslHandshakeRequest.API_KEY, handshake)
    kafka.answer(SaslAuthenticateRequest.API_KEY, authenticate)
    return checked


@pytest.mark.anyio
async def test_msk_standin_takes_our_token_and_refuses_a_wrong_secret(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIAGOOD0000001", "AWS_SECRET_ACCESS_KEY": SECRET, **NOTHING}
    provider = MskIamTokenProvider("eu-west-1", env={**env, **no_files(tmp_path)})
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        checked = msk_broker(kafka, {"AKIAGOOD0000001": SECRET})
        async with connect(*address(kafka), oauth_config(provider, kafka)) as conn:
            assert not conn.closed
        assert [p["X-Amz-Credential"].split("/")[0] for p in checked] == ["AKIAGOOD0000001"]
        wrong = {**env, "AWS_SECRET_ACCESS_KEY": "not-the-secret", **no_files(tmp_path)}
        bad = MskIamTokenProvider("eu-west-1", env=wrong)
        with pytest.raises(SaslAuthenticationFailedError, match="invalid_token"):
            async with connect(*address(kafka), oauth_config(bad, kafka)):
                pass
    assert SECRET not in repr(provider) and "not-the-secret" not in repr(bad)


# ----------------------------------------------------------------- the credential chain


def test_environment_first_unless_a_profile_is_named(tmp_path: Path) -> None:
    files = tmp_path / "credentials"
    files.write_text(
        "[default]\naws_access_key_id = AKIAFILEDEFAULT\naws_secret_access_key = s1\n"
        "[ops]\naws_access_key_id = AKIAFILEOPS\naws_secret_access_key = s2\n"
        "aws_session_token = t2\n"
    )
    config = tmp_path / "config"
    config.write_text("[profile cfg]\naws_access_key_id = AKIACONFIG\naws_secret_access_key = s3\n")
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAENV",
        "AWS_SECRET_ACCESS_KEY": "s0",
        "AWS_SHARED_CREDENTIALS_FILE": str(files),
        "AWS_CONFIG_FILE": str(config),
        **NOTHING,
    }
    assert aws_credentials("eu-west-1", env=env).access_key == "AKIAENV"
    ops = aws_credentials("eu-west-1", env=env, profile="ops")
    assert (ops.access_key, ops.session_token, ops.source) == ("AKIAFILEOPS", "t2", f"file {files}")
    no_env = {k: v for k, v in env.items() if not k.startswith("AWS_ACCESS")}
    assert aws_credentials("eu-west-1", env=no_env).access_key == "AKIAFILEDEFAULT"
    assert aws_credentials("eu-west-1", env={**no_env, "AWS_PROFILE": "cfg"}).access_key == (
        "AKIACONFIG"
    )


def test_web_identity_is_exchanged_at_sts(cloud: CloudEndpoints, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(cloud.web_identity[1] + "\n")
    env = {
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "AWS_ROLE_ARN": cloud.web_identity[0],
        "AWS_ENDPOINT_URL_STS": cloud.base + "/sts",
        **no_files(tmp_path),
        **NOTHING,
    }
    creds = aws_credentials("eu-west-1", env=env)
    assert (creds.access_key, creds.session_token) == ("ASIASTS0000001", "sts-session-token")
    assert creds.expires_at is not None and creds.source == "web identity"
    token_file.write_text("another-jwt")
    with pytest.raises(SaslAuthenticationFailedError, match="web identity"):
        aws_credentials("eu-west-1", env=env)
    assert cloud.refusals == ["POST /sts/: 403"]


def test_container_endpoint_with_its_authorization_token(
    cloud: CloudEndpoints, tmp_path: Path
) -> None:
    auth = tmp_path / "auth"
    auth.write_text(cloud.container_auth)
    env = {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": cloud.base + "/container-creds",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(auth),
        **no_files(tmp_path),
        **NOTHING,
    }
    creds = aws_credentials("eu-west-1", env=env)
    assert (creds.access_key, creds.session_token) == ("ASIACONTAINER1", "container-session-token")
    auth.write_text("wrong")
    with pytest.raises(SaslAuthenticationFailedError, match="container"):
        aws_credentials("eu-west-1", env=env)


def test_instance_metadata_with_an_imdsv2_session(cloud: CloudEndpoints, tmp_path: Path) -> None:
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": cloud.base, **no_files(tmp_path)}
    creds = aws_credentials("eu-west-1", env=env)
    assert creds.access_key == "ASIAIMDS0001" and creds.source == "instance metadata"
    assert cloud.calls["PUT /latest/api/token"] == 1 and cloud.refusals == []
    with pytest.raises(SaslAuthenticationFailedError, match="no AWS credentials"):
        aws_credentials("eu-west-1", env={**env, **NOTHING})


@pytest.mark.anyio
async def test_temporary_credentials_are_renewed_before_they_expire(
    cloud: CloudEndpoints, tmp_path: Path
) -> None:
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": cloud.base, **no_files(tmp_path)}
    now = [1_900_000_000.0]
    cloud.expires_in_s = 10**9  # far off: reused for every token
    provider = MskIamTokenProvider("eu-west-1", env=env, clock=lambda: now[0])
    first = await provider()
    now[0] += 800  # past 80% of the token's 900 s: a new token, the same credentials
    second = await provider()
    assert first.value != second.value
    assert cloud.calls["PUT /latest/api/token"] == 1
    params = verify_msk_token(
        second.value, {"ASIAIMDS0001": "imds-secret"}, region="eu-west-1", now=now[0]
    )
    assert params["X-Amz-Security-Token"] == "imds-session-credential-token"


# -------------------------------------------------------------------------- Azure IMDS


@pytest.mark.anyio
async def test_azure_imds_system_and_user_assigned_identities(cloud: CloudEndpoints) -> None:
    endpoint = cloud.base + "/metadata/identity/oauth2/token"
    resource = "https://ns1.servicebus.windows.net"
    system = AzureImdsTokenProvider(resource, endpoint=endpoint)
    token = await system()
    assert token.value.startswith("system-token.") and token.expires_at is not None
    await system()  # cached
    user = AzureImdsTokenProvider(resource, client_id="user-client-id", endpoint=endpoint)
    assert (await user()).value.startswith("user-token.")
    assert cloud.azure_tokens == {f"system {resource}": 1, f"user-client-id {resource}": 1}
    assert cloud.refusals == []  # the Metadata header, api-version and resource were right


@pytest.mark.anyio
async def test_azure_imds_busy_is_retried_and_an_unknown_identity_is_final(
    cloud: CloudEndpoints,
) -> None:
    endpoint = cloud.base + "/metadata/identity/oauth2/token"
    cloud.azure_busy = 2
    provider = AzureImdsTokenProvider("https://ns.servicebus.windows.net", endpoint=endpoint)
    assert (await provider()).value.startswith("system-token.")
    assert provider.requests == 3
    unknown = AzureImdsTokenProvider("https://x", client_id="nobody", endpoint=endpoint)
    with pytest.raises(SaslAuthenticationFailedError, match="Identity not found"):
        await unknown()
    assert unknown.requests == 1


def test_the_azure_standin_refuses_what_imds_refuses(cloud: CloudEndpoints) -> None:
    import urllib.error
    import urllib.request

    url = AzureImdsTokenProvider(
        "https://x", endpoint=cloud.base + "/metadata/identity/oauth2/token"
    ).url()
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url)  # no Metadata: true header
    with info.value:
        assert info.value.code == 400


def docs_one_liner(name: str) -> Any:
    """The provider expression docs/security.md configures with ``name``."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    (line,) = [ln for ln in text.splitlines() if f"sasl_oauth_token_provider={name}(" in ln]
    return line.strip().removeprefix("sasl_oauth_token_provider=").rstrip(",")


def test_the_docs_recipes_are_one_line_configurations() -> None:
    from aiokafka_ng.net import aws, azure

    msk = eval(docs_one_liner("MskIamTokenProvider"), vars(aws))
    assert isinstance(msk, MskIamTokenProvider) and msk.region == "eu-west-1"
    entra = eval(docs_one_liner("AzureImdsTokenProvider"), {**vars(azure), "namespace": "ns"})
    assert isinstance(entra, AzureImdsTokenProvider)
    assert entra.resource == "https://ns.servicebus.windows.net"


def test_a_broken_credentials_file_is_named_without_its_content(tmp_path: Path) -> None:
    broken = tmp_path / "credentials"
    broken.write_text(f"[default]\naws_access_key_id = AKIAX\n{SECRET}\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(broken), "AWS_CONFIG_FILE": "/none", **NOTHING}
    with pytest.raises(SaslAuthenticationFailedError, match="does not parse") as info:
        aws_credentials("eu-west-1", env=env)
    assert SECRET not in str(info.value)
