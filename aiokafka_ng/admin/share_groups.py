"""Share groups (KIP-932): listing them and describing their members and assignments.

``list_share_groups`` is ListGroups v5 with the type filter "share", asked of every broker;
the answer is filtered here too, so a broker that ignores the filter cannot slip other
groups in. ``describe_share_groups`` sends ShareGroupDescribe to each group's coordinator
(share groups live in the group coordinator, found with FindCoordinator key type 0).

ShareGroupDescribe is negotiated as any request: v1, the first stable version (Kafka 4.1,
where share groups left early access). The early-access v0 of Kafka 4.0 is not in the
schemas the client is generated from (Kafka 4.4's), so a 4.0 broker gets an
``UnsupportedVersionError`` naming the operation.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka_ng.admin._core import _AdminCore, broker_error
from aiokafka_ng.admin.models import (
    AclOperation,
    Node,
    TopicPartition,
    decode_authorized_operations,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.protocol.messages import list_groups as lgr
from aiokafka_ng.protocol.messages import share_group_describe as sgd

__all__ = [
    "ShareGroupDescription",
    "ShareGroupListing",
    "ShareGroupState",
    "ShareMemberDescription",
]


class ShareGroupState(enum.StrEnum):
    UNKNOWN = "Unknown"
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, value: str) -> ShareGroupState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ShareGroupListing:
    """One group of ``list_share_groups``."""

    group_id: str
    state: ShareGroupState | None


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """A member of a share group: the partitions it is assigned share their records with
    the other members assigned the same partitions."""

    member_id: str
    client_id: str
    host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: list[str]
    assignment: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """What ``describe_share_groups`` returns for one group."""

    group_id: str
    state: ShareGroupState
    group_epoch: int
    assignment_epoch: int
    partition_assignor: str
    members: list[ShareMemberDescription]
    coordinator: Node | None
    authorized_operations: frozenset[AclOperation] | None = None


class ShareGroupOps(_AdminCore):
    """Share group operations of :class:`AdminClient`."""

    async def list_share_groups(
        self, states: Iterable[ShareGroupState | str] | None = None, timeout_ms: int | None = None
    ) -> list[ShareGroupListing]:
        """Every share group of the cluster (or those in ``states``), sorted by group id.
        Needs ListGroups v5 (the type filter); raises ``AdminBatchError`` if a broker could
        not answer."""
        state_filter = [str(s) for s in states or ()]

        async def on_broker(node: int, deadline: float) -> list[ShareGroupListing] | BaseException:
            resp = await self._send(
                "list_share_groups",
                node,
                lgr.ListGroupsRequest(states_filter=state_filter, types_filter=["share"]),
                deadline,
                min_version=5,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                return err
            return [
                ShareGroupListing(
                    g.group_id, ShareGroupState.parse(g.group_state) if g.group_state else None
                )
                for g in resp.groups
                if g.group_type == "share"
            ]

        per_broker = await self._each_broker("list_share_groups", on_broker, timeout_ms)
        found = {g.group_id: g for gs in per_broker.raise_on_error().values() for g in gs}
        return [found[k] for k in sorted(found)]

    async def describe_share_groups(
        self,
        group_ids: Iterable[str],
        include_authorized_operations: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, ShareGroupDescription]:
        """State, epochs, assignor and members (with their assignments) of each share group,
        asked of its coordinator. A group that does not exist fails with
        ``GroupIdNotFoundError``."""

        async def on_coordinator(
            node: int, batch: list[str], deadline: float
        ) -> dict[str, ShareGroupDescription | BaseException]:
            req = sgd.ShareGroupDescribeRequest(
                group_ids=batch, include_authorized_operations=include_authorized_operations
            )
            resp = await self._send("describe_share_groups", node, req, deadline)
            coordinator = self._node(node)
            out: dict[str, ShareGroupDescription | BaseException] = {}
            for g in resp.groups:
                err = broker_error(g.error_code, g.error_message)
                out[g.group_id] = (
                    err
                    if err is not None
                    else _description(g, coordinator, include_authorized_operations)
                )
            return out

        return await self._at_coordinators(
            "describe_share_groups", group_ids, on_coordinator, timeout_ms
        )


def _description(
    g: sgd.DescribedGroup, coordinator: Node | None, authorized: bool
) -> ShareGroupDescription:
    return ShareGroupDescription(
        group_id=g.group_id,
        state=ShareGroupState.parse(g.group_state),
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
        partition_assignor=g.assignor_name,
        members=[
            ShareMemberDescription(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.client_host,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                subscribed_topics=list(m.subscribed_topic_names),
                assignment=[
                    TopicPartition(t.topic_name, p)
                    for t in m.assignment.topic_partitions
                    for p in t.partitions
                ],
            )
            for m in g.members
        ],
        coordinator=coordinator,
        authorized_operations=decode_authorized_operations(g.authorized_operations)
        if authorized
        else None,
    )
