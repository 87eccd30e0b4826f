"""AWS MSK IAM sign-in: OAUTHBEARER tokens MSK's IAM access control accepts.

One configuration line: ``sasl_oauth_token_provider=MskIamTokenProvider("eu-west-1")``.

The token (what ``aws-msk-iam-sasl-signer-python`` makes, byte for byte for the same
credentials and clock) is a SigV4 *presigned URL*, base64url-encoded without padding::

    https://kafka.<region>.amazonaws.com/?Action=kafka-cluster%3AConnect
      &X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=<key id>%2F<yyyymmdd>%2F<region>
      %2Fkafka-cluster%2Faws4_request&X-Amz-Date=<yyyymmddThhmmssZ>&X-Amz-Expires=900
      &X-Amz-SignedHeaders=host[&X-Amz-Security-Token=<session token>]
      &X-Amz-Signature=<hex>&User-Agent=<ours>

signed for service ``kafka-cluster`` over the canonical request ``GET``, ``/``, the sorted
query (every parameter above but the signature and the user agent), the ``host`` header and
the SHA-256 of the empty body (SigV4 query signing). MSK recomputes the signature with the key's
secret; the token is valid for 15 minutes from ``X-Amz-Date``.

Credentials come from the standard AWS chain, in botocore's order, the first that has them:

1. the environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``
   (skipped when a ``profile`` is passed explicitly);
2. web identity (EKS IRSA and others): ``AWS_WEB_IDENTITY_TOKEN_FILE`` and
   ``AWS_ROLE_ARN`` (``AWS_ROLE_SESSION_NAME``), exchanged at STS with
   ``AssumeRoleWithWebIdentity`` (``AWS_ENDPOINT_URL_STS`` / ``AWS_ENDPOINT_URL`` override
   the regional endpoint);
3. the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, ``~/.aws/credentials``)
   and then the config file (``AWS_CONFIG_FILE``, ``~/.aws/config``, ``[profile NAME]``),
   for the profile given, else ``AWS_PROFILE``, else ``default``;
4. the container endpoint (ECS, EKS Pod Identity): ``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI``
   on 169.254.170.2 or ``AWS_CONTAINER_CREDENTIALS_FULL_URI``, with
   ``AWS_CONTAINER_AUTHORIZATION_TOKEN`` (``_FILE``) as the Authorization header;
5. the EC2 instance metadata service, IMDSv2 (a session token from ``PUT
   /latest/api/token``, then the role's credentials), unless ``AWS_EC2_METADATA_DISABLED``
   is true; ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` overrides its address.

Temporary credentials (web identity, container, IMDS) are reused until 5 minutes before
they expire; tokens are refreshed at ~80% of their lifetime like every built-in provider.
HTTP is urllib in a worker thread, without proxies (metadata endpoints must not go through
one). Secret keys and session tokens are never in a repr, log line or error.
"""

from __future__ import annotations

import base64
import configparser
import datetime as dt
import hashlib
import hmac
import json
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata

import anyio
import anyio.to_thread

from aiokafka_ng.errors import SaslAuthenticationFailedError
from aiokafka_ng.net.oauth import OAuthBearerToken, TokenCache

__all__ = ["AwsCredentials", "MskIamTokenProvider", "aws_credentials", "msk_iam_token"]

TOKEN_LIFETIME_S = 900
_SERVICE = "kafka-cluster"
#: The payload hash of the canonical request: a GET's empty body (botocore's query signer
#: for non-S3 services hashes it; only S3 presigning says UNSIGNED-PAYLOAD).
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"
_STS_NS = "{https://sts.amazonaws.com/doc/2011-06-15/}"
_IMDS = "http://169.254.169.254/"
_CONTAINER_HOST = "http://169.254.170.2"
_EARLY_S = 300  # temporary credentials are renewed this long before they expire
_TIMEOUT_S = 5.0
_IMDS_TIMEOUT_S = 1.0  # botocore's: no instance answers slower than this
_MAX_ANSWER = 1024 * 1024


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


def _quote(value: str) -> str:
    # SigV4's URI encoding: everything but the unreserved characters (RFC 3986).
    return urllib.parse.quote(value, safe="-_.~")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _user_agent() -> str:
    try:
        version = metadata.version("aiokafka-ng")
    except metadata.PackageNotFoundError:
        version = "dev"
    return f"aiokafka-ng/{version}"


def msk_iam_token(
    region: str,
    credentials: AwsCredentials,
    *,
    now: float | None = None,
    user_agent: str | None = None,
) -> tuple[str, float]:
    """The MSK IAM token for ``credentials`` signed at ``now`` (default: the time), and
    when it expires (seconds since the epoch)."""
    signed_at = dt.datetime.fromtimestamp(int(time.time() if now is None else now), dt.UTC)
    amz_date = signed_at.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    host = f"kafka.{region}.amazonaws.com"
    scope = f"{day}/{region}/{_SERVICE}/aws4_request"
    # The URL's order is the signer library's (Action, then the signing parameters);
    # the canonical query is the same parameters sorted.
    params = [
        ("Action", "kafka-cluster:Connect"),
        ("X-Amz-Algorithm", _ALGORITHM),
        ("X-Amz-Credential", f"{credentials.access_key}/{scope}"),
        ("X-Amz-Date", amz_date),
        ("X-Amz-Expires", str(TOKEN_LIFETIME_S)),
        ("X-Amz-SignedHeaders", "host"),
    ]
    if credentials.session_token:
        params.append(("X-Amz-Security-Token", credentials.session_token))
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in params)
    canonical_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params))
    canonical = "\n".join(["GET", "/", canonical_query, f"host:{host}", "", "host", _EMPTY_SHA256])
    to_sign = "\n".join(
        [_ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + credentials.secret_key).encode(), day)
    for part in (region, _SERVICE, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    agent = _user_agent() if user_agent is None else user_agent
    url = f"https://{host}/?{query}&X-Amz-Signature={signature}&User-Agent={_quote(agent)}"
    token = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return token, signed_at.timestamp() + TOKEN_LIFETIME_S


# --------------------------------------------------------------------------- the chain


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
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _from_json(body: bytes, source: str) -> AwsCredentials:
    answer = json.loads(body)
    if not isinstance(answer, dict) or not answer.get("AccessKeyId"):
        raise ValueError(f"{source}: no AccessKeyId in the answer")
    return AwsCredentials(
        str(answer["AccessKeyId"]),
        str(answer["SecretAccessKey"]),
        answer.get("Token") or None,
        _expiry(answer.get("Expiration")),
        source,
    )


def _from_env(env: Mapping[str, str]) -> AwsCredentials | None:
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return None
    token = env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN") or None
    return AwsCredentials(key, secret, token, None, "environment")


def _from_web_identity(env: Mapping[str, str], region: str) -> AwsCredentials | None:
    token_file, role = env.get("AWS_WEB_IDENTITY_TOKEN_FILE"), env.get("AWS_ROLE_ARN")
    if not token_file or not role:
        return None
    with open(token_file, encoding="utf-8") as f:
        web_token = f.read().strip()
    endpoint = (
        env.get("AWS_ENDPOINT_URL_STS")
        or env.get("AWS_ENDPOINT_URL")
        or f"https://sts.{region}.amazonaws.com"
    )
    form = {
        "Action": "AssumeRoleWithWebIdentity",
        "Version": "2011-06-15",
        "RoleArn": role,
        "RoleSessionName": env.get("AWS_ROLE_SESSION_NAME") or f"aiokafka-ng-{int(time.time())}",
        "WebIdentityToken": web_token,
    }
    status, body = _http(
        "POST",
        endpoint.rstrip("/") + "/",
        {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        urllib.parse.urlencode(form).encode(),
    )
    if status != 200:
        raise ValueError(f"STS AssumeRoleWithWebIdentity for {role}: HTTP {status}")
    creds = ET.fromstring(body).find(f".//{_STS_NS}Credentials")
    if creds is None:
        raise ValueError(f"STS AssumeRoleWithWebIdentity for {role}: no Credentials")

    def text(name: str) -> str:
        node = creds.find(f"{_STS_NS}{name}")
        return "" if node is None or node.text is None else node.text.strip()

    return AwsCredentials(
        text("AccessKeyId"),
        text("SecretAccessKey"),
        text("SessionToken") or None,
        _expiry(text("Expiration")),
        "web identity",
    )


def _from_files(env: Mapping[str, str], profile: str) -> AwsCredentials | None:
    home = os.path.expanduser("~")
    files = [
        (
            env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials"),
            profile,
        ),
        (
            env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config"),
            profile if profile == "default" else f"profile {profile}",
        ),
    ]
    for path, section in files:
        parser = configparser.RawConfigParser()
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                parser.read_file(f)
        except FileNotFoundError:
            continue
        if not parser.has_section(section):
            continue
        values = parser[section]
        key, secret = values.get("aws_access_key_id"), values.get("aws_secret_access_key")
        if key and secret:
            token = values.get("aws_session_token") or None
            return AwsCredentials(key.strip(), secret.strip(), token, None, f"file {path}")
    return None


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
        raise ValueError(f"container credentials endpoint: HTTP {status}")
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


def aws_credentials(
    region: str, *, profile: str | None = None, env: Mapping[str, str] | None = None
) -> AwsCredentials:
    """The first credentials of the chain (module docstring); blocking (files, HTTP).
    Raises SaslAuthenticationFailedError when no link has any, or one fails."""
    env = os.environ if env is None else env
    links: list[tuple[str, Callable[[], AwsCredentials | None]]] = []
    if profile is None:
        links.append(("environment", lambda: _from_env(env)))
    name = profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    links += [
        ("web identity", lambda: _from_web_identity(env, region)),
        ("shared files", lambda: _from_files(env, name)),
        ("container endpoint", lambda: _from_container(env)),
        ("instance metadata", lambda: _from_imds(env)),
    ]
    for where, link in links:
        try:
            found = link()
        except configparser.Error as exc:
            # Its message quotes the file's lines, which may hold a secret key: the type only.
            raise SaslAuthenticationFailedError(
                f"AWS credentials ({where}): the file does not parse ({type(exc).__name__})"
            ) from None
        except (OSError, ValueError, KeyError, ET.ParseError, urllib.error.URLError) as exc:
            raise SaslAuthenticationFailedError(
                f"AWS credentials ({where}): {type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        if found is not None:
            return found
    raise SaslAuthenticationFailedError(
        "no AWS credentials: none in the environment, web identity, shared files "
        f"(profile {name!r}), container endpoint or instance metadata"
    )


class MskIamTokenProvider:
    """OAUTHBEARER tokens for MSK IAM in ``region``, signed with the chain's credentials
    (or those of ``profile``)."""

    def __init__(
        self,
        region: str,
        *,
        profile: str | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if not region:
            raise ValueError("the AWS region is required")
        self.region = region
        self.profile = profile
        self._env = env
        self._clock = clock
        self._rng = rng or random.Random()
        self._credentials: AwsCredentials | None = None
        self._cache = TokenCache(self._rng, clock)

    def __repr__(self) -> str:
        return f"MskIamTokenProvider({self.region!r}, profile={self.profile!r})"

    def _sign(self) -> OAuthBearerToken:
        now = self._clock()
        creds = self._credentials
        if creds is None or (creds.expires_at is not None and now >= creds.expires_at - _EARLY_S):
            creds = self._credentials = aws_credentials(
                self.region, profile=self.profile, env=self._env
            )
        token, expires_at = msk_iam_token(self.region, creds, now=now)
        if creds.expires_at is not None:
            expires_at = min(expires_at, creds.expires_at)
        return OAuthBearerToken(token, expires_at)

    async def __call__(self) -> OAuthBearerToken:
        return await self._cache.get(self._signed)

    async def _signed(self) -> OAuthBearerToken:
        return await anyio.to_thread.run_sync(self._sign, abandon_on_cancel=True)

    def invalidate(self) -> None:
        """Drop the cached token and credentials: the next call reads the chain again."""
        self._cache.invalidate()
        self._credentials = None
