"""Signed JWT assertions for the token endpoint: KIP-1139 (the jwt-bearer grant, RFC 7523
section 2.1) and KIP-1258 (client authentication by assertion, ``private_key_jwt``, RFC 7523
section 2.2, for the client credentials grant).

An assertion is made for every token request, as Java's ``DefaultAssertionCreator`` makes
it: the header is ``{"alg": ..., "typ": "JWT"}``, the claims are layered like Java's
``LayeredAssertionJwtTemplate`` -- the static ``iss``/``sub``/``aud`` given, then the
template file's ``header``/``payload`` (JSON, re-read when it changes), then the times,
which always win: ``iat`` now, ``exp`` ``exp_seconds`` later, ``nbf`` ``nbf_seconds``
earlier, and a random ``jti`` when asked. It is signed RS256 (RSASSA-PKCS1-v1_5 with
SHA-256) or ES256 (ECDSA P-256 with SHA-256, the signature as JWS wants it: ``r || s``, 32
bytes each) with the PKCS#8 PEM private key in ``private_key_file`` (encrypted with
``passphrase`` or not), re-read when the file changes (a rotated key is picked up as Java's
``CachedFile`` picks it up).

Or the assertion is made elsewhere and read from ``assertion_file`` (Java's
``sasl.oauthbearer.assertion.file``): its content is sent as it is, re-read when it changes.

Signing needs the ``cryptography`` package (``pip install 'aiokafka-ng[oauth]'``); keys and
passphrases are never in a repr, a log line or an error.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["JwtAssertion", "read_assertion_file"]

Algorithm = Literal["RS256", "ES256"]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class _CachedFile:
    """A file's content, transformed once per change of its modification time/size."""

    __slots__ = ("_path", "_stamp", "_transform", "_value")

    def __init__(self, path: str, transform: Callable[[bytes], Any]) -> None:
        self._path = path
        self._transform = transform
        self._stamp: tuple[int, int] | None = None
        self._value: Any = None

    def get(self) -> Any:
        st = os.stat(self._path)
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with open(self._path, "rb") as f:
                self._value = self._transform(f.read())
            self._stamp = stamp
        return self._value


def _check_jws(content: bytes) -> str:
    text = content.decode("ascii", "replace").strip()
    parts = text.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        raise ValueError("the assertion file does not hold a JWS compact token")
    for part in parts[:2]:
        json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return text


def read_assertion_file(path: str) -> Callable[[], str]:
    """An assertion source reading a ready-made JWT from ``path`` (re-read when it
    changes), checked to be a JWS compact token, as Java checks it."""
    cached = _CachedFile(path, _check_jws)

    def assertion() -> str:
        value: str = cached.get()
        return value

    return assertion


def _template(content: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    data = json.loads(content)
    if not isinstance(data, dict):
        raise ValueError("the assertion template file is not a JSON object")
    header, payload = data.get("header", {}), data.get("payload", {})
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise ValueError("the assertion template's header and payload must be JSON objects")
    return header, payload


class JwtAssertion:
    """Makes a signed JWT assertion per call (see the module docstring)."""

    def __init__(
        self,
        private_key_file: str,
        *,
        algorithm: Algorithm = "RS256",
        passphrase: str | None = None,
        issuer: str | None = None,
        subject: str | None = None,
        audience: str | None = None,
        exp_seconds: int = 300,
        nbf_seconds: int = 60,
        include_jti: bool = False,
        template_file: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        algorithm = algorithm.upper()  # type: ignore[assignment]  # Java ignores its case
        if algorithm not in ("RS256", "ES256"):
            raise ValueError("the assertion algorithm must be RS256 or ES256")
        if not 0 <= exp_seconds <= 86400 or not 0 <= nbf_seconds <= 3600:
            raise ValueError("exp_seconds must be 0..86400 and nbf_seconds 0..3600")
        try:
            from cryptography.hazmat.primitives import serialization  # noqa: F401
        except ImportError as exc:
            raise ValueError(
                "signed assertions need the cryptography package: pip install 'aiokafka-ng[oauth]'"
            ) from exc
        self.algorithm: Algorithm = algorithm
        self.private_key_file = private_key_file
        self._passphrase = passphrase
        self._static = {
            k: v for k, v in (("aud", audience), ("iss", issuer), ("sub", subject)) if v is not None
        }
        self._exp_s = exp_seconds
        self._nbf_s = nbf_seconds
        self._jti = include_jti
        self._clock = clock
        self._key = _CachedFile(private_key_file, self._load_key)
        self._template = None if template_file is None else _CachedFile(template_file, _template)

    def __repr__(self) -> str:
        return (
            f"JwtAssertion({self.private_key_file!r}, algorithm={self.algorithm!r}, "
            f"claims={self._static!r})"
        )

    def _load_key(self, pem: bytes) -> Any:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        password = None if self._passphrase is None else self._passphrase.encode()
        try:
            key = serialization.load_pem_private_key(pem, password=password)
        except (ValueError, TypeError) as exc:
            # cryptography's message says nothing secret, but keep only the file's name.
            raise ValueError(
                f"cannot read the assertion private key {self.private_key_file!r} "
                f"(PKCS#8 PEM{', encrypted' if password else ''}): {type(exc).__name__}"
            ) from None
        wanted = rsa.RSAPrivateKey if self.algorithm == "RS256" else ec.EllipticCurvePrivateKey
        if not isinstance(key, wanted) or (
            isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name != "secp256r1"
        ):
            need = "an RSA key" if self.algorithm == "RS256" else "an EC P-256 key"
            raise ValueError(f"{self.algorithm} needs {need} in {self.private_key_file!r}")
        return key

    def claims(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The header and the claims of the next assertion (layered as Java layers them)."""
        header: dict[str, Any] = {}
        payload: dict[str, Any] = dict(self._static)
        if self._template is not None:
            t_header, t_payload = self._template.get()
            header.update(t_header)
            payload.update(t_payload)
        header.update({"alg": self.algorithm, "typ": "JWT"})
        now = int(self._clock())
        payload.update({"iat": now, "exp": now + self._exp_s, "nbf": now - self._nbf_s})
        if self._jti:
            payload["jti"] = str(uuid.uuid4())
        return header, payload

    def __call__(self) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

        header, payload = self.claims()
        signing_input = (
            _b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64url(json.dumps(payload, separators=(",", ":")).encode())
        )
        key = self._key.get()
        if self.algorithm == "RS256":
            signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            der = key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
            r, s = utils.decode_dss_signature(der)
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return signing_input + "." + _b64url(signature)
