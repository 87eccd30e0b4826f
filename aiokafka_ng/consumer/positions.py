"""Where a partition with no position starts reading.

The fetcher hands the assigned partitions that have no position to one resolver task at a
time, which calls :func:`resolve_positions`: a partition that needs its committed offset
gets it from the group (OffsetFetch), and one with nothing committed -- or a reset asked
for by ``seek_to_beginning``/``seek_to_end`` or an out-of-range fetch -- is placed by
``auto_offset_reset`` through ListOffsets. A partition seeked or revoked while a lookup
was in flight keeps what the application asked for: the lookup's answer is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import EARLIEST, LATEST, OffsetsClient
from aiokafka_ng.consumer.state import PartitionState
from aiokafka_ng.errors import OffsetOutOfRangeError

__all__ = ["resolve_positions"]


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
                s.position = om.offset
                s.leader_epoch = om.leader_epoch
                s.epoch += 1
            else:
                s.reset = auto_offset_reset
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
            continue
        offset = answer[0]
        if offset < 0:  # no record at/after the timestamp: go to the end
            s.request_reset("latest")
            continue
        s.seek(offset)


def _reset_timestamp(reset: str | int) -> int:
    """ListOffsets' timestamp for a reset: "earliest", "latest", or a time in ms."""
    if reset == "earliest":
        return EARLIEST
    if reset == "latest":
        return LATEST
    assert isinstance(reset, int)
    return reset
