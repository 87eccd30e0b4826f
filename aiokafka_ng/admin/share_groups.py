"""Share groups (KIP-932): listing them, describing their members and assignments, and
their start offsets (list / alter / delete, as Kafka 4.2's Admin has them).

``list_share_groups`` is ListGroups v5 with the type filter "share", asked of every broker;
the answer is filtered here too, so a broker that ignores the filter cannot slip other
groups in. ``describe_share_groups`` sends ShareGroupDescribe to each group's coordinator
(share groups live in the group coordinator, found with FindCoordinator key type 0).

A share group's offset is per partition: the *start offset*, below which every record is
done (acknowledged or archived). DescribeShareGroupOffsets reads it (v1 adds the lag),
AlterShareGroupOffsets sets it (the group must have no members, as for consumer groups),
DeleteShareGroupOffsets forgets it per topic. All three go to the group coordinator.

ShareGroupDescribe is negotiated as any request: v1, the first stable version (Kafka 4.1,
where share groups left early access). The early-access v0 of Kafka 4.0 is not in the
schemas the client is generated from (Kafka 4.4's), so a 4.0 broker gets an
``UnsupportedVersionError`` naming the operation.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from aiokafka_ng.admin._core import _AdminCore, broker_error, by_topic
from aiokafka_ng.admin.models import (
    AclOperation,
    Node,
    TopicPartition,
    decode_authorized_operations,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.cluster.retry import Coordinator, Route
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import alter_share_group_offsets as asgo
from aiokafka_ng.protocol.messages import delete_share_group_offsets as dsgo
from aiokafka_ng.protocol.messages import describe_share_group_offsets as dsgof
from aiokafka_ng.protocol.messages import list_groups as lgr
from aiokafka_ng.protocol.messages import share_group_describe as sgd

K = TypeVar("K")

__all__ = [
    "ShareGroupDescription",
    "ShareGroupListing",
    "ShareGroupOffset",
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


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """A share group's position in one partition: records below ``start_offset`` are done.
    ``lag`` (records from the start offset to the end, minus those already done) needs
    DescribeShareGroupOffsets v1 (Kafka 4.2); None when the broker did not say."""

    start_offset: int
    leader_epoch: int | None
    lag: int | None


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

    async def list_share_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ShareGroupOffset]:
        """The share group's start offset in each partition it has state for (or in
        ``partitions``); partitions without one are left out. A partition's error raises."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, ShareGroupOffset]:
            topics = None if tps is None else by_topic(tps)
            req = dsgof.DescribeShareGroupOffsetsRequest(
                groups=[
                    dsgof.DescribeShareGroupOffsetsRequestGroup(
                        group_id=group_id,
                        topics=None
                        if topics is None
                        else [
                            dsgof.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                            for t, ps in topics.items()
                        ],
                    )
                ]
            )
            resp = await self._send(
                "list_share_group_offsets", Coordinator(group_id), req, deadline
            )
            out: dict[TopicPartition, ShareGroupOffset] = {}
            for g in resp.groups:
                err = broker_error(g.error_code, g.error_message)
                if err is not None:
                    raise err
                for t in g.topics:
                    for p in t.partitions:
                        perr = broker_error(p.error_code, p.error_message)
                        if perr is not None:
                            raise perr
                        if p.start_offset < 0:
                            continue  # no state for this partition yet
                        out[TopicPartition(t.topic_name, p.partition_index)] = ShareGroupOffset(
                            p.start_offset,
                            p.leader_epoch if p.leader_epoch >= 0 else None,
                            p.lag if p.lag >= 0 else None,
                        )
            return out

        return await self._run_one("list_share_group_offsets", attempt, timeout_ms)

    async def alter_share_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, None]:
        """Set the share group's start offset per partition. The group must have no
        members (else each partition fails with ``NonEmptyGroupError``)."""
        wanted = {TopicPartition(*tp): int(o) for tp, o in offsets.items()}

        async def on_node(
            coordinator: Route, pending: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, KafkaError | None]:
            req = asgo.AlterShareGroupOffsetsRequest(
                group_id=group_id,
                topics=[
                    asgo.AlterShareGroupOffsetsRequestTopic(
                        topic_name=t,
                        partitions=[
                            asgo.AlterShareGroupOffsetsRequestPartition(
                                partition_index=p, start_offset=wanted[TopicPartition(t, p)]
                            )
                            for p in ps
                        ],
                    )
                    for t, ps in by_topic(pending).items()
                ],
            )
            resp = await self._send("alter_share_group_offsets", coordinator, req, deadline)
            top = broker_error(resp.error_code, resp.error_message)
            if top is not None:
                return dict.fromkeys(pending, top)
            return {
                TopicPartition(t.topic_name, p.partition_index): broker_error(
                    p.error_code, p.error_message
                )
                for t in resp.responses
                for p in t.partitions
            }

        return await self._at_group_coordinator(
            "alter_share_group_offsets", group_id, list(wanted), on_node, timeout_ms
        )

    async def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str], timeout_ms: int | None = None
    ) -> ItemResults[str, None]:
        """Forget the share group's state for whole topics (the group must be empty); the
        next member starts them by ``share.auto.offset.reset`` again."""
        names = list(dict.fromkeys([topics] if isinstance(topics, str) else topics))

        async def on_node(
            coordinator: Route, pending: list[str], deadline: float
        ) -> dict[str, KafkaError | None]:
            req = dsgo.DeleteShareGroupOffsetsRequest(
                group_id=group_id,
                topics=[dsgo.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in pending],
            )
            resp = await self._send("delete_share_group_offsets", coordinator, req, deadline)
            top = broker_error(resp.error_code, resp.error_message)
            if top is not None:
                return dict.fromkeys(pending, top)
            return {
                t.topic_name: broker_error(t.error_code, t.error_message) for t in resp.responses
            }

        return await self._at_group_coordinator(
            "delete_share_group_offsets", group_id, names, on_node, timeout_ms
        )

    async def _at_group_coordinator(
        self,
        operation: str,
        group_id: str,
        items: list[K],
        call: Callable[[Route, list[K], float], Awaitable[Mapping[K, KafkaError | None]]],
        timeout_ms: int | None,
    ) -> ItemResults[K, None]:
        """Per-item outcomes of one request to ``group_id``'s coordinator, in rounds (the
        route forgets a stale coordinator, so the next round looks it up again)."""
        coordinator = Coordinator(group_id)

        async def attempt(pending: list[K], deadline: float) -> Mapping[K, KafkaError | None]:
            return await call(coordinator, pending, deadline)

        return await self._run(operation, items, attempt, timeout_ms)


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
