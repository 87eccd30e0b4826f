"""Loopback stand-ins for the AWS and Azure endpoints the built-in cloud token providers
talk to, checking what the real endpoints check, and MSK's check of a token.

* EC2 instance metadata, IMDSv2 only: ``PUT /latest/api/token`` needs
  ``X-aws-ec2-metadata-token-ttl-seconds`` (1..21600) and answers a session token; every
  ``GET /latest/meta-data/...`` needs that token in ``X-aws-ec2-metadata-token`` (401
  without: an IMDSv1 request is refused, as on an instance that requires v2).
* The ECS/EKS container credentials endpoint, ``GET /container-creds``: needs the
  ``Authorization`` header to be the configured token (403 otherwise).
* STS, ``POST /sts/``: ``Action=AssumeRoleWithWebIdentity``, ``Version=2011-06-15``, the
  configured ``RoleArn`` and ``WebIdentityToken`` and a ``RoleSessionName`` (2..64 of STS's
  characters); answers STS's XML.
* STS ``AssumeRole`` on the same ``POST /sts/``: the request must be SigV4-signed
  (service ``sts``, the configured region) by a key the stand-in knows -- an IAM user's
  (``users``) or temporary credentials it handed out (their session token in
  ``X-Amz-Security-Token``, as STS requires) -- with ``host`` and ``x-amz-date`` signed and
  the date within 15 minutes of its clock; the caller must be in the role's trust
  (``roles``), give the role's external id when it has one, a ``DurationSeconds`` of
  900..43200 (at most 3600 when a role assumes a role: STS's role-chaining limit); answers
  fresh credentials, valid for that long, which it then accepts as a caller.
* The IAM Identity Center portal, ``GET /sso/federation/credentials?account_id=&role_name=``:
  the access token in ``x-amz-sso_bearer_token`` must be one it issued (401
  UnauthorizedException otherwise, as for an expired or signed-out session) and allowed the
  account's role (403 ForbiddenException); answers ``roleCredentials`` with ``expiration``
  in epoch milliseconds.
* The IAM Identity Center OIDC service's ``CreateToken``, ``POST /oidc/token`` (JSON):
  ``grantType`` ``refresh_token`` with a registered client's id and secret (``oidc_clients``)
  and a refresh token it knows (``oidc_refresh``: refresh token -> the (account, role)s
  the new access token may use); answers a new access token (which the portal then takes)
  and a new refresh token, the old one spent (400 ``invalid_grant`` for anything else).
* Azure IMDS, ``GET /metadata/identity/oauth2/token``: needs ``Metadata: true`` (400
  otherwise, as IMDS answers), ``api-version`` one IMDS knows, a ``resource``, and for a
  user-assigned identity its ``client_id`` (400 "Identity not found" for an unknown one);
  answers ``access_token`` with ``expires_on``/``expires_in`` as strings, as IMDS does.
* :func:`verify_msk_token`: MSK's check of an IAM token, written from the SigV4 query
  signing spec apart from the library: it parses the presigned URL, rebuilds the canonical
  request from what it received and recomputes the signature with the key's secret.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import re
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SKEW_S = 900  # STS refuses a request signed further from its clock ("Signature expired")
_ROLE_SESSION = re.compile(r"[\w+=,.@-]{2,64}")
IMDS_API_VERSIONS = {"2018-02-01", "2019-08-01", "2021-02-01"}


class CloudEndpoints:
    """The stand-ins on one 127.0.0.1 port; ``calls`` counts requests per endpoint."""

    def __init__(self) -> None:
        self.role = "app-role"
        self.imds_credentials = {"AccessKeyId": "ASIAIMDS0001", "SecretAccessKey": "imds-secret"}
        self.imds_sessions: set[str] = set()
        self.container_auth = "container-auth-token"
        self.container_credentials = {
            "AccessKeyId": "ASIACONTAINER1",
            "SecretAccessKey": "container-secret",
        }
        self.web_identity = ("arn:aws:iam::123456789012:role/web", "the-oidc-jwt")
        self.sts_credentials = ("ASIASTS0000001", "sts-secret", "sts-session-token")
        self.expires_in_s = 3600
        self.clock = time.time  # the endpoints' clock: expirations, STS's date check
        self.region = "eu-west-1"
        # access key id -> (secret, session token or None, principal)
        self.keys: dict[str, tuple[str, str | None, str]] = {
            "AKIASOURCE000001": ("source-user-secret", None, "user/ops"),
            "ASIACONTAINER1": ("container-secret", "container-session-token", "role/task"),
            "ASIAIMDS0001": ("imds-secret", "imds-session-credential-token", "role/app-role"),
        }
        # role ARN -> {"trust": principals allowed to assume it, "external_id": optional}
        self.roles: dict[str, dict[str, Any]] = {}
        self.assumed: list[dict[str, str]] = []  # each AssumeRole granted: who, what
        self.sso_tokens: dict[str, set[tuple[str, str]]] = {}  # token -> (account, role)s
        self.oidc_clients: dict[str, str] = {}  # client id -> client secret
        self.oidc_refresh: dict[str, set[tuple[str, str]]] = {}  # refresh token -> grants
        self.oidc_issued = 0
        self.azure_tokens: Counter[str] = Counter()
        self.azure_identities = {"system": "system-token", "user-client-id": "user-token"}
        self.azure_busy = 0  # answer this many 429s first
        self.calls: Counter[str] = Counter()
        self.refusals: list[str] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                stand_in.route(self, "PUT")

            def do_GET(self) -> None:
                stand_in.route(self, "GET")

            def do_POST(self) -> None:
                stand_in.route(self, "POST")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll: shutdown() waits for it, and every test using the stand-ins stops them.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._lock = threading.Lock()

    def __enter__(self) -> CloudEndpoints:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def expiration(self, seconds: float | None = None) -> str:
        left = self.expires_in_s if seconds is None else seconds
        when = dt.datetime.fromtimestamp(self.clock() + left, dt.UTC)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    # ---------------------------------------------------------------------------- routing

    def route(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self._lock:
            self.calls[f"{method} {url.path}"] += 1
        status, content_type, answer = self._answer(method, url, h.headers, body)
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        if status >= 400:
            with self._lock:
                self.refusals.append(f"{method} {url.path}: {status}")
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _answer(
        self, method: str, url: urllib.parse.SplitResult, headers: Any, body: bytes
    ) -> tuple[int, str, Any]:
        text, js = "text/plain", "application/json"
        path = url.path
        if path == "/latest/api/token" and method == "PUT":
            ttl = headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return 400, text, b"missing or bad TTL"
            session = f"imds-session-{len(self.imds_sessions)}"
            self.imds_sessions.add(session)
            return 200, text, session.encode()
        if path.startswith("/latest/meta-data/") and method == "GET":
            if headers.get("X-aws-ec2-metadata-token") not in self.imds_sessions:
                return 401, text, b"IMDSv2 session token required"
            if path == "/latest/meta-data/iam/security-credentials/":
                return 200, text, self.role.encode()
            if path == f"/latest/meta-data/iam/security-credentials/{self.role}":
                creds = {
                    "Code": "Success",
                    "Type": "AWS-HMAC",
                    **self.imds_credentials,
                    "Token": "imds-session-credential-token",
                    "Expiration": self.expiration(),
                }
                return 200, js, creds
            return 404, text, b"not found"
        if path == "/container-creds" and method == "GET":
            if headers.get("Authorization") != self.container_auth:
                return 403, js, {"message": "bad authorization token"}
            creds = {
                **self.container_credentials,
                "Token": "container-session-token",
                "Expiration": self.expiration(),
            }
            return 200, js, creds
        if path == "/sts/" and method == "POST":
            form = dict(urllib.parse.parse_qsl(body.decode()))
            if form.get("Action") == "AssumeRole":
                return self._assume_role(h_headers(headers), body, form, url)
            return self._sts(body)
        if path == "/oidc/token" and method == "POST":
            return self._oidc_token(headers, body)
        if path == "/sso/federation/credentials" and method == "GET":
            return self._sso(url, headers)
        if path == "/metadata/identity/oauth2/token" and method == "GET":
            return self._azure(url, headers)
        return 404, text, b"no such endpoint"

    def _sts(self, body: bytes) -> tuple[int, str, Any]:
        form = dict(urllib.parse.parse_qsl(body.decode()))
        role, web_token = self.web_identity
        if form.get("Action") != "AssumeRoleWithWebIdentity" or form.get("Version") != (
            "2011-06-15"
        ):
            return 400, "text/xml", b"<Error><Code>InvalidAction</Code></Error>"
        if not _ROLE_SESSION.fullmatch(form.get("RoleSessionName", "")):
            return 400, "text/xml", b"<Error><Code>ValidationError</Code></Error>"
        if form.get("RoleArn") != role or form.get("WebIdentityToken") != web_token:
            return 403, "text/xml", b"<Error><Code>AccessDenied</Code></Error>"
        key, secret, token = self.sts_credentials
        xml = (
            '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            "<AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{key}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>"
            f"<SessionToken>{token}</SessionToken><Expiration>{self.expiration()}</Expiration>"
            "</Credentials></AssumeRoleWithWebIdentityResult>"
            "</AssumeRoleWithWebIdentityResponse>"
        )
        return 200, "text/xml", xml.encode()

    def _assume_role(
        self, headers: dict[str, str], body: bytes, form: dict[str, str], url: Any
    ) -> tuple[int, str, Any]:
        try:
            key_id = verify_sigv4(
                "POST",
                url.path,
                url.query,
                headers,
                body,
                self.keys,
                "sts",
                self.region,
                now=self.clock(),
            )
        except ValueError as exc:
            return _sts_error(403, "SignatureDoesNotMatch", str(exc))
        principal = self.keys[key_id][2]
        role_arn = form.get("RoleArn", "")
        role = self.roles.get(role_arn)
        if form.get("Version") != "2011-06-15":
            return _sts_error(400, "InvalidAction", "bad Version")
        if not _ROLE_SESSION.fullmatch(form.get("RoleSessionName", "")):
            return _sts_error(400, "ValidationError", "bad RoleSessionName")
        duration = int(form.get("DurationSeconds", "3600"))
        limit = 3600 if principal.startswith("arn:aws:iam::") else 43200
        if not 900 <= duration <= limit:
            return _sts_error(400, "ValidationError", f"DurationSeconds above {limit}")
        if (
            role is None
            or principal not in role["trust"]
            or role.get("external_id") != form.get("ExternalId")
        ):
            return _sts_error(
                403,
                "AccessDenied",
                f"User: {principal} is not authorized to perform: sts:AssumeRole on "
                f"resource: {role_arn}",
            )
        with self._lock:
            n = len(self.assumed) + 1
            issued = (f"ASIAROLE{n:08d}", f"role-secret-{n}", f"role-session-token-{n}")
            self.keys[issued[0]] = (issued[1], issued[2], role_arn)
            self.assumed.append(
                {
                    "role": role_arn,
                    "by": principal,
                    "session": form["RoleSessionName"],
                    "duration": str(duration),
                    "key": issued[0],
                }
            )
        xml = (
            '<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            "<AssumeRoleResult><Credentials>"
            f"<AccessKeyId>{issued[0]}</AccessKeyId>"
            f"<SecretAccessKey>{issued[1]}</SecretAccessKey>"
            f"<SessionToken>{issued[2]}</SessionToken>"
            f"<Expiration>{self.expiration(duration)}</Expiration>"
            "</Credentials></AssumeRoleResult></AssumeRoleResponse>"
        )
        return 200, "text/xml", xml.encode()

    def _sso(self, url: urllib.parse.SplitResult, headers: Any) -> tuple[int, str, Any]:
        js = "application/json"
        query = dict(urllib.parse.parse_qsl(url.query))
        if not query.get("account_id") or not query.get("role_name"):
            return 400, js, {"message": "account_id and role_name are required"}
        allowed = self.sso_tokens.get(headers.get("x-amz-sso_bearer_token", ""))
        if allowed is None:
            return 401, js, {"message": "Session token not found or invalid"}
        if (query["account_id"], query["role_name"]) not in allowed:
            return 403, js, {"message": "No access"}
        role = query["role_name"]
        creds = {
            "accessKeyId": f"ASIASSO{role.upper()}",
            "secretAccessKey": f"sso-secret-{role}",
            "sessionToken": f"sso-session-token-{role}",
            "expiration": int((self.clock() + self.expires_in_s) * 1000),
        }
        return 200, js, {"roleCredentials": creds}

    def _oidc_token(self, headers: Any, body: bytes) -> tuple[int, str, Any]:
        js = "application/json"
        refused = (400, js, {"error": "invalid_grant", "error_description": "refused"})
        if not (headers.get("Content-Type") or "").startswith("application/json"):
            return 400, js, {"error": "invalid_request"}
        ask = json.loads(body)
        client = ask.get("clientId")
        if ask.get("grantType") != "refresh_token" or self.oidc_clients.get(client) is None:
            return refused
        if self.oidc_clients[client] != ask.get("clientSecret"):
            return 401, js, {"error": "invalid_client"}
        with self._lock:
            grants = self.oidc_refresh.pop(ask.get("refreshToken", ""), None)
            if grants is None:
                return refused
            self.oidc_issued += 1
            access, refresh = (
                f"refreshed-access-{self.oidc_issued}",
                f"refresh-{self.oidc_issued}",
            )
            self.sso_tokens[access] = grants
            self.oidc_refresh[refresh] = grants
        answer = {
            "accessToken": access,
            "tokenType": "Bearer",
            "expiresIn": 28800,
            "refreshToken": refresh,
        }
        return 200, js, answer

    def _azure(self, url: urllib.parse.SplitResult, headers: Any) -> tuple[int, str, Any]:
        js = "application/json"
        if headers.get("Metadata") != "true":
            return (
                400,
                js,
                {
                    "error": "invalid_request",
                    "error_description": "Required metadata header not specified",
                },
            )
        query = dict(urllib.parse.parse_qsl(url.query))
        if query.get("api-version") not in IMDS_API_VERSIONS:
            return 400, js, {"error": "invalid_request", "error_description": "bad api-version"}
        resource = query.get("resource")
        if not resource:
            return 400, js, {"error": "invalid_request", "error_description": "no resource"}
        with self._lock:
            if self.azure_busy > 0:
                self.azure_busy -= 1
                return 429, js, {"error": "too_many_requests"}
        identity = query.get("client_id", "system")
        token = self.azure_identities.get(identity)
        if token is None:
            return 400, js, {"error": "invalid_request", "error_description": "Identity not found"}
        with self._lock:
            self.azure_tokens[f"{identity} {resource}"] += 1
        now = int(time.time())
        tag = base64.urlsafe_b64encode(resource.encode()).decode().rstrip("=")
        return (
            200,
            js,
            {
                "access_token": f"{token}.for.{tag}",
                "expires_in": "3599",
                "expires_on": str(now + 3599),
                "resource": resource,
                "token_type": "Bearer",
            },
        )


def h_headers(headers: Any) -> dict[str, str]:
    """The request's headers, names lower-cased (a repeated header is not expected)."""
    return {k.lower(): v for k, v in headers.items()}


def _sts_error(status: int, code: str, message: str) -> tuple[int, str, bytes]:
    xml = (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error>'
        f"<Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
        "</Error><RequestId>standin</RequestId></ErrorResponse>"
    )
    return status, "text/xml", xml.encode()


def verify_sigv4(
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    keys: dict[str, tuple[str, str | None, str]],
    service: str,
    region: str,
    *,
    now: float,
) -> str:
    """AWS's check of a SigV4-signed request (the Authorization header form), written from
    the spec apart from the library: the access key id of a valid request, else ValueError
    with the reason. ``keys``: access key id -> (secret, session token or None, principal);
    ``headers``: names lower-cased."""
    auth = headers.get("authorization", "")
    algorithm, _, rest = auth.partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise ValueError("not AWS4-HMAC-SHA256")
    fields = dict(p.strip().split("=", 1) for p in rest.split(","))
    key_id, day, scope_region, scope_service, terminal = fields["Credential"].split("/")
    if (scope_region, scope_service, terminal) != (region, service, "aws4_request"):
        raise ValueError("bad credential scope")
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed or "x-amz-date" not in signed or signed != sorted(signed):
        raise ValueError("host and x-amz-date must be signed")
    amz_date = headers["x-amz-date"]
    if amz_date[:8] != day:
        raise ValueError("the scope's day is not the request's")
    at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC).timestamp()
    if abs(at - now) > _SKEW_S:
        raise ValueError("Signature expired")
    if key_id not in keys:
        raise ValueError("InvalidClientTokenId")
    secret, token, _ = keys[key_id]
    if token is not None and headers.get("x-amz-security-token") != token:
        raise ValueError("the security token included in the request is invalid")
    pairs = sorted(
        (_enc(k), _enc(v)) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
    )
    canonical = "\n".join(
        [
            method,
            path or "/",
            "&".join(f"{k}={v}" for k, v in pairs),
            *(f"{name}:{' '.join(headers[name].split())}" for name in signed),
            "",
            ";".join(signed),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    string_to_sign = (
        f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    )
    key = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields.get("Signature", "")):
        raise ValueError("the request signature we calculated does not match")
    return key_id


# --------------------------------------------------------------------------- MSK's check


def _enc(value: str) -> str:
    return urllib.parse.quote(value, safe="-_.~")


def verify_msk_token(
    token: str, secrets: dict[str, str], *, region: str, now: float | None = None
) -> dict[str, str]:
    """MSK's check of an IAM token: the parameters of a valid token (else ValueError with
    the reason). ``secrets``: access key id -> secret access key."""
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    if (parts.scheme, parts.netloc, parts.path) != ("https", f"kafka.{region}.amazonaws.com", "/"):
        raise ValueError(f"not this region's kafka-cluster URL: {parts.netloc}{parts.path}")
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    params = dict(pairs)
    if len(params) != len(pairs):
        raise ValueError("repeated parameter")
    if params.get("Action") != "kafka-cluster:Connect":
        raise ValueError("Action is not kafka-cluster:Connect")
    if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise ValueError("not AWS4-HMAC-SHA256")
    key_id, day, scope_region, service, terminal = params["X-Amz-Credential"].split("/")
    amz_date = params["X-Amz-Date"]
    if (scope_region, service, terminal, day) != (
        region,
        "kafka-cluster",
        "aws4_request",
        amz_date[:8],
    ):
        raise ValueError("bad credential scope")
    if params.get("X-Amz-SignedHeaders") != "host":
        raise ValueError("signed headers are not host")
    signed_at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC).timestamp()
    expires = int(params["X-Amz-Expires"])
    moment = time.time() if now is None else now
    if not signed_at - 300 <= moment <= signed_at + expires:
        raise ValueError("expired or signed in the future")
    secret = secrets.get(key_id)
    if secret is None:
        raise ValueError(f"unknown access key {key_id}")
    signed = sorted((k, v) for k, v in pairs if k not in ("X-Amz-Signature", "User-Agent"))
    canonical_query = "&".join(f"{_enc(k)}={_enc(v)}" for k, v in signed)
    canonical = (
        f"GET\n/\n{canonical_query}\nhost:{parts.netloc}\n\nhost\n"
        + hashlib.sha256(b"").hexdigest()
    )
    scope = f"{day}/{region}/kafka-cluster/aws4_request"
    string_to_sign = (
        f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    )
    key = ("AWS4" + secret).encode()
    for part in (day, region, "kafka-cluster", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, params.get("X-Amz-Signature", "")):
        raise ValueError("signature does not match")
    return params
