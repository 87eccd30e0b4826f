"""Hostile answers to a Metadata request, as raw frames, and a peak-RSS sampler.

Only a fake can send these (no real broker can be made to claim 3,000,000 partitions or a
2 GiB frame), so tests/net/test_hostile_broker.py and test_answer_limits.py serve them from
``FakeKafka`` as :class:`RawFrames` answers. The frames are built from bytes, not from the
codec's dataclasses: building a 3,000,000 partition answer as objects would itself cost
gigabytes in the test process, whose RSS the test measures. Metadata is answered in v12
(the tests advertise only v12 for it).
"""

from __future__ import annotations

import os
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from aiokafka_ng.protocol.messages.metadata import (
    MetadataResponseBroker,
    MetadataResponsePartition,
)
from aiokafka_ng.protocol.primitives import Writer
from aiokafka_ng.testing.fake import RawFrames

if TYPE_CHECKING:
    from aiokafka_ng.testing.fake import Received

METADATA_VERSION = 12
_I32 = struct.Struct(">i")


def _framed(body: bytes) -> bytes:
    return _I32.pack(len(body)) + body


def _head(correlation_id: int, port: int) -> Writer:
    """Response header v1 and a Metadata v12 body up to its topics array."""
    w = Writer()
    w.int32(correlation_id)
    w.uvarint(0)  # header tagged fields
    w.int32(0)  # throttle_time_ms
    w.compact_array_len(1)
    w.raw(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port).encode(12))
    w.compact_nullable_string(None)  # cluster_id
    w.int32(1)  # controller_id
    return w


def _topic_start(w: Writer, name: str, partitions: int) -> None:
    w.int16(0)
    w.compact_nullable_string(name)
    w.uuid(uuid.UUID(int=1))
    w.boolean(False)
    w.compact_array_len(partitions)


# One v12 partition entry of exactly 30 bytes: 14 fixed, replicas [1, 2], isr [1], no
# offline replicas, no tags. 3,000,000 of them: the 90 MB answer of issue 34.
PARTITION = MetadataResponsePartition(
    partition_index=7, leader_id=1, leader_epoch=0, replica_nodes=[1, 2], isr_nodes=[1]
).encode(METADATA_VERSION)
assert len(PARTITION) == 30


def many_partitions(correlation_id: int, port: int, partitions: int, topics: int = 1) -> bytes:
    """A well-formed answer: ``topics`` topics of ``partitions`` partitions each."""
    w = _head(correlation_id, port)
    w.compact_array_len(topics)
    blob = PARTITION * partitions
    for i in range(topics):
        _topic_start(w, f"t{i}", partitions)
        w.raw(blob)
        w.int32(-2147483648)  # topic_authorized_operations
        w.uvarint(0)
    w.uvarint(0)
    return _framed(bytes(w.buf))


def huge_frame(correlation_id: int, port: int) -> bytes:
    """A size prefix of 2 GiB - 1 (2**31 is negative as an int32), then a few bytes."""
    return _I32.pack(2**31 - 1) + _I32.pack(correlation_id) + b"\x00" * 64


def huge_array_count(correlation_id: int, port: int) -> bytes:
    """A 40-byte frame whose brokers array claims 2**31 - 1 elements."""
    w = Writer()
    w.int32(correlation_id)
    w.uvarint(0)
    w.int32(0)
    w.compact_array_len(2**31 - 2)  # compact: stored as n + 1
    w.raw(b"\x00" * 30)
    return _framed(bytes(w.buf))


def string_past_frame(correlation_id: int, port: int) -> bytes:
    """A topic name whose length (0x7fff0000 bytes) runs far past the end of its frame."""
    w = _head(correlation_id, port)
    w.compact_array_len(1)
    w.int16(0)
    w.uvarint(0x7FFF0000 + 1)
    w.raw(b"abc")
    return _framed(bytes(w.buf))


def garbage(correlation_id: int, port: int) -> bytes:
    """The right correlation id, then 64 KiB of random bytes."""
    body = _I32.pack(correlation_id) + os.urandom(64 * 1024)
    return _framed(body)


def wrong_correlation_id(correlation_id: int, port: int) -> bytes:
    """A well-formed answer carrying another request's correlation id."""
    return many_partitions(correlation_id + 1000, port, 1)


def raw_answer(call: Received, template: bytes, cid_shift: int = 0) -> RawFrames:
    """``template`` (a frame built for correlation id 0) as the answer to ``call``, with its
    correlation id (plus ``cid_shift``) spliced in: the template is shared, not copied, and
    the fake writes it in 1 MiB pieces, so no write buffers a copy of a big answer."""
    cid = _I32.pack(call.correlation_id + cid_shift)
    return RawFrames(template[:4], cid, memoryview(template)[8:])


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def peak_rss_growth() -> Iterator[Callable[[], int]]:
    """Sample RSS every 2 ms in a thread; yields a function giving the peak's growth over
    the RSS at entry. (ru_maxrss is a high-water mark for the whole process: an earlier
    test's peak would hide this one's.)"""
    start = rss_bytes()
    peak = start
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.002):
            peak = max(peak, rss_bytes())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: max(peak, rss_bytes()) - start
    finally:
        stop.set()
        thread.join()
