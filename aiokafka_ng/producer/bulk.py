"""The bulk path behind :meth:`Producer.send_batch`.

A run of records for one topic -- values, optional keys, one optional partition, one
timestamp, and the headers they all carry (none, or a traced call's trace context:
``aiokafka_ng.tracing``) -- is validated and charged to ``buffer_memory`` per chunk and
handed to the engine chunk by chunk (``ProducerEngine.add_run``), which groups it by
partition (keeping send order within each) and appends each group with one builder call per
batch. What ``send()`` promises holds record by record: nothing waits for metadata (a
topic without it queues the records in order), an oversize record's future fails alone,
order per partition is send order, and the only wait is for memory, at most
``max_block_ms`` per chunk. When memory does not free up in time, the records not yet
queued fail with ``BufferExhaustedError`` in their futures (those already queued go on):
the caller still gets one future per record.

:meth:`Producer.send_many` runs the same path with one :class:`BatchDelivery` standing in
for every record's future: each batch entry is that object, and the record's position in
the run goes beside it (``ProducerBatch.positions``), so failures and offsets are still
known per record. A chunk that must wait for its topic's metadata waits as one entry of the
topic's queue and takes this same path when the metadata arrives. Where records go one by one
(a custom partitioner) each gets a member future that counts into the run.

Cancellation
------------
A run is queued chunk by chunk, and a chunk is queued whole or not at all: its memory is
reserved first (the only wait, besides the checkpoint after each chunk) and then it is
placed in one synchronous step. So wherever the caller is cancelled -- waiting for memory
before the first chunk or between two, or at a checkpoint -- the run splits cleanly into
the chunks already queued and the records not yet queued:

* the records queued go on and are delivered (or fail) as usual: they may already be on
  the wire, and the Java client does not take an appended record back either. In a
  transaction they are part of it;
* the records not queued were never sent. With ``send_many`` they are still counted by the
  run's :class:`BatchDelivery` -- which the accumulator holds for the records it did queue,
  and ``flush()`` and a transaction's commit wait for -- so they are *withdrawn* from it
  (``future.withdraw``): decided at once with an error saying they were not
  queued, without which the run, and every ``flush()`` after it, would wait forever. A
  commit does not count them (``queued_error``): as in the Java client, a record whose send
  was interrupted before it was appended is simply not part of the transaction -- abort it
  if the run must be all or nothing. With ``send_batch`` they have futures of their own
  that nothing else holds; they are dropped with the call.
* memory: a wait for memory that is cancelled gives back what it had gathered
  (``MemoryPool.reserve``), and a queued chunk's memory comes back with its batches.

The same holds when the producer is closed while a chunk waits for memory (the call
raises; the rest of the run is withdrawn). ``send()`` is the one-record case: cancelled
while it waits for memory, the record is not queued; at its checkpoint, it is.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Awaitable, Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any, cast

import anyio.lowlevel

from aiokafka_ng.errors import BufferExhaustedError, KafkaError
from aiokafka_ng.producer.batch import QueuedRun
from aiokafka_ng.producer.future import (
    BatchDelivery,
    Delivery,
    DeliveryFuture,
    withdraw,
)
from aiokafka_ng.producer.intake import (
    RECORD_OVERHEAD,
    Intake,
    ProducerRecord,
    as_bytes,
)
from aiokafka_ng.producer.runs import record_sizes
from aiokafka_ng.protocol.speedups import BinaryColumn

__all__ = ["chunk_end", "send_batch", "send_run"]

#: Records per memory reservation: big enough that the reservation is noise, small enough
#: that a run larger than the buffer streams through it.
_CHUNK = 4096


def _bytes_list(items: list[Any], name: str) -> list[bytes | None]:
    out: list[bytes | None] = items
    for i, item in enumerate(items):
        if item is not None and item.__class__ is not bytes:
            if out is items:
                out = list(items)
            out[i] = as_bytes(item, name)
    return out


#: ``Producer.send`` (records with headers, a partition or a timestamp of their own).
SendOne = Callable[..., Awaitable[DeliveryFuture]]

#: Headers every record of a run carries (the producer's own list: a traced call's trace
#: context), or None.
RunHeaders = list[tuple[str, bytes | None]] | None


def _headers_charge(headers: RunHeaders) -> int:
    """What a run's headers add to each record's memory charge: ``send()``'s rule for a
    record's headers."""
    if not headers:
        return 0
    return sum(len(k) + (0 if v is None else len(v)) + 10 for k, v in headers)


async def send_batch(
    intake: Intake,
    send: SendOne,
    topic: str,
    records: Iterable[Any],
    keys: Iterable[Any] | None,
    partition: int | None,
    timestamp_ms: int | None,
    headers: RunHeaders = None,
) -> list[DeliveryFuture]:
    """:meth:`Producer.send_batch`: ProducerRecords with headers, a partition or a
    timestamp of their own go record by record through ``send()`` (which traces each, when
    tracing is on); the rest in runs, every record with ``headers``."""
    if not intake.running:
        raise intake.stopped()
    items = list(records)
    key_list = None if keys is None else list(keys)
    if any(isinstance(r, ProducerRecord) for r in items):
        if key_list is not None:
            raise TypeError("send_batch: keys= goes with plain values, not ProducerRecords")
        if all(
            isinstance(r, ProducerRecord)
            and not r.headers
            and r.partition is None
            and r.timestamp_ms is None
            for r in items
        ):
            key_list = [r.key for r in items]
            items = [r.value for r in items]
        else:
            out: list[DeliveryFuture] = []
            for rec in items:
                if not isinstance(rec, ProducerRecord):
                    rec = ProducerRecord(rec)
                out.append(
                    await send(
                        topic,
                        rec.value,
                        rec.key,
                        partition if rec.partition is None else rec.partition,
                        timestamp_ms if rec.timestamp_ms is None else rec.timestamp_ms,
                        rec.headers,
                    )
                )
            return out
    futures = await send_run(intake, topic, items, key_list, partition, timestamp_ms, headers)
    return cast(list[DeliveryFuture], futures)  # one DeliveryFuture per record here


async def send_many(
    intake: Intake,
    topic: str,
    values: Iterable[Any],
    keys: Iterable[Any] | None,
    partition: int | None,
    timestamp_ms: int | None,
    headers: RunHeaders = None,
) -> BatchDelivery:
    """:meth:`Producer.send_many`: ``send_run`` with one :class:`BatchDelivery` for the
    whole run instead of a future per record."""
    if not intake.running:
        raise intake.stopped()
    vals = _run_items(values)
    ks = None if keys is None else _run_items(keys)
    futures = await send_run(
        intake, topic, vals, ks, partition, timestamp_ms, headers, together=True
    )
    if futures:
        outcome = futures[0]
        assert isinstance(outcome, BatchDelivery)
        return outcome
    return BatchDelivery(topic, 0, intake.loop, 0)


def _run_items(items: Iterable[Any]) -> Sequence[Any]:
    """A run's values or keys as a list of their own, or a :class:`BinaryColumn` as it is
    (the C kernel reads its Arrow buffers in place: no object per record)."""
    if BinaryColumn is not None and items.__class__ is BinaryColumn:
        return cast(Sequence[Any], items)
    return list(items)


async def send_run(
    intake: Intake,
    topic: str,
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    partition: int | None,
    timestamp_ms: int | None,
    headers: RunHeaders = None,
    *,
    together: bool = False,
) -> list[Delivery[Any]]:
    if keys is not None and len(keys) != len(values):
        raise ValueError(f"send_batch: {len(keys)} keys for {len(values)} values")
    if intake.value_ser is not None:
        values = [intake.value_ser(v) for v in values]
    if keys is not None and intake.key_ser is not None:
        keys = [intake.key_ser(k) for k in keys]
    vals: Sequence[bytes | None] = values
    ks: Sequence[bytes | None] | None = keys
    # The run's headers are the same on every record: charged in the per-record overhead
    # (nothing per record when there are none).
    overhead = RECORD_OVERHEAD + _headers_charge(headers)
    sizes = record_sizes(values, keys, overhead)
    if sizes is None:
        # Some key or value is not bytes: convert (bytearray, memoryview) or refuse it.
        vals = _bytes_list(list(values), "value")
        ks = None if keys is None else _bytes_list(list(keys), "key")
        sizes = record_sizes(vals, ks, overhead)
        assert sizes is not None
    part, timestamp_ms = intake.admit(topic, partition, timestamp_ms)
    txn = intake.txn
    loop = intake.loop
    futures: list[Delivery[Any]]
    shared: BatchDelivery | None = None
    if together:
        # One object, once per record: the accumulator counts entries, not objects.
        shared = BatchDelivery(topic, timestamp_ms, loop, len(vals))
        futures = [shared] * len(vals)
        if txn is not None:
            txn.track(shared)  # the commit checks it: every record's outcome
    else:
        futures = [DeliveryFuture(topic, timestamp_ms, loop) for _ in vals]
    max_record = intake.max_record
    engine = intake.engine
    if max(sizes, default=0) > max_record:
        keep = []
        for i, size in enumerate(sizes):
            if size > max_record:
                engine.refuse(futures[i], intake.too_large(size), i)
            else:
                keep.append(i)
        positions: list[int] | None = keep  # run index -> index in the caller's values
        run_vals: Sequence[bytes | None] = [vals[i] for i in keep]
        run_keys: Sequence[bytes | None] | None = None if ks is None else [ks[i] for i in keep]
        run_sizes = [sizes[i] for i in keep]
        run_futs = [futures[i] for i in keep]
    else:
        positions = None
        run_vals, run_keys, run_sizes, run_futs = vals, ks, sizes, futures
    # Chunks: at most _CHUNK records and a quarter of the buffer, so a run larger than
    # buffer_memory streams through it instead of asking for more than exists.
    limit = max(1, engine.buffer_memory // 4)
    lo = 0
    count = len(run_vals)
    # ends[i]: the bytes of records [0, i) -- a chunk's end is found by bisection, not by a
    # loop over its records. Built only once a chunk of _CHUNK records would be too large
    # (a sum costs no int object per record; the prefix sums do).
    ends: list[int] | None = None
    try:
        while lo < count:
            hi = min(count, lo + _CHUNK)
            if ends is not None or sum(run_sizes[lo:hi]) > limit:
                if ends is None:
                    ends = [0, *accumulate(run_sizes)]
                hi = chunk_end(ends, lo, limit)
            c_futs = run_futs[lo:hi]
            # Positions in the caller's run of this chunk's records (a BatchDelivery keeps
            # them).
            c_pos: list[int] | None = None
            if shared is not None:
                c_pos = list(range(lo, hi)) if positions is None else positions[lo:hi]
            try:
                await _queue_chunk(
                    intake, topic, part, timestamp_ms,
                    None if run_keys is None else run_keys[lo:hi],
                    run_vals[lo:hi], run_sizes[lo:hi], c_futs, shared, c_pos, headers,
                )  # fmt: skip
            except BufferExhaustedError as exc:
                rest = range(lo, count) if positions is None else positions[lo:]
                for fut, pos in zip(run_futs[lo:], rest, strict=True):
                    engine.refuse(fut, exc, pos)
                break
            # Queued: no await between placing the chunk and these lines (see Cancellation).
            if txn is not None and shared is None:
                for fut in c_futs:
                    txn.track(fut)
            lo = hi
            # Let the senders take what filled up before queueing more (as send() does).
            await anyio.lowlevel.checkpoint()
    except BaseException as exc:
        # Cancelled (or the producer closed) with records [lo, count) not queued: see
        # Cancellation above. Only a run's BatchDelivery counts them.
        if shared is not None and lo < count:
            withdraw(
                shared,
                range(lo, count) if positions is None else positions[lo:],
                _not_queued(exc),
            )
        raise
    return futures


def _not_queued(exc: BaseException) -> KafkaError:
    """The error of a run's records that were not queued because ``exc`` ended the call."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return KafkaError("send_many was cancelled before the record was queued; it was not sent")
    err = KafkaError(f"send_many stopped before the record was queued ({exc!r}); it was not sent")
    err.__cause__ = exc
    return err


def chunk_end(ends: list[int], lo: int, limit: int) -> int:
    """End of the chunk starting at record ``lo``: as many records as fit in ``limit``
    bytes, at most ``_CHUNK``, at least one. ``ends[i]`` is the size of records [0, i)."""
    count = len(ends) - 1
    return max(lo + 1, min(count, lo + _CHUNK, bisect_right(ends, ends[lo] + limit) - 1))


async def _queue_chunk(
    intake: Intake,
    topic: str,
    partition: int,
    ts: int,
    keys: Sequence[bytes | None] | None,
    values: Sequence[bytes | None],
    sizes: list[int],
    futures: list[Delivery[Any]],
    shared: BatchDelivery | None,
    positions: list[int] | None,
    headers: RunHeaders,
) -> None:
    engine = intake.engine
    extra = engine.waiting_charge(topic)
    if extra:
        sizes = [s + extra for s in sizes]
    total = sum(sizes)
    if not engine.try_reserve(total):
        await engine.reserve(total, intake.max_block_s)
        if not intake.running:
            engine.release(total)
            raise intake.stopped()
    # Placed at once, or -- behind the topic's metadata, or records already waiting for
    # it -- queued as one entry and placed whole, in its turn, when the metadata comes.
    engine.add_run(
        topic, QueuedRun(partition, ts, keys, values, sizes, futures, shared, positions, headers)
    )
