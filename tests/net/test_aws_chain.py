"""The profile links of the AWS credential chain (aiokafka_ng/net/aws_credentials.py):
assume-role profiles (source_profile chains, credential_source), web identity from a
profile, credential_process and SSO, against the loopback stand-ins of STS (which checks
the SigV4 signature of AssumeRole), the SSO portal, the container endpoint and IMDS
(tests/net/cloud_standins.py); botocore's order between them; and the request signer byte
for byte against botocore's."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiokafka_ng.errors import SaslAuthenticationFailedError
from aiokafka_ng.net.aws import MskIamTokenProvider
from aiokafka_ng.net.aws_credentials import AwsCredentials, aws_credentials, sigv4_headers
from tests.net.cloud_standins import CloudEndpoints, verify_msk_token

REGION = "eu-west-1"
ACCOUNT = "123456789012"
SOURCE_SECRET = "source-user-secret"
T0 = 1_900_000_000.0


def arn(name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/{name}"


@pytest.fixture
def cloud() -> Iterator[CloudEndpoints]:
    with CloudEndpoints() as endpoints:
        yield endpoints


class Setup:
    """An ~/.aws of its own (HOME in the env given to the chain) and the stand-ins."""

    def __init__(self, cloud: CloudEndpoints, home: Path) -> None:
        self.cloud = cloud
        self.home = home
        (home / ".aws").mkdir()
        self.now = [T0]
        cloud.clock = lambda: self.now[0]
        self.env = {
            "HOME": str(home),
            "AWS_ENDPOINT_URL_STS": cloud.base + "/sts",
            "AWS_ENDPOINT_URL_SSO": cloud.base + "/sso",
            "AWS_ENDPOINT_URL_SSO_OIDC": cloud.base + "/oidc",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        self.cache: dict[str, AwsCredentials] = {}

    def files(self, config: str = "", credentials: str = "") -> None:
        (self.home / ".aws" / "config").write_text(config)
        (self.home / ".aws" / "credentials").write_text(credentials)

    def creds(self, profile: str | None = None, **env: str) -> AwsCredentials:
        return aws_credentials(
            REGION,
            profile=profile,
            env={**self.env, **env},
            cache=self.cache,
            clock=lambda: self.now[0],
        )

    def fails(self, profile: str | None = None, **env: str) -> str:
        with pytest.raises(SaslAuthenticationFailedError) as info:
            self.creds(profile, **env)
        return str(info.value)


@pytest.fixture
def aws(cloud: CloudEndpoints, tmp_path: Path) -> Setup:
    return Setup(cloud, tmp_path)


BASE_KEYS = (
    f"[base]\naws_access_key_id = AKIASOURCE000001\naws_secret_access_key = {SOURCE_SECRET}\n"
)


# ------------------------------------------------------------------------ the signer


@pytest.mark.parametrize("session_token", [None, "FwoGZXIvYXdzE+/token=="])
def test_request_signing_is_botocores_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, session_token: str | None
) -> None:
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials

    at = dt.datetime(2026, 3, 1, 12, 30, 15)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: at)
    url = "https://sts.eu-west-1.amazonaws.com/"
    body = b"Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fx"
    form = "application/x-www-form-urlencoded; charset=utf-8"
    request = botocore.awsrequest.AWSRequest("POST", url, data=body, headers={"Content-Type": form})
    theirs = botocore.credentials.Credentials("AKIDEXAMPLE", SOURCE_SECRET, session_token)
    botocore.auth.SigV4Auth(theirs, "sts", REGION).add_auth(request)
    ours = sigv4_headers(
        "POST",
        url,
        {"Content-Type": form},
        body,
        AwsCredentials("AKIDEXAMPLE", SOURCE_SECRET, session_token),
        region=REGION,
        service="sts",
        now=at.replace(tzinfo=dt.UTC).timestamp(),
    )
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["X-Amz-Date"] == request.headers["X-Amz-Date"]


# ------------------------------------------------------------------ assume-role profiles


def test_a_role_profile_is_assumed_with_its_source_profiles_keys(aws: Setup) -> None:
    aws.cloud.roles[arn("reader")] = {"trust": {"user/ops"}, "external_id": "ext-42"}
    aws.files(
        config=(
            f"[profile reader]\nrole_arn = {arn('reader')}\nsource_profile = base\n"
            "role_session_name = kafka-app\nexternal_id = ext-42\nduration_seconds = 1800\n"
        ),
        credentials=BASE_KEYS,
    )
    creds = aws.creds("reader")
    assert (creds.access_key, creds.session_token) == ("ASIAROLE00000001", "role-session-token-1")
    assert creds.expires_at == T0 + 1800
    assert aws.cloud.assumed == [
        {
            "role": arn("reader"),
            "by": "user/ops",
            "session": "kafka-app",
            "duration": "1800",
            "key": "ASIAROLE00000001",
        }
    ]
    # AWS_PROFILE picks it too, even with keys in the environment's way (botocore: the
    # environment first only when no profile is passed; AWS_PROFILE is not "passed").
    assert aws.creds(AWS_PROFILE="reader").access_key == "ASIAROLE00000001"  # cached
    assert len(aws.cloud.assumed) == 1


def test_a_role_profile_wins_over_keys_in_the_same_profile(aws: Setup) -> None:
    aws.cloud.roles[arn("self")] = {"trust": {"user/ops"}}
    aws.files(
        config=f"[profile base]\nrole_arn = {arn('self')}\nsource_profile = base\n",
        credentials=BASE_KEYS,
    )
    # The profile names itself as its source: its own keys sign the AssumeRole.
    assert aws.creds("base").access_key == "ASIAROLE00000001"
    assert aws.cloud.assumed[0]["by"] == "user/ops"


def test_role_profiles_chain_through_source_profiles(aws: Setup) -> None:
    aws.cloud.roles[arn("hop")] = {"trust": {"user/ops"}}
    aws.cloud.roles[arn("target")] = {"trust": {arn("hop")}}
    aws.files(
        config=(
            f"[profile target]\nrole_arn = {arn('target')}\nsource_profile = hop\n"
            f"[profile hop]\nrole_arn = {arn('hop')}\nsource_profile = base\n"
        ),
        credentials=BASE_KEYS,
    )
    creds = aws.creds("target")
    assert creds.access_key == "ASIAROLE00000002"
    # The hop's temporary credentials (and their session token) signed the second call.
    assert [(a["role"], a["by"]) for a in aws.cloud.assumed] == [
        (arn("hop"), "user/ops"),
        (arn("target"), arn("hop")),
    ]
    assert aws.cloud.refusals == []


def test_a_source_profile_cycle_is_an_error_naming_it(aws: Setup) -> None:
    aws.files(
        config=(
            f"[profile a]\nrole_arn = {arn('a')}\nsource_profile = b\n"
            f"[profile b]\nrole_arn = {arn('b')}\nsource_profile = c\n"
            f"[profile c]\nrole_arn = {arn('c')}\nsource_profile = a\n"
        )
    )
    assert "source_profile cycle: a -> b -> c -> a" in aws.fails("a")
    assert aws.cloud.calls["POST /sts/"] == 0


@pytest.mark.parametrize(
    ("source", "principal"),
    [
        ("Environment", "user/ops"),
        ("EcsContainer", "role/task"),
        ("Ec2InstanceMetadata", "role/app-role"),
    ],
)
def test_credential_source_signs_the_assume_role(aws: Setup, source: str, principal: str) -> None:
    aws.cloud.roles[arn("r")] = {"trust": {principal}}
    aws.files(config=f"[profile r]\nrole_arn = {arn('r')}\ncredential_source = {source}\n")
    env = {
        "AWS_ACCESS_KEY_ID": "AKIASOURCE000001",
        "AWS_SECRET_ACCESS_KEY": SOURCE_SECRET,
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": aws.cloud.base + "/container-creds",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": aws.cloud.container_auth,
        "AWS_EC2_METADATA_DISABLED": "false",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": aws.cloud.base,
    }
    assert aws.creds("r", **env).access_key == "ASIAROLE00000001"
    assert aws.cloud.assumed[0]["by"] == principal
    assert aws.cloud.refusals == []


@pytest.mark.parametrize(
    ("profile", "says"),
    [
        (f"role_arn = {arn('r')}\nsource_profile = base\nmfa_serial = arn:mfa", "mfa_serial"),
        (f"role_arn = {arn('r')}\n", "no source_profile or credential_source"),
        (
            f"role_arn = {arn('r')}\nsource_profile = base\ncredential_source = Environment",
            "both source_profile and credential_source",
        ),
        (f"role_arn = {arn('r')}\ncredential_source = Lambda", "not one of Environment"),
        (f"role_arn = {arn('r')}\nsource_profile = nowhere", "'nowhere' does not exist"),
        (f"role_arn = {arn('r')}\nsource_profile = empty", "'empty' (of profile 'r') has no"),
        (f"role_arn = {arn('r')}\ncredential_source = Environment", "Environment has no"),
    ],
    ids=["mfa", "no-source", "two-sources", "unknown-source", "no-such-profile", "empty", "no-env"],
)
def test_role_profiles_that_cannot_work_say_why(aws: Setup, profile: str, says: str) -> None:
    aws.files(
        config=f"[profile r]\n{profile}\n[profile empty]\nregion = x\n", credentials=BASE_KEYS
    )
    assert says in aws.fails("r")
    assert aws.cloud.calls["POST /sts/"] == 0


def test_sts_refusals_are_reported_without_the_secret(aws: Setup) -> None:
    aws.cloud.roles[arn("r")] = {"trust": {"user/ops"}, "external_id": "right"}
    config = f"[profile r]\nrole_arn = {arn('r')}\nsource_profile = base\nexternal_id = wrong\n"
    aws.files(config=config, credentials=BASE_KEYS)
    said = aws.fails("r")
    assert "AccessDenied" in said and "not authorized to perform: sts:AssumeRole" in said
    wrong_secret = BASE_KEYS.replace(SOURCE_SECRET, "not-the-secret-at-all")
    aws.files(config=config.replace("wrong", "right"), credentials=wrong_secret)
    said = aws.fails("r")
    assert "SignatureDoesNotMatch" in said and "AKIASOURCE000001" in said
    assert "not-the-secret-at-all" not in said and SOURCE_SECRET not in said
    assert aws.cloud.assumed == []


def test_assumed_roles_are_reused_until_five_minutes_before_they_expire(aws: Setup) -> None:
    aws.cloud.roles[arn("hop")] = {"trust": {"user/ops"}}
    aws.cloud.roles[arn("r")] = {"trust": {arn("hop")}}
    aws.files(
        config=(
            f"[profile r]\nrole_arn = {arn('r')}\nsource_profile = hop\nduration_seconds = 900\n"
            f"[profile hop]\nrole_arn = {arn('hop')}\nsource_profile = base\n"
        ),
        credentials=BASE_KEYS,
    )
    first = aws.creds("r")
    aws.now[0] = T0 + 599  # 301 s left: still good
    assert aws.creds("r") == first and len(aws.cloud.assumed) == 2
    aws.now[0] = T0 + 601  # 299 s left: renewed; the hop (3600 s) is reused to sign it
    second = aws.creds("r")
    assert second.access_key != first.access_key
    assert [a["role"] for a in aws.cloud.assumed] == [arn("hop"), arn("r"), arn("r")]


@pytest.mark.anyio
async def test_the_msk_provider_signs_with_an_assumed_role(aws: Setup) -> None:
    aws.cloud.roles[arn("msk")] = {"trust": {"user/ops"}}
    aws.files(
        config=f"[profile msk]\nrole_arn = {arn('msk')}\nsource_profile = base\n",
        credentials=BASE_KEYS,
    )
    provider = MskIamTokenProvider(REGION, profile="msk", env=aws.env, clock=lambda: aws.now[0])
    token = await provider()
    params = verify_msk_token(
        token.value, {"ASIAROLE00000001": "role-secret-1"}, region=REGION, now=aws.now[0]
    )
    assert params["X-Amz-Security-Token"] == "role-session-token-1"
    aws.now[0] += 800  # a new token, the role's credentials (an hour) reused
    assert (await provider()).value != token.value
    assert len(aws.cloud.assumed) == 1
    assert "role-secret" not in repr(provider) and SOURCE_SECRET not in repr(provider)


def test_web_identity_from_a_profile(aws: Setup) -> None:
    token_file = aws.home / "jwt"
    token_file.write_text(aws.cloud.web_identity[1])
    aws.files(
        config=(
            f"[profile eks]\nweb_identity_token_file = {token_file}\n"
            f"role_arn = {aws.cloud.web_identity[0]}\nrole_session_name = pod-1\n"
        )
    )
    creds = aws.creds("eks")
    assert (creds.access_key, creds.source) == ("ASIASTS0000001", "web identity")
    assert aws.cloud.calls["POST /sts/"] == 1 and aws.cloud.refusals == []


# ----------------------------------------------------------------------- credential_process


def helper(aws: Setup, answer: object, *, status: int = 0, noise: str = "") -> str:
    """A credential_process command line: a script printing ``answer`` (JSON unless a
    str), counting its runs in runs.txt, writing ``noise`` to stderr."""
    script = aws.home / "helper dir" / "creds.py"  # a space: the command must be split right
    script.parent.mkdir(exist_ok=True)
    out = answer if isinstance(answer, str) else json.dumps(answer)
    script.write_text(
        "import sys\n"
        f"open({str(aws.home / 'runs.txt')!r}, 'a').write(sys.argv[1] + '\\n')\n"
        f"sys.stderr.write({noise!r})\n"
        f"sys.stdout.write({out!r})\n"
        f"sys.exit({status})\n"
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} 'arg one'"


def runs(aws: Setup) -> list[str]:
    path = aws.home / "runs.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_credential_process_is_run_and_cached_until_it_expires(aws: Setup) -> None:
    expiry = dt.datetime.fromtimestamp(T0 + 3600, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    answer = {
        "Version": 1,
        "AccessKeyId": "ASIAPROCESS00001",
        "SecretAccessKey": "process-secret",
        "SessionToken": "process-token",
        "Expiration": expiry,
    }
    aws.files(config=f"[profile p]\ncredential_process = {helper(aws, answer)}\n")
    creds = aws.creds("p")
    assert (creds.access_key, creds.session_token, creds.expires_at) == (
        "ASIAPROCESS00001",
        "process-token",
        T0 + 3600,
    )
    assert runs(aws) == ["arg one"]  # split as a shell would, without one
    aws.now[0] = T0 + 3000
    aws.creds("p")
    assert len(runs(aws)) == 1
    aws.now[0] = T0 + 3301  # within 5 minutes of the expiry: run again
    aws.creds("p")
    assert len(runs(aws)) == 2
    assert "process-secret" not in repr(creds) and "process-token" not in repr(creds)


@pytest.mark.parametrize(
    ("answer", "status", "says"),
    [
        ({"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "leak-me"}, 3, "status 3"),
        ("leak-me {not json", 0, "its output is not JSON"),
        ({"Version": 2, "AccessKeyId": "A", "SecretAccessKey": "leak-me"}, 0, "must be 1, not 2"),
        ({"Version": 1, "AccessKeyId": "A", "Token": "leak-me"}, 0, "no SecretAccessKey"),
        (
            {"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "leak-me", "Expiration": "x"},
            0,
            "Expiration is not an ISO 8601 time",
        ),
    ],
    ids=["exit-status", "not-json", "version", "no-secret", "bad-expiration"],
)
def test_credential_process_failures_say_why_without_its_output(
    aws: Setup, answer: object, status: int, says: str
) -> None:
    command = helper(aws, answer, status=status, noise="stderr: leak-me too")
    aws.files(config=f"[profile p]\ncredential_process = {command}\n")
    said = aws.fails("p")
    assert says in said and "credential_process of profile 'p'" in said
    assert "leak-me" not in said


def test_a_missing_credential_process_program_is_named(aws: Setup) -> None:
    aws.files(config="[profile p]\ncredential_process = /nonexistent/helper --x\n")
    assert "'/nonexistent/helper' was not found" in aws.fails("p")


# ----------------------------------------------------------------------------------- SSO


def stamp(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sso_cache_file(aws: Setup, name: str) -> Path:
    return aws.home / ".aws" / "sso" / "cache" / f"{hashlib.sha1(name.encode()).hexdigest()}.json"


def sso_cache(aws: Setup, name: str, token: str, expires_at: float, **more: str) -> None:
    """The file ``aws sso login`` leaves in ~/.aws/sso/cache (``more``: the client
    registration and refresh token it adds for an sso-session)."""
    path = sso_cache_file(aws, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "startUrl": "https://example.awsapps.com/start",
        "region": "eu-central-1",
        "accessToken": token,
        "expiresAt": stamp(expires_at),
        **more,
    }
    path.write_text(json.dumps(entry))


SSO_SESSION = (
    "[sso-session corp]\nsso_start_url = https://example.awsapps.com/start\n"
    "sso_region = eu-central-1\nsso_registration_scopes = sso:account:access\n"
)


def test_sso_session_profile(aws: Setup) -> None:
    aws.cloud.sso_tokens["sso-access-token"] = {(ACCOUNT, "KafkaWriter")}
    sso_cache(aws, "corp", "sso-access-token", T0 + 8 * 3600)
    aws.files(
        config=(
            f"[profile dev]\nsso_session = corp\nsso_account_id = {ACCOUNT}\n"
            f"sso_role_name = KafkaWriter\n{SSO_SESSION}"
        )
    )
    creds = aws.creds("dev")
    assert (creds.access_key, creds.session_token) == (
        "ASIASSOKAFKAWRITER",
        "sso-session-token-KafkaWriter",
    )
    assert creds.expires_at == T0 + 3600
    aws.creds("dev")
    assert aws.cloud.calls["GET /sso/federation/credentials"] == 1  # cached
    assert aws.cloud.refusals == []


def test_legacy_sso_profile_reads_the_cache_named_after_the_start_url(aws: Setup) -> None:
    aws.cloud.sso_tokens["legacy-token"] = {(ACCOUNT, "Reader")}
    sso_cache(aws, "https://example.awsapps.com/start", "legacy-token", T0 + 3600)
    aws.files(
        config=(
            "[default]\nsso_start_url = https://example.awsapps.com/start\n"
            f"sso_region = eu-central-1\nsso_account_id = {ACCOUNT}\nsso_role_name = Reader\n"
        )
    )
    assert aws.creds().access_key == "ASIASSOREADER"


def test_expired_or_refused_sso_sign_in_asks_for_aws_sso_login(aws: Setup) -> None:
    aws.cloud.sso_tokens["good-token"] = {(ACCOUNT, "KafkaWriter")}
    profile = (
        f"[profile dev]\nsso_session = corp\nsso_account_id = {ACCOUNT}\n"
        f"sso_role_name = KafkaWriter\n{SSO_SESSION}"
    )
    aws.files(config=profile)
    assert "not signed in to SSO" in aws.fails("dev")
    sso_cache(aws, "corp", "good-token", T0 - 1)
    said = aws.fails("dev")
    assert "expired: run `aws sso login --sso-session corp`" in said
    assert aws.cloud.calls["GET /sso/federation/credentials"] == 0
    sso_cache(aws, "corp", "revoked-token", T0 + 3600)
    said = aws.fails("dev")
    assert "refused the sign-in" in said and "aws sso login --sso-session corp" in said
    assert "revoked-token" not in said and "good-token" not in said
    aws.files(config=profile.replace("KafkaWriter", "Admin"))
    sso_cache(aws, "corp", "good-token", T0 + 3600)
    assert "HTTP 403" in aws.fails("dev")


def test_an_sso_profile_disagreeing_with_its_session_is_refused(aws: Setup) -> None:
    aws.files(
        config=(
            f"[profile dev]\nsso_session = corp\nsso_region = us-east-1\n"
            f"sso_account_id = {ACCOUNT}\nsso_role_name = R\n{SSO_SESSION}"
        )
    )
    assert "sso_region differs between the profile and sso-session 'corp'" in aws.fails("dev")
    aws.files(config="[profile dev]\nsso_session = nope\nsso_account_id = 1\nsso_role_name = R\n")
    assert "no [sso-session nope] section" in aws.fails("dev")


# ------------------------------------------------------------------------------ the order


def test_the_profile_links_in_botocores_order(aws: Setup) -> None:
    """Role, then SSO, then the credentials file, then credential_process, then the config
    file's keys: each profile below has the next ones too, and the first wins."""
    aws.cloud.roles[arn("r")] = {"trust": {"user/ops"}}
    aws.cloud.sso_tokens["t"] = {(ACCOUNT, "S")}
    sso_cache(aws, "corp", "t", T0 + 3600)
    answer = {"Version": 1, "AccessKeyId": "AKIAPROCESS", "SecretAccessKey": "x"}
    process = f"credential_process = {helper(aws, answer)}\n"
    config_keys = "aws_access_key_id = AKIACONFIG\naws_secret_access_key = y\n"
    sso = f"sso_session = corp\nsso_account_id = {ACCOUNT}\nsso_role_name = S\n"
    role = f"role_arn = {arn('r')}\nsource_profile = base\n"
    aws.files(
        config=(
            f"[profile role]\n{role}{sso}{process}{config_keys}"
            f"[profile sso]\n{sso}{process}{config_keys}"
            f"[profile file]\n{process}{config_keys}"
            f"[profile process]\n{process}{config_keys}"
            f"[profile config]\n{config_keys}{SSO_SESSION}"
        ),
        credentials=(
            BASE_KEYS + "[file]\naws_access_key_id = AKIACREDFILE\naws_secret_access_key = z\n"
        ),
    )
    found = {
        name: aws.creds(name).access_key for name in ("role", "sso", "file", "process", "config")
    }
    assert found == {
        "role": "ASIAROLE00000001",
        "sso": "ASIASSOS",
        "file": "AKIACREDFILE",
        "process": "AKIAPROCESS",
        "config": "AKIACONFIG",
    }
    assert "(profile): 'nobody' is in neither" in aws.fails("nobody")
    # The environment's keys come first unless a profile is passed.
    env_keys = {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "s", "AWS_PROFILE": "role"}
    assert aws.creds(**env_keys).access_key == "AKIAENV"


def test_an_expiring_sso_session_token_is_refreshed_and_written_back(aws: Setup) -> None:
    aws.cloud.oidc_clients["client-1"] = "client-secret-1"
    aws.cloud.oidc_refresh["refresh-0"] = {(ACCOUNT, "KafkaWriter")}
    registration = {
        "clientId": "client-1",
        "clientSecret": "client-secret-1",
        "registrationExpiresAt": stamp(T0 + 90 * 86400),
    }
    # Ten minutes left: inside botocore's 15-minute window, so renewed before use.
    sso_cache(aws, "corp", "old-token", T0 + 600, refreshToken="refresh-0", **registration)
    aws.files(
        config=(
            f"[profile dev]\nsso_session = corp\nsso_account_id = {ACCOUNT}\n"
            f"sso_role_name = KafkaWriter\n{SSO_SESSION}"
        )
    )
    assert aws.creds("dev").access_key == "ASIASSOKAFKAWRITER"
    written = json.loads(sso_cache_file(aws, "corp").read_text())
    assert (written["accessToken"], written["refreshToken"]) == ("refreshed-access-1", "refresh-1")
    assert written["expiresAt"] == stamp(T0 + 28800) and written["clientId"] == "client-1"
    assert sso_cache_file(aws, "corp").stat().st_mode & 0o077 == 0  # tokens: owner only
    assert aws.cloud.refusals == []
    # Expired, and the refresh token already spent: nothing to do but sign in again.
    aws.cache.clear()
    sso_cache(aws, "corp", "old-token", T0 - 1, refreshToken="refresh-0", **registration)
    said = aws.fails("dev")
    assert "expired: run `aws sso login --sso-session corp`" in said
    assert "client-secret-1" not in said and "refresh-0" not in said
    # A legacy profile's token is not refreshed (botocore neither): it has no registration.
    aws.cloud.calls.clear()
    sso_cache(aws, "https://example.awsapps.com/start", "t", T0 - 1, refreshToken="refresh-1")
    aws.files(
        config=(
            "[profile old]\nsso_start_url = https://example.awsapps.com/start\n"
            f"sso_region = eu-central-1\nsso_account_id = {ACCOUNT}\nsso_role_name = R\n"
        )
    )
    assert "aws sso login --profile old" in aws.fails("old")
    assert aws.cloud.calls["POST /oidc/token"] == 0


def test_a_valid_sso_token_is_used_when_its_refresh_fails(aws: Setup) -> None:
    aws.cloud.sso_tokens["still-good"] = {(ACCOUNT, "KafkaWriter")}
    aws.cloud.oidc_clients["client-1"] = "client-secret-1"
    sso_cache(
        aws,
        "corp",
        "still-good",
        T0 + 600,
        clientId="client-1",
        clientSecret="client-secret-1",
        refreshToken="unknown",
        registrationExpiresAt=stamp(T0 + 86400),
    )
    aws.files(
        config=(
            f"[profile dev]\nsso_session = corp\nsso_account_id = {ACCOUNT}\n"
            f"sso_role_name = KafkaWriter\n{SSO_SESSION}"
        )
    )
    assert aws.creds("dev").access_key == "ASIASSOKAFKAWRITER"
    assert aws.cloud.refusals == ["POST /oidc/token: 400"]
    assert json.loads(sso_cache_file(aws, "corp").read_text())["accessToken"] == "still-good"


def test_botocore_finds_the_same_credentials_in_the_same_files(
    aws: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Differential: botocore's own chain, on the same files and against the same STS
    stand-in (which so takes botocore's AssumeRole as well as ours), picks the same link
    for each profile. SSO is left out: botocore fixes its token cache's directory at import."""
    import time

    import botocore.session

    aws.now[0] = time.time()  # botocore signs with the real clock
    aws.cloud.roles[arn("hop")] = {"trust": {"user/ops"}}
    aws.cloud.roles[arn("r")] = {"trust": {arn("hop")}}
    answer = {"Version": 1, "AccessKeyId": "AKIAPROCESS", "SecretAccessKey": "x"}
    process = f"credential_process = {helper(aws, answer)}\n"
    config_keys = "aws_access_key_id = AKIACONFIG\naws_secret_access_key = y\n"
    aws.files(
        config=(
            f"[profile role]\nrole_arn = {arn('r')}\nsource_profile = hop\n{process}{config_keys}"
            f"[profile hop]\nrole_arn = {arn('hop')}\nsource_profile = base\n"
            f"[profile file]\n{process}{config_keys}"
            f"[profile process]\n{process}{config_keys}"
            f"[profile config]\n{config_keys}"
        ),
        credentials=(
            BASE_KEYS + "[file]\naws_access_key_id = AKIACREDFILE\naws_secret_access_key = z\n"
        ),
    )
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in {
        **aws.env,
        "AWS_CONFIG_FILE": str(aws.home / ".aws" / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(aws.home / ".aws" / "credentials"),
        "AWS_ENDPOINT_URL_STS": aws.cloud.base + "/sts/",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)

    def who(key: str) -> str:
        """A key the STS stand-in issued stands for the role it was issued for."""
        return aws.cloud.keys[key][2] if key.startswith("ASIAROLE") else key

    for profile in ("role", "file", "process", "config"):
        theirs = botocore.session.Session(profile=profile).get_credentials()
        assert theirs is not None
        theirs_key = theirs.get_frozen_credentials().access_key
        assert who(theirs_key) == who(aws.creds(profile).access_key), profile
    assert aws.cloud.refusals == []
    # Both walked hop -> r: botocore first, then us.
    assert [a["role"] for a in aws.cloud.assumed] == [arn("hop"), arn("r")] * 2
