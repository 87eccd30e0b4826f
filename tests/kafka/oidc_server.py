"""A small OIDC identity provider on 127.0.0.1 for the OAUTHBEARER tests on Apache Kafka and
the OIDC tests of Apicurio Registry.

``POST /token``: the client credentials grant (RFC 6749 4.4) with HTTP Basic client
authentication, with the id and secret in the form (``client_secret_post``, RFC 6749 2.3.1:
how Apicurio Registry asks, chunked) or, for a client registered with a public key, a signed
client assertion (RFC 7523 2.2, ``private_key_jwt``: KIP-1258); and the jwt-bearer grant (RFC
7523 2.1: KIP-1139) for an issuer registered with a public key. Assertions are checked as an
IdP checks them: the signature (RS256 or ES256, verified with ``cryptography``) against the
registered key, ``alg`` the registered one, ``aud`` this IdP's token URL or issuer, ``exp``
in the future, ``nbf``/``iat`` not in the future (30 s leeway), for a client assertion
``iss`` = ``sub`` = the client (and the form's ``client_id``, if sent). Answers an
RS256-signed JWT (``sub`` = the client id, or the assertion's ``sub`` for jwt-bearer) or
RFC 6749 5.2 errors. ``GET /jwks``: the public key as a JWK Set, which Kafka's JWKS
validator (KIP-768) and Apicurio Registry (Quarkus OIDC) fetch. Runs in a thread (the broker
and the registry call it too, from their JVMs); keys are made with ``cryptography``. This is
a real HTTP server the real broker, registry and client talk to, not a fake of either: only
the identity provider itself is ours, as no IdP ships with the tests.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

ISSUER = "https://idp.test"
AUDIENCE = "kafka-test"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
LEEWAY_S = 30


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _uint(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class AssertionRejected(Exception):
    """Why an assertion was refused (the error_description)."""


def verify_assertion(
    token: str, key: Any, algorithm: str, audiences: set[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of ``token`` once its signature (with ``key``), ``alg``,
    ``aud`` and times check; else AssertionRejected."""
    try:
        head_b64, body_b64, sig_b64 = token.split(".")
        header, claims = json.loads(_unb64(head_b64)), json.loads(_unb64(body_b64))
        signature = _unb64(sig_b64)
    except ValueError:
        raise AssertionRejected("not a JWS compact token") from None
    if header.get("alg") != algorithm:
        raise AssertionRejected(f"alg {header.get('alg')!r}, expected {algorithm}")
    signed = f"{head_b64}.{body_b64}".encode()
    try:
        if algorithm == "RS256":
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            if len(signature) != 64:  # JWS: r || s, 32 bytes each (not DER)
                raise AssertionRejected("ES256 signature is not 64 bytes")
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            der = utils.encode_dss_signature(r, s)
            key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise AssertionRejected("bad signature") from None
    aud = claims.get("aud")
    if not (set(aud) if isinstance(aud, list) else {aud}) & audiences:
        raise AssertionRejected(f"aud {aud!r} is not this IdP")
    now = time.time()
    if not isinstance(claims.get("exp"), int) or claims["exp"] + LEEWAY_S < now:
        raise AssertionRejected("expired or no exp")
    for claim in ("nbf", "iat"):
        if claim in claims and claims[claim] - LEEWAY_S > now:
            raise AssertionRejected(f"{claim} in the future")
    return header, claims


class IdentityProvider:
    """Clients (id -> secret), per-client token lifetimes, revocation, request counts."""

    def __init__(self, clients: dict[str, str], lifetime_s: float = 300.0) -> None:
        self.clients = dict(clients)
        self.lifetime_s: dict[str, float] = {}
        self.default_lifetime_s = lifetime_s
        self.revoked: set[str] = set()
        #: Clients authenticating by assertion (KIP-1258): id -> (public key, alg).
        self.assertion_clients: dict[str, tuple[Any, str]] = {}
        #: Issuers whose assertions are jwt-bearer grants (KIP-1139): iss -> (key, alg).
        self.trusted_issuers: dict[str, tuple[Any, str]] = {}
        #: Every assertion accepted: (grant, header, claims, the form's other keys).
        self.assertions: list[tuple[str, dict[str, Any], dict[str, Any], set[str]]] = []
        self.rejections: list[str] = []
        self.requests: Counter[str] = Counter()  # token requests by client id (as sent)
        self.issued: Counter[str] = Counter()  # tokens issued by client id
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._lock = threading.Lock()
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(200, idp.jwks())

            def do_POST(self) -> None:
                form = urllib.parse.parse_qs(self._body().decode())
                status, answer = idp.token_answer(self.headers.get("Authorization", ""), form)
                self._answer(status, answer)

            def _body(self) -> bytes:
                # Vert.x's web client (Apicurio Registry's token requests) sends its form
                # chunked (RFC 9112 7.1), with no Content-Length.
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()  # the CRLF after the chunk
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields, up to the empty line
                return body

            def _answer(self, status: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        port = self._server.server_address[1]
        self.token_url = f"http://127.0.0.1:{port}/token"
        self.audiences = {self.token_url, ISSUER}
        self.jwks_url = f"http://127.0.0.1:{port}/jwks"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        key = {"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256"}
        return {"keys": [{**key, "n": _uint(numbers.n), "e": _uint(numbers.e)}]}

    def sign(self, claims: dict[str, Any], kid: str = "k1") -> str:
        header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": kid}).encode())
        body = b64url(json.dumps(claims).encode())
        signature = self._key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{body}.{b64url(signature)}"

    def token_for(self, subject: str, lifetime_s: float, *, issued_at: float | None = None) -> str:
        now = time.time() if issued_at is None else issued_at
        return self.sign(
            {
                "iss": ISSUER,
                "aud": AUDIENCE,
                "sub": subject,
                "iat": int(now),
                "exp": int(now + lifetime_s),
            }
        )

    def token_answer(
        self, authorization: str, form: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        one = {k: v[0] for k, v in form.items() if len(v) == 1}
        if len(one) != len(form):
            return 400, {"error": "invalid_request", "error_description": "repeated parameter"}
        grant = one.get("grant_type")
        if grant == JWT_BEARER:
            return self._jwt_bearer(authorization, one)
        if grant != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if "client_assertion" in one or "client_assertion_type" in one:
            return self._client_assertion(authorization, one)
        if "client_secret" in one:
            # RFC 6749 2.3.1: the client's id and secret in the form (client_secret_post),
            # as Apicurio Registry sends them; never together with HTTP Basic.
            if authorization:
                return self._reject(400, "invalid_request", "two client authentications")
            client, secret = one.get("client_id", ""), one["client_secret"]
        else:
            try:
                user, _, secret = (
                    base64.b64decode(authorization.removeprefix("Basic ")).decode().partition(":")
                )
            except ValueError:
                return 401, {"error": "invalid_client"}
            client, secret = urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(secret)
        with self._lock:
            self.requests[client] += 1
            if self.clients.get(client) != secret:
                return 401, {"error": "invalid_client", "error_description": "bad credentials"}
        return self._issue(client)

    def _issue(self, subject: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if subject in self.revoked:
                return 400, {"error": "unauthorized_client", "error_description": "revoked"}
            self.issued[subject] += 1
        lifetime = self.lifetime_s.get(subject, self.default_lifetime_s)
        token = self.token_for(subject, lifetime)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(lifetime)}

    def _reject(self, status: int, error: str, why: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.rejections.append(why)
        return status, {"error": error, "error_description": why}

    def _client_assertion(
        self, authorization: str, form: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        """RFC 7523 2.2 / OIDC private_key_jwt: the client is the assertion's iss and sub."""
        if authorization:
            return self._reject(400, "invalid_request", "two client authentications")
        if form.get("client_assertion_type") != CLIENT_ASSERTION:
            return self._reject(400, "invalid_request", "wrong client_assertion_type")
        token = form.get("client_assertion", "")
        try:
            unverified = json.loads(_unb64(token.split(".")[1]))
        except (ValueError, IndexError):
            return self._reject(401, "invalid_client", "client_assertion is not a JWT")
        client = unverified.get("iss")
        with self._lock:
            self.requests[str(client)] += 1
        registered = self.assertion_clients.get(str(client))
        if registered is None:
            return self._reject(401, "invalid_client", f"unknown client {client!r}")
        if unverified.get("sub") != client or form.get("client_id", client) != client:
            return self._reject(401, "invalid_client", "iss, sub and client_id differ")
        try:
            header, claims = verify_assertion(token, *registered, self.audiences)
        except AssertionRejected as exc:
            return self._reject(401, "invalid_client", str(exc))
        with self._lock:
            self.assertions.append(("client_credentials", header, claims, set(form)))
        return self._issue(str(client))

    def _jwt_bearer(self, authorization: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """RFC 7523 2.1: a trusted issuer's signed assertion is the grant for its sub."""
        token = form.get("assertion", "")
        try:
            unverified = json.loads(_unb64(token.split(".")[1]))
        except (ValueError, IndexError):
            return self._reject(400, "invalid_grant", "assertion is not a JWT")
        issuer = str(unverified.get("iss"))
        with self._lock:
            self.requests[issuer] += 1
        registered = self.trusted_issuers.get(issuer)
        if registered is None:
            return self._reject(400, "invalid_grant", f"untrusted issuer {issuer!r}")
        try:
            header, claims = verify_assertion(token, *registered, self.audiences)
        except AssertionRejected as exc:
            return self._reject(400, "invalid_grant", str(exc))
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            return self._reject(400, "invalid_grant", "no sub")
        with self._lock:
            self.assertions.append((JWT_BEARER, header, claims, set(form)))
        return self._issue(claims["sub"])
