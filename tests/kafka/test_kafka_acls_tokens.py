"""ACLs and delegation tokens on a real 3-node Apache Kafka cluster.

Tansu has no authorizer and no delegation tokens, so both ran only against the in-repo fake
broker before (tests/admin/test_admin_fake_more.py, tests/admin/test_admin_tokens.py). The
cluster runs the StandardAuthorizer with ``allow.everyone.if.no.acl.found``: an ACL the test
creates is the only thing that can deny, so its effect on a login is the proof it took hold.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    PatternType,
    ResourceType,
)
from aiokafka_ng.errors import (
    DelegationTokenNotFoundError,
    DelegationTokenRequestNotAllowedError,
    KafkaError,
)
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def login(cluster: KafkaCluster, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": user,
        "sasl_plain_password": cluster.users[user],
    }


async def test_a_deny_acl_made_by_the_admin_client_stops_a_login_until_deleted(
    kafka_cluster: KafkaCluster,
) -> None:
    prefix = unique("acl")
    topic = f"{prefix}-t"
    deny = AclBinding(
        ResourceType.TOPIC,
        prefix,
        PatternType.PREFIXED,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    mine = AclBindingFilter(ResourceType.TOPIC, prefix, PatternType.PREFIXED)
    async with admin_for(kafka_cluster) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 3)])).raise_on_error()
        try:
            assert (await admin.create_acls([deny])).raise_on_error() == {deny: None}
            listed = await eventually(lambda: admin.describe_acls(mine), lambda r: deny in r)
            assert listed == [deny]
            # Every broker applies the ACL from the metadata log a moment after the
            # controller: alice's write fails once the broker she writes to has it.
            async with Producer(
                acks="all", request_timeout_ms=5000, **login(kafka_cluster, "alice")
            ) as producer:
                refused = await eventually(lambda: _send(producer, topic), lambda e: e is not None)
            assert refused is not None and "AUTHORIZATION" in str(refused).upper()

            deleted = (await admin.delete_acls([mine])).result(mine)
            assert deleted == [deny]
            assert await eventually(lambda: admin.describe_acls(mine), lambda r: not r) == []
            async with Producer(acks="all", **login(kafka_cluster, "alice")) as producer:
                ok = await eventually(lambda: _send(producer, topic), lambda e: e is None)
            assert ok is None
        finally:
            await admin.delete_acls([mine])
            await admin.delete_topics([topic])


async def _send(producer: Producer, topic: str) -> BaseException | None:
    """None when the record was written, else the error (for eventually)."""
    try:
        with anyio.fail_after(15):
            await producer.send_and_wait(topic, b"v", partition=0)
    except KafkaError as exc:
        return exc
    return None


async def until_found(call: Callable[[], Awaitable[int]]) -> int:
    """``call()`` again (bounded, 50 ms apart) while the answering broker lacks the token."""
    for _ in range(200):
        try:
            return await call()
        except DelegationTokenNotFoundError:
            await anyio.sleep(0.05)
    return await call()


async def test_delegation_tokens_create_describe_renew_expire(kafka_cluster: KafkaCluster) -> None:
    # Kafka issues tokens only to a SASL (non-token) login: over PLAINTEXT it refuses.
    async with admin_for(kafka_cluster) as anonymous:
        with pytest.raises(DelegationTokenRequestNotAllowedError):
            await anonymous.create_delegation_token()
    async with admin_for(kafka_cluster, **login(kafka_cluster, "alice")) as admin:
        token = await admin.create_delegation_token(renewers=["User:admin"])
        info = token.token_info
        assert info.owner == "User:alice" and info.token_requester == "User:alice"
        assert info.renewers == ["User:admin"] and token.hmac
        assert info.issue_timestamp_ms <= info.expiry_timestamp_ms <= info.max_timestamp_ms

        described = await eventually(
            lambda: admin.describe_delegation_token(["User:alice"]),
            lambda r: info.token_id in [t.token_info.token_id for t in r],
        )
        (mine,) = [t for t in described if t.token_info.token_id == info.token_id]
        assert mine.hmac == token.hmac and mine.token_info.renewers == ["User:admin"]

        # Renew and expire go to any broker; one that has not replayed the token's record
        # from the metadata log yet answers DELEGATION_TOKEN_NOT_FOUND (as to Java's admin).
        renewed = await until_found(
            lambda: admin.renew_delegation_token(token.hmac, renew_period_ms=3_600_000)
        )
        assert info.issue_timestamp_ms < renewed <= info.max_timestamp_ms

        expired_at = await until_found(
            lambda: admin.expire_delegation_token(token.hmac, expiry_time_period_ms=-1)
        )
        assert expired_at <= info.expiry_timestamp_ms
        gone = await eventually(
            lambda: admin.describe_delegation_token(["User:alice"]),
            lambda r: info.token_id not in [t.token_info.token_id for t in r],
        )
        assert info.token_id not in [t.token_info.token_id for t in gone]
