"""Every exception aiokafka_ng raises.

All of them derive from :class:`KafkaError`, whose class attributes say what to do next:
``retriable`` (the same operation may succeed if tried again) and ``invalid_metadata``
(refresh cluster metadata first). Broker error codes map to one class each; they live in
:mod:`aiokafka_ng.protocol.errors` (so the pure protocol layer can raise them) and are
re-exported here. This module adds the errors that arise in the client itself:

- :class:`ConfigError` -- bad configuration; names every bad key.
- :class:`KafkaConnectionError` -- a connection failed or dropped (retriable);
  :class:`CorrelationIdMismatchError` is one way a connection goes bad;
  :class:`SslAuthenticationError` (the broker's certificate failed verification) is not
  retriable.
- :class:`KafkaTimeoutError` -- a client-side deadline passed (retriable);
  :class:`RequestTimeoutError` (no response in time), :class:`BufferExhaustedError`
  (producer memory stayed full), :class:`SendTimeoutError` (``send_and_wait``'s own
  timeout) and :class:`ClosedBeforeDeliveryError` (the producer's close timeout passed
  with the record undelivered) are the specific cases.
- :class:`IllegalStateError` -- a call the object's state does not allow;
  :class:`ProducerClosedError` is ``send()`` after ``close()``.
- :class:`NoBrokersAvailableError` -- no bootstrap server could be reached (retriable).
- :class:`LogTruncationError` -- a consumer's position is past the end of the log it was
  read from: the partition's log was truncated (an unclean leader election, KIP-320) and
  ``auto_offset_reset`` is "none". An :class:`OffsetOutOfRangeError`, as Java's
  ``LogTruncationException`` is an ``OffsetOutOfRangeException``.

Do not confuse :class:`RequestTimeoutError` (the client gave up waiting) with
:class:`RequestTimedOutError` (error code 7: the broker gave up).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka_ng.protocol import errors as _protocol_errors
from aiokafka_ng.protocol.errors import *  # noqa: F403  (re-exported; listed in __all__)
from aiokafka_ng.protocol.errors import KafkaError, OffsetOutOfRangeError

__all__ = [
    "BufferExhaustedError",
    "ClosedBeforeDeliveryError",
    "ConfigError",
    "CorrelationIdMismatchError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "LogTruncationError",
    "NoBrokersAvailableError",
    "ProducerClosedError",
    "RequestTimeoutError",
    "SendTimeoutError",
    "SslAuthenticationError",
]
__all__ += _protocol_errors.__all__


class ConfigError(KafkaError, ValueError):
    """Invalid configuration.

    ``errors`` maps each bad key to what is wrong with it; the message names every key, so a
    user fixes all of them in one go rather than one per run.
    """

    message = "Invalid configuration."

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors: dict[str, str] = dict(errors)
        super().__init__(_describe_config_errors(self.errors))

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.errors,))


def _describe_config_errors(errors: Mapping[str, str]) -> str:
    if not errors:
        return "invalid configuration"
    noun = "key" if len(errors) == 1 else "keys"
    problems = "; ".join(f"{key}: {problem}" for key, problem in errors.items())
    return f"invalid configuration ({len(errors)} bad {noun}): {problems}"


class KafkaConnectionError(KafkaError):
    """A connection to a broker could not be made, or broke; the request may be retried."""

    retriable = True
    message = "The connection to the broker failed or was dropped."


class CorrelationIdMismatchError(KafkaConnectionError):
    """A response's correlation id matched no request in flight; the connection is closed."""

    message = "A response's correlation id did not match the request sent; connection closed."


class SslAuthenticationError(KafkaConnectionError):
    """The broker's TLS certificate failed verification (unknown CA, wrong host name, expired).

    Not retriable, like Java's ``SslAuthenticationException``: the same certificate fails
    the same way on every try, so the client raises it at once instead of retrying until
    its bootstrap or request deadline.
    """

    retriable = False
    message = "The broker's TLS certificate failed verification."


class KafkaTimeoutError(KafkaError):
    """A client-side deadline passed before the operation completed."""

    retriable = True
    message = "The operation did not complete in time."


class RequestTimeoutError(KafkaTimeoutError):
    """The broker did not answer a request in time; its connection is closed."""

    message = "The broker did not answer the request in time."


class BufferExhaustedError(KafkaTimeoutError):
    """The producer's record buffer stayed full for longer than the caller may block."""

    message = "The producer's buffer stayed full for longer than the caller may block."


class SendTimeoutError(KafkaTimeoutError):
    """``send_and_wait(..., timeout=...)`` passed its timeout before the record's outcome.

    The record is *not* taken back: if it was queued, it may still be delivered (or fail at
    ``delivery_timeout_ms``). A caller that retries may therefore write it twice.
    """

    message = "The record's delivery was not confirmed within the caller's timeout."


class ClosedBeforeDeliveryError(KafkaTimeoutError):
    """The producer closed with this record undelivered: ``close()`` (or leaving
    ``async with``) waited ``close_timeout_ms`` (or its ``timeout``) and gave up.

    If the record was in flight, the broker may have written it anyway.
    """

    message = "The producer closed before the record was delivered."


class IllegalStateError(KafkaError):
    """A call that the object's current state does not allow (a programming error)."""

    message = "The object's state does not allow this call."


class ProducerClosedError(IllegalStateError):
    """``send()`` (or another call) on a producer that is closed or closing."""

    message = "The producer is closed."


class NoBrokersAvailableError(KafkaError):
    """None of the bootstrap servers (or known brokers) could be reached."""

    retriable = True
    message = "No broker could be reached."


class LogTruncationError(OffsetOutOfRangeError):
    """The log of some partitions diverged before the consumer's position (KIP-320).

    Raised by the consumer when ``auto_offset_reset="none"``: the records it read past
    ``divergent_offsets[tp]`` are no longer in the partition's log (an unclean leader
    election or a truncated replica became leader), and what the log now holds from there
    on was never read. ``fetch_offsets[tp]`` is the position that was found past the
    divergence; ``divergent_offsets[tp]`` is the first offset known to diverge, absent when
    the leader could not say (the epoch of the position is unknown to it). Keys are
    ``(topic, partition)`` pairs (``TopicPartition`` is one). The application decides: for
    instance ``seek(tp, divergent_offsets[tp])`` to read the new log from the divergence.
    """

    def __init__(
        self,
        detail: str | None = None,
        fetch_offsets: Mapping[tuple[str, int], int] | None = None,
        divergent_offsets: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        super().__init__(detail)
        self.fetch_offsets = dict(fetch_offsets or {})
        self.divergent_offsets = dict(divergent_offsets or {})

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.detail, self.fetch_offsets, self.divergent_offsets))
