"""Delegation tokens (KIP-48): create, renew, expire, describe.

A token's HMAC is its secret (a client authenticates with token id + HMAC over SCRAM), so it
is kept out of every ``repr`` here, as the generated messages do too. Principals are
``"Type:name"`` strings, as in Kafka's tools (``"User:alice"``). The requests go to any
broker (a KRaft broker forwards the writes to the controller); the broker only issues tokens
to a client authenticated by SASL (not by a token) and over TLS or SASL_SSL as configured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka_ng.admin._core import _AdminCore, broker_error
from aiokafka_ng.protocol.messages import create_delegation_token as cdt
from aiokafka_ng.protocol.messages import describe_delegation_token as ddt
from aiokafka_ng.protocol.messages import expire_delegation_token as edt
from aiokafka_ng.protocol.messages import renew_delegation_token as rdt

__all__ = ["DelegationToken", "TokenInformation"]


def _split_principal(principal: str) -> tuple[str, str]:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"principal {principal!r} is not 'Type:name' (e.g. 'User:alice')")
    return kind, name


def _principal(kind: str, name: str) -> str:
    return f"{kind}:{name}"


@dataclass(frozen=True, slots=True)
class TokenInformation:
    """What a token is: who owns it, who asked for it, who may renew it, and when it ends."""

    token_id: str
    owner: str
    token_requester: str
    renewers: list[str]
    issue_timestamp_ms: int
    expiry_timestamp_ms: int
    max_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class DelegationToken:
    """A token and its HMAC (the secret; left out of ``repr``)."""

    token_info: TokenInformation
    hmac: bytes = field(repr=False)


class TokenOps(_AdminCore):
    """Delegation token operations of :class:`AdminClient`."""

    async def create_delegation_token(
        self,
        renewers: Iterable[str] = (),
        max_lifetime_ms: int = -1,
        owner: str | None = None,
        timeout_ms: int | None = None,
    ) -> DelegationToken:
        """A new token for the authenticated principal (or ``owner``, KIP-373, if allowed);
        ``max_lifetime_ms`` -1 takes the broker's ``delegation.token.max.lifetime.ms``."""
        owner_kind, owner_name = _split_principal(owner) if owner else (None, None)
        req = cdt.CreateDelegationTokenRequest(
            owner_principal_type=owner_kind,
            owner_principal_name=owner_name,
            renewers=[
                cdt.CreatableRenewers(principal_type=k, principal_name=n)
                for k, n in map(_split_principal, renewers)
            ],
            max_lifetime_ms=max_lifetime_ms,
        )
        need = 3 if owner else None  # owner_principal_* exist from v3 (KIP-373)

        async def attempt(deadline: float) -> DelegationToken:
            node = await self._any_node()
            resp = await self._send(
                "create_delegation_token", node, req, deadline, min_version=need
            )
            err = broker_error(resp.error_code)
            if err is not None:
                raise err
            return DelegationToken(
                TokenInformation(
                    resp.token_id,
                    _principal(resp.principal_type, resp.principal_name),
                    _principal(
                        resp.token_requester_principal_type or resp.principal_type,
                        resp.token_requester_principal_name or resp.principal_name,
                    ),
                    [_principal(k, n) for k, n in map(_split_principal, renewers)],
                    resp.issue_timestamp_ms,
                    resp.expiry_timestamp_ms,
                    resp.max_timestamp_ms,
                ),
                resp.hmac,
            )

        return await self._run_one("create_delegation_token", attempt, timeout_ms)

    async def renew_delegation_token(
        self, hmac: bytes, renew_period_ms: int = -1, timeout_ms: int | None = None
    ) -> int:
        """Extend the token's life (by the broker's default period with -1); returns the
        new expiry timestamp (ms)."""

        async def attempt(deadline: float) -> int:
            node = await self._any_node()
            resp = await self._send(
                "renew_delegation_token",
                node,
                rdt.RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=renew_period_ms),
                deadline,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                raise err
            return resp.expiry_timestamp_ms

        return await self._run_one("renew_delegation_token", attempt, timeout_ms)

    async def expire_delegation_token(
        self, hmac: bytes, expiry_time_period_ms: int = -1, timeout_ms: int | None = None
    ) -> int:
        """Expire the token after ``expiry_time_period_ms`` (-1: now); returns the expiry
        timestamp (ms)."""

        async def attempt(deadline: float) -> int:
            node = await self._any_node()
            resp = await self._send(
                "expire_delegation_token",
                node,
                edt.ExpireDelegationTokenRequest(
                    hmac=hmac, expiry_time_period_ms=expiry_time_period_ms
                ),
                deadline,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                raise err
            return resp.expiry_timestamp_ms

        return await self._run_one("expire_delegation_token", attempt, timeout_ms)

    async def describe_delegation_token(
        self, owners: Iterable[str] | None = None, timeout_ms: int | None = None
    ) -> list[DelegationToken]:
        """The tokens of ``owners`` (every token the caller may see when None)."""
        wanted = None if owners is None else [_split_principal(o) for o in owners]

        async def attempt(deadline: float) -> list[DelegationToken]:
            node = await self._any_node()
            req = ddt.DescribeDelegationTokenRequest(
                owners=None
                if wanted is None
                else [
                    ddt.DescribeDelegationTokenOwner(principal_type=k, principal_name=n)
                    for k, n in wanted
                ]
            )
            resp = await self._send("describe_delegation_token", node, req, deadline)
            err = broker_error(resp.error_code)
            if err is not None:
                raise err
            return [
                DelegationToken(
                    TokenInformation(
                        t.token_id,
                        _principal(t.principal_type, t.principal_name),
                        _principal(
                            t.token_requester_principal_type or t.principal_type,
                            t.token_requester_principal_name or t.principal_name,
                        ),
                        [_principal(r.principal_type, r.principal_name) for r in t.renewers],
                        t.issue_timestamp,
                        t.expiry_timestamp,
                        t.max_timestamp,
                    ),
                    t.hmac,
                )
                for t in resp.tokens
            ]

        return await self._run_one("describe_delegation_token", attempt, timeout_ms)
