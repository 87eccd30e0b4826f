"""Which log directory holds a replica, and moving replicas between a broker's directories
(JBOD, KIP-113).

Both are per broker: a replica is named with its broker (:class:`TopicPartitionReplica`).
Describing asks each broker involved for its log directories (DescribeLogDirs) and picks the
replicas out; altering sends AlterReplicaLogDirs to each broker for its replicas. A move
creates a "future" replica in the target directory that catches up and then replaces the
current one: describe shows both until it finishes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from aiokafka_ng.admin._core import broker_error, group_by
from aiokafka_ng.admin._partitions import PartitionOps
from aiokafka_ng.admin.models import TopicPartition
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import alter_replica_log_dirs as arl

__all__ = ["ReplicaLogDirInfo", "TopicPartitionReplica"]


class TopicPartitionReplica(NamedTuple):
    """A partition's replica on one broker."""

    topic: str
    partition: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class ReplicaLogDirInfo:
    """Where a replica lives: its directory and lag, and those of the future replica a move
    is creating (None / -1 when there is none, or when the broker does not hold it)."""

    current_log_dir: str | None
    current_offset_lag: int
    future_log_dir: str | None
    future_offset_lag: int


class ReplicaDirOps(PartitionOps):
    """Replica log directory operations of :class:`AdminClient`."""

    async def describe_replica_log_dirs(
        self, replicas: Iterable[TopicPartitionReplica], timeout_ms: int | None = None
    ) -> ItemResults[TopicPartitionReplica, ReplicaLogDirInfo]:
        """The log directory (and any future one) of each replica."""
        wanted = [TopicPartitionReplica(*r) for r in replicas]
        brokers = sorted({r.broker_id for r in wanted})
        described = await self.describe_log_dirs(brokers, timeout_ms=timeout_ms)
        out: dict[TopicPartitionReplica, ReplicaLogDirInfo | BaseException] = {}
        for r in wanted:
            dirs = described[r.broker_id]
            if isinstance(dirs, BaseException):
                out[r] = dirs
                continue
            tp = TopicPartition(r.topic, r.partition)
            current: tuple[str | None, int] = (None, -1)
            future: tuple[str | None, int] = (None, -1)
            for path, d in dirs.items():
                info = d.replicas.get(tp)
                if info is None:
                    continue
                if info.is_future:
                    future = (path, info.offset_lag)
                else:
                    current = (path, info.offset_lag)
            out[r] = ReplicaLogDirInfo(*current, *future)
        return ItemResults("describe_replica_log_dirs", out)

    async def alter_replica_log_dirs(
        self, assignments: Mapping[TopicPartitionReplica, str], timeout_ms: int | None = None
    ) -> ItemResults[TopicPartitionReplica, None]:
        """Move each replica to the named log directory of its broker (an absolute path
        the broker has); one outcome per replica."""
        wanted = {TopicPartitionReplica(*r): path for r, path in assignments.items()}

        async def on_broker(
            node: int, batch: list[TopicPartitionReplica], deadline: float
        ) -> dict[TopicPartitionReplica, KafkaError | None]:
            by_dir: dict[str, dict[str, list[int]]] = {}
            for r in batch:
                by_dir.setdefault(wanted[r], {}).setdefault(r.topic, []).append(r.partition)
            req = arl.AlterReplicaLogDirsRequest(
                dirs=[
                    arl.AlterReplicaLogDir(
                        path=path,
                        topics=[
                            arl.AlterReplicaLogDirTopic(name=t, partitions=ps)
                            for t, ps in topics.items()
                        ],
                    )
                    for path, topics in by_dir.items()
                ]
            )
            resp = await self._send("alter_replica_log_dirs", node, req, deadline)
            answered = {
                (t.topic_name, p.partition_index): broker_error(p.error_code)
                for t in resp.results
                for p in t.partitions
            }
            return {
                r: answered.get(
                    (r.topic, r.partition),
                    KafkaError("alter_replica_log_dirs: the broker did not answer for it"),
                )
                for r in batch
            }

        async def attempt(
            pending: list[TopicPartitionReplica], deadline: float
        ) -> dict[TopicPartitionReplica, KafkaError | BaseException | None]:
            return await self._per_node(
                group_by((r.broker_id, r) for r in pending),
                lambda node, batch: on_broker(node, batch, deadline),
            )

        return await self._run("alter_replica_log_dirs", wanted, attempt, timeout_ms)
