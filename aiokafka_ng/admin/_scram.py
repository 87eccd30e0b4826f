"""SCRAM users: describe and alter (upsert / delete) credentials, KIP-554.

Describing goes to any broker. Altering goes to the controller, as the Java client sends
it (a KRaft cluster names a broker there, which forwards). An upsertion carries the salted
password, never the password: ``Hi(password, salt, iterations)`` (RFC 5802) is computed
here, with the same function the SASL login uses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from aiokafka_ng.admin._core import _AdminCore, broker_error
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.admin.user_models import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.net.sasl import scram_salted_password
from aiokafka_ng.protocol.messages import alter_user_scram_credentials as alter
from aiokafka_ng.protocol.messages import describe_user_scram_credentials as describe

_SALT_BYTES = 32

Alteration = UserScramCredentialUpsertion | UserScramCredentialDeletion


def _mechanism(value: int) -> ScramMechanism:
    try:
        return ScramMechanism(value)
    except ValueError:
        return ScramMechanism.UNKNOWN


def upsertion_message(u: UserScramCredentialUpsertion) -> alter.ScramCredentialUpsertion:
    """The wire form of an upsertion: salt chosen (unless given) and password salted."""
    salt = os.urandom(_SALT_BYTES) if u.salt is None else u.salt
    return alter.ScramCredentialUpsertion(
        name=u.user,
        mechanism=int(u.mechanism),
        iterations=u.iterations,
        salt=salt,
        salted_password=scram_salted_password(
            u.mechanism.hash_name, u.password, salt, u.iterations
        ),
    )


class ScramOps(_AdminCore):
    """SCRAM credential operations of :class:`AdminClient`."""

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, timeout_ms: int | None = None
    ) -> ItemResults[str, UserScramCredentialsDescription]:
        """The mechanisms and iteration counts of each user's credentials (every user with
        one when ``users`` is None). An unknown user fails with RESOURCE_NOT_FOUND."""
        wanted = None if users is None else list(dict.fromkeys(users))

        async def attempt(
            _keys: list[int], deadline: float
        ) -> dict[int, dict[str, UserScramCredentialsDescription | BaseException] | BaseException]:
            req = describe.DescribeUserScramCredentialsRequest(
                users=None if wanted is None else [describe.UserName(name=u) for u in wanted]
            )
            node = await self._any_node()
            resp = await self._send("describe_user_scram_credentials", node, req, deadline)
            top = broker_error(resp.error_code, resp.error_message)
            if top is not None:
                return {0: top}
            out: dict[str, UserScramCredentialsDescription | BaseException] = {}
            for r in resp.results:
                err = broker_error(r.error_code, r.error_message)
                out[r.user] = err or UserScramCredentialsDescription(
                    r.user,
                    [
                        ScramCredentialInfo(_mechanism(c.mechanism), c.iterations)
                        for c in r.credential_infos
                    ],
                )
            return {0: out}

        # One request answers for every user: a retriable top-level error retries it whole.
        outcome = (
            await self._run("describe_user_scram_credentials", [0], attempt, timeout_ms)
        ).result(0)
        if wanted is None:
            return ItemResults("describe_user_scram_credentials", outcome)
        missing = KafkaError("describe_user_scram_credentials: the broker did not answer")
        return ItemResults(
            "describe_user_scram_credentials", {u: outcome.get(u, missing) for u in wanted}
        )

    async def alter_user_scram_credentials(
        self, alterations: Iterable[Alteration], timeout_ms: int | None = None
    ) -> ItemResults[str, None]:
        """Upsert and delete SCRAM credentials; one outcome per user (a user's alterations
        succeed or fail together, as the broker applies them)."""
        items = list(alterations)
        for a in items:
            if a.mechanism is ScramMechanism.UNKNOWN:
                raise ValueError(f"{a.user}: a SCRAM alteration needs a known mechanism")
        # Salting is done once, so a retry sends the same salt and salted password.
        upserts = [
            upsertion_message(a) for a in items if isinstance(a, UserScramCredentialUpsertion)
        ]
        deletes = [
            alter.ScramCredentialDeletion(name=a.user, mechanism=int(a.mechanism))
            for a in items
            if isinstance(a, UserScramCredentialDeletion)
        ]
        users = list(dict.fromkeys(a.user for a in items))

        async def attempt(pending: list[str], deadline: float) -> dict[str, KafkaError | None]:
            keep = set(pending)
            req = alter.AlterUserScramCredentialsRequest(
                deletions=[d for d in deletes if d.name in keep],
                upsertions=[u for u in upserts if u.name in keep],
            )
            node = await self._controller()
            resp = await self._send("alter_user_scram_credentials", node, req, deadline)
            return {r.user: broker_error(r.error_code, r.error_message) for r in resp.results}

        return await self._run("alter_user_scram_credentials", users, attempt, timeout_ms)
