"""What ``Producer.send_many`` sends is what its arguments held when it returned.

``send_many`` may return before it has encoded a run (its topic's metadata is not known
yet: the run waits in the topic's queue). Before, a ``BinaryColumn`` run waiting there was
read from the caller's buffers when the metadata came, so changing them after the call
changed what was sent (1000 of 1000 records went with the new bytes), and changing a
column's offsets read out of bounds (the process died with SIGSEGV). Each test here
changes everything the caller still holds at each step -- after the column was made, after
``send_many`` returned, before the flush -- then reads the topic's log back from FakeKafka
and compares every record with what was passed. Keeping the topic unknown is done as
``test_send_many.py`` does it: the cluster creates no topic on its own
(``auto.create.topics.enable=false``), and the test creates the topic when it lets the
metadata come.
"""

from __future__ import annotations

import uuid
from array import array
from typing import Any

import pytest

from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol import speedups
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio

N = 1000
PARTITIONS = 4


def _column_buffers(items: list[bytes]) -> tuple[bytearray, bytearray, bytearray]:
    """Arrow-layout buffers of ``items`` (every bit valid) that the caller can change."""
    offs = array("i", [0])
    for item in items:
        offs.append(offs[-1] + len(item))
    bits = bytearray(b"\xff" * ((len(items) + 7) // 8))
    return bytearray(offs.tobytes()), bytearray(b"".join(items)), bits


class Caller:
    """A run as one form of ``send_many`` argument, and ways to change it afterwards."""

    def __init__(self, form: str, items: list[bytes]) -> None:
        self.form = form
        self.buffers: tuple[bytearray, bytearray, bytearray] | None = None
        self.arg: Any
        if form == "list":
            self.arg = list(items)
        elif form == "bytearray-items":
            self.arg = [bytearray(item) for item in items]
        else:
            assert speedups.BinaryColumn is not None, "the C kernel is not built"
            self.buffers = _column_buffers(items)
            offsets, data, validity = self.buffers
            self.arg = speedups.BinaryColumn(offsets, data, validity, 0, len(items))
            # After the column was made, before it is sent: new offsets (a negative one,
            # one past the data, decreasing ones) and a cleared bitmap.
            offsets[0:4] = (-100_000).to_bytes(4, "little", signed=True)
            offsets[4:8] = (1 << 30).to_bytes(4, "little")
            offsets[8:] = b"\x01" * (len(offsets) - 8)
            validity[:] = bytes(len(validity))

    def scribble(self, tag: bytes) -> None:
        """Change every byte and every slot the caller can still reach."""
        if self.form == "list":
            self.arg[:] = [tag * 3] * (len(self.arg) + 5)
        elif self.form == "bytearray-items":
            for item in self.arg:
                item[:] = tag * (len(item) + 2)
        else:
            assert self.buffers is not None
            offsets, data, validity = self.buffers
            data[:] = tag * len(data)
            offsets[:] = b"\x80" * len(offsets)
            validity[:] = bytes(len(validity))
            with pytest.raises(BufferError):  # the column still holds the data buffer
                data.extend(tag * 100)


@pytest.mark.parametrize("form", ["list", "bytearray-items", "column"])
@pytest.mark.parametrize("metadata", ["known", "unknown"])
@pytest.mark.parametrize("keyed", [True, False])
async def test_changes_after_send_many_returns_change_nothing_sent(
    form: str, metadata: str, keyed: bool
) -> None:
    topic = f"snap-{uuid.uuid4().hex[:10]}"
    values = [b"value-%04d" % i for i in range(N)]
    keys = [b"key-%d" % (i % 7) for i in range(N)]
    async with (
        FakeKafka(tcp=False, auto_create_topics=False) as kafka,
        Producer(**kafka.client_config(), batch_size=4096) as p,
    ):
        if metadata == "known":
            kafka.create_topic(topic, partitions=PARTITIONS)
            await p.partitions_for(topic)
        vals, ks = Caller(form, values), Caller(form, keys) if keyed else None
        run = await p.send_many(topic, vals.arg, keys=None if ks is None else ks.arg)
        if metadata == "unknown":
            # Returned with nothing encoded (there is no partition to encode for): the
            # run waits whole in the topic's queue.
            assert not run.done()
        vals.scribble(b"V")
        if ks is not None:
            ks.scribble(b"K")
        if metadata == "unknown":
            kafka.create_topic(topic, partitions=PARTITIONS)
        vals.scribble(b"W")  # and again just before the flush
        await p.flush()
        metas = await run
        assert run.failed == 0 and len(metas) == N
        sent = {
            (part, r.offset): (r.key, r.value)
            for part in range(PARTITIONS)
            for r in kafka.records(topic, part)
        }
    assert len(sent) == N
    assert [sent[m.partition, m.offset] for m in metas] == [
        (keys[i] if keyed else None, values[i]) for i in range(N)
    ]
