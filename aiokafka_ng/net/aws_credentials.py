"""The standard AWS credential chain (botocore's order) and SigV4 signing of AWS requests.

:func:`aws_credentials` returns the first credentials of these links; a link that is
configured but fails raises (as in botocore: a broken role profile does not fall through to
the instance's role):

1. the environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``
   (skipped when a ``profile`` is passed explicitly);
2. an assume-role profile: one with ``role_arn`` (and no ``web_identity_token_file``). STS
   ``AssumeRole``, SigV4-signed with the source credentials: those of ``source_profile``
   (found by links 3-7 for that profile, or, when it is itself a role profile without keys
   of its own, by assuming that role first: chains of any length; a cycle is an error
   naming it; a profile may name itself when it also holds keys) or of
   ``credential_source`` (``Environment``, ``Ec2InstanceMetadata``, ``EcsContainer``).
   ``role_session_name``, ``external_id`` and ``duration_seconds`` are sent;
   ``mfa_serial`` is refused (a library has no one to type the code);
3. web identity (EKS IRSA and others): ``AWS_WEB_IDENTITY_TOKEN_FILE``, ``AWS_ROLE_ARN``,
   ``AWS_ROLE_SESSION_NAME`` (not read when a ``profile`` is passed), else the profile's
   ``web_identity_token_file``, ``role_arn``, ``role_session_name``; exchanged at STS with
   ``AssumeRoleWithWebIdentity`` (unsigned: the token is the proof);
4. SSO (IAM Identity Center): a profile with ``sso_account_id`` / ``sso_role_name`` and
   either ``sso_session`` (naming a ``[sso-session NAME]`` section with ``sso_start_url``
   and ``sso_region``) or the legacy ``sso_start_url`` / ``sso_region`` in the profile. The
   access token is the one ``aws sso login`` cached in
   ``~/.aws/sso/cache/<sha1 of the session name, or of the start URL>.json``; the portal's
   ``GetRoleCredentials`` turns it into the role's credentials. For ``sso_session``
   profiles a token within 15 minutes of its expiry is renewed with its refresh token at
   the OIDC service's ``CreateToken`` and written back to the cache, as the AWS CLI does;
   an expired token that cannot be renewed (and any expired legacy one) is an error asking
   for ``aws sso login``;
5. the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, ``~/.aws/credentials``);
6. ``credential_process`` in the profile: the command (no shell; split as botocore splits
   it) prints ``{"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken",
   "Expiration"}``;
7. the config file's keys (``AWS_CONFIG_FILE``, ``~/.aws/config``, ``[profile NAME]``);
8. the container endpoint (ECS, EKS Pod Identity): ``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI``
   on 169.254.170.2 or ``AWS_CONTAINER_CREDENTIALS_FULL_URI``, with
   ``AWS_CONTAINER_AUTHORIZATION_TOKEN`` (``_FILE``) as the Authorization header;
9. the EC2 instance metadata service, IMDSv2 (a session token from ``PUT
   /latest/api/token``, then the role's credentials), unless ``AWS_EC2_METADATA_DISABLED``
   is true; ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` overrides its address.

The profile is the one passed, else ``AWS_PROFILE``, else ``default``; profiles 2-4 and 6
read the config file's profile with the credentials file's section of the same name laid
over it (botocore's merged view). STS is ``https://sts.<region>.amazonaws.com`` and the SSO
portal ``https://portal.sso.<sso_region>.amazonaws.com`` unless ``AWS_ENDPOINT_URL_STS`` /
``AWS_ENDPOINT_URL_SSO`` (and ``AWS_ENDPOINT_URL_SSO_OIDC`` for ``oidc.<sso_region>``), or
``AWS_ENDPOINT_URL`` for all, say otherwise.

Temporary credentials from STS, SSO and ``credential_process`` are kept in the ``cache``
the caller passes (``MskIamTokenProvider`` keeps one) and reused until 5 minutes before they
expire, at every depth of a role chain: a cached role needs no look-up of its source.
HTTP is urllib (blocking: callers run this in a worker thread), without proxies (metadata
endpoints must not go through one). Secret keys, session tokens, SSO access tokens and a
process's output are never in a repr, log line or error.
"""

from __future__ import annotations

import configparser
import datetime as dt
import functools
import hashlib
import hmac
import json
import os
import shlex
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field

from aiokafka_ng.errors import SaslAuthenticationFailedError

__all__ = ["AwsCredentials", "aws_credentials", "signing_key", "sigv4_headers"]

ALGORITHM = "AWS4-HMAC-SHA256"
_STS_NS = "{https://sts.amazonaws.com/doc/2011-06-15/}"
_IMDS = "http://169.254.169.254/"
_CONTAINER_HOST = "http://169.254.170.2"
EARLY_S = 300  # temporary credentials are renewed this long before they expire
_TIMEOUT_S = 5.0
_IMDS_TIMEOUT_S = 1.0  # botocore's: no instance answers slower than this
# A credential_process may itself sign in (a browser, a hardware key): generous, but bounded
# so that a hung helper fails the connection instead of holding a worker thread forever.
_PROCESS_TIMEOUT_S = 300.0
_MAX_ANSWER = 1024 * 1024
_SSO_REFRESH_S = 900  # an SSO token this close to its expiry is renewed (botocore's window)
_FORM = "application/x-www-form-urlencoded; charset=utf-8"


@dataclass(frozen=True, slots=True)
class AwsCredentials:
    """An access key, its secret, the session token of temporary credentials, and when
    they expire (seconds since the epoch; None: long-term). ``source`` names the link of
    the chain they came from."""

    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    source: str = ""


class _ChainError(ValueError):
    """A link is configured but cannot give credentials; the message is the user's
    explanation (never a secret) and is passed on as is."""


# ------------------------------------------------------------------------------ SigV4


def quote(value: str) -> str:
    """SigV4's URI encoding: everything but the unreserved characters (RFC 3986)."""
    return urllib.parse.quote(value, safe="-_.~")


def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    """SigV4's derived key: HMAC-SHA256 of the day, region, service and ``aws4_request``
    in turn, starting from ``AWS4`` + the secret."""
    key = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sigv4_headers(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: AwsCredentials,
    *,
    region: str,
    service: str,
    now: float,
) -> dict[str, str]:
    """``headers`` with ``Host``, ``X-Amz-Date``, ``X-Amz-Security-Token`` (temporary
    credentials) and the SigV4 ``Authorization`` that signs all of them and the body."""
    parts = urllib.parse.urlsplit(url)
    amz_date = dt.datetime.fromtimestamp(int(now), dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    signed = {**headers, "Host": parts.netloc, "X-Amz-Date": amz_date}
    if credentials.session_token:
        signed["X-Amz-Security-Token"] = credentials.session_token
    canonical_headers = sorted((k.lower(), " ".join(v.split())) for k, v in signed.items())
    names = ";".join(k for k, _ in canonical_headers)
    query = sorted(
        (quote(k), quote(v)) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    )
    canonical = "\n".join(
        [
            method,
            urllib.parse.quote(parts.path or "/", safe="/-_.~"),
            "&".join(f"{k}={v}" for k, v in query),
            *(f"{k}:{v}" for k, v in canonical_headers),
            "",
            names,
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = signing_key(credentials.secret_key, day, region, service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={names}, Signature={signature}"
    )
    return signed


# -------------------------------------------------------------------------- transport


def _http(
    method: str,
    url: str,
    headers: Mapping[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = _TIMEOUT_S,
) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=data, headers=dict(headers or {}), method=method)
    try:
        with opener.open(request, timeout=timeout) as answer:
            return int(answer.status), answer.read(_MAX_ANSWER)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read(_MAX_ANSWER)


def _expiry(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    # The AWS CLI's older SSO cache files end in "UTC" rather than "Z".
    text = text.strip().removesuffix("UTC").removesuffix("Z")
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _from_json(body: bytes, source: str) -> AwsCredentials:
    answer = json.loads(body)
    if not isinstance(answer, dict) or not answer.get("AccessKeyId"):
        raise _ChainError(f"{source}: no AccessKeyId in the answer")
    return AwsCredentials(
        str(answer["AccessKeyId"]),
        str(answer["SecretAccessKey"]),
        answer.get("Token") or None,
        _expiry(answer.get("Expiration")),
        source,
    )


def _sts_credentials(body: bytes, source: str) -> AwsCredentials:
    creds = ET.fromstring(body).find(f".//{_STS_NS}Credentials")
    if creds is None:
        raise _ChainError(f"{source}: no Credentials in STS's answer")

    def text(name: str) -> str:
        node = creds.find(f"{_STS_NS}{name}")
        return "" if node is None or node.text is None else node.text.strip()

    return AwsCredentials(
        text("AccessKeyId"),
        text("SecretAccessKey"),
        text("SessionToken") or None,
        _expiry(text("Expiration")),
        source,
    )


def _sts_refusal(status: int, body: bytes) -> str:
    """``HTTP 403 AccessDenied: <STS's message>``: STS's message names the caller and the
    role, never a secret."""
    said = f"HTTP {status}"
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return said
    values = {node.tag.rsplit("}", 1)[-1]: (node.text or "").strip() for node in root.iter()}
    if values.get("Code"):
        said += f" {values['Code']}"
    if values.get("Message"):
        said += f": {values['Message'][:200]}"
    return said


def _sts_endpoint(env: Mapping[str, str], region: str) -> str:
    endpoint = (
        env.get("AWS_ENDPOINT_URL_STS")
        or env.get("AWS_ENDPOINT_URL")
        or f"https://sts.{region}.amazonaws.com"
    )
    return endpoint.rstrip("/") + "/"


# --------------------------------------------------------------------- the simple links


def _from_env(env: Mapping[str, str]) -> AwsCredentials | None:
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return None
    token = env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN") or None
    return AwsCredentials(key, secret, token, None, "environment")


def _from_container(env: Mapping[str, str]) -> AwsCredentials | None:
    relative, full = (
        env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
    )
    if not relative and not full:
        return None
    url = _CONTAINER_HOST + relative if relative else str(full)
    headers = {"Accept": "application/json"}
    auth = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN")
    auth_file = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
    if auth_file:
        with open(auth_file, encoding="utf-8") as f:
            auth = f.read().strip()
    if auth:
        headers["Authorization"] = auth
    status, body = _http("GET", url, headers)
    if status != 200:
        raise _ChainError(f"container credentials endpoint: HTTP {status}")
    return _from_json(body, "container endpoint")


def _from_imds(env: Mapping[str, str]) -> AwsCredentials | None:
    if env.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true":
        return None
    base = (env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or _IMDS).rstrip("/") + "/"
    try:
        status, token = _http(
            "PUT",
            base + "latest/api/token",
            {"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
            timeout=_IMDS_TIMEOUT_S,
        )
        if status != 200:
            return None
        session = {"X-aws-ec2-metadata-token": token.decode().strip()}
        path = base + "latest/meta-data/iam/security-credentials/"
        status, roles = _http("GET", path, session, timeout=_IMDS_TIMEOUT_S)
        if status != 200 or not roles.strip():
            return None
        role = roles.decode().splitlines()[0].strip()
        status, body = _http("GET", path + role, session, timeout=_IMDS_TIMEOUT_S)
    except (OSError, urllib.error.URLError):
        return None  # not on EC2 (or no metadata service): the chain ends without
    if status != 200:
        return None
    return _from_json(body, "instance metadata")


def _static(values: Mapping[str, str], source: str) -> AwsCredentials | None:
    key, secret = values.get("aws_access_key_id"), values.get("aws_secret_access_key")
    if not key or not secret:
        return None
    token = (values.get("aws_session_token") or "").strip() or None
    return AwsCredentials(key.strip(), secret.strip(), token, None, source)


def _run_process(command: str, profile: str) -> AwsCredentials:
    where = f"credential_process of profile {profile!r}"
    # botocore: shlex on POSIX; on Windows the command line goes to CreateProcess as is,
    # whose argument parsing is the one botocore's Windows splitter imitates.
    argv: str | list[str] = shlex.split(command) if os.name != "nt" else command
    program = argv[0] if isinstance(argv, list) and argv else command.split(" ", 1)[0]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=_PROCESS_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise _ChainError(f"{where}: {program!r} was not found") from None
    except subprocess.TimeoutExpired:
        raise _ChainError(f"{where}: no answer within {_PROCESS_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        # Its stderr may repeat what it read (a password, a key): only the status.
        raise _ChainError(f"{where}: {program!r} exited with status {done.returncode}")
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        raise _ChainError(f"{where}: its output is not JSON") from None
    if not isinstance(answer, dict):
        raise _ChainError(f"{where}: its output is not a JSON object")
    version = answer.get("Version")
    if version != 1 or isinstance(version, bool):
        shown = version if isinstance(version, int) else type(version).__name__
        raise _ChainError(f"{where}: Version must be 1, not {shown}")
    for name in ("AccessKeyId", "SecretAccessKey"):
        if not isinstance(answer.get(name), str) or not answer[name]:
            raise _ChainError(f"{where}: no {name} in its output")
    token = answer.get("SessionToken")
    try:
        expires_at = _expiry(answer.get("Expiration"))
    except ValueError:
        raise _ChainError(f"{where}: Expiration is not an ISO 8601 time") from None
    return AwsCredentials(
        answer["AccessKeyId"],
        answer["SecretAccessKey"],
        token if isinstance(token, str) and token else None,
        expires_at,
        "credential_process",
    )


def _write_private_json(path: str, value: Mapping[str, object]) -> None:
    """Replace ``path`` with ``value`` as JSON, readable by the owner only (it holds
    tokens), all at once: the AWS CLI may read it at the same moment."""
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(value, f)
    os.replace(temporary, path)


# ---------------------------------------------------------------------- the config files


@dataclass(frozen=True, slots=True)
class _Files:
    """What the two files say: the credentials file's sections, the config file's profiles
    and sso-sessions, and the merged view (config profile, credentials section over it)."""

    credentials_path: str
    config_path: str
    credentials: dict[str, dict[str, str]]
    config: dict[str, dict[str, str]]
    sso_sessions: dict[str, dict[str, str]]
    profiles: dict[str, dict[str, str]]


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def _read_ini(path: str) -> dict[str, dict[str, str]]:
    parser = configparser.RawConfigParser()
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        return {}
    return {name: dict(parser[name]) for name in parser.sections()}


def _load_files(env: Mapping[str, str]) -> _Files:
    aws_dir = os.path.join(_home(env), ".aws")
    credentials_path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(
        aws_dir, "credentials"
    )
    config_path = env.get("AWS_CONFIG_FILE") or os.path.join(aws_dir, "config")
    credentials = _read_ini(credentials_path)
    config: dict[str, dict[str, str]] = {}
    sso_sessions: dict[str, dict[str, str]] = {}
    for section, values in _read_ini(config_path).items():
        if section == "default":
            config["default"] = values
            continue
        try:
            words = shlex.split(section)
        except ValueError:
            continue
        if len(words) == 2 and words[0] == "profile":
            config[words[1]] = values
        elif len(words) == 2 and words[0] == "sso-session":
            sso_sessions[words[1]] = values
    profiles = {name: dict(values) for name, values in config.items()}
    for name, values in credentials.items():
        profiles.setdefault(name, {}).update(values)
    return _Files(credentials_path, config_path, credentials, config, sso_sessions, profiles)


# ---------------------------------------------------------------------------- the chain


class _Chain:
    """One walk of the chain for one profile: the files read once, the caller's cache of
    temporary credentials, the role profiles visited (for cycles)."""

    def __init__(
        self,
        region: str,
        env: Mapping[str, str],
        cache: MutableMapping[str, AwsCredentials],
        clock: Callable[[], float],
    ) -> None:
        self.region = region
        self.env = env
        self.cache = cache
        self.clock = clock

    @functools.cached_property
    def files(self) -> _Files:
        # Read on first use: credentials in the environment win even over a broken file.
        return _load_files(self.env)

    def cached(self, key: str, fetch: Callable[[], AwsCredentials | None]) -> AwsCredentials | None:
        held = self.cache.get(key)
        if held is not None and (
            held.expires_at is None or self.clock() < held.expires_at - EARLY_S
        ):
            return held
        found = fetch()
        if found is not None:
            self.cache[key] = found
        return found

    # ------------------------------------------------------------------- role profiles

    @staticmethod
    def is_role_profile(values: Mapping[str, str]) -> bool:
        return "role_arn" in values and "web_identity_token_file" not in values

    def assume_role(self, name: str, visited: list[str]) -> AwsCredentials:
        values = self.files.profiles[name]
        where = f"profile {name!r}"
        role = values["role_arn"].strip()
        if values.get("mfa_serial"):
            raise _ChainError(
                f"{where} sets mfa_serial: assuming a role with MFA needs a code typed in, "
                "which a Kafka client cannot ask for; use credentials that need no MFA "
                "(or a credential_process that prompts)"
            )
        source_profile, credential_source = (
            values.get("source_profile"),
            values.get("credential_source"),
        )
        if source_profile and credential_source:
            raise _ChainError(f"{where} has both source_profile and credential_source")
        if not source_profile and not credential_source:
            raise _ChainError(f"{where} has role_arn but no source_profile or credential_source")
        form = {
            "Action": "AssumeRole",
            "Version": "2011-06-15",
            "RoleArn": role,
            "RoleSessionName": (values.get("role_session_name") or "").strip(),
        }
        if values.get("external_id"):
            form["ExternalId"] = values["external_id"].strip()
        if values.get("duration_seconds"):
            duration = values["duration_seconds"].strip()
            if not duration.isdigit():
                raise _ChainError(f"{where}: duration_seconds must be a number of seconds")
            form["DurationSeconds"] = duration
        # The generated session name changes each time: botocore leaves it out of the key.
        # The source is in it: two profiles reaching one role from different sources do
        # not share what one of them was granted.
        source = {"source_profile": source_profile, "credential_source": credential_source}
        key = "assume-role " + json.dumps({**form, **source}, sort_keys=True)
        form["RoleSessionName"] = form["RoleSessionName"] or f"aiokafka-ng-{int(self.clock())}"

        def fetch() -> AwsCredentials:
            if credential_source:
                signer = self.named_source(credential_source, where)
            else:
                signer = self.source_profile(name, str(source_profile), visited)
            return self.call_assume_role(form, signer, where)

        found = self.cached(key, fetch)
        assert found is not None  # fetch() never answers None
        return found

    def named_source(self, credential_source: str, where: str) -> AwsCredentials:
        links: dict[str, Callable[[], AwsCredentials | None]] = {
            "Environment": lambda: _from_env(self.env),
            "Ec2InstanceMetadata": lambda: _from_imds(self.env),
            "EcsContainer": lambda: _from_container(self.env),
        }
        link = links.get(credential_source.strip())
        if link is None:
            raise _ChainError(
                f"{where}: credential_source {credential_source!r} is not one of "
                + ", ".join(links)
            )
        found = link()
        if found is None:
            raise _ChainError(f"{where}: credential_source {credential_source} has no credentials")
        return found

    def source_profile(self, parent: str, name: str, visited: list[str]) -> AwsCredentials:
        values = self.files.profiles.get(name)
        if values is None:
            raise _ChainError(f"profile {parent!r}: its source_profile {name!r} does not exist")
        has_keys = "aws_access_key_id" in values or "aws_secret_access_key" in values
        # A profile may name itself to take its own keys; any other return is a loop.
        if name in visited and not (name == parent and has_keys):
            raise _ChainError("source_profile cycle: " + " -> ".join([*visited, name]))
        if has_keys or not self.is_role_profile(values):
            found = self.from_profile(name)
            if found is None:
                raise _ChainError(
                    f"source_profile {name!r} (of profile {parent!r}) has no credentials"
                )
            return found
        return self.assume_role(name, [*visited, name])

    def call_assume_role(
        self, form: dict[str, str], source: AwsCredentials, where: str
    ) -> AwsCredentials:
        url = _sts_endpoint(self.env, self.region)
        body = urllib.parse.urlencode(form).encode()
        headers = sigv4_headers(
            "POST",
            url,
            {"Content-Type": _FORM},
            body,
            source,
            region=self.region,
            service="sts",
            now=self.clock(),
        )
        status, answer = _http("POST", url, headers, body)
        if status != 200:
            raise _ChainError(
                f"{where}: STS AssumeRole of {form['RoleArn']} with {source.source} credentials "
                f"({source.access_key}): {_sts_refusal(status, answer)}"
            )
        return _sts_credentials(answer, f"assume role {form['RoleArn']}")

    # ----------------------------------------------------------- links of one profile

    def web_identity(self, name: str, use_env: bool) -> AwsCredentials | None:
        profile = self.files.profiles.get(name, {})

        def setting(env_name: str, key: str) -> str:
            if use_env and self.env.get(env_name):
                return self.env[env_name]
            return profile.get(key, "").strip()

        token_file = setting("AWS_WEB_IDENTITY_TOKEN_FILE", "web_identity_token_file")
        if not token_file:
            return None
        role = setting("AWS_ROLE_ARN", "role_arn")
        if not role:
            raise _ChainError("web identity: a token file is set but no role ARN")
        session_name = setting("AWS_ROLE_SESSION_NAME", "role_session_name")

        def fetch() -> AwsCredentials:
            with open(os.path.expanduser(token_file), encoding="utf-8") as f:
                web_token = f.read().strip()
            form = {
                "Action": "AssumeRoleWithWebIdentity",
                "Version": "2011-06-15",
                "RoleArn": role,
                "RoleSessionName": session_name or f"aiokafka-ng-{int(self.clock())}",
                "WebIdentityToken": web_token,
            }
            status, body = _http(
                "POST",
                _sts_endpoint(self.env, self.region),
                {"Content-Type": _FORM},
                urllib.parse.urlencode(form).encode(),
            )
            if status != 200:
                raise _ChainError(
                    f"STS AssumeRoleWithWebIdentity for {role}: {_sts_refusal(status, body)}"
                )
            return _sts_credentials(body, "web identity")

        return self.cached(f"web-identity {role} {session_name} {token_file}", fetch)

    def sso(self, name: str) -> AwsCredentials | None:
        profile = self.files.profiles.get(name, {})
        if "sso_account_id" not in profile and "sso_role_name" not in profile:
            return None
        where = f"profile {name!r}"
        settings = {k: v.strip() for k, v in profile.items()}
        session_name = settings.get("sso_session")
        if session_name:
            session = self.files.sso_sessions.get(session_name)
            if session is None:
                raise _ChainError(f"{where}: there is no [sso-session {session_name}] section")
            for key, value in session.items():
                if settings.get(key, value.strip()) != value.strip():
                    raise _ChainError(
                        f"{where}: {key} differs between the profile and sso-session "
                        f"{session_name!r}"
                    )
                settings[key] = value.strip()
        wanted = ("sso_start_url", "sso_region", "sso_account_id", "sso_role_name")
        missing = [k for k in wanted if not settings.get(k)]
        if missing:
            raise _ChainError(f"{where} is an SSO profile without " + ", ".join(missing))
        start_url, account, role = (
            settings["sso_start_url"],
            settings["sso_account_id"],
            settings["sso_role_name"],
        )
        login = (
            f"aws sso login --sso-session {session_name}"
            if session_name
            else f"aws sso login --profile {name}"
        )
        key = f"sso {session_name or start_url} {account} {role}"
        return self.cached(
            key,
            lambda: self.sso_role_credentials(
                where,
                login,
                session_name or start_url,
                settings["sso_region"],
                account,
                role,
                refresh=bool(session_name),
            ),
        )

    def sso_role_credentials(
        self,
        where: str,
        login: str,
        cache_name: str,
        sso_region: str,
        account: str,
        role: str,
        *,
        refresh: bool,
    ) -> AwsCredentials:
        # The AWS CLI names the cache file after the SHA-1 of the session name (or, for
        # legacy profiles, of the start URL).
        digest = hashlib.sha1(cache_name.encode()).hexdigest()
        path = os.path.join(_home(self.env), ".aws", "sso", "cache", f"{digest}.json")
        try:
            with open(path, encoding="utf-8") as f:
                cached = json.load(f)
        except FileNotFoundError:
            raise _ChainError(f"{where}: not signed in to SSO (no {path}): run `{login}`") from None
        except ValueError:
            raise _ChainError(f"{where}: the SSO token cache {path} is not JSON") from None
        if not isinstance(cached, dict) or not cached.get("accessToken"):
            raise _ChainError(f"{where}: the SSO token cache {path} has no accessToken")
        try:
            token_expiry = _expiry(cached.get("expiresAt"))
        except ValueError:
            raise _ChainError(f"{where}: expiresAt in {path} is not a time") from None
        if refresh and (token_expiry is None or self.clock() >= token_expiry - _SSO_REFRESH_S):
            renewed = self.refresh_sso_token(cached, sso_region)
            if renewed is not None:
                cached, token_expiry = renewed
                _write_private_json(path, cached)
        if token_expiry is None or self.clock() >= token_expiry:
            raise _ChainError(f"{where}: the SSO sign-in has expired: run `{login}`")
        endpoint = (
            self.env.get("AWS_ENDPOINT_URL_SSO")
            or self.env.get("AWS_ENDPOINT_URL")
            or f"https://portal.sso.{sso_region}.amazonaws.com"
        )
        url = (
            endpoint.rstrip("/")
            + "/federation/credentials?"
            + urllib.parse.urlencode({"account_id": account, "role_name": role})
        )
        status, body = _http("GET", url, {"x-amz-sso_bearer_token": str(cached["accessToken"])})
        if status == 401:
            raise _ChainError(
                f"{where}: the SSO portal refused the sign-in (expired or signed out): "
                f"run `{login}`"
            )
        if status != 200:
            raise _ChainError(
                f"{where}: SSO GetRoleCredentials for {role} in {account}: HTTP {status}"
            )
        parsed = json.loads(body)
        answer = parsed.get("roleCredentials") if isinstance(parsed, dict) else None
        if not isinstance(answer, dict) or not answer.get("accessKeyId"):
            raise _ChainError(f"{where}: SSO GetRoleCredentials answered no credentials")
        expiration = answer.get("expiration")
        return AwsCredentials(
            str(answer["accessKeyId"]),
            str(answer["secretAccessKey"]),
            answer.get("sessionToken") or None,
            expiration / 1000 if isinstance(expiration, int | float) else None,
            f"sso {role} in {account}",
        )

    def static(self, name: str, *, config: bool) -> AwsCredentials | None:
        files = self.files
        if config:
            return _static(files.config.get(name, {}), f"file {files.config_path}")
        return _static(files.credentials.get(name, {}), f"file {files.credentials_path}")

    def refresh_sso_token(
        self, cached: dict[str, object], sso_region: str
    ) -> tuple[dict[str, object], float] | None:
        """The cached SSO token renewed with its refresh token at the OIDC service's
        CreateToken (what the AWS CLI and botocore do for sso-session profiles), and its
        expiry; None when it cannot be (no refresh token, the client registration expired,
        the service said no): the caller goes on with the token it has."""
        client_id, client_secret, refresh_token = (
            cached.get("clientId"),
            cached.get("clientSecret"),
            cached.get("refreshToken"),
        )
        if not (
            isinstance(client_id, str)
            and isinstance(client_secret, str)
            and isinstance(refresh_token, str)
        ):
            return None
        try:
            registration_expiry = _expiry(cached.get("registrationExpiresAt"))
        except ValueError:
            return None
        if registration_expiry is not None and self.clock() >= registration_expiry:
            return None
        endpoint = (
            self.env.get("AWS_ENDPOINT_URL_SSO_OIDC")
            or self.env.get("AWS_ENDPOINT_URL")
            or f"https://oidc.{sso_region}.amazonaws.com"
        )
        request = {
            "grantType": "refresh_token",
            "clientId": client_id,
            "clientSecret": client_secret,
            "refreshToken": refresh_token,
        }
        now = self.clock()
        try:
            status, body = _http(
                "POST",
                endpoint.rstrip("/") + "/token",
                {"Content-Type": "application/json"},
                json.dumps(request).encode(),
            )
            answer = json.loads(body) if status == 200 else None
        except (OSError, ValueError):
            return None
        if not isinstance(answer, dict) or not isinstance(answer.get("accessToken"), str):
            return None
        expires_in = answer.get("expiresIn")
        if not isinstance(expires_in, int):
            return None
        expiry = now + expires_in
        renewed = {
            **cached,
            "accessToken": answer["accessToken"],
            "expiresAt": dt.datetime.fromtimestamp(int(expiry), dt.UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        }
        if isinstance(answer.get("refreshToken"), str):
            renewed["refreshToken"] = answer["refreshToken"]
        return renewed, float(int(expiry))

    def process(self, name: str) -> AwsCredentials | None:
        command = self.files.profiles.get(name, {}).get("credential_process", "").strip()
        if not command:
            return None
        return self.cached(f"process {command}", lambda: _run_process(command, name))

    def profile_links(
        self, name: str, *, use_env: bool
    ) -> list[tuple[str, Callable[[], AwsCredentials | None]]]:
        """Links 3-7 for profile ``name``, each with its name for errors."""
        return [
            ("web identity", lambda: self.web_identity(name, use_env)),
            ("SSO", lambda: self.sso(name)),
            ("shared credentials file", lambda: self.static(name, config=False)),
            ("credential_process", lambda: self.process(name)),
            ("config file", lambda: self.static(name, config=True)),
        ]

    def from_profile(self, name: str) -> AwsCredentials | None:
        for _, link in self.profile_links(name, use_env=False):
            found = link()
            if found is not None:
                return found
        return None


def aws_credentials(
    region: str,
    *,
    profile: str | None = None,
    env: Mapping[str, str] | None = None,
    cache: MutableMapping[str, AwsCredentials] | None = None,
    clock: Callable[[], float] = time.time,
) -> AwsCredentials:
    """The first credentials of the chain (module docstring); blocking (files, HTTP, a
    process). ``cache`` keeps temporary credentials between calls. Raises
    SaslAuthenticationFailedError when no link has any, or one fails."""
    env = os.environ if env is None else env
    name = profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    chain = _Chain(region, env, {} if cache is None else cache, clock)

    def named_profile() -> None:
        # botocore refuses an unknown profile; walking on would hide a typo behind the
        # instance's role.
        if name != "default" and name not in chain.files.profiles:
            raise _ChainError(
                f"{name!r} is in neither {chain.files.config_path} nor "
                f"{chain.files.credentials_path}"
            )

    def role_profile() -> AwsCredentials | None:
        values = chain.files.profiles.get(name, {})
        return chain.assume_role(name, [name]) if chain.is_role_profile(values) else None

    links: list[tuple[str, Callable[[], AwsCredentials | None]]] = []
    if profile is None:
        links.append(("environment", lambda: _from_env(env)))
    links += [("profile", named_profile), ("assume role", role_profile)]
    where = "shared files"
    try:
        links += chain.profile_links(name, use_env=profile is None)
        links += [
            ("container endpoint", lambda: _from_container(env)),
            ("instance metadata", lambda: _from_imds(env)),
        ]
        for label, link in links:
            where = label  # for the error, should this link fail
            found = link()
            if found is not None:
                return found
    except configparser.Error as exc:
        # Its message quotes the file's lines, which may hold a secret key: the type only.
        raise SaslAuthenticationFailedError(
            f"AWS credentials ({where}): the file does not parse ({type(exc).__name__})"
        ) from None
    except _ChainError as exc:
        raise SaslAuthenticationFailedError(f"AWS credentials ({where}): {exc}") from None
    except (OSError, ValueError, KeyError, ET.ParseError, urllib.error.URLError) as exc:
        raise SaslAuthenticationFailedError(
            f"AWS credentials ({where}): {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    raise SaslAuthenticationFailedError(
        "no AWS credentials: none in the environment, the profile "
        f"{name!r} (role, web identity, SSO, shared files, credential_process), the "
        "container endpoint or instance metadata"
    )
