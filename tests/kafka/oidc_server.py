"""A small OIDC identity provider on 127.0.0.1 for the OAUTHBEARER tests on Apache Kafka.

``POST /token``: the client credentials grant (RFC 6749 4.4) with HTTP Basic client
authentication; answers an RS256-signed JWT (``sub`` = the client id) or RFC 6749 5.2
errors. ``GET /jwks``: the public key as a JWK Set, which Kafka's JWKS validator (KIP-768)
fetches. Runs in a thread (the broker calls it too, from the JVM); keys are made with
``cryptography``. This is a real HTTP server the real broker and client talk to, not a fake
of either: only the identity provider itself is ours, as no IdP ships with the tests.
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

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "https://idp.test"
AUDIENCE = "kafka-test"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _uint(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class IdentityProvider:
    """Clients (id -> secret), per-client token lifetimes, revocation, request counts."""

    def __init__(self, clients: dict[str, str], lifetime_s: float = 300.0) -> None:
        self.clients = dict(clients)
        self.lifetime_s: dict[str, float] = {}
        self.default_lifetime_s = lifetime_s
        self.revoked: set[str] = set()
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
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                status, answer = idp.token_answer(self.headers.get("Authorization", ""), form)
                self._answer(status, answer)

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
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
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
            if client in self.revoked:
                return 400, {"error": "unauthorized_client", "error_description": "revoked"}
            self.issued[client] += 1
        lifetime = self.lifetime_s.get(client, self.default_lifetime_s)
        token = self.token_for(client, lifetime)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(lifetime)}
