"""The transaction state machine's table (KIP-98): :class:`TransactionState`, every legal
move (:data:`TRANSITIONS`), what to tell a caller a state refuses (:data:`HINTS`), which
errors end the transactional id for this producer (:data:`FATAL_TYPES`), and the errors a
transactional call raises.

*One state, one table.* :class:`TransactionState` and :data:`TRANSITIONS` below are the
whole state machine; ``TransactionManager._to`` (``transactions.py``) is the only place the
state changes and it raises :class:`IllegalTransactionStateError` for a move the table does
not list (commit without begin, begin twice, ...). A fatal error (we were fenced, not
authorized) is a state of its own that nothing leaves: every later call raises that error
again.
"""

from __future__ import annotations

import enum

from aiokafka_ng.errors import (
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    UnsupportedVersionError,
)

__all__ = [
    "FATAL_TYPES",
    "HINTS",
    "TRANSITIONS",
    "IllegalTransactionStateError",
    "TransactionAbortedError",
    "TransactionNotStartedError",
    "TransactionState",
]

#: Errors after which the transactional id is unusable by this producer.
FATAL_TYPES: tuple[type[KafkaError], ...] = (
    ProducerFencedError,
    InvalidProducerEpochError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    InvalidTxnStateError,
    UnsupportedVersionError,
)


class IllegalTransactionStateError(IllegalStateError):
    """A transactional call the transaction's state does not allow (commit without begin,
    begin twice, commit after an abortable error, ...)."""

    message = "The transaction's state does not allow this call."


class TransactionNotStartedError(IllegalTransactionStateError):
    """``send()`` or ``send_offsets_to_transaction()`` on a transactional producer with no
    transaction open: call ``begin_transaction()`` (or use ``async with
    producer.transaction():``) first."""

    message = "No transaction is open; call begin_transaction() first."


class TransactionAbortedError(KafkaError):
    """The record was not delivered because its transaction was aborted."""

    message = "The record's transaction was aborted."


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"
    PREPARED = "prepared"


S = TransactionState

#: Every legal move. FATAL_ERROR is reachable from every state (``TransactionManager.fail_fatal``).
TRANSITIONS: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),
    # back to UNINITIALIZED when init timed out (it may be called again)
    S.INITIALIZING: frozenset({S.READY, S.UNINITIALIZED, S.ABORTABLE_ERROR}),
    S.READY: frozenset({S.IN_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR}),
    # PREPARED: flushed, EndTxn left to whoever holds the PreparedTransaction
    S.COMMITTING: frozenset({S.READY, S.ABORTABLE_ERROR, S.PREPARED}),
    # INITIALIZING: the epoch bump after an abort that left a sequence hole (KIP-360)
    S.ABORTING: frozenset({S.READY, S.INITIALIZING}),
    S.ABORTABLE_ERROR: frozenset({S.ABORTING}),
    S.FATAL_ERROR: frozenset(),
    S.PREPARED: frozenset(),
}

#: What to tell a caller whose call the current state does not allow.
HINTS = {
    S.UNINITIALIZED: "call init_transactions() (start() does) first",
    S.INITIALIZING: "init_transactions() is still running",
    S.READY: "no transaction is open; call begin_transaction() first",
    S.IN_TRANSACTION: "a transaction is already open",
    S.COMMITTING: "the transaction is being committed",
    S.ABORTING: "the transaction is being aborted",
    S.ABORTABLE_ERROR: "the transaction failed; call abort_transaction()",
    S.PREPARED: "the transaction is prepared: complete it with complete_transaction(); "
    "this producer can only be closed",
}
