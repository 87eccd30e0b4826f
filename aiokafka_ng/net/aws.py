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

Credentials come from the standard AWS chain, in botocore's order (the environment, an
assume-role profile, web identity, SSO, the shared credentials file, ``credential_process``,
the config file, the container endpoint, EC2 instance metadata): ``aws_credentials.py``
says how each link works. Temporary credentials are reused until 5 minutes before they
expire (the provider keeps them, at every depth of a role chain); tokens are refreshed at
~80% of their lifetime like every built-in provider. Secret keys and session tokens are
never in a repr, log line or error.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import random
import time
from collections.abc import Callable, Mapping
from importlib import metadata

import anyio
import anyio.to_thread

from aiokafka_ng.net.aws_credentials import (
    ALGORITHM,
    EARLY_S,
    AwsCredentials,
    aws_credentials,
    quote,
    signing_key,
)
from aiokafka_ng.net.oauth import OAuthBearerToken, TokenCache

__all__ = ["AwsCredentials", "MskIamTokenProvider", "aws_credentials", "msk_iam_token"]

TOKEN_LIFETIME_S = 900
_SERVICE = "kafka-cluster"
#: The payload hash of the canonical request: a GET's empty body (botocore's query signer
#: for non-S3 services hashes it; only S3 presigning says UNSIGNED-PAYLOAD).
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


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
        ("X-Amz-Algorithm", ALGORITHM),
        ("X-Amz-Credential", f"{credentials.access_key}/{scope}"),
        ("X-Amz-Date", amz_date),
        ("X-Amz-Expires", str(TOKEN_LIFETIME_S)),
        ("X-Amz-SignedHeaders", "host"),
    ]
    if credentials.session_token:
        params.append(("X-Amz-Security-Token", credentials.session_token))
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in params)
    canonical_query = "&".join(f"{quote(k)}={quote(v)}" for k, v in sorted(params))
    canonical = "\n".join(["GET", "/", canonical_query, f"host:{host}", "", "host", _EMPTY_SHA256])
    to_sign = "\n".join(
        [ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = signing_key(credentials.secret_key, day, region, _SERVICE)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    agent = _user_agent() if user_agent is None else user_agent
    url = f"https://{host}/?{query}&X-Amz-Signature={signature}&User-Agent={quote(agent)}"
    token = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return token, signed_at.timestamp() + TOKEN_LIFETIME_S


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
        # The chain's temporary credentials (roles, SSO, credential_process), by what
        # identifies them: reused until shortly before they expire.
        self._held: dict[str, AwsCredentials] = {}
        self._cache = TokenCache(self._rng, clock)

    def __repr__(self) -> str:
        return f"MskIamTokenProvider({self.region!r}, profile={self.profile!r})"

    def _sign(self) -> OAuthBearerToken:
        now = self._clock()
        creds = self._credentials
        if creds is None or (creds.expires_at is not None and now >= creds.expires_at - EARLY_S):
            creds = self._credentials = aws_credentials(
                self.region,
                profile=self.profile,
                env=self._env,
                cache=self._held,
                clock=self._clock,
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
        self._held.clear()
