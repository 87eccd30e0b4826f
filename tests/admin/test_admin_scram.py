"""SCRAM credential administration (KIP-554) on FakeKafka in memory, both APIs scripted:
neither Tansu (TANSU.md) nor FakeKafka models Describe/AlterUserScramCredentials. The fake
decodes our requests with the codec's server side, so what is asserted is what went over
the wire."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest

from aiokafka_ng.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from aiokafka_ng.errors import (
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedVersionError,
)
from aiokafka_ng.net.sasl import scram_salted_password
from aiokafka_ng.protocol.messages import alter_user_scram_credentials as alter
from aiokafka_ng.protocol.messages import describe_user_scram_credentials as describe
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

DESCRIBE, ALTER = 50, 51
SENTINEL = "pw-SENTINEL-7c1f"


def admin_for(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


def test_salted_password_is_rfc_5802_hi() -> None:
    # RFC 7677's SCRAM-SHA-256 exchange: from Hi(password, salt, i) the client proof it
    # lists follows (ClientKey XOR HMAC(H(ClientKey), AuthMessage)).
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram_salted_password("sha256", "pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth = (
        "n=user,r=rOprNGfwEbeRWgbNEkqO,"
        f"r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        f"c=biws,r={nonce}"
    ).encode()
    signature = hmac.new(stored_key, auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    assert base64.b64encode(proof).decode() == "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="


def test_passwords_stay_out_of_reprs() -> None:
    u = UserScramCredentialUpsertion("alice", ScramMechanism.SCRAM_SHA_512, SENTINEL)
    assert SENTINEL not in repr(u) and SENTINEL not in str(u)


async def test_alter_sends_salted_passwords_and_reports_per_user() -> None:
    seen: list[tuple[int, alter.AlterUserScramCredentialsRequest]] = []

    def handle(call: Received) -> Any:
        req: alter.AlterUserScramCredentialsRequest = call.request
        seen.append((call.node, req))
        return alter.AlterUserScramCredentialsResponse(
            results=[
                alter.AlterUserScramCredentialsResult(user="alice"),
                alter.AlterUserScramCredentialsResult(
                    user="bob", error_code=UnacceptableCredentialError.errno, error_message="short"
                ),
                alter.AlterUserScramCredentialsResult(user="carol"),
            ]
        )

    salt = b"s" * 16
    async with FakeKafka(brokers=2, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.move_controller(2)
        kafka.answer(ALTER, handle)
        results = await admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", ScramMechanism.SCRAM_SHA_256, SENTINEL),
            UserScramCredentialUpsertion(
                "bob", ScramMechanism.SCRAM_SHA_512, "x", iterations=8192, salt=salt
            ),
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256),
        ])  # fmt: skip
    assert results.succeeded == {"alice": None, "carol": None}
    assert isinstance(results["bob"], UnacceptableCredentialError)
    ((node, req),) = seen
    assert node == 2  # the controller
    alice, bob = req.upsertions
    assert (alice.name, alice.mechanism, alice.iterations, len(alice.salt)) == (
        "alice",
        1,
        4096,
        32,
    )
    assert alice.salted_password == hashlib.pbkdf2_hmac(
        "sha256", SENTINEL.encode(), alice.salt, 4096
    )
    assert (bob.name, bob.mechanism, bob.iterations, bob.salt) == ("bob", 2, 8192, salt)
    assert bob.salted_password == hashlib.pbkdf2_hmac("sha512", b"x", salt, 8192)
    assert [(d.name, d.mechanism) for d in req.deletions] == [("carol", 1)]
    # The password itself never went over the wire, nor into the message's repr.
    assert SENTINEL.encode() not in req.encode(0) and SENTINEL not in repr(req)


async def test_describe_some_and_all_users() -> None:
    asked: list[list[str] | None] = []

    def handle(call: Received) -> Any:
        req: describe.DescribeUserScramCredentialsRequest = call.request
        asked.append(None if req.users is None else [u.name for u in req.users])
        known = {
            "alice": [describe.CredentialInfo(mechanism=1, iterations=4096)],
            "bob": [
                describe.CredentialInfo(mechanism=1, iterations=8192),
                describe.CredentialInfo(mechanism=2, iterations=4096),
            ],
        }
        names = list(known) if req.users is None else [u.name for u in req.users]
        return describe.DescribeUserScramCredentialsResponse(
            results=[
                describe.DescribeUserScramCredentialsResult(user=n, credential_infos=known[n])
                if n in known
                else describe.DescribeUserScramCredentialsResult(
                    user=n, error_code=ResourceNotFoundError.errno, error_message="no such user"
                )
                for n in names
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        kafka.answer(DESCRIBE, handle)
        some = await admin.describe_user_scram_credentials(["bob", "nobody"])
        every = await admin.describe_user_scram_credentials()
    assert asked == [["bob", "nobody"], None]
    assert some.result("bob") == UserScramCredentialsDescription(
        "bob",
        [
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        ],
    )
    assert isinstance(some["nobody"], ResourceNotFoundError)
    assert sorted(every.raise_on_error()) == ["alice", "bob"]


async def test_a_broker_without_the_api_names_the_operation() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka, admin_for(kafka) as admin:
        assert not {DESCRIBE, ALTER} & set(kafka.api_versions)  # not modelled: not advertised
        with pytest.raises(UnsupportedVersionError, match="describe_user_scram_credentials"):
            await admin.describe_user_scram_credentials()
        with pytest.raises(UnsupportedVersionError, match="alter_user_scram_credentials"):
            await admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion("a", ScramMechanism.SCRAM_SHA_256)]
            )
