"""The share fetcher: a share consumer's fetching and acknowledging on the wire (KIP-932).

Theory of operation
-------------------
:class:`ShareFetcher` is built by the :class:`~aiokafka_ng.consumer.share.ShareConsumer` when
it starts, with the cluster, the settings and callables into the consumer (the partitions to
fetch, where fetched records go, who hears acknowledgement outcomes). The consumer calls it
from ``poll``/``commit``/``unsubscribe``/``stop`` in the caller's task; it runs no task of
its own. What it owns, and what each subtle part guards against:

*Share sessions, one per broker* (``_Session``). A member's ShareFetch requests to a broker
form a session: epoch 0 opens it with the full partition list, each later request uses the
next epoch (wrapping to 1) and names only partitions that are new, forgotten or carry
acknowledgements, -1 closes it. Each request's epoch depends on the previous answer, so a
session's requests are serialized by its lock: without it a ``commit()``'s ShareAcknowledge
racing a fetch would send an epoch twice and the broker would answer
INVALID_SHARE_SESSION_EPOCH, losing the acknowledgements both carried. A failed request
leaves the epoch unknown, so the session goes back to epoch 0 and what it carried is
reported as failed (the records come back when their locks expire, as in Java); for the same
reason ``poll`` never cancels a fetch in flight. An answer that says the session is gone
(``_SESSION_LOST``) reopens it at once; other failures from a broker are paced by its
session's ``RetryState`` (KIP-580's policy), bounded by the round's wait so ``poll`` keeps
its timeout.

*Acquisition.* The broker acquires records for this member under a time lock; the answer
names the acquired offset ranges. Ranges are clamped to the batches sent (a hostile or
broken range of 2**62 offsets must not size a loop); acquired offsets without a record
(control records, compacted gaps) are acknowledged as gaps at once, so the broker's
bookkeeping moves on; records of a partition no longer wanted (the subscription changed
while the fetch was out) and undecodable batches are released at once rather than left to
their locks; a record whose deserializer fails is released and the error raised by the next
``poll`` once.

*Acknowledgement batching* (``_acks``: partition -> offset -> type). Acknowledgements wait
here until the next ShareFetch to the partition's broker carries them, folded into runs of
one type, or ShareAcknowledge sends them (``commit()``, an idle ``poll``, closing). A
partition leaving a session carries its last acknowledgements in the request that forgets
it (the broker acknowledges, then forgets). Renewals (KIP-1222) go with ShareAcknowledge
only: a ShareFetch that renews may not fetch. Acknowledgements no open session holds cannot
be sent; they are reported as failed rather than kept forever.

*record_limit* (``share_acquire_mode``, KIP-1206). The limit holds per poll, so one broker
acquires records per round, the leaders in turn (none starved); the others get a request
only for acknowledgements and session changes (nothing asked, nothing waited for). A broker
before ShareFetch v2 would ignore the mode and acquire whole batches: that is an error the
next ``poll`` raises, not a silently broken limit.

*Unknown leaders.* When no assigned partition has a known leader, the round asks the
cluster's metadata refresher for an update and waits for its next snapshot (or a
:meth:`ShareFetcher.wake`, or the round's wait): the fetch resumes as soon as metadata names
a leader, and no loop of fixed sleeps polls the cache meanwhile (the refresher paces the
asking).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from aiokafka_ng.cluster import ClusterClient, RetryState
from aiokafka_ng.cluster.topics import topic_names_by_id
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.errors import RecordDeserializationError
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.share.records import AcknowledgeType, ShareRecord
from aiokafka_ng.errors import IllegalStateError, KafkaError, ProtocolError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import UnsupportedVersionError, error_for_code
from aiokafka_ng.protocol.messages import share_acknowledge as sa
from aiokafka_ng.protocol.messages import share_fetch as sf
from aiokafka_ng.protocol.records import RecordBatch, iter_batches

__all__ = ["AcknowledgementOutcome", "ShareFetcher"]

log = logging.getLogger("aiokafka_ng.consumer.share")

_GAP = 0  # an acquired offset without a record: acknowledged for the broker's bookkeeping
_RENEW = int(AcknowledgeType.RENEW)
_MAX_EPOCH = 2**31 - 1

# ShareFetch top-level answers that end the share session: UNKNOWN_MEMBER_ID,
# SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH (no backoff before reopening it).
_SESSION_LOST = frozenset({25, 122, 123})

#: ``outcome(tp, record offsets, error or None)``: how one acknowledging request went for
#: one partition (the record offsets it carried; gaps are not records).
AcknowledgementOutcome = Callable[[TopicPartition, frozenset[int], KafkaError | None], None]


@dataclass(slots=True)
class _Session:
    """The share session of this member on one broker (see the module docstring).

    ``pacing`` outlives the session: consecutive failed fetches from the broker (an
    error or a refused session) back off by the shared policy (KIP-580), growing with each
    failure and starting over after an answer, as the classic fetcher's per-node pacing."""

    pacing: RetryState
    epoch: int = 0
    partitions: set[TopicPartition] = field(default_factory=set)
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    def reset(self) -> None:
        self.epoch = 0
        self.partitions = set()

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1


class ShareFetcher:
    """Share sessions, acquisition and acknowledgement batching for one share group member
    (see the module docstring).

    ``wanted()`` names the partitions to fetch now (assigned, of subscribed topics);
    ``deliver`` takes each acquired record as it is decoded; ``outcome`` hears how each
    acknowledging request went per partition. ``record_limit`` is
    ``share_acquire_mode="record_limit"`` (KIP-1206); ``backoff`` paces failed fetches."""

    def __init__(
        self,
        cluster: ClusterClient,
        config: ConsumerConfig,
        *,
        member_id: str,
        record_limit: bool,
        backoff: ExponentialBackoff,
        wanted: Callable[[], frozenset[TopicPartition]],
        deliver: Callable[[ShareRecord[Any, Any]], None],
        outcome: AcknowledgementOutcome,
    ) -> None:
        self._cluster = cluster
        self._config = config
        self._member_id = member_id
        self._record_limit = record_limit
        self._backoff = backoff
        self._wanted = wanted
        self._deliver = deliver
        self._outcome = outcome
        self._sessions: dict[int, _Session] = {}
        self._acks: dict[TopicPartition, dict[int, int]] = {}
        self._fetch_turn = 0  # record_limit: which leader fetches records this round
        self._decode_error: RecordDeserializationError | None = None
        self._fetch_error: KafkaError | None = None  # an unusable broker version
        # Set by a new metadata snapshot or wake(): a round waiting for leaders looks again.
        self._changed = anyio.Event()

    # ------------------------------------------------------------------ the consumer's calls

    @property
    def share_sessions(self) -> int:
        """Brokers this member has a share session with (or had one, until it is reopened)."""
        return len(self._sessions)

    def acknowledge(self, tp: TopicPartition, offset: int, kind: AcknowledgeType) -> None:
        """Record ``kind`` for ``offset``: sent with the next request to its broker."""
        self._acks.setdefault(tp, {})[offset] = int(kind)

    @property
    def acknowledgements_pending(self) -> bool:
        return any(self._acks.values())

    @property
    def renewals_pending(self) -> bool:
        """A renewal waits: it goes with ShareAcknowledge, before the next fetch (KIP-1222)."""
        return any(_RENEW in acks.values() for acks in self._acks.values())

    @property
    def error_pending(self) -> bool:
        """A fetch found an error for the next ``poll`` to raise (see :meth:`take_error`)."""
        return self._decode_error is not None or self._fetch_error is not None

    def take_error(self) -> KafkaError | None:
        """The error to raise now, once: a failed deserializer first (the records fetched
        with it stay deliverable), then an unusable broker version."""
        if self._decode_error is not None:
            error: KafkaError = self._decode_error
            self._decode_error = None
            return error
        fetch_error, self._fetch_error = self._fetch_error, None
        return fetch_error

    def wake(self) -> None:
        """Something the fetch depends on changed (the assignment, the consumer stopping): a
        round waiting for leaders looks again now."""
        self._changed.set()

    # ------------------------------------------------------------------ fetching

    async def fetch(self, limit: int, wait_ms: int) -> None:
        """One round: a ShareFetch to each leader of a wanted partition (and to each broker
        whose session still holds partitions, to forget them), concurrently, each waiting
        up to ``wait_ms`` for records and asking for up to ``limit``; acquired records go to
        ``deliver`` as they are decoded. With no leader known, waits for the next metadata
        snapshot instead, for up to ``wait_ms`` (see the module docstring)."""
        self._changed = anyio.Event()  # before the check: a change after it wakes the wait
        by_node, unknown = self._leaders()
        if not any(by_node.values()) and not any(s.partitions for s in self._sessions.values()):
            await self._await_metadata(unknown, wait_ms)
            return
        if unknown:
            # Fetch from the leaders known; the refresher paces the asking and the next
            # round finds the others' leaders in its snapshot.
            self._cluster.request_update(unknown)
        records_from = None
        if self._record_limit:
            # KIP-1206's limit holds per poll: one broker acquires records for this round
            # (the leaders in turn, so none is starved), the others only take
            # acknowledgements and session changes (as Java's ShareConsumeRequestManager).
            leaders = sorted(node for node, tps in by_node.items() if tps)
            if leaders:
                records_from = leaders[self._fetch_turn % len(leaders)]
                self._fetch_turn += 1
        async with anyio.create_task_group() as tg:
            for node, tps in by_node.items():
                fetch = records_from is None or node == records_from
                tg.start_soon(
                    self._fetch_node,
                    node,
                    frozenset(tps),
                    limit if fetch else 0,
                    wait_ms if fetch else 0,
                )
        held = {tp for s in self._sessions.values() for tp in s.partitions}
        held.update(tp for tps in by_node.values() for tp in tps)
        for tp in list(self._acks):
            if tp not in held:
                self._drop_acks(tp)  # its session is gone and no fetch will name it again

    def _leaders(self) -> tuple[dict[int, list[TopicPartition]], set[str]]:
        """The wanted partitions by leader (every session's broker included, so partitions
        that moved away are forgotten), and the topics of those whose leader is unknown."""
        by_node: dict[int, list[TopicPartition]] = {}
        unknown: set[str] = set()
        metadata = self._cluster.metadata
        for tp in sorted(self._wanted()):
            node = metadata.leader_for(tp.topic, tp.partition)
            if node is None:
                unknown.add(tp.topic)
                continue
            by_node.setdefault(node, []).append(tp)
        for node in self._sessions:
            by_node.setdefault(node, [])
        return by_node, unknown

    async def _await_metadata(self, topics: set[str], wait_ms: int) -> None:
        """Nothing to fetch from: ask for the leaders of ``topics`` (if any) and wait for the
        refresher's next snapshot, a :meth:`wake`, or ``wait_ms``. A fixed sleep here would
        resume a backoff step after the leader became known, and spin the check
        meanwhile."""
        changed = self._changed
        remove = self._cluster.add_listener(lambda _snapshot: changed.set())
        try:
            if topics:
                self._cluster.request_update(topics)
            with anyio.move_on_after(wait_ms / 1000):
                await changed.wait()
        finally:
            remove()

    @staticmethod
    async def _paced(session: _Session, error: KafkaError, wait_ms: int) -> None:
        """A failed fetch from the session's broker: back off before the next one by the
        shared policy, the pause growing with consecutive failures -- but for no longer
        than this round may wait (``poll``'s timeout holds) unless that is shorter than the
        policy's first step (a ``poll(timeout_ms=0)`` loop still paces its retries)."""
        session.pacing.failed(error)
        first = session.pacing.backoff.initial_ms / 1000
        await session.pacing.pause(limit=max(wait_ms / 1000, first))

    async def _fetch_node(
        self,
        node: int,
        wanted: frozenset[TopicPartition],
        limit: int,
        wait_ms: int,
    ) -> None:
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = _Session(RetryState(self._backoff))
        async with session.lock:
            names, ids = self._topic_ids()
            # Only partitions the request can name (their topic id known) join the session.
            wanted = frozenset(tp for tp in wanted if tp.topic in ids)
            if not wanted and not session.partitions:
                return
            if self._record_limit and limit and not await self._acquire_mode_ok(node):
                return
            leaving = session.partitions - wanted
            if not wanted:
                # Nothing left on this broker: close the session rather than keep it (the
                # close carries what is pending for the partitions that left).
                tps = [tp for tp in leaving if self._acks.get(tp)]
                await self._acknowledge_locked(node, session, tps, True, {})
                return
            sent: dict[TopicPartition, frozenset[int]] = {}
            if session.epoch == 0:
                topics, forgotten = self._fetch_topics(names, ids, wanted, {}), {}
            else:
                # Partitions leaving the session carry their last acknowledgements and are
                # forgotten in the same request (the broker acknowledges, then forgets).
                acks: dict[TopicPartition, list[sf.AcknowledgementBatch]] = {}
                for tp in session.partitions:
                    batches, offsets = self._take_acks(tp, renew=False)
                    if batches:
                        acks[tp], sent[tp] = batches, offsets
                fetched = (wanted - session.partitions) | acks.keys()
                topics = self._fetch_topics(names, ids, fetched, acks)
                forgotten = self._group_ids(ids, leaving)
                if not limit and not topics and not forgotten:
                    return  # record_limit, not this broker's turn, nothing else to say
            req = sf.ShareFetchRequest(
                group_id=self._config.group_id,
                member_id=self._member_id,
                share_session_epoch=session.epoch,
                # A request not asking for records (limit 0) says so in every bound, as
                # Java's session-only ShareFetch does.
                max_wait_ms=wait_ms,
                min_bytes=self._config.fetch_min_bytes if limit else 0,
                max_bytes=self._config.fetch_max_bytes if limit else 0,
                max_records=limit,
                batch_size=limit,
                share_acquire_mode=1 if self._record_limit else 0,
                topics=topics,
                forgotten_topics_data=[
                    sf.ForgottenTopic(topic_id=t, partitions=ps) for t, ps in forgotten.items()
                ],
            )
            timeout = (self._config.request_timeout_ms + wait_ms) / 1000
            try:
                resp = await self._cluster.request(node, req, timeout=timeout)
            except KafkaError as exc:
                log.debug("share fetch from node %s failed: %r", node, exc)
                session.reset()
                for tp, offsets in sent.items():
                    self._outcome(tp, offsets, exc)
                await self._paced(session, exc, wait_ms)
                return
            if resp.error_code:
                top = error_for_code(resp.error_code)(resp.error_message)
                log.debug("share fetch from node %s: %s", node, top)
                session.reset()
                for tp, offsets in sent.items():
                    self._outcome(tp, offsets, top)
                if resp.error_code not in _SESSION_LOST:
                    await self._paced(session, top, wait_ms)
                return
            session.pacing.succeeded()
            session.advance()
            session.partitions = set(wanted)
            for t in resp.responses:
                name = names.get(t.topic_id)
                if name is None:
                    continue  # not a topic of ours: nothing to take from it
                for p in t.partitions:
                    tp = TopicPartition(name, p.partition_index)
                    if tp in sent:
                        code = p.acknowledge_error_code
                        failed = error_for_code(code)(p.acknowledge_error_message) if code else None
                        self._outcome(tp, sent.pop(tp), failed)
                    self._take_partition(tp, p)
            for tp, offsets in sent.items():
                self._outcome(tp, offsets, None)  # not named in the answer: nothing went wrong

    async def _acquire_mode_ok(self, node: int) -> bool:
        """Whether ``node`` understands ``share_acquire_mode="record_limit"`` (ShareFetch
        v2, Kafka 4.2+). An older broker would drop the field and acquire whole batches, so
        the poll gets an error instead of a silently broken limit."""
        try:
            conn = await self._cluster.connection(node)
        except KafkaError:
            return True  # unreachable: the fetch fails as any other and is paced
        version = conn.version_for(sf.ShareFetchRequest)
        if version >= 2:
            return True
        self._fetch_error = UnsupportedVersionError(
            f"share_acquire_mode='record_limit' needs ShareFetch v2 (Kafka 4.2+); broker "
            f"{node} offers up to v{version}"
        )
        return False

    def _take_partition(self, tp: TopicPartition, p: sf.PartitionData) -> None:
        if p.error_code:
            err = error_for_code(p.error_code)
            if err.invalid_metadata:
                self._cluster.request_update([tp.topic])
            log.debug("share fetch %s: %s", tp, err.name)
            return
        if not p.acquired_records:
            return
        keep = tp in self._wanted()
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
        if decoded is None or not keep:
            # Undecodable, or acquired for a partition no longer wanted (the subscription
            # changed during the fetch): given back at once rather than when the lock expires.
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
                self._deliver(
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

    def _topic_ids(self) -> tuple[dict[uuid.UUID, str], dict[str, uuid.UUID]]:
        """Topic id -> name (the cluster's map, ``topic_names_by_id``) and name -> id, of
        every known topic, not only the subscribed ones: acknowledgements for a topic that
        was unsubscribed still have to name it. Answers name topics by id, requests need
        the id of each partition's topic."""
        names = topic_names_by_id(self._cluster.metadata.topics.values())
        return names, {name: topic_id for topic_id, name in names.items()}

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
        names: Mapping[uuid.UUID, str],
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
            for name in [names[topic_id]]
        ]

    def _take_acks(
        self, tp: TopicPartition, *, renew: bool
    ) -> tuple[list[sf.AcknowledgementBatch], frozenset[int]]:
        """The pending acknowledgements of ``tp`` as batches of equal type (removed), and the
        offsets of records among them. ``renew=False`` leaves renewals pending: a ShareFetch
        that renews may not fetch (KIP-1222), so they go with ShareAcknowledge only."""
        pending = self._acks.pop(tp, None) or {}
        if not renew:
            renewals = {o: t for o, t in pending.items() if t == _RENEW}
            if renewals:
                self._acks[tp] = renewals
                pending = {o: t for o, t in pending.items() if t != _RENEW}
        batches = [sf.AcknowledgementBatch(a, b, [t]) for a, b, t in _runs(pending)]
        return batches, frozenset(o for o, t in pending.items() if t != _GAP)

    # ------------------------------------------------------------------ acknowledging

    async def send_acknowledgements(
        self, *, closing: bool = False
    ) -> dict[TopicPartition, KafkaError | None]:
        """ShareAcknowledge for everything pending (renewals too), per broker; ``closing``
        closes every open share session (epoch -1). Each partition's outcome."""
        results: dict[TopicPartition, KafkaError | None] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        for node, session in self._sessions.items():
            tps = [tp for tp in session.partitions if self._acks.get(tp)]
            if tps or (closing and session.epoch > 0):
                by_node[node] = tps
        async with anyio.create_task_group() as tg:
            for node, tps in by_node.items():
                tg.start_soon(self._acknowledge_node, node, tps, closing, results)
        for tp in list(self._acks):
            if tp not in results:
                error = self._drop_acks(tp)
                if error is not None:
                    results[tp] = error
        return results

    def _drop_acks(self, tp: TopicPartition) -> KafkaError | None:
        """No open share session holds ``tp``: its acknowledgements cannot be sent (the
        records' locks lapse instead); reported as failed (None: nothing was pending)."""
        pending = self._acks.pop(tp, {})
        if not pending:
            return None
        error = IllegalStateError(f"{tp}: no share session to acknowledge in")
        self._outcome(tp, frozenset(o for o, t in pending.items() if t != _GAP), error)
        return error

    async def _acknowledge_node(
        self,
        node: int,
        tps: list[TopicPartition],
        closing: bool,
        results: dict[TopicPartition, KafkaError | None],
    ) -> None:
        session = self._sessions[node]
        async with session.lock:
            if session.epoch == 0:
                return  # reset meanwhile: the acks are undeliverable (see send_acknowledgements)
            await self._acknowledge_locked(node, session, tps, closing, results)

    async def _acknowledge_locked(
        self,
        node: int,
        session: _Session,
        tps: list[TopicPartition],
        closing: bool,
        results: dict[TopicPartition, KafkaError | None],
    ) -> None:
        """ShareAcknowledge of ``tps``' pending acknowledgements in ``session`` (its lock
        held); ``closing`` closes the session too."""
        names, ids = self._topic_ids()
        tps = [tp for tp in tps if tp.topic in ids]
        renew = any(_RENEW in self._acks.get(tp, {}).values() for tp in tps)
        try:
            conn = await self._cluster.connection(node)
        except KafkaError as exc:
            # Nothing was sent: the session's epoch still holds, only these acks are lost.
            for tp in tps:
                pending = self._acks.pop(tp, {})
                results[tp] = exc
                self._outcome(tp, frozenset(o for o, t in pending.items() if t != _GAP), exc)
            return
        if renew and conn.version_for(sa.ShareAcknowledgeRequest) < 2:
            # Renewals exist from version 2 (Kafka 4.2) on; an older broker would misread
            # the type. They fail alone; the rest of the request goes.
            renew = False
            old = UnsupportedVersionError("renewing a lock needs ShareAcknowledge v2 (Kafka 4.2+)")
            for tp in tps:
                pending = self._acks.get(tp, {})
                renewals = frozenset(o for o, t in pending.items() if t == _RENEW)
                for offset in renewals:
                    del pending[offset]
                if renewals:
                    self._outcome(tp, renewals, old)
        taken = {tp: self._take_acks(tp, renew=True) for tp in tps}
        sent = {tp: offsets for tp, (batches, offsets) in taken.items() if batches}
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
                            for b in taken[tp][0]
                        ],
                    )
                    for tp in sorted(sent)
                    if tp.topic == name
                ],
            )
            for name in sorted({tp.topic for tp in sent})
        ]
        req = sa.ShareAcknowledgeRequest(
            group_id=self._config.group_id,
            member_id=self._member_id,
            share_session_epoch=-1 if closing else session.epoch,
            is_renew_ack=renew,
            topics=topics,
        )
        outcome: dict[TopicPartition, KafkaError | None] = {}
        try:
            resp = await conn.send(req, timeout=self._config.request_timeout_ms / 1000)
        except KafkaError as exc:
            session.reset()
            outcome = dict.fromkeys(sent, exc)
        else:
            if closing or resp.error_code:
                session.reset()
            else:
                session.advance()
            if resp.error_code:
                outcome = dict.fromkeys(sent, error_for_code(resp.error_code)(resp.error_message))
            else:
                for t in resp.responses:
                    for p in t.partitions:
                        tp = TopicPartition(names.get(t.topic_id, "?"), p.partition_index)
                        if tp in sent:
                            code = p.error_code
                            outcome[tp] = error_for_code(code)(p.error_message) if code else None
        for tp, offsets in sent.items():
            error = outcome.get(tp)
            results[tp] = error
            self._outcome(tp, offsets, error)


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
