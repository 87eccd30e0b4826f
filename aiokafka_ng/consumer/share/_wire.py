"""The wire side of :class:`~aiokafka_ng.consumer.share.ShareConsumer`: share sessions,
ShareFetch, ShareAcknowledge, and the records and acknowledgement types they carry.

See the theory of operation in :mod:`aiokafka_ng.consumer.share.consumer`. Everything here
runs on the consumer's event loop; a share session's requests are serialized by its lock
because each request's epoch depends on the answer to the previous one.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.errors import RecordDeserializationError
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.errors import IllegalStateError, KafkaError, ProtocolError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import error_for_code
from aiokafka_ng.protocol.messages import share_acknowledge as sa
from aiokafka_ng.protocol.messages import share_fetch as sf
from aiokafka_ng.protocol.records import RecordBatch, iter_batches

__all__ = ["AcknowledgeType", "ShareRecord"]

log = logging.getLogger("aiokafka_ng.consumer.share")

K = TypeVar("K")
V = TypeVar("V")

_GAP = 0  # an acquired offset without a record: acknowledged for the broker's bookkeeping
_MAX_EPOCH = 2**31 - 1

# ShareFetch top-level answers that end the share session: UNKNOWN_MEMBER_ID,
# SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH (no backoff before reopening it).
_SESSION_LOST = frozenset({25, 122, 123})


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged (the protocol's codes)."""

    ACCEPT = 1  #: processed: never delivered again
    RELEASE = 2  #: give it back: delivered again (to any member), delivery count + 1
    REJECT = 3  #: unprocessable: never delivered again, not counted as processed


@dataclass(frozen=True, slots=True)
class ShareRecord(Generic[K, V]):
    """A record of a share group. ``delivery_count`` is 1 the first time the record is
    delivered (to any member) and grows each time it is released or its lock expires."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: K
    value: V
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True)
class _Session:
    """The share session of this member on one broker (see the module docstring)."""

    epoch: int = 0
    partitions: set[TopicPartition] = field(default_factory=set)
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    def reset(self) -> None:
        self.epoch = 0
        self.partitions = set()

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1


class _ShareWire:
    """Fetching and acknowledging, for :class:`ShareConsumer` (which owns the state)."""

    _config: ConsumerConfig
    _topics: list[str]
    _cluster: Cluster | None
    _assignment: frozenset[TopicPartition]
    _sessions: dict[int, _Session]
    _acks: dict[TopicPartition, dict[int, int]]
    _buffer: deque[ShareRecord[Any, Any]]
    _backoff: ExponentialBackoff
    _decode_error: RecordDeserializationError | None
    member_id: str

    # ------------------------------------------------------------------ fetching

    def _leaders(self, cluster: Cluster) -> dict[int, list[TopicPartition]]:
        by_node: dict[int, list[TopicPartition]] = {}
        unknown = False
        for tp in sorted(self._assignment):
            node = cluster.metadata.leader_for(tp.topic, tp.partition)
            if node is None:
                unknown = True
                continue
            by_node.setdefault(node, []).append(tp)
        if unknown:
            cluster.request_update(self._topics)
        for node in self._sessions:
            by_node.setdefault(node, [])  # to forget partitions that moved away
        return by_node

    async def _fetch_round(self, cluster: Cluster, limit: int, wait_ms: int) -> None:
        by_node = self._leaders(cluster)
        if not any(by_node.values()):
            await anyio.sleep(self._backoff.backoff_s(1))  # leaders not known yet
            return
        async with anyio.create_task_group() as tg:
            for node, tps in by_node.items():
                tg.start_soon(self._fetch_node, cluster, node, frozenset(tps), limit, wait_ms)

    async def _fetch_node(
        self,
        cluster: Cluster,
        node: int,
        wanted: frozenset[TopicPartition],
        limit: int,
        wait_ms: int,
    ) -> None:
        session = self._sessions.setdefault(node, _Session())
        async with session.lock:
            ids = self._topic_ids(cluster)
            # Only partitions the request can name (their topic id known) join the session.
            wanted = frozenset(tp for tp in wanted if tp.topic in ids)
            if not wanted and not session.partitions:
                return
            if session.epoch == 0:
                topics, forgotten = self._fetch_topics(ids, wanted, {}), {}
            else:
                acks = {tp: self._take_acks(tp) for tp in wanted & session.partitions}
                acks = {tp: a for tp, a in acks.items() if a}
                topics = self._fetch_topics(ids, (wanted - session.partitions) | acks.keys(), acks)
                forgotten = self._group_ids(ids, session.partitions - wanted)
            if not wanted:
                # Nothing left on this broker: close the session rather than keep it.
                await self._close_session(cluster, node, session)
                return
            req = sf.ShareFetchRequest(
                group_id=self._config.group_id,
                member_id=self.member_id,
                share_session_epoch=session.epoch,
                max_wait_ms=wait_ms,
                min_bytes=self._config.fetch_min_bytes,
                max_bytes=self._config.fetch_max_bytes,
                max_records=limit,
                batch_size=limit,
                topics=topics,
                forgotten_topics_data=[
                    sf.ForgottenTopic(topic_id=t, partitions=ps) for t, ps in forgotten.items()
                ],
            )
            timeout = (self._config.request_timeout_ms + wait_ms) / 1000
            try:
                resp = await cluster.request(node, req, timeout=timeout)
            except KafkaError as exc:
                log.debug("share fetch from node %s failed: %r", node, exc)
                session.reset()
                await anyio.sleep(self._backoff.backoff_s(1))
                return
            if resp.error_code:
                log.debug(
                    "share fetch from node %s: %s", node, error_for_code(resp.error_code).name
                )
                session.reset()
                if resp.error_code not in _SESSION_LOST:
                    await anyio.sleep(self._backoff.backoff_s(1))
                return
            session.advance()
            session.partitions = set(wanted)
            names = {v: k for k, v in ids.items()}
            for t in resp.responses:
                name = names.get(t.topic_id)
                if name is None:
                    continue  # not a topic of ours: nothing to take from it
                for p in t.partitions:
                    self._take_partition(cluster, TopicPartition(name, p.partition_index), p)

    def _take_partition(self, cluster: Cluster, tp: TopicPartition, p: sf.PartitionData) -> None:
        if p.acknowledge_error_code:
            failed = error_for_code(p.acknowledge_error_code)(p.acknowledge_error_message)
            log.warning(
                "share consumer %s: acknowledging %s failed: %s", self.member_id, tp, failed
            )
        if p.error_code:
            err = error_for_code(p.error_code)
            if err.invalid_metadata:
                cluster.request_update([tp.topic])
            log.debug("share fetch %s: %s", tp, err.name)
            return
        if not p.acquired_records or tp not in self._assignment:
            return
        batches: list[RecordBatch] = []
        try:
            # extend keeps the batches read before a bad one (they name releasable offsets)
            batches.extend(iter_batches(p.records or b"", verify_crc=self._config.check_crcs))
            decoded = [
                b.consumer_records(tp.topic, tp.partition) for b in batches if not b.is_control
            ]
        except ProtocolError as exc:
            # Garbage where records should be: hand out nothing of it and release what
            # can be named (the rest comes back when its lock expires); the broker's
            # delivery count limit ends the loop if the log itself is bad.
            log.error("share fetch %s: undecodable records (%s); released", tp, exc)
            decoded = None
        if not batches:
            return
        # Acquired ranges are clamped to the batches sent: a range beyond them names
        # nothing this client could acknowledge (and must not size a loop).
        low, high = batches[0].base_offset, batches[-1].last_offset
        counts: dict[int, int] = {}
        for r in p.acquired_records:
            for offset in range(max(r.first_offset, low), min(r.last_offset, high) + 1):
                counts[offset] = r.delivery_count
        acks = self._acks.setdefault(tp, {})
        if decoded is None:
            acks.update(dict.fromkeys(counts, int(AcknowledgeType.RELEASE)))
            return
        key_de, value_de = self._config.key_deserializer, self._config.value_deserializer
        for records in decoded:
            for rec in records:
                count = counts.pop(rec.offset, None)
                if count is None:
                    continue  # not acquired for us (another member's, or already done)
                try:
                    key = key_de(rec.key) if key_de else rec.key
                    value = value_de(rec.value) if value_de else rec.value
                except Exception as exc:
                    # Released (it comes back, up to the group's delivery count limit);
                    # poll() raises the error once, after this round.
                    acks[rec.offset] = int(AcknowledgeType.RELEASE)
                    if self._decode_error is None:
                        bad = RecordDeserializationError(
                            f"{tp.topic}[{tp.partition}]@{rec.offset}: {exc!r}",
                            tp.topic, tp.partition, rec.offset,
                        )  # fmt: skip
                        bad.__cause__ = exc
                        self._decode_error = bad
                    continue
                self._buffer.append(
                    ShareRecord(
                        tp.topic, tp.partition, rec.offset, rec.timestamp, rec.timestamp_type,
                        key, value, tuple(rec.headers), count,
                    )
                )  # fmt: skip
        # Acquired offsets without a record (control records, compacted away) are
        # acknowledged as gaps at once.
        acks.update(dict.fromkeys(counts, _GAP))
        if not acks:
            del self._acks[tp]

    def _topic_ids(self, cluster: Cluster) -> dict[str, uuid.UUID]:
        return {n: t.topic_id for n, t in cluster.metadata.topics.items() if n in self._topics}

    @staticmethod
    def _group_ids(
        ids: Mapping[str, uuid.UUID], tps: Iterable[TopicPartition]
    ) -> dict[uuid.UUID, list[int]]:
        out: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(tps):
            if tp.topic in ids:
                out.setdefault(ids[tp.topic], []).append(tp.partition)
        return out

    def _fetch_topics(
        self,
        ids: Mapping[str, uuid.UUID],
        tps: Iterable[TopicPartition],
        acks: Mapping[TopicPartition, list[sf.AcknowledgementBatch]],
    ) -> list[sf.FetchTopic]:
        return [
            sf.FetchTopic(
                topic_id=topic_id,
                partitions=[
                    sf.FetchPartition(
                        partition_index=p,
                        acknowledgement_batches=acks.get(TopicPartition(name, p), []),
                    )
                    for p in ps
                ],
            )
            for topic_id, ps in self._group_ids(ids, tps).items()
            for name in [next(n for n, i in ids.items() if i == topic_id)]
        ]

    def _take_acks(self, tp: TopicPartition) -> list[sf.AcknowledgementBatch]:
        """The pending acknowledgements of ``tp`` as batches of equal type (removed)."""
        pending = self._acks.pop(tp, None)
        return [sf.AcknowledgementBatch(a, b, [t]) for a, b, t in _runs(pending or {})]

    # ------------------------------------------------------------------ acknowledging

    async def _send_acks(self, *, closing: bool = False) -> dict[TopicPartition, KafkaError | None]:
        cluster = self._cluster
        assert cluster is not None
        results: dict[TopicPartition, KafkaError | None] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        for node, session in self._sessions.items():
            tps = [tp for tp in session.partitions if self._acks.get(tp)]
            if tps or (closing and session.epoch > 0):
                by_node[node] = tps
        async with anyio.create_task_group() as tg:
            for node, tps in by_node.items():
                tg.start_soon(self._acknowledge_node, cluster, node, tps, closing, results)
        for tp in list(self._acks):
            if self._acks[tp] and tp not in results:
                # No open session holds this partition: its records' locks lapse instead.
                del self._acks[tp]
                results[tp] = IllegalStateError(f"{tp}: no share session to acknowledge in")
        return results

    async def _acknowledge_node(
        self,
        cluster: Cluster,
        node: int,
        tps: list[TopicPartition],
        closing: bool,
        results: dict[TopicPartition, KafkaError | None],
    ) -> None:
        session = self._sessions[node]
        async with session.lock:
            if session.epoch == 0:
                return  # reset meanwhile: the acks are undeliverable (see _send_acks)
            ids = self._topic_ids(cluster)
            acks = {tp: self._take_acks(tp) for tp in tps}
            topics = [
                sa.AcknowledgeTopic(
                    topic_id=ids[name],
                    partitions=[
                        sa.AcknowledgePartition(
                            partition_index=tp.partition,
                            acknowledgement_batches=[
                                sa.AcknowledgementBatch(
                                    b.first_offset, b.last_offset, b.acknowledge_types
                                )
                                for b in acks[tp]
                            ],
                        )
                        for tp in tps
                        if tp.topic == name and acks[tp]
                    ],
                )
                for name in sorted({tp.topic for tp in tps if tp.topic in ids})
            ]
            req = sa.ShareAcknowledgeRequest(
                group_id=self._config.group_id,
                member_id=self.member_id,
                share_session_epoch=-1 if closing else session.epoch,
                topics=topics,
            )
            try:
                resp = await cluster.request(
                    node, req, timeout=self._config.request_timeout_ms / 1000
                )
            except KafkaError as exc:
                session.reset()
                for tp in tps:
                    results[tp] = exc
                return
            if closing or resp.error_code:
                session.reset()
            else:
                session.advance()
            if resp.error_code:
                top = error_for_code(resp.error_code)(resp.error_message)
                for tp in tps:
                    results[tp] = top
                return
            names = {v: k for k, v in ids.items()}
            for t in resp.responses:
                for p in t.partitions:
                    tp = TopicPartition(names.get(t.topic_id, "?"), p.partition_index)
                    err = error_for_code(p.error_code)(p.error_message) if p.error_code else None
                    results[tp] = err
            for tp in tps:
                results.setdefault(tp, None)

    async def _close_session(self, cluster: Cluster, node: int, session: _Session) -> None:
        req = sa.ShareAcknowledgeRequest(
            group_id=self._config.group_id, member_id=self.member_id, share_session_epoch=-1
        )
        try:
            await cluster.request(node, req, timeout=self._config.request_timeout_ms / 1000)
        except KafkaError as exc:
            log.debug("closing the share session on node %s: %r", node, exc)
        session.reset()


def _runs(acks: Mapping[int, int]) -> list[tuple[int, int, int]]:
    """``offset -> type`` as ``(first, last, type)`` runs of consecutive equal types."""
    out: list[tuple[int, int, int]] = []
    for offset in sorted(acks):
        kind = acks[offset]
        if out and out[-1][1] == offset - 1 and out[-1][2] == kind:
            out[-1] = (out[-1][0], offset, kind)
        else:
            out.append((offset, offset, kind))
    return out
