"""A consume-transform-produce loop whose next transaction starts while the coordinator is
still writing the previous one's markers (FakeKafka holding them, virtual time): every
transactional request is answered CONCURRENT_TRANSACTIONS until the markers are written, and
the producer asks again after 20 ms each time, so the transaction commits within 20 ms (and
jitter) of the markers being written rather than up to ``retry_backoff_max_ms`` later (see
``producer/txn_coordinator.py``)."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

ADD_PARTITIONS, TXN_OFFSET_COMMIT = 24, 28
#: The pause after CONCURRENT_TRANSACTIONS, 20 ms, +20% jitter.
STEADY_MAX = 0.024
HELD_S = 3.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@pytest.mark.parametrize("version", [1, 2])  # the cluster's transaction.version
async def test_next_transaction_commits_moments_after_the_markers_are_written(
    version: int,
) -> None:
    async with FakeKafka(brokers=3, tcp=False, transaction_version=version) as kafka:
        kafka.create_topic("in")
        kafka.create_topic("out")
        config = kafka.client_config()
        async with Producer(
            **config, transactional_id="loop", linger_ms=1, max_block_ms=60000
        ) as producer:
            async with producer.transaction():
                await producer.send("out", b"1", partition=0)
                await producer.send_offsets_to_transaction({("in", 0): 1}, "grp")
                # Its markers wait (a slow marker sender, a partition that lost its
                # leader): the commit is answered, the next transaction is not.
                kafka.transactions.hold_markers = True
            done = anyio.Event()
            first_api = ADD_PARTITIONS if version == 1 else TXN_OFFSET_COMMIT

            async def next_transaction() -> None:
                async with producer.transaction():
                    if version == 1:
                        await producer.send("out", b"2", partition=0)
                    await producer.send_offsets_to_transaction({("in", 0): 2}, "grp")
                done.set()

            before = len(kafka.received(first_api))
            async with anyio.create_task_group() as tg:
                tg.start_soon(next_transaction)
                await anyio.sleep(HELD_S)  # how long the markers wait (virtual seconds)
                assert not done.is_set()
                kafka.transactions.hold_markers = False
                kafka.transactions.catch_up()
                written = anyio.current_time()
                await done.wait()
                took = anyio.current_time() - written
        asked = kafka.received(first_api)[before:]
        gaps = [b.at - a.at for a, b in itertools.pairwise(asked)]
        # Asked again and again while the markers waited, never more than 24 ms apart
        # (AddPartitionsToTxn on version 1; TxnOffsetCommit v5, the first request of a
        # version 2 transaction that is not a Produce, there).
        assert len(asked) >= HELD_S / STEADY_MAX
        assert all(gap <= STEADY_MAX for gap in gaps), gaps
        # The commit (and, on version 2, the offsets' request) moments after the write.
        assert took <= STEADY_MAX
        assert kafka.committed("grp") == {("in", 0): 2}
