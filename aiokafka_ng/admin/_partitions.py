"""Partition-level operations: list offsets, delete records, describe producers (each sent
to the partition's leader, one request per leader), elect leaders (controller) and
describe log dirs (each broker).

A partition whose leader moved answers NOT_LEADER_OR_FOLLOWER (invalid metadata): the
driver refreshes metadata and the next round routes it to the new leader.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

from aiokafka_ng.admin._core import Final, _AdminCore, broker_error, by_topic, group_by
from aiokafka_ng.admin.models import (
    DeletedRecords,
    ElectionType,
    IsolationLevel,
    ListOffsetsResultInfo,
    ListOffsetsSpec,
    LogDirDescription,
    ProducerState,
    ReplicaInfo,
    TopicPartition,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import LeaderNotAvailableError, UnknownTopicOrPartitionError
from aiokafka_ng.protocol.messages import delete_records as dr
from aiokafka_ng.protocol.messages import describe_producers as dp
from aiokafka_ng.protocol.messages import elect_leaders as el
from aiokafka_ng.protocol.messages import list_offsets as lo
from aiokafka_ng.protocol.messages.describe_log_dirs import DescribeLogDirsRequest

V = TypeVar("V")


class PartitionOps(_AdminCore):
    """Partition-level operations of :class:`AdminClient`."""

    async def _at_leaders(
        self,
        operation: str,
        items: Iterable[TopicPartition],
        on_leader: Callable[
            [int, list[TopicPartition], float],
            Awaitable[Mapping[TopicPartition, V | BaseException]],
        ],
        timeout_ms: int | None,
    ) -> ItemResults[TopicPartition, V]:
        """Run ``operation`` with partitions sent to their leaders, one request per leader.

        Each round looks the leaders up in fresh metadata. A topic or partition the broker
        does not know fails at once (Final: retrying will not create it); a partition
        without a leader is retried.
        """

        async def attempt(
            pending: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, V | BaseException]:
            out: dict[TopicPartition, V | BaseException] = {}
            topics = sorted({tp.topic for tp in pending})
            _, snap = await self._metadata(operation, topics, deadline, authorized=False)
            pairs: list[tuple[int, TopicPartition]] = []
            for tp in pending:
                t = snap.topics.get(tp.topic)
                if t is None or t.error is UnknownTopicOrPartitionError:
                    out[tp] = Final(UnknownTopicOrPartitionError(f"unknown topic {tp.topic!r}"))
                elif t.error is not None:
                    out[tp] = t.error(f"topic {tp.topic!r}")
                elif tp.partition not in t.partitions:
                    out[tp] = Final(
                        UnknownTopicOrPartitionError(
                            f"topic {tp.topic!r} has no partition {tp.partition}"
                        )
                    )
                elif (leader := t.leader_for(tp.partition)) is None:
                    out[tp] = LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader")
                else:
                    pairs.append((leader, tp))
            out.update(
                await self._per_node(
                    group_by(pairs), lambda node, batch: on_leader(node, batch, deadline)
                )
            )
            return out

        return await self._run(operation, items, attempt, timeout_ms)

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, ListOffsetsSpec],
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, ListOffsetsResultInfo]:
        """Earliest / latest / by-timestamp / max-timestamp offsets, asked of each leader."""
        wanted = {TopicPartition(*tp): s for tp, s in specs.items()}
        # v1 is the first with a single offset per partition; READ_COMMITTED needs v2,
        # max-timestamp (KIP-734) v7.
        need = 1
        if isolation_level is IsolationLevel.READ_COMMITTED:
            need = 2
        if any(s.timestamp == ListOffsetsSpec.MAX_TIMESTAMP for s in wanted.values()):
            need = 7

        async def on_leader(
            node: int, batch: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, ListOffsetsResultInfo | BaseException]:
            req = lo.ListOffsetsRequest(
                replica_id=-1,  # a client, not a follower
                isolation_level=int(isolation_level),
                topics=[
                    lo.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            lo.ListOffsetsPartition(
                                partition_index=p,
                                timestamp=wanted[TopicPartition(topic, p)].timestamp,
                            )
                            for p in parts
                        ],
                    )
                    for topic, parts in by_topic(batch).items()
                ],
                timeout_ms=self._server_timeout_ms(deadline),
            )
            resp = await self._send("list_offsets", node, req, deadline, min_version=need)
            out: dict[TopicPartition, ListOffsetsResultInfo | BaseException] = {}
            for t in resp.topics:
                for p in t.partitions:
                    err = broker_error(p.error_code)
                    out[TopicPartition(t.name, p.partition_index)] = err or ListOffsetsResultInfo(
                        offset=p.offset,
                        timestamp=p.timestamp,
                        leader_epoch=p.leader_epoch if p.leader_epoch >= 0 else None,
                    )
            return out

        return await self._at_leaders("list_offsets", wanted, on_leader, timeout_ms)

    async def delete_records(
        self,
        before_offsets: Mapping[TopicPartition, int],
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, DeletedRecords]:
        """Delete every record before the given offset (-1: the high watermark)."""
        wanted = {TopicPartition(*tp): o for tp, o in before_offsets.items()}

        async def on_leader(
            node: int, batch: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, DeletedRecords | BaseException]:
            req = dr.DeleteRecordsRequest(
                topics=[
                    dr.DeleteRecordsTopic(
                        name=topic,
                        partitions=[
                            dr.DeleteRecordsPartition(
                                partition_index=p, offset=wanted[TopicPartition(topic, p)]
                            )
                            for p in parts
                        ],
                    )
                    for topic, parts in by_topic(batch).items()
                ],
                timeout_ms=self._server_timeout_ms(deadline),
            )
            resp = await self._send("delete_records", node, req, deadline)
            out: dict[TopicPartition, DeletedRecords | BaseException] = {}
            for t in resp.topics:
                for p in t.partitions:
                    err = broker_error(p.error_code)
                    out[TopicPartition(t.name, p.partition_index)] = err or DeletedRecords(
                        p.low_watermark
                    )
            return out

        return await self._at_leaders("delete_records", wanted, on_leader, timeout_ms)

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> ItemResults[TopicPartition, list[ProducerState]]:
        """Active idempotent/transactional producers of each partition (KIP-664)."""
        tps = [TopicPartition(*tp) for tp in partitions]

        async def on_leader(
            node: int, batch: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, list[ProducerState] | BaseException]:
            req = dp.DescribeProducersRequest(
                topics=[
                    dp.TopicRequest(name=t, partition_indexes=ps)
                    for t, ps in by_topic(batch).items()
                ]
            )
            resp = await self._send("describe_producers", node, req, deadline)
            out: dict[TopicPartition, list[ProducerState] | BaseException] = {}
            for t in resp.topics:
                for p in t.partitions:
                    err = broker_error(p.error_code, p.error_message)
                    out[TopicPartition(t.name, p.partition_index)] = err or [
                        ProducerState(
                            producer_id=s.producer_id,
                            producer_epoch=s.producer_epoch,
                            last_sequence=s.last_sequence,
                            last_timestamp=s.last_timestamp,
                            coordinator_epoch=s.coordinator_epoch,
                            current_transaction_start_offset=(
                                s.current_txn_start_offset
                                if s.current_txn_start_offset >= 0
                                else None
                            ),
                        )
                        for s in p.active_producers
                    ]
            return out

        return await self._at_leaders("describe_producers", tps, on_leader, timeout_ms)

    async def elect_leaders(
        self,
        election_type: ElectionType = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, None]:
        """Run a preferred or unclean leader election (controller); None: every partition."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def once(
            pending: list[TopicPartition] | None, deadline: float
        ) -> dict[TopicPartition, BaseException | None]:
            req = el.ElectLeadersRequest(
                election_type=int(election_type),
                topic_partitions=None
                if pending is None
                else [
                    el.TopicPartitions(topic=t, partitions=ps)
                    for t, ps in by_topic(pending).items()
                ],
                timeout_ms=self._server_timeout_ms(deadline),
            )
            node = await self._controller()
            resp = await self._send(
                "elect_leaders", node, req, deadline, min_version=1 if election_type else None
            )
            top = broker_error(resp.error_code)
            if top is not None:
                raise top
            out: dict[TopicPartition, BaseException | None] = {}
            for r in resp.replica_election_results:
                for p in r.partition_result:
                    err = broker_error(p.error_code, p.error_message)
                    # A partition's election outcome is final (as in Java): retrying
                    # ELECTION_NOT_NEEDED or an ineligible replica would not change it.
                    out[TopicPartition(r.topic, p.partition_id)] = (
                        None if err is None else Final(err)
                    )
            return out

        if tps is None:
            # Every partition: the keys are only known from the answer, so one outcome.
            everything = await self._run_one(
                "elect_leaders", lambda deadline: once(None, deadline), timeout_ms
            )
            return ItemResults(
                "elect_leaders",
                {k: v.error if isinstance(v, Final) else v for k, v in everything.items()},
            )

        async def attempt(
            pending: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, BaseException | None]:
            return await once(pending, deadline)

        return await self._run("elect_leaders", tps, attempt, timeout_ms)

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None, timeout_ms: int | None = None
    ) -> ItemResults[int, dict[str, LogDirDescription]]:
        """Each broker's log directories and the replicas they hold (default: all brokers)."""

        async def on_broker(
            node: int, deadline: float
        ) -> dict[str, LogDirDescription] | BaseException:
            resp = await self._send(
                "describe_log_dirs", node, DescribeLogDirsRequest(topics=None), deadline
            )
            top = broker_error(resp.error_code)
            if top is not None:
                return top
            dirs: dict[str, LogDirDescription] = {}
            for r in resp.results:
                dirs[r.log_dir] = LogDirDescription(
                    path=r.log_dir,
                    error=broker_error(r.error_code),
                    replicas={
                        TopicPartition(t.name, p.partition_index): ReplicaInfo(
                            p.partition_size, p.offset_lag, p.is_future_key
                        )
                        for t in r.topics
                        for p in t.partitions
                    },
                    total_bytes=r.total_bytes if r.total_bytes >= 0 else None,
                    usable_bytes=r.usable_bytes if r.usable_bytes >= 0 else None,
                )
            return dirs

        return await self._each_broker("describe_log_dirs", on_broker, timeout_ms, brokers)
