"""Consumer group operations: list, describe, delete groups; list, alter, delete offsets.

Listing asks every broker (each knows only the groups it coordinates). Everything else goes
to each group's coordinator (FindCoordinator, batched by the cluster layer, cached), one
request per coordinator where the API takes several groups. NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE mean the cached coordinator is stale: it is forgotten before the
driver retries, so the next round looks it up again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from aiokafka_ng.admin._core import _AdminCore, broker_error, by_topic
from aiokafka_ng.admin.models import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    MemberDescription,
    MemberToRemove,
    Node,
    OffsetAndMetadata,
    TopicPartition,
    decode_authorized_operations,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.cluster.retry import Coordinator, Route
from aiokafka_ng.errors import (
    GroupIdNotFoundError,
    KafkaError,
    ProtocolError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import consumer_group_describe as cgd
from aiokafka_ng.protocol.messages import leave_group as lg
from aiokafka_ng.protocol.messages import offset_commit as oc
from aiokafka_ng.protocol.messages import offset_delete as od
from aiokafka_ng.protocol.messages import offset_fetch as of
from aiokafka_ng.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from aiokafka_ng.protocol.messages.consumer_protocol import ConsumerProtocolAssignment
from aiokafka_ng.protocol.messages.delete_groups import DeleteGroupsRequest
from aiokafka_ng.protocol.messages.describe_groups import DescribeGroupsRequest
from aiokafka_ng.protocol.messages.list_groups import ListGroupsRequest

V = TypeVar("V")


def _kip848_description(
    g: cgd.DescribedGroup, coordinator: Node | None, authorized: bool
) -> ConsumerGroupDescription:
    """A KIP-848 group as ConsumerGroupDescribe answered it."""

    def partitions(assignment: cgd.Assignment) -> list[TopicPartition]:
        return sorted(
            TopicPartition(t.topic_name, p)
            for t in assignment.topic_partitions
            for p in t.partitions
        )

    return ConsumerGroupDescription(
        group_id=g.group_id,
        is_simple_consumer_group=False,
        members=[
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                host=m.client_host,
                assignment=partitions(m.assignment),
                target_assignment=partitions(m.target_assignment),
                member_epoch=m.member_epoch,
                rack_id=m.rack_id,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
            )
            for m in g.members
        ],
        partition_assignor=g.assignor_name,
        state=ConsumerGroupState.parse(g.group_state),
        coordinator=coordinator,
        protocol_type="consumer",
        authorized_operations=decode_authorized_operations(g.authorized_operations)
        if authorized
        else None,
        group_type="consumer",
        group_epoch=g.group_epoch,
        target_assignment_epoch=g.assignment_epoch,
    )


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions in a consumer-protocol assignment (int16 version, then the body).

    Undecodable bytes (another protocol's data) give an empty list, not an error: the
    group description is still useful without them.
    """
    if len(data) < 2:
        return []
    version = int.from_bytes(data[:2], "big", signed=True)
    # Newer versions only add fields at the end, so the newest we know reads them.
    version = max(0, min(version, ConsumerProtocolAssignment.MAX_VERSION))
    try:
        a = ConsumerProtocolAssignment.decode(data[2:], version)
    except ProtocolError:
        return []
    return [TopicPartition(t.topic, p) for t in a.assigned_partitions for p in t.partitions]


def _commit_partition(partition: int, o: OffsetAndMetadata) -> oc.OffsetCommitRequestPartition:
    return oc.OffsetCommitRequestPartition(
        partition_index=partition,
        committed_offset=o.offset,
        committed_leader_epoch=-1 if o.leader_epoch is None else o.leader_epoch,
        committed_metadata=o.metadata,
    )


def _partition_errors(topics: Iterable[Any]) -> dict[TopicPartition, KafkaError | None]:
    """Per-partition outcomes of OffsetCommit / OffsetDelete responses (same layout)."""
    return {
        TopicPartition(t.name, p.partition_index): broker_error(p.error_code)
        for t in topics
        for p in t.partitions
    }


class GroupOps(_AdminCore):
    """Consumer group operations of :class:`AdminClient`."""

    async def list_consumer_groups(
        self,
        states: Iterable[ConsumerGroupState | str] | None = None,
        timeout_ms: int | None = None,
    ) -> list[ConsumerGroupListing]:
        """Every consumer group of the cluster (asks each broker), sorted by group id.

        ``states`` filters on the broker side (ListGroups v4+). Raises ``AdminBatchError``
        if some broker could not answer.
        """
        state_filter = [str(s) for s in states or ()]

        async def on_broker(
            node: int, deadline: float
        ) -> list[ConsumerGroupListing] | BaseException:
            resp = await self._send(
                "list_consumer_groups",
                node,
                ListGroupsRequest(states_filter=state_filter),
                deadline,
                min_version=4 if state_filter else None,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                return err
            return [
                ConsumerGroupListing(
                    group_id=g.group_id,
                    is_simple_consumer_group=not g.protocol_type,
                    state=ConsumerGroupState.parse(g.group_state) if g.group_state else None,
                    group_type=g.group_type or None,
                    protocol_type=g.protocol_type,
                )
                for g in resp.groups
                if g.protocol_type in ("", "consumer")
            ]

        per_broker = await self._each_broker("list_consumer_groups", on_broker, timeout_ms)
        listings = {g.group_id: g for gs in per_broker.raise_on_error().values() for g in gs}
        return [listings[k] for k in sorted(listings)]

    async def describe_consumer_groups(
        self,
        group_ids: Iterable[str],
        include_authorized_operations: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, ConsumerGroupDescription]:
        """Members, assignments, state and assignor of each group (at its coordinator).

        As the Java client does: ConsumerGroupDescribe first, which describes KIP-848 groups
        (member epochs, target assignments, racks); the groups it does not know (classic
        groups) and brokers without it get DescribeGroups. A group that does not exist
        fails with :class:`~aiokafka_ng.errors.GroupIdNotFoundError`, whether the broker
        says GROUP_ID_NOT_FOUND (DescribeGroups v6+, KIP-1043) or, before that, describes
        it as Dead."""

        async def on_coordinator(
            node: int, batch: list[str], deadline: float
        ) -> dict[str, ConsumerGroupDescription | BaseException]:
            coordinator = self._node(node)
            out: dict[str, ConsumerGroupDescription | BaseException] = {}
            classic = list(batch)
            try:
                resp = await self._send(
                    "describe_consumer_groups",
                    node,
                    ConsumerGroupDescribeRequest(
                        group_ids=batch, include_authorized_operations=include_authorized_operations
                    ),
                    deadline,
                )
            except UnsupportedVersionError:
                pass  # a broker without KIP-848: every group is a classic one
            else:
                classic = []
                for g in resp.groups:
                    err = broker_error(g.error_code, g.error_message)
                    if isinstance(err, GroupIdNotFoundError | UnsupportedVersionError) or (
                        err is None and g.group_epoch < 0
                    ):
                        # Not a KIP-848 group: maybe a classic one. (A KIP-848 group's epoch
                        # starts at 0; Tansu answers every group here, with epoch -1 and no
                        # members, so the epoch is what tells.)
                        classic.append(g.group_id)
                    elif err is not None:
                        out[g.group_id] = err
                    else:
                        out[g.group_id] = _kip848_description(
                            g, coordinator, include_authorized_operations
                        )
            if classic:
                out.update(
                    await self._describe_classic(
                        node, classic, include_authorized_operations, deadline
                    )
                )
            return out

        return await self._at_coordinators(
            "describe_consumer_groups", group_ids, on_coordinator, timeout_ms
        )

    async def _describe_classic(
        self, node: int, groups: list[str], include_authorized_operations: bool, deadline: float
    ) -> dict[str, ConsumerGroupDescription | BaseException]:
        """DescribeGroups for ``groups`` at their coordinator ``node``."""
        req = DescribeGroupsRequest(
            groups=groups, include_authorized_operations=include_authorized_operations
        )
        resp = await self._send("describe_consumer_groups", node, req, deadline)
        coordinator = self._node(node)
        out: dict[str, ConsumerGroupDescription | BaseException] = {}
        for g in resp.groups:
            err = broker_error(g.error_code, g.error_message)
            if isinstance(err, GroupIdNotFoundError) or (err is None and g.group_state == "Dead"):
                # Dead: what brokers before KIP-1043 answer for a group that does not exist
                # (or is being removed); Kafka's own tool says "does not exist" for it too.
                out[g.group_id] = GroupIdNotFoundError(f"group {g.group_id!r} does not exist")
                continue
            if err is not None:
                out[g.group_id] = err
                continue
            consumer = g.protocol_type == "consumer"
            out[g.group_id] = ConsumerGroupDescription(
                group_id=g.group_id,
                is_simple_consumer_group=not g.protocol_type,
                members=[
                    MemberDescription(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        host=m.client_host,
                        assignment=decode_assignment(m.member_assignment) if consumer else [],
                    )
                    for m in g.members
                ],
                partition_assignor=g.protocol_data,
                state=ConsumerGroupState.parse(g.group_state),
                coordinator=coordinator,
                protocol_type=g.protocol_type,
                authorized_operations=decode_authorized_operations(g.authorized_operations)
                if include_authorized_operations
                else None,
            )
        return out

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], timeout_ms: int | None = None
    ) -> ItemResults[str, None]:
        """Delete groups (they must be empty: NON_EMPTY_GROUP otherwise)."""

        async def on_coordinator(
            node: int, batch: list[str], deadline: float
        ) -> dict[str, KafkaError | None]:
            resp = await self._send(
                "delete_consumer_groups", node, DeleteGroupsRequest(groups_names=batch), deadline
            )
            return {r.group_id: broker_error(r.error_code) for r in resp.results}

        return await self._at_coordinators(
            "delete_consumer_groups", group_ids, on_coordinator, timeout_ms
        )

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        require_stable: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them, or of ``partitions``).

        Partitions without a committed offset are left out.
        """
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, OffsetAndMetadata]:
            topics = None if tps is None else by_topic(tps)
            req = of.OffsetFetchRequest(
                group_id=group_id,
                topics=None
                if topics is None
                else [
                    of.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()
                ],
                groups=[
                    of.OffsetFetchRequestGroup(
                        group_id=group_id,
                        topics=None
                        if topics is None
                        else [
                            of.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                            for t, ps in topics.items()
                        ],
                    )
                ],
                require_stable=require_stable,
            )
            # v2+: v0/v1 cannot ask for "all partitions".
            resp = await self._send(
                "list_consumer_group_offsets", Coordinator(group_id), req, deadline, min_version=2
            )
            # The same fields, per group from v8 on, at the top level before.
            topics_resp: Sequence[Any]
            if resp.groups:
                err, topics_resp = broker_error(resp.groups[0].error_code), resp.groups[0].topics
            else:
                err, topics_resp = broker_error(resp.error_code), resp.topics
            if err is not None:
                raise err
            out: dict[TopicPartition, OffsetAndMetadata] = {}
            for t in topics_resp:
                for p in t.partitions:
                    perr = broker_error(p.error_code)
                    if perr is not None:
                        raise perr
                    if p.committed_offset < 0:
                        continue  # nothing committed
                    epoch = p.committed_leader_epoch
                    out[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset, p.metadata or "", epoch if epoch >= 0 else None
                    )
            return out

        return await self._run_one("list_consumer_group_offsets", attempt, timeout_ms)

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, None]:
        """Commit offsets for a group that has no active members (an admin commit)."""
        wanted = {
            TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
            for tp, o in offsets.items()
        }

        async def on_coordinator(
            coordinator: Route, pending: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, KafkaError | None]:
            req = oc.OffsetCommitRequest(
                group_id=group_id,
                generation_id_or_member_epoch=-1,  # not a member: an admin commit
                member_id="",
                topics=[
                    oc.OffsetCommitRequestTopic(
                        name=t,
                        partitions=[_commit_partition(p, wanted[TopicPartition(t, p)]) for p in ps],
                    )
                    for t, ps in by_topic(pending).items()
                ],
            )
            resp = await self._send("alter_consumer_group_offsets", coordinator, req, deadline)
            return _partition_errors(resp.topics)

        return await self._partition_op(
            "alter_consumer_group_offsets", group_id, wanted, on_coordinator, timeout_ms
        )

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, None]:
        """Delete a group's committed offsets (OffsetDelete, KIP-496)."""
        tps = [TopicPartition(*tp) for tp in partitions]

        async def on_coordinator(
            coordinator: Route, pending: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, KafkaError | None]:
            req = od.OffsetDeleteRequest(
                group_id=group_id,
                topics=[
                    od.OffsetDeleteRequestTopic(
                        name=t,
                        partitions=[od.OffsetDeleteRequestPartition(partition_index=p) for p in ps],
                    )
                    for t, ps in by_topic(pending).items()
                ],
            )
            resp = await self._send("delete_consumer_group_offsets", coordinator, req, deadline)
            top = broker_error(resp.error_code)
            if top is not None:
                # The group-level error (e.g. GROUP_ID_NOT_FOUND) is every partition's.
                return dict.fromkeys(pending, top)
            return _partition_errors(resp.topics)

        return await self._partition_op(
            "delete_consumer_group_offsets", group_id, tps, on_coordinator, timeout_ms
        )

    async def remove_members_from_consumer_group(
        self,
        group_id: str,
        members: Iterable[MemberToRemove] | None = None,
        reason: str | None = None,
        timeout_ms: int | None = None,
    ) -> ItemResults[MemberToRemove, None]:
        """Make members leave ``group_id`` (LeaveGroup v3+, KIP-345), e.g. a stuck static
        member that would otherwise hold its partitions until its session times out.

        ``members`` None removes every current member (described first). ``reason``
        (KIP-800) is shown in the broker's log. One outcome per member.
        """
        if members is None:
            desc = (await self.describe_consumer_groups([group_id], timeout_ms=timeout_ms)).result(
                group_id
            )
            wanted = [
                MemberToRemove(m.group_instance_id, "" if m.group_instance_id else m.member_id)
                for m in desc.members
            ]
        else:
            wanted = list(dict.fromkeys(members))

        async def attempt(
            pending: list[MemberToRemove], deadline: float
        ) -> dict[MemberToRemove, KafkaError | None]:
            req = lg.LeaveGroupRequest(
                group_id=group_id,
                members=[
                    lg.MemberIdentity(
                        member_id=m.member_id, group_instance_id=m.group_instance_id, reason=reason
                    )
                    for m in pending
                ],
            )
            resp = await self._send(
                "remove_members_from_consumer_group",
                Coordinator(group_id),
                req,
                deadline,
                min_version=3,
            )
            top = broker_error(resp.error_code)
            if top is not None:
                return dict.fromkeys(pending, top)
            answered = {(r.group_instance_id, r.member_id): r.error_code for r in resp.members}
            out: dict[MemberToRemove, KafkaError | None] = {}
            for m in pending:
                # A static member is answered under its instance id (and the member id the
                # coordinator knew it by); a dynamic one under its member id.
                code = answered.get((m.group_instance_id, m.member_id))
                if code is None and m.group_instance_id:
                    code = next(
                        (c for (i, _), c in answered.items() if i == m.group_instance_id), None
                    )
                out[m] = (
                    KafkaError("remove_members_from_consumer_group: member not in the answer")
                    if code is None
                    else broker_error(code)
                )
            return out

        return await self._run("remove_members_from_consumer_group", wanted, attempt, timeout_ms)

    async def _partition_op(
        self,
        operation: str,
        group_id: str,
        tps: Iterable[TopicPartition],
        call: Callable[
            [Route, list[TopicPartition], float],
            Awaitable[Mapping[TopicPartition, KafkaError | None]],
        ],
        timeout_ms: int | None,
    ) -> ItemResults[TopicPartition, None]:
        """Per-partition outcomes of one request to ``group_id``'s coordinator (the route
        forgets a stale one, so the partitions it failed look it up again next round)."""
        coordinator = Coordinator(group_id)

        async def attempt(
            pending: list[TopicPartition], deadline: float
        ) -> Mapping[TopicPartition, KafkaError | None]:
            return await call(coordinator, pending, deadline)

        return await self._run(operation, tps, attempt, timeout_ms)
