"""ACL and transaction operations.

ACL requests go to any broker (brokers forward writes to the controller themselves). The
Create/DeleteAcls responses answer *positionally* (result ``i`` is for creation/filter
``i``), so results are matched by index, not by content. Transactions are listed by asking
every broker and described at each transactional id's coordinator.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, TypeVar

from aiokafka_ng.admin._core import _AdminCore, broker_error
from aiokafka_ng.admin.models import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import create_acls as ca
from aiokafka_ng.protocol.messages import delete_acls as da
from aiokafka_ng.protocol.messages import describe_acls as dsc
from aiokafka_ng.protocol.messages.describe_transactions import DescribeTransactionsRequest
from aiokafka_ng.protocol.messages.list_transactions import ListTransactionsRequest

E = TypeVar("E", bound=enum.IntEnum)

_TRANSACTION = 1  # FindCoordinator key type


def _enum(cls: type[E], v: int) -> E:
    try:
        return cls(v)
    except ValueError:
        return cls(0)  # UNKNOWN in every ACL enum


def _binding(
    resource_type: int,
    name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission_type: int,
) -> AclBinding:
    return AclBinding(
        resource_type=_enum(ResourceType, resource_type),
        name=name,
        pattern_type=_enum(PatternType, pattern_type),
        principal=principal,
        host=host,
        operation=_enum(AclOperation, operation),
        permission_type=_enum(AclPermissionType, permission_type),
    )


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    """An ACL filter as DescribeAcls and DeleteAcls name its fields on the wire."""
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


def _needs_v1(pattern_type: PatternType) -> int | None:
    # Pattern types other than LITERAL (KIP-290) exist from v1 on.
    return None if pattern_type in (PatternType.LITERAL, PatternType.ANY) else 1


class AclOps(_AdminCore):
    """ACL and transaction operations of :class:`AdminClient`."""

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """Every ACL matching ``acl_filter`` (default: all)."""
        f = acl_filter or AclBindingFilter()

        async def attempt(deadline: float) -> list[AclBinding]:
            req = dsc.DescribeAclsRequest(**_filter_fields(f))
            node = await self._any_node()
            resp = await self._send(
                "describe_acls", node, req, deadline, min_version=_needs_v1(f.pattern_type)
            )
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err
            return [
                _binding(
                    r.resource_type,
                    r.resource_name,
                    r.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission_type,
                )
                for r in resp.resources
                for a in r.acls
            ]

        return await self._run_one("describe_acls", attempt, timeout_ms)

    async def create_acls(
        self, acls: Iterable[AclBinding], timeout_ms: int | None = None
    ) -> ItemResults[AclBinding, None]:
        """Create ACLs; one outcome per binding."""

        async def attempt(
            pending: list[AclBinding], deadline: float
        ) -> dict[AclBinding, KafkaError | None]:
            req = ca.CreateAclsRequest(
                creations=[
                    ca.AclCreation(
                        resource_type=int(a.resource_type),
                        resource_name=a.name,
                        resource_pattern_type=int(a.pattern_type),
                        principal=a.principal,
                        host=a.host,
                        operation=int(a.operation),
                        permission_type=int(a.permission_type),
                    )
                    for a in pending
                ]
            )
            need = max((_needs_v1(a.pattern_type) or 0 for a in pending), default=0)
            node = await self._any_node()
            resp = await self._send("create_acls", node, req, deadline, min_version=need or None)
            return {
                a: broker_error(r.error_code, r.error_message)
                for a, r in zip(pending, resp.results, strict=False)
            }

        return await self._run("create_acls", acls, attempt, timeout_ms)

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], timeout_ms: int | None = None
    ) -> ItemResults[AclBindingFilter, list[AclBinding]]:
        """Delete the ACLs matching each filter; per filter, the bindings deleted."""

        async def attempt(
            pending: list[AclBindingFilter], deadline: float
        ) -> dict[AclBindingFilter, list[AclBinding] | BaseException]:
            req = da.DeleteAclsRequest(
                filters=[da.DeleteAclsFilter(**_filter_fields(f)) for f in pending]
            )
            need = max((_needs_v1(f.pattern_type) or 0 for f in pending), default=0)
            node = await self._any_node()
            resp = await self._send("delete_acls", node, req, deadline, min_version=need or None)
            out: dict[AclBindingFilter, list[AclBinding] | BaseException] = {}
            for f, r in zip(pending, resp.filter_results, strict=False):
                err = broker_error(r.error_code, r.error_message)
                if err is None:
                    # A matching ACL can fail on its own; the filter then reports that.
                    err = next(
                        (
                            e
                            for m in r.matching_acls
                            if (e := broker_error(m.error_code, m.error_message)) is not None
                        ),
                        None,
                    )
                out[f] = err or [
                    _binding(
                        m.resource_type,
                        m.resource_name,
                        m.pattern_type,
                        m.principal,
                        m.host,
                        m.operation,
                        m.permission_type,
                    )
                    for m in r.matching_acls
                ]
            return out

        return await self._run("delete_acls", filters, attempt, timeout_ms)

    async def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        timeout_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Transactions known to every broker's coordinator (KIP-664), sorted by id."""
        state_filters, pid_filters = list(states), list(producer_ids)

        async def on_broker(node: int, deadline: float) -> list[TransactionListing] | BaseException:
            req = ListTransactionsRequest(
                state_filters=state_filters, producer_id_filters=pid_filters
            )
            resp = await self._send("list_transactions", node, req, deadline)
            err = broker_error(resp.error_code)
            if err is not None:
                return err
            return [
                TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                for t in resp.transaction_states
            ]

        per_broker = await self._each_broker("list_transactions", on_broker, timeout_ms)
        found = {t.transactional_id: t for ts in per_broker.raise_on_error().values() for t in ts}
        return [found[k] for k in sorted(found)]

    async def describe_transactions(
        self, transactional_ids: Iterable[str], timeout_ms: int | None = None
    ) -> ItemResults[str, TransactionDescription]:
        """State, producer and partitions of each transaction (at its coordinator)."""

        async def on_coordinator(
            node: int, batch: list[str], deadline: float
        ) -> dict[str, TransactionDescription | BaseException]:
            resp = await self._send(
                "describe_transactions",
                node,
                DescribeTransactionsRequest(transactional_ids=batch),
                deadline,
            )
            out: dict[str, TransactionDescription | BaseException] = {}
            for t in resp.transaction_states:
                err = broker_error(t.error_code)
                out[t.transactional_id] = err or TransactionDescription(
                    transactional_id=t.transactional_id,
                    state=t.transaction_state,
                    coordinator_id=node,
                    producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    transaction_timeout_ms=t.transaction_timeout_ms,
                    transaction_start_time_ms=t.transaction_start_time_ms
                    if t.transaction_start_time_ms >= 0
                    else None,
                    topic_partitions=[
                        TopicPartition(d.topic, p) for d in t.topics for p in d.partitions
                    ],
                )
            return out

        return await self._at_coordinators(
            "describe_transactions", transactional_ids, on_coordinator, timeout_ms, _TRANSACTION
        )
