"""SASL client mechanisms (sans-IO): PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, 7677)
and OAUTHBEARER (RFC 7628, KIP-255; in :mod:`aiokafka_ng.net.oauth`).

A mechanism is a small state machine: :meth:`SaslMechanism.start` gives the first client
message, :meth:`SaslMechanism.step` takes each server message and returns the next client
message, or ``None`` once the exchange is complete (the server has been verified where the
mechanism allows it). The connection carries the messages in SaslAuthenticate requests after a
SaslHandshake v1 (KIP-152); nothing here does I/O.

Limits, stated rather than half-done:

- SASLprep (RFC 4013) normalisation of user names and passwords is not applied: credentials
  are sent as their UTF-8 bytes. This matches what Kafka's own Java client does and is exact
  for ASCII credentials; a password whose SASLprep form differs (e.g. compatibility
  characters) must be given already normalised.
- SCRAM channel binding is not supported (gs2 header ``n,,``, as in every Kafka client).
- Kafka's SCRAM extensions (``tokenauth`` for delegation tokens) are not sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aiokafka_ng.errors import SaslAuthenticationFailedError

__all__ = [
    "SASL_MECHANISMS",
    "PlainMechanism",
    "SaslConfig",
    "SaslMechanism",
    "ScramMechanism",
]

SaslMechanismName = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
SASL_MECHANISMS: tuple[str, ...] = (
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    "OAUTHBEARER",
    "GSSAPI",
)

# Kafka's broker and Java client refuse fewer iterations (ScramMechanism.minIterations): a
# server offering less is either misconfigured or trying to make the proof cheap to attack.
_SCRAM_MIN_ITERATIONS = 4096
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslMechanism(Protocol):
    """One client side of one SASL exchange."""

    @property
    def name(self) -> str: ...

    @property
    def complete(self) -> bool: ...

    def start(self) -> bytes:
        """The first client message (sent without waiting for a server challenge)."""
        ...

    def step(self, challenge: bytes) -> bytes | None:
        """Consume a server message; return the next client message or ``None`` when done.

        Raises :class:`~aiokafka_ng.errors.SaslAuthenticationFailedError` when the server's
        message is malformed, reports an error, or fails verification.
        """
        ...


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """SASL settings for a connection: ``sasl.mechanism`` and its credentials.

    PLAIN and SCRAM take ``username``/``password``; OAUTHBEARER takes ``token_provider``
    (any shape :func:`aiokafka_ng.net.oauth.obtain_token` accepts) and optional SASL
    ``extensions`` (KIP-342) sent with every token; GSSAPI takes the ``kerberos_*`` settings
    (:mod:`aiokafka_ng.net.kerberos`; ``kerberos_host`` None: the broker's host).
    """

    mechanism: SaslMechanismName
    username: str = ""
    password: str = field(default="", repr=False)
    # PLAIN and OAUTHBEARER: authorization identity to act as (empty: the authenticated one).
    authzid: str = ""
    token_provider: Any = None
    extensions: Mapping[str, str] = field(default_factory=dict)
    kerberos_service_name: str = "kafka"
    kerberos_host: str | None = None
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kerberos_ccache: str | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"unsupported SASL mechanism {self.mechanism!r}; "
                f"supported: {', '.join(SASL_MECHANISMS)}"
            )
        if self.mechanism == "OAUTHBEARER" and self.token_provider is None:
            raise ValueError("SASL OAUTHBEARER needs a token provider")

    def new_mechanism(self) -> SaslMechanism:
        """A fresh state machine for one PLAIN or SCRAM exchange (no I/O needed)."""
        if self.mechanism == "PLAIN":
            return PlainMechanism(self.username, self.password, authzid=self.authzid)
        if self.mechanism in ("OAUTHBEARER", "GSSAPI"):
            raise TypeError(f"{self.mechanism} needs I/O first: use create_mechanism()")
        return ScramMechanism(self.mechanism, self.username, self.password)

    async def create_mechanism(self, host: str = "") -> SaslMechanism:
        """A fresh state machine for one exchange with broker ``host`` of any mechanism; for
        OAUTHBEARER this asks the token provider for a (possibly cached) token first, for
        GSSAPI it gets the service ticket (in a worker thread)."""
        if self.mechanism == "GSSAPI":
            from aiokafka_ng.net.kerberos import new_gssapi_mechanism

            return await new_gssapi_mechanism(
                self.kerberos_service_name,
                self.kerberos_host or host,
                principal=self.kerberos_principal,
                keytab=self.kerberos_keytab,
                ccache=self.kerberos_ccache,
                authzid=self.authzid,
            )
        if self.mechanism != "OAUTHBEARER":
            return self.new_mechanism()
        from aiokafka_ng.net.oauth import OAuthBearerMechanism, obtain_token

        token = await obtain_token(self.token_provider)
        extensions = {**self.extensions, **token.extensions}
        return OAuthBearerMechanism(token.value, extensions, authzid=self.authzid)


def scram_salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``Hi(Normalize(password), salt, i)``: PBKDF2 with HMAC over ``hash_name``
    ("sha256", "sha512"). The password is used as its UTF-8 bytes, as Kafka does (no
    SASLprep). The login below and the admin client's SCRAM upsertions share it."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def _fail(reason: str) -> SaslAuthenticationFailedError:
    return SaslAuthenticationFailedError(reason)


class PlainMechanism:
    """RFC 4616: one message ``authzid NUL authcid NUL passwd``; the server answers empty."""

    __slots__ = ("_authzid", "_complete", "_password", "_started", "_username")

    def __init__(self, username: str, password: str, *, authzid: str = "") -> None:
        for label, value in (("username", username), ("password", password), ("authzid", authzid)):
            if "\0" in value:
                raise ValueError(f"SASL PLAIN {label} must not contain NUL")
        self._username = username
        self._password = password
        self._authzid = authzid
        self._started = False
        self._complete = False

    @property
    def name(self) -> str:
        return "PLAIN"

    @property
    def complete(self) -> bool:
        return self._complete

    def start(self) -> bytes:
        self._started = True
        return f"{self._authzid}\0{self._username}\0{self._password}".encode()

    def step(self, challenge: bytes) -> bytes | None:
        if not self._started or self._complete:
            raise _fail("SASL PLAIN: unexpected server message")
        # The broker's answer to PLAIN carries no data; success is the absence of an error
        # code on the SaslAuthenticate response, which the connection checks.
        self._complete = True
        return None


def _escape_saslname(name: str) -> str:
    # RFC 5802 section 5.1: "=" and "," are the attribute syntax, so they are escaped.
    return name.replace("=", "=3D").replace(",", "=2C")


def _parse_attributes(message: bytes) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail("SCRAM: server message is not UTF-8") from exc
    attributes: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise _fail(f"SCRAM: malformed server message {text!r}")
        # First occurrence wins; later duplicates and unknown extensions are ignored.
        attributes.setdefault(part[0], part[2:])
    return attributes


class ScramMechanism:
    """RFC 5802 SCRAM client for SHA-256 and SHA-512, verifying the server signature."""

    __slots__ = (
        "_auth_message",
        "_client_first_bare",
        "_hash",
        "_mechanism",
        "_nonce",
        "_password",
        "_server_signature",
        "_state",
        "_username",
    )

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        try:
            self._hash = _SCRAM_HASHES[mechanism]
        except KeyError:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None
        self._mechanism = mechanism
        self._username = username
        self._password = password
        # 24 random bytes, URL-safe base64: printable and never contains ",".
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        if not self._nonce or "," in self._nonce:
            raise ValueError("SCRAM nonce must be non-empty printable text without ','")
        self._client_first_bare = ""
        self._auth_message = b""
        self._server_signature = b""
        self._state: Literal["initial", "first-sent", "final-sent", "complete"] = "initial"

    @property
    def name(self) -> str:
        return self._mechanism

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def start(self) -> bytes:
        if self._state != "initial":
            raise RuntimeError("SCRAM exchange already started")
        self._client_first_bare = f"n={_escape_saslname(self._username)},r={self._nonce}"
        self._state = "first-sent"
        return ("n,," + self._client_first_bare).encode()

    def step(self, challenge: bytes) -> bytes | None:
        if self._state == "first-sent":
            return self._client_final(challenge)
        if self._state == "final-sent":
            self._verify_server_final(challenge)
            return None
        raise _fail(f"SCRAM: unexpected server message in state {self._state}")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _parse_attributes(server_first)
        if "m" in attrs:
            raise _fail("SCRAM: server requires an unsupported mandatory extension")
        if "e" in attrs:
            raise _fail(f"SCRAM: server error {attrs['e']!r}")
        nonce, salt_b64, iterations_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise _fail("SCRAM: server-first-message lacks r, s or i")
        # The server extends our nonce; anything else is a replay or a confused peer.
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise _fail("SCRAM: server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iterations_text)
        except ValueError as exc:
            raise _fail("SCRAM: malformed salt or iteration count") from exc
        if iterations < _SCRAM_MIN_ITERATIONS:
            raise _fail(
                f"SCRAM: iteration count {iterations} below the minimum {_SCRAM_MIN_ITERATIONS}"
            )

        salted = scram_salted_password(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        # "biws" is base64("n,,"): the gs2 header echoed back (no channel binding).
        final_without_proof = f"c=biws,r={nonce}"
        self._auth_message = (
            f"{self._client_first_bare},{server_first.decode()},{final_without_proof}"
        ).encode()
        client_signature = self._hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), self._auth_message)
        self._state = "final-sent"
        return f"{final_without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: bytes) -> None:
        attrs = _parse_attributes(server_final)
        if "e" in attrs:
            raise _fail(f"SCRAM: server error {attrs['e']!r}")
        verifier = attrs.get("v")
        if verifier is None:
            raise _fail("SCRAM: server-final-message lacks a verifier")
        try:
            signature = base64.b64decode(verifier, validate=True)
        except ValueError as exc:
            raise _fail("SCRAM: malformed server signature") from exc
        if not hmac.compare_digest(signature, self._server_signature):
            raise _fail("SCRAM: server signature verification failed")
        self._state = "complete"
