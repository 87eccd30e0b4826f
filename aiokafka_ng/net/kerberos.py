"""SASL GSSAPI (Kerberos V5, RFC 4752) through the optional ``gssapi`` package.

``pip install 'aiokafka-ng[gssapi]'`` (it needs the system's Kerberos libraries, e.g.
Debian's ``libkrb5-3``). The exchange, carried in SaslAuthenticate like any mechanism:

1. GSS-API context tokens to the service ``{service_name}@{host}`` (``kafka@broker1``) until
   the context is established, mutual authentication included. If the last step yields no
   token, the client sends an empty response (RFC 4752 section 3.1).
2. Security layer negotiation: the server sends a wrapped 4-byte offer (a bit mask of the
   layers it supports and its maximum buffer size); the client answers with a wrapped
   choice. We choose "no security layer" -- Kafka's Java client does the same (its
   ``javax.security.sasl.qop`` default is ``auth``; TLS is how Kafka encrypts) -- and refuse
   a server that does not offer it.

Credentials come from a keytab (``keytab`` + ``principal``), or from the ticket cache
(``kinit``; ``ccache`` names a cache other than the default). Getting the service ticket
talks to the KDC and blocks, so :func:`new_gssapi_mechanism` runs the first step in a worker
thread; the later steps are local computations.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import anyio.to_thread

from aiokafka_ng.errors import SaslAuthenticationFailedError

__all__ = ["GssapiMechanism", "new_gssapi_mechanism"]

_NO_SECURITY_LAYER = 1


def _gssapi() -> Any:
    try:
        # By name, not an import statement: the package is an optional extra, and mypy run
        # where it is not installed (a user's checker over site-packages) must not fail.
        gssapi = importlib.import_module("gssapi")
    except ImportError:
        raise SaslAuthenticationFailedError(
            "SASL GSSAPI needs the gssapi package: pip install 'aiokafka-ng[gssapi]'"
        ) from None
    return gssapi


def _fail(what: str, exc: BaseException) -> SaslAuthenticationFailedError:
    describe = getattr(exc, "gen_message", None)
    detail = describe() if callable(describe) else type(exc).__name__
    return SaslAuthenticationFailedError(f"SASL GSSAPI: {what}: {detail}")


class GssapiMechanism:
    """Client side of one GSSAPI exchange (see the module docstring)."""

    __slots__ = ("_authzid", "_context", "_first", "_state")

    def __init__(
        self,
        service_name: str,
        host: str,
        *,
        principal: str | None = None,
        keytab: str | None = None,
        ccache: str | None = None,
        authzid: str = "",
    ) -> None:
        gssapi = _gssapi()
        try:
            target = gssapi.Name(f"{service_name}@{host}", gssapi.NameType.hostbased_service)
            store = {}
            if keytab:
                store["client_keytab"] = keytab
            if ccache:
                store["ccache"] = ccache
            name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
            creds = None
            if store or name is not None:
                creds = gssapi.Credentials(name=name, usage="initiate", store=store or None)
            flags = gssapi.RequirementFlag
            self._context = gssapi.SecurityContext(
                name=target,
                creds=creds,
                usage="initiate",
                mech=gssapi.MechType.kerberos,
                flags=flags.mutual_authentication | flags.out_of_sequence_detection,
            )
        except gssapi.exceptions.GSSError as exc:
            raise _fail("no Kerberos credentials", exc) from None
        self._authzid = authzid
        self._first: bytes | None = None
        self._state: Literal["context", "layer", "final", "complete"] = "context"

    @property
    def name(self) -> str:
        return "GSSAPI"

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def prepare(self) -> None:
        """The first context step (asks the KDC for the service ticket: blocking)."""
        self._first = self._context_step(b"")

    def start(self) -> bytes:
        if self._first is None:
            self.prepare()
        assert self._first is not None
        return self._first

    def step(self, challenge: bytes) -> bytes | None:
        if self._state == "context":
            return self._context_step(challenge)
        if self._state == "layer":
            return self._choose_layer(challenge)
        if self._state == "final":
            self._state = "complete"
            return None
        raise SaslAuthenticationFailedError("SASL GSSAPI: unexpected server message")

    def _context_step(self, token: bytes) -> bytes:
        gssapi = _gssapi()
        try:
            out = self._context.step(token or None)
        except gssapi.exceptions.GSSError as exc:
            raise _fail("security context", exc) from None
        if self._context.complete:
            self._state = "layer"
        return out or b""

    def _choose_layer(self, challenge: bytes) -> bytes:
        gssapi = _gssapi()
        try:
            offer = self._context.unwrap(challenge).message
        except gssapi.exceptions.GSSError as exc:
            raise _fail("unwrapping the security layer offer", exc) from None
        if len(offer) != 4:
            raise SaslAuthenticationFailedError("SASL GSSAPI: malformed security layer offer")
        if not offer[0] & _NO_SECURITY_LAYER:
            raise SaslAuthenticationFailedError(
                "SASL GSSAPI: the server requires an integrity or confidentiality layer; "
                "only 'no security layer' is supported (use SASL_SSL for encryption)"
            )
        # No layer, so the maximum buffer size is 0; then the authorization identity.
        choice = bytes([_NO_SECURITY_LAYER, 0, 0, 0]) + self._authzid.encode()
        self._state = "final"
        return bytes(self._context.wrap(choice, False).message)


async def new_gssapi_mechanism(
    service_name: str,
    host: str,
    *,
    principal: str | None = None,
    keytab: str | None = None,
    ccache: str | None = None,
    authzid: str = "",
) -> GssapiMechanism:
    """A mechanism with its first token ready, made in a worker thread (KDC round trips)."""

    def make() -> GssapiMechanism:
        mechanism = GssapiMechanism(
            service_name, host, principal=principal, keytab=keytab, ccache=ccache, authzid=authzid
        )
        mechanism.prepare()
        return mechanism

    return await anyio.to_thread.run_sync(make, abandon_on_cancel=True)
