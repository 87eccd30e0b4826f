"""What a Produce answer, or a request that failed, means for each of its batches.

Theory of operation
-------------------
Deciding and doing are apart. :func:`response_outcomes` and :func:`error_outcomes` are pure:
they read the answer, each batch's attempts and age and -- with idempotence -- whether it
holds the next sequence the broker expects, and return the outcomes in the order they are
to be carried out; they change nothing. The engine carries them out
(``ProducerEngine.apply``: the accumulator, the idempotence state, and the cluster's metadata
through its signals), so every rule below is one place, testable on a canned answer with no
sender, connection or clock (``tests/producer/test_settle.py``).

Every batch of a request gets exactly one final outcome:

* success, or DUPLICATE_SEQUENCE_NUMBER (written by an earlier attempt): :class:`Delivered`
  (Kafka repeats the original offset there; Tansu answers -1, reported as -1);
* MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE: :class:`Split` -- into two halves re-queued at
  the head, as the Java client does; a batch of one record cannot be split and gets the
  error's outcomes instead (``fallback``);
* OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_EPOCH /
  PRODUCER_FENCED with idempotence: the batch was not written, so it is retried; a real gap
  (the out-of-order batch is the next expected one, or the first unresolved one of its
  partition: ``IdempotenceState.gap_at``) or lost/fenced producer state also asks for a
  new producer id first (:class:`ResetProducerId`, KIP-360);
* a retriable error (connection lost, timeout, NOT_LEADER...), fewer attempts than
  ``retries`` and younger than ``delivery_timeout_ms``: :class:`Requeue` (re-queued at the
  head after the backoff); ``invalid_metadata`` errors also ask for a metadata refresh
  (:class:`Refresh`) and, when the answer names the partition's current leader (KIP-951),
  :class:`NewLeader` before anything else;
* anything else: :class:`Failed` -- with a ``KafkaTimeoutError`` naming the last error when
  a retriable one came after ``delivery_timeout_ms``;
* a partition the answer leaves out: as a retriable error ("no response").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from aiokafka_ng.cluster.metadata import BrokerMetadata
from aiokafka_ng.errors import KafkaError, KafkaTimeoutError
from aiokafka_ng.protocol.errors import error_for_code
from aiokafka_ng.protocol.messages.produce import ProduceResponse

if TYPE_CHECKING:
    from aiokafka_ng.producer.batch import ProducerBatch
    from aiokafka_ng.producer.idempotence import IdempotenceState

__all__ = [
    "Delivered",
    "Failed",
    "NewLeader",
    "Outcome",
    "Refresh",
    "Requeue",
    "ResetProducerId",
    "Rules",
    "Split",
    "error_outcomes",
    "response_outcomes",
]

_DUPLICATE_SEQUENCE = 46
_OUT_OF_ORDER_SEQUENCE = 45
#: The broker lost or fenced our producer state, or saw a sequence gap: not written.
_PRODUCER_STATE = (_OUT_OF_ORDER_SEQUENCE, 59, 47, 90)  # + UNKNOWN_PRODUCER_ID, epoch, fenced
_TOO_LARGE = (10, 18)  # MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE


class Delivered(NamedTuple):
    batch: ProducerBatch
    base_offset: int
    log_append_time: int
    log_start_offset: int


class Split(NamedTuple):
    batch: ProducerBatch
    #: What happens instead when the batch holds one record.
    fallback: tuple[Outcome, ...]


class Requeue(NamedTuple):
    batch: ProducerBatch


class Failed(NamedTuple):
    batch: ProducerBatch
    exc: BaseException


class NewLeader(NamedTuple):
    topic: str
    partition: int
    leader: int
    epoch: int
    endpoint: BrokerMetadata | None


class Refresh(NamedTuple):
    topic: str


class ResetProducerId(NamedTuple):
    code: int
    batch: ProducerBatch
    exc: KafkaError


Outcome = Delivered | Split | Requeue | Failed | NewLeader | Refresh | ResetProducerId


class Rules(NamedTuple):
    """What the decisions read besides the answer: the producer's settings and, with
    idempotence, its sequence state (read only)."""

    retries: int
    delivery_timeout: float  # seconds
    idem: IdempotenceState | None


def error_outcomes(
    batch: ProducerBatch, exc: KafkaError, code: int | None, now: float, rules: Rules
) -> list[Outcome]:
    """The outcomes of ``batch`` failing with ``exc`` (``code``: the broker's error code,
    None for a request that failed as a whole)."""
    out: list[Outcome] = []
    idem = rules.idem
    if idem is not None and code in _PRODUCER_STATE:
        if code != _OUT_OF_ORDER_SEQUENCE or idem.gap_at(batch.pq, batch):
            out.append(ResetProducerId(code, batch, exc))
        retriable = True  # the batch itself was not written
    else:
        retriable = exc.retriable or exc.invalid_metadata
    if exc.invalid_metadata:
        out.append(Refresh(batch.topic))
    expired = now - batch.created >= rules.delivery_timeout
    if retriable and batch.attempts < rules.retries and not expired:
        out.append(Requeue(batch))
    elif expired and retriable:
        out.append(
            Failed(
                batch,
                KafkaTimeoutError(
                    f"{batch.topic}-{batch.partition}: delivery_timeout_ms passed "
                    f"(last error: {exc})"
                ),
            )
        )
    else:
        out.append(Failed(batch, exc))
    return out


def response_outcomes(
    response: ProduceResponse, batches: Sequence[ProducerBatch], now: float, rules: Rules
) -> list[Outcome]:
    """The outcomes of one Produce answer for the ``batches`` of its request."""
    index = {(b.topic, b.partition): b for b in batches}
    endpoints = {
        e.node_id: BrokerMetadata(e.node_id, e.host, e.port, e.rack)
        for e in response.node_endpoints
    }
    out: list[Outcome] = []
    for topic in response.responses:
        for part in topic.partition_responses:
            batch = index.pop((topic.name, part.index), None)
            if batch is None:
                continue  # not ours (or answered twice): nothing to settle
            code = part.error_code
            if code == 0 or code == _DUPLICATE_SEQUENCE:
                offsets = (part.base_offset, part.log_append_time_ms, part.log_start_offset)
                out.append(Delivered(batch, *offsets))
                continue
            err = error_for_code(code)
            exc = err(part.error_message or err.message or f"error code {code}")
            if code in _TOO_LARGE:
                out.append(Split(batch, tuple(error_outcomes(batch, exc, code, now, rules))))
                continue
            leader = part.current_leader
            if err.invalid_metadata and leader.leader_id >= 0:
                out.append(
                    NewLeader(
                        topic.name,
                        part.index,
                        leader.leader_id,
                        leader.leader_epoch,
                        endpoints.get(leader.leader_id),
                    )
                )
            out.extend(error_outcomes(batch, exc, code, now, rules))
    for batch in index.values():
        # The broker did not answer for this partition: treat as a retriable failure.
        silent = KafkaTimeoutError("no response for this partition")
        out.extend(error_outcomes(batch, silent, None, now, rules))
    return out
