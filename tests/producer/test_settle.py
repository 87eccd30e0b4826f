"""The settling rules as pure functions: canned answers in, outcomes out, nothing changed.

``producer/settle.py`` decides what each batch of a request gets; the sender only carries
it out (tests/producer/test_sender_outcomes.py checks the carrying out on a real
accumulator). No broker can be made to answer with these codes on demand, so the answers
are built here, exactly as a broker would send them.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.cluster.metadata import BrokerMetadata
from aiokafka_ng.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    TopicAuthorizationFailedError,
    UnknownProducerIdError,
)
from aiokafka_ng.producer.batch import PartitionQueue, ProducerBatch
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.settle import (
    Delivered,
    Failed,
    NewLeader,
    Refresh,
    Requeue,
    ResetProducerId,
    Rules,
    Split,
    error_outcomes,
    response_outcomes,
)
from aiokafka_ng.protocol.messages.produce import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)

NOW = 100.0
RULES = Rules(retries=3, delivery_timeout=30.0, idem=None)


def batch(partition: int = 0, *, attempts: int = 0, created: float = NOW - 1) -> ProducerBatch:
    b = ProducerBatch(PartitionQueue("t", partition), None, created)  # type: ignore[arg-type]
    b.attempts = attempts
    return b


def answer(*parts: PartitionProduceResponse, endpoints: Any = ()) -> ProduceResponse:
    return ProduceResponse(
        responses=[TopicProduceResponse(name="t", partition_responses=list(parts))],
        node_endpoints=list(endpoints),
    )


def part(index: int, code: int, **kw: Any) -> PartitionProduceResponse:
    return PartitionProduceResponse(index=index, error_code=code, **kw)


def kinds(outcomes: list[Any]) -> list[type]:
    return [type(o) for o in outcomes]


def test_success_and_duplicate_are_delivered_with_the_answers_offsets() -> None:
    b0, b1 = batch(0), batch(1)
    out = response_outcomes(
        answer(
            part(0, 0, base_offset=40, log_append_time_ms=777, log_start_offset=12),
            part(1, 46, base_offset=-1),  # DUPLICATE_SEQUENCE_NUMBER (Tansu: offset -1)
        ),
        [b0, b1],
        NOW,
        RULES,
    )
    assert out == [Delivered(b0, 40, 777, 12), Delivered(b1, -1, -1, -1)]


def test_not_leader_moves_the_leader_refreshes_and_retries_in_that_order() -> None:
    b = batch(1)
    resp = answer(
        part(1, 6, current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=9)),
        endpoints=[NodeEndpoint(node_id=2, host="127.0.0.1", port=2)],
    )
    out = response_outcomes(resp, [b], NOW, RULES)
    assert out == [
        NewLeader("t", 1, 2, 9, BrokerMetadata(2, "127.0.0.1", 2, None)),
        Refresh("t"),
        Requeue(b),
    ]
    # Without a current-leader hint: refresh and retry only.
    assert kinds(response_outcomes(answer(part(1, 6)), [b], NOW, RULES)) == [Refresh, Requeue]


def test_retries_stop_at_the_limit_with_the_last_error() -> None:
    b = batch(attempts=3)
    (failed,) = error_outcomes(b, KafkaConnectionError("cut"), None, NOW, RULES)
    assert isinstance(failed, Failed) and isinstance(failed.exc, KafkaConnectionError)
    below = batch(attempts=2)
    assert error_outcomes(below, KafkaConnectionError("x"), None, NOW, RULES) == [Requeue(below)]


def test_a_retriable_error_after_the_delivery_timeout_fails_as_a_timeout() -> None:
    old = batch(created=NOW - 30.0)  # exactly delivery_timeout old: expired
    (failed,) = error_outcomes(old, KafkaConnectionError("cut"), None, NOW, RULES)
    assert isinstance(failed, Failed) and isinstance(failed.exc, KafkaTimeoutError)
    assert "delivery_timeout_ms passed" in str(failed.exc) and "cut" in str(failed.exc)
    # A fatal error stays itself, however old the batch.
    (fatal,) = error_outcomes(old, TopicAuthorizationFailedError("no"), 29, NOW, RULES)
    assert isinstance(fatal, Failed) and isinstance(fatal.exc, TopicAuthorizationFailedError)


def test_a_fatal_code_fails_the_batch_at_once() -> None:
    b = batch()
    (failed,) = response_outcomes(answer(part(0, 29)), [b], NOW, RULES)
    assert isinstance(failed, Failed) and failed.batch is b
    assert isinstance(failed.exc, TopicAuthorizationFailedError)


@pytest.mark.parametrize("code", [10, 18])  # MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE
def test_too_large_splits_and_falls_back_to_failing(code: int) -> None:
    b = batch()
    (split,) = response_outcomes(answer(part(0, code)), [b], NOW, RULES)
    assert isinstance(split, Split) and split.batch is b
    (fallback,) = split.fallback
    assert isinstance(fallback, Failed) and fallback.batch is b
    assert not fallback.exc.retriable  # type: ignore[attr-defined]
    if code == 10:
        assert isinstance(fallback.exc, MessageSizeTooLargeError)


def test_a_partition_left_out_of_the_answer_is_retried() -> None:
    answered, silent = batch(0), batch(1)
    out = response_outcomes(answer(part(0, 0, base_offset=5)), [answered, silent], NOW, RULES)
    assert out == [Delivered(answered, 5, -1, -1), Requeue(silent)]


def test_an_answer_for_a_partition_not_in_the_request_is_ignored() -> None:
    b = batch(0)
    out = response_outcomes(answer(part(3, 0), part(0, 0, base_offset=1)), [b], NOW, RULES)
    assert out == [Delivered(b, 1, -1, -1)]


def idempotent(last_acked: int, base_sequence: int, attempts: int = 0) -> tuple[Any, Rules]:
    b = batch(attempts=attempts)
    b.pq.last_acked = last_acked
    b.base_sequence = base_sequence
    return b, Rules(retries=3, delivery_timeout=30.0, idem=IdempotenceState())


def test_out_of_order_resets_only_when_nothing_ahead_can_fill_the_gap() -> None:
    nxt, rules = idempotent(last_acked=9, base_sequence=10)
    out = response_outcomes(answer(part(0, 45)), [nxt], NOW, rules)
    assert kinds(out) == [ResetProducerId, Requeue] and out[0].code == 45  # type: ignore[union-attr]
    # Behind an earlier batch still unresolved (its retry may fill the gap): retry only.
    behind, rules = idempotent(last_acked=9, base_sequence=13)
    earlier = batch()
    earlier.base_sequence = 10
    behind.pq.unresolved[:] = [earlier, behind]
    assert response_outcomes(answer(part(0, 45)), [behind], NOW, rules) == [Requeue(behind)]
    # The first unresolved batch, yet not next: the partition is already past it (a later
    # batch of ours got in first -- a broker takes any first sequence from a producer it
    # has no state for), so no retry under this producer id can ever fit: reset.
    passed, rules = idempotent(last_acked=333, base_sequence=0)
    passed.pq.unresolved[:] = [passed]
    out = response_outcomes(answer(part(0, 45)), [passed], NOW, rules)
    assert kinds(out) == [ResetProducerId, Requeue]


@pytest.mark.parametrize("code", [59, 47, 90])
def test_lost_or_fenced_producer_state_resets_and_retries(code: int) -> None:
    b, rules = idempotent(last_acked=0, base_sequence=50)
    out = response_outcomes(answer(part(0, code)), [b], NOW, rules)
    assert kinds(out) == [ResetProducerId, Requeue]
    if code == 59:
        assert isinstance(out[0].exc, UnknownProducerIdError)  # type: ignore[union-attr]
    # Out of attempts: still reset (the state is lost either way), and the batch fails.
    b, rules = idempotent(last_acked=0, base_sequence=50, attempts=3)
    assert kinds(response_outcomes(answer(part(0, code)), [b], NOW, rules)) == [
        ResetProducerId,
        Failed,
    ]


def test_without_idempotence_the_producer_state_codes_are_plain_errors() -> None:
    b = batch()
    out = response_outcomes(answer(part(0, 59)), [b], NOW, RULES)
    assert ResetProducerId not in kinds(out)


def test_deciding_changes_nothing() -> None:
    b, rules = idempotent(last_acked=9, base_sequence=10, attempts=1)
    fields = {name: getattr(b, name) for name in ProducerBatch.__slots__}
    pq_fields = {name: getattr(b.pq, name) for name in PartitionQueue.__slots__}
    for code in (0, 6, 10, 29, 45, 59):
        response_outcomes(answer(part(0, code)), [b], NOW, rules)
    error_outcomes(b, NotLeaderForPartitionError("x"), 6, NOW, rules)
    assert {name: getattr(b, name) for name in ProducerBatch.__slots__} == fields
    assert {name: getattr(b.pq, name) for name in PartitionQueue.__slots__} == pq_fields
    assert rules.idem is not None and rules.idem.resets == 0 and rules.idem.ready is False
