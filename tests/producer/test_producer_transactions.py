"""The transactional Producer against the real broker: the wiring of
:mod:`aiokafka_ng.producer.transactions` into ``Producer`` (state machine details are
tested in tests/transactions)."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.errors import IllegalStateError, ProducerFencedError
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.transactions import (
    TransactionAbortedError,
    TransactionNotStartedError,
)
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio


async def test_commit_abort_and_context(kafka_broker: Any) -> None:
    topic = topic_name("txn")
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=topic_name("tid")
    ) as producer:
        assert producer.statistics()["transaction_state"] == "ready"
        with pytest.raises(TransactionNotStartedError):
            await producer.send(topic, b"outside")
        producer.begin_transaction()
        futs = [await producer.send(topic, b"c%d" % i, partition=0) for i in range(10)]
        await producer.commit_transaction()
        assert [f.result().offset for f in futs] == list(range(10))
        # abort: the producer stays usable. The broker wrote a COMMIT marker at offset 10:
        # it only does when the Produce requests name the transactional id.
        producer.begin_transaction()
        aborted = await producer.send(topic, b"a", partition=0)
        await producer.flush()
        assert aborted.result().offset == 11
        await producer.abort_transaction()
        async with producer.transaction():
            last = await producer.send(topic, b"ctx", partition=0)
        assert last.done() and last.exception() is None
        # the body raised: aborted, the error propagates
        with pytest.raises(RuntimeError):
            async with producer.transaction():
                doomed = await producer.send(topic, b"x", partition=0)
                raise RuntimeError("boom")
        assert doomed.done()
        if doomed.exception() is not None:
            assert isinstance(doomed.exception(), TransactionAbortedError)
        assert producer.statistics()["transaction_state"] == "ready"


async def test_second_producer_fences_the_first(kafka_broker: Any) -> None:
    # Tansu drops the connection on an EndTxn with a fenced epoch (Kafka answers
    # PRODUCER_FENCED), so on Tansu the fence is observed where it does answer: on Produce.
    topic = topic_name("fence")
    tid = topic_name("tid")
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=tid, max_block_ms=5000
    ) as first:
        first.begin_transaction()
        ok = await first.send(topic, b"1", partition=0)
        await first.flush()
        assert ok.exception() is None
        async with Producer(
            bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=tid
        ) as second:
            fenced = await first.send(topic, b"2", partition=0)
            await first.flush()
            assert fenced.exception() is not None
            if first.statistics()["transaction_state"] == "abortable_error":
                # Apache Kafka answers the Produce with INVALID_PRODUCER_EPOCH, abortable as
                # in the Java client (KIP-588); the abort's EndTxn then meets the coordinator,
                # which answers PRODUCER_FENCED: fatal.
                with pytest.raises(ProducerFencedError):
                    await first.abort_transaction()
            assert first.statistics()["transaction_state"] == "fatal_error"
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            second.begin_transaction()
            await second.send(topic, b"3", partition=0)
            await second.commit_transaction()


async def test_non_transactional_producer_refuses_transaction_calls(kafka_broker: Any) -> None:
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()
        assert producer.statistics()["transaction_state"] is None
