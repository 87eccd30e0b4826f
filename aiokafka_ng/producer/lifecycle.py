"""The producer's lifecycle states, and the error a call gets when the producer cannot take it.

A producer is NEW until ``start()``, RUNNING until ``close()`` begins, then CLOSING and
CLOSED. A background task that fails leaves it RUNNING but stopped: every call then raises
the failure (as the cause of an ``IllegalStateError``) until ``close()`` cleans up.
"""

from __future__ import annotations

import enum

from aiokafka_ng.errors import IllegalStateError, KafkaError, ProducerClosedError

__all__ = ["State", "not_running_error", "stopped_error"]


class State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


def not_running_error(state: State, failure: Exception | None) -> KafkaError:
    """What a call that needs a running producer raises in ``state``, ``failure`` being what
    stopped a background task, if anything did."""
    if state is State.NEW:
        return IllegalStateError("the producer is not started; call start() or use async with")
    if failure is not None and state is State.RUNNING:
        return stopped_error(failure)
    return ProducerClosedError("the producer is closed")


def stopped_error(failure: Exception) -> IllegalStateError:
    """The error of every call (and every pending record) after ``failure`` stopped a
    background task."""
    err = IllegalStateError(
        f"the producer stopped: a background task failed ({failure!r}); close it"
    )
    err.__cause__ = failure
    return err
