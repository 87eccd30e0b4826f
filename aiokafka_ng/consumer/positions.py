"""Where a partition with no position starts reading.

The fetcher hands the assigned partitions that have no position to one resolver task at a
time, which calls :func:`resolve_positions`: a partition that needs its committed offset
gets it from the group (OffsetFetch), and one with nothing committed -- or a reset asked
for by ``seek_to_beginning``/``seek_to_end`` or an out-of-range fetch -- is placed by
``auto_offset_reset`` through ListOffsets. A partition seeked or revoked while a lookup
was in flight keeps what the application asked for: the lookup's answer is dropped.

*Validation* (KIP-320, as Java's ``SubscriptionState.maybeCompleteValidation``). A position
that carries a leader epoch (the epoch of the last record consumed, or a committed
offset's) is checked when the partition's leader epoch moves, and after it is set from a
committed offset: OffsetForLeaderEpoch asks the leader where that epoch ends in its log
(:func:`complete_validation`; a Fetch v12+ answer's diverging epoch is the same answer,
given by the broker unasked). An end before the position means the log was truncated under
the consumer (an unclean leader election): the records it read from there on are gone and
others took their offsets. With a reset policy the consumer logs a warning and resumes at
the divergence (the new records are read; nothing moves backwards unsaid); with
``auto_offset_reset="none"`` the application gets a
:class:`~aiokafka_ng.errors.LogTruncationError` naming the partition and the offset,
again on every poll until it seeks. An epoch the leader does not know at all is reset by
the policy ("none": the error, without a divergent offset).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from aiokafka_ng.consumer.config import by_duration_ago
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import EARLIEST, LATEST, OffsetsClient
from aiokafka_ng.consumer.state import PartitionState
from aiokafka_ng.errors import LogTruncationError, OffsetOutOfRangeError

__all__ = ["complete_validation", "resolve_positions"]

# The fetcher's logger, as for the rest of the position handling (log filters select it).
log = logging.getLogger("aiokafka_ng.consumer.fetcher")


async def resolve_positions(
    states: list[PartitionState],
    assignment: Mapping[TopicPartition, PartitionState],
    offsets: OffsetsClient,
    *,
    group_offsets: Callable[[], bool],
    auto_offset_reset: str,
    on_error: Callable[[], None],
) -> None:
    """Give ``states`` (those still in ``assignment``) a position; ``on_error`` is called
    when one gets an error for the application instead (``auto_offset_reset="none"``)."""
    live = [s for s in states if assignment.get(s.tp) is s]
    need_committed = [s for s in live if s.needs_committed]
    if need_committed:
        epochs = {id(s): s.epoch for s in need_committed}
        if group_offsets():
            committed = await offsets.fetch_committed([s.tp for s in need_committed])
        else:
            committed = {}
        for s in need_committed:
            if s.epoch != epochs[id(s)] or not s.needs_committed:
                continue  # seeked meanwhile
            om = committed.get(s.tp)
            s.needs_committed = False
            if om is not None:
                # Java validates a committed offset that has an epoch (seekUnvalidated).
                s.seek(om.offset, om.leader_epoch, validate=True)
            else:
                s.reset = auto_offset_reset
    to_validate = [s for s in live if s.validate and s.reset is None and not s.needs_committed]
    if to_validate:
        epochs = {id(s): s.epoch for s in to_validate}
        ends = await offsets.epoch_end_offsets({s.tp: s.leader_epoch for s in to_validate})
        for s in to_validate:
            if s.epoch != epochs[id(s)] or not s.validate or s.tp not in ends:
                continue  # seeked meanwhile
            end = ends[s.tp]
            if not end.asked:  # the leader offers no OffsetForLeaderEpoch v3+: as Java, trust
                s.validated(end.current_epoch)
                continue
            policy = auto_offset_reset
            if complete_validation(s, end.current_epoch, end.epoch, end.end_offset, policy):
                on_error()
    to_reset = [s for s in live if s.reset is not None and not s.needs_committed]
    if not to_reset:
        return
    asks: dict[TopicPartition, int] = {}
    for s in to_reset:
        reset = s.reset
        assert reset is not None
        if reset == "none":
            s.error = OffsetOutOfRangeError(
                f"no committed offset for {s.tp.topic}-{s.tp.partition} "
                "and auto_offset_reset='none'"
            )
            s.reset = None
            on_error()
            continue
        asks[s.tp] = _reset_timestamp(reset)
    epochs = {id(s): s.epoch for s in to_reset}
    answers = await offsets.list_offsets(asks)
    for s in to_reset:
        answer = answers.get(s.tp)
        if answer is None or s.epoch != epochs[id(s)]:
            if answer is None:  # its leader did not answer this round: the planner asks again
                log.debug("no ListOffsets answer for %s-%s yet", s.tp.topic, s.tp.partition)
            continue
        if answer.offset < 0:  # no record at/after the timestamp (by_duration too): the end
            s.request_reset("latest")
            continue
        # The position carries the epoch of its record (Java's seekUnvalidated after a
        # reset): a later leader change validates it (KIP-320) instead of trusting it.
        s.seek(answer.offset, answer.leader_epoch)


def complete_validation(
    state: PartitionState,
    current_epoch: int,
    epoch: int,
    end_offset: int,
    auto_offset_reset: str,
) -> bool:
    """Act on where ``state``'s epoch ends in the leader's log (``epoch`` and ``end_offset``,
    -1 when unknown), asked under ``current_epoch`` (see *Validation*); True when
    ``state.error`` now holds an error for the application."""
    tp, position = state.tp, state.position
    assert position is not None
    if epoch < 0 or end_offset < 0:
        if auto_offset_reset != "none":
            log.warning(
                "log truncation detected for %s-%s at offset %s: the leader knows no end "
                "for leader epoch %s; resetting to %s",
                tp.topic, tp.partition, position, state.leader_epoch, auto_offset_reset,
            )  # fmt: skip
            state.request_reset(auto_offset_reset)
            return False
        state.error = LogTruncationError(
            f"log truncation detected for {tp.topic}-{tp.partition} at offset {position}: "
            f"the leader knows no end for leader epoch {state.leader_epoch}",
            {tp: position},
            {},
        )
        return True
    if end_offset < position:
        if auto_offset_reset != "none":
            log.warning(
                "log truncation detected for %s-%s: position %s (leader epoch %s) is past "
                "the end of the leader's log for it (epoch %s ends at %s); records from %s "
                "on were lost, resuming there",
                tp.topic, tp.partition, position, state.leader_epoch, epoch, end_offset,
                end_offset,
            )  # fmt: skip
            state.seek(end_offset, epoch)
            state.validated(current_epoch)
            return False
        state.error = LogTruncationError(
            f"log truncation detected for {tp.topic}-{tp.partition}: position {position} "
            f"(leader epoch {state.leader_epoch}) is past the end of the leader's log for "
            f"it, which diverges from offset {end_offset} (epoch {epoch})",
            {tp: position},
            {tp: end_offset},
        )
        return True
    if epoch < state.leader_epoch:
        # The leader's log holds our position in an older epoch (ours is unknown to it):
        # that epoch is what the next checks and fetches must name.
        state.leader_epoch = epoch
    state.validated(current_epoch)
    return False


def _reset_timestamp(reset: str | int) -> int:
    """ListOffsets' timestamp for a reset: "earliest", "latest", a time in ms, or
    "by_duration:<duration>" (KIP-1106): that long before now, on the wall clock (record
    timestamps are wall-clock ms), computed when the reset is made as Java does. Never below
    0: a negative timestamp would ask ListOffsets for one of its special offsets."""
    if reset == "earliest":
        return EARLIEST
    if reset == "latest":
        return LATEST
    if isinstance(reset, str):
        ago_ms = int(by_duration_ago(reset).total_seconds() * 1000)
        return max(0, time.time_ns() // 1_000_000 - ago_ms)
    return reset
