"""Operator tools for transactions: fence producers (KIP-618) and abort a hanging
transaction (KIP-664).

``fence_producers`` does what a new producer instance does on start: InitProducerId for the
transactional id at its transaction coordinator, which bumps the epoch (fencing every older
instance) and aborts the id's open transaction. ``abort_transaction`` is for a transaction
whose coordinator lost track of it (the "hanging transaction" of KIP-664: a partition's last
stable offset stuck behind a producer nobody can find): it writes the ABORT marker straight
to the partition's leader with WriteTxnMarkers, as ``kafka-transactions.sh abort`` does. Find
the producer id, epoch and coordinator epoch with ``describe_producers``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka_ng.admin._acls import _TRANSACTION
from aiokafka_ng.admin._core import broker_error
from aiokafka_ng.admin._partitions import PartitionOps
from aiokafka_ng.admin.models import TopicPartition
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import init_producer_id as ipi
from aiokafka_ng.protocol.messages import write_txn_markers as wtm

__all__ = ["AbortTransactionSpec", "FencedProducer"]


@dataclass(frozen=True, slots=True)
class FencedProducer:
    """The producer id and the bumped epoch a transactional id has after fencing."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class AbortTransactionSpec:
    """The open transaction to abort on ``topic_partition`` (values from
    ``describe_producers``)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


class TxnAdminOps(PartitionOps):
    """Producer fencing and transaction abort of :class:`AdminClient`."""

    async def fence_producers(
        self,
        transactional_ids: Iterable[str],
        transaction_timeout_ms: int = 60000,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, FencedProducer]:
        """Fence every producer instance using these transactional ids (their open
        transactions are aborted); one outcome per id."""

        async def on_coordinator(
            node: int, batch: list[str], deadline: float
        ) -> dict[str, FencedProducer | BaseException]:
            out: dict[str, FencedProducer | BaseException] = {}
            for tid in batch:  # InitProducerId takes one transactional id
                resp = await self._send(
                    "fence_producers",
                    node,
                    ipi.InitProducerIdRequest(
                        transactional_id=tid,
                        transaction_timeout_ms=transaction_timeout_ms,
                        producer_id=-1,
                        producer_epoch=-1,
                    ),
                    deadline,
                )
                err = broker_error(resp.error_code)
                out[tid] = err or FencedProducer(resp.producer_id, resp.producer_epoch)
            return out

        return await self._at_coordinators(
            "fence_producers", transactional_ids, on_coordinator, timeout_ms, _TRANSACTION
        )

    async def abort_transaction(
        self, spec: AbortTransactionSpec, timeout_ms: int | None = None
    ) -> None:
        """Write an ABORT marker for ``spec``'s producer to its partition's leader."""
        tp = TopicPartition(*spec.topic_partition)

        async def on_leader(
            node: int, batch: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, BaseException | None]:
            req = wtm.WriteTxnMarkersRequest(
                markers=[
                    wtm.WritableTxnMarker(
                        producer_id=spec.producer_id,
                        producer_epoch=spec.producer_epoch,
                        transaction_result=False,  # abort
                        topics=[
                            wtm.WritableTxnMarkerTopic(
                                name=tp.topic, partition_indexes=[tp.partition]
                            )
                        ],
                        coordinator_epoch=spec.coordinator_epoch,
                    )
                ]
            )
            resp = await self._send("abort_transaction", node, req, deadline)
            for marker in resp.markers:
                for t in marker.topics:
                    for p in t.partitions:
                        if (t.name, p.partition_index) == tp:
                            return {tp: broker_error(p.error_code)}
            return {tp: KafkaError("abort_transaction: the leader did not answer for it")}

        (await self._at_leaders("abort_transaction", [tp], on_leader, timeout_ms)).result(tp)
