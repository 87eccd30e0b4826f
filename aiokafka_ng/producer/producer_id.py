"""The producer id and epoch: one owner for idempotent and transactional producers.

Theory of operation
-------------------
:class:`ProducerIdOwner` takes the producer's engine in its constructor and is the only code
that gives the engine's :class:`IdempotenceState` (producer id, epoch, and the sequence rules
that read them) a producer id. Replacing the id is always the same three steps:

1. Wait until no batch is in flight (:meth:`ProducerIdOwner.wait_idle`, the engine's
   ``wait_nothing_in_flight``). A batch on the wire holds a sequence of the old id; its
   answer must be settled (written, a duplicate, or a hole that asks for a reset) before
   sequences are thrown away, or a late answer would be read against the new id's
   sequences. The engine looks again at the end of every request, which is the only moment
   the flight can shrink to empty with an answer in hand.
2. Ask for the new id/epoch. *How* is the caller's, an :data:`Ask` given the current id
   and epoch: :func:`idempotent_ask` for a producer without a transactional id (always a
   fresh id, see ``idempotence.py`` for why), the transaction coordinator's InitProducerId
   (fencing at init, KIP-360's epoch bump after an abort) for a transactional one.
3. Apply it (:meth:`ProducerIdOwner.apply`, the engine's ``new_producer_id``): every
   partition restarts at sequence 0, queued retries lose their old sequence (re-stamped at
   their next drain), the state takes the id (drain resumes) and the senders are woken.

*When* is the caller's too. An idempotent producer runs :meth:`ProducerIdOwner.run` as a
background task: an id at start, and a new one each time the idempotence state requests a
reset (a sequence gap, UNKNOWN_PRODUCER_ID, a batch that failed for good holding a sequence:
the engine's ``producer_id_wanted`` signal, routed to
:meth:`ProducerIdOwner.renewal_requested`), every error retried while the producer runs
(the shared ``retrying`` driver).
A transactional producer's state machine (``transactions.py``) calls
:meth:`ProducerIdOwner.renew` itself at init and for the epoch bump after an abort that left
a sequence hole, and judges the errors (fenced: fatal; timed out: try again); transactions
v2's EndTxn answers the next epoch itself, which goes straight to :meth:`apply`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

import anyio

from aiokafka_ng.cluster.retry import ANY, ONCE, Retry, RetryState, retrying
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.errors import error_for_code
from aiokafka_ng.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)

if TYPE_CHECKING:
    from aiokafka_ng.cluster import ClusterClient
    from aiokafka_ng.net.backoff import ExponentialBackoff
    from aiokafka_ng.producer.engine import ProducerEngine
    from aiokafka_ng.producer.idempotence import IdempotenceState

__all__ = ["Ask", "ProducerIdOwner", "idempotent_ask"]

#: How to get a new producer id: given the current (id, epoch) -- (-1, -1) before the
#: first -- return the new (id, epoch).
Ask = Callable[[int, int], Awaitable[tuple[int, int]]]

#: The idempotent producer's InitProducerId is retried whatever the error: it keeps trying
#: while the producer runs.
_EVERY_ERROR = Retry(every_error=True)


def idempotent_ask(cluster: ClusterClient) -> Ask:
    """InitProducerId without a transactional id, to any broker: always a new producer id
    (-1/-1), which every broker accepts (``idempotence.py`` says why not a local bump)."""

    async def ask(producer_id: int, epoch: int) -> tuple[int, int]:
        if not cluster.ready:
            await cluster.wait_ready()  # started without the cluster: no point yet
        # Once to any broker: the owner's loop below retries, whatever the error.
        response = await cluster.call(
            InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout_ms=60000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            ANY,
            retry=ONCE,
            check=_checked,
        )
        return response.producer_id, response.producer_epoch

    return ask


def _checked(response: InitProducerIdResponse) -> InitProducerIdResponse:
    if response.error_code:
        err = error_for_code(response.error_code)
        raise err(f"InitProducerId failed: {err.__name__}")
    return response


class ProducerIdOwner:
    """Gets, holds and renews a producer's id and epoch (see the module docstring)."""

    __slots__ = ("_renewal", "engine", "idem", "label", "level", "log")

    def __init__(
        self,
        engine: ProducerEngine,
        *,
        label: str,
        log: logging.Logger,
        level: int = logging.DEBUG,
    ) -> None:
        """``engine``: whose idempotence state this owner gives ids to; ``label``, ``log``
        and ``level``: who we are in log lines ("producer", "transaction 'tid'"), on whose
        logger, and the level of the line a new producer id gets."""
        assert engine.idem is not None, "a producer id owner without idempotence"
        self.engine = engine
        self.idem: IdempotenceState = engine.idem
        self.label = label
        self.log = log
        self.level = level
        # Made by the task that waits on it (an anyio Event needs a running loop).
        self._renewal: anyio.Event | None = None

    def __repr__(self) -> str:
        i = self.idem
        return f"<ProducerIdOwner {self.label} pid={i.producer_id} epoch={i.epoch} ready={i.ready}>"

    @property
    def producer_id(self) -> int:
        return self.idem.producer_id

    @property
    def epoch(self) -> int:
        return self.idem.epoch

    def renewal_requested(self) -> None:
        """The idempotence state asked for a new id (the engine's ``producer_id_wanted``
        signal); :meth:`run` acts."""
        if self._renewal is not None:
            self._renewal.set()

    # ------------------------------------------------------------------ the three steps

    async def wait_idle(self) -> None:
        """Return once no batch is in flight (their sequences are settled)."""
        await self.engine.wait_nothing_in_flight()

    def apply(self, producer_id: int, epoch: int, *, routine: bool = False) -> None:
        """Take ``producer_id``/``epoch``: sequences restart at 0, drain resumes, senders
        wake. ``routine``: logged at DEBUG (transactions v2 moves the epoch every commit)."""
        self.engine.new_producer_id(producer_id, epoch)
        self.log.log(
            logging.DEBUG if routine else self.level,
            "%s: producer id %s epoch %s", self.label, producer_id, epoch,
        )  # fmt: skip

    async def renew(self, ask: Ask) -> tuple[int, int]:
        """Wait until nothing is in flight, ``ask`` for an id, apply it; returns it. What
        ``ask`` raises propagates, and then nothing changed."""
        await self.wait_idle()
        producer_id, epoch = await ask(self.idem.producer_id, self.idem.epoch)
        self.apply(producer_id, epoch)
        return producer_id, epoch

    # ------------------------------------------------------------------ idempotent

    async def run(
        self,
        ask: Ask,
        backoff: ExponentialBackoff,
        on_error: Callable[[KafkaError], None] = lambda exc: None,
    ) -> None:
        """The idempotent producer's task: an id now and a new one after every requested
        reset, each ask retried whatever the error, paced by ``backoff``. ``on_error`` sees
        every failure (the producer fails what waits on an authentication failure)."""
        idem = self.idem
        self._renewal = anyio.Event()
        # One RetryState for the task's life: the failure count (and the log's pacing)
        # start over after each success.
        backoff_state = RetryState(backoff)

        async def note(exc: KafkaError) -> None:
            on_error(exc)
            n = backoff_state.failures
            if n in (1, 10, 100) or n % 1000 == 0:  # not at every retry
                # A retriable error once is routine (COORDINATOR_LOAD_IN_PROGRESS answers
                # the first InitProducerId on every fresh Kafka cluster): DEBUG until it
                # persists; any other error is worth a WARNING the first time.
                transient = exc.retriable and n < 10
                self.log.log(
                    logging.DEBUG if transient else logging.WARNING,
                    "%s: InitProducerId failed %d times (%s); retrying", self.label, n, exc,
                )  # fmt: skip

        async def retried(producer_id: int, epoch: int) -> tuple[int, int]:
            return await retrying(
                partial(ask, producer_id, epoch),
                backoff_state,
                what="InitProducerId",
                retry=_EVERY_ERROR,
                on_retry=note,
            )

        while True:
            if idem.ready:
                await self._renewal.wait()
                self._renewal = anyio.Event()
                continue
            await self.renew(retried)
