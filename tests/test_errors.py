"""The error table, the classes built from it, and the client-level errors."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

import aiokafka_ng.errors as public_errors
import aiokafka_ng.protocol.errors as protocol_errors
from aiokafka_ng.errors import (
    BufferExhaustedError,
    ConfigError,
    CorrelationIdMismatchError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    ProducerClosedError,
    RequestTimeoutError,
)
from aiokafka_ng.protocol.errors import (
    ERROR_TABLE,
    BrokerResponseError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    DuplicateSequenceNumberError,
    KafkaError,
    MessageSizeTooLargeError,
    MessageTooLargeError,
    NotControllerError,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    ProtocolError,
    SaslAuthenticationFailedError,
    UnknownErrorCodeError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
    raise_for_code,
)


def class_name_for(kafka_name: str) -> str:
    """UNKNOWN_TOPIC_OR_PARTITION -> UnknownTopicOrPartitionError (a trailing _ERROR or
    _EXCEPTION in Kafka's name is dropped: KAFKA_STORAGE_ERROR -> KafkaStorageError)."""
    for suffix in ("_EXCEPTION", "_ERROR"):
        kafka_name = kafka_name.removesuffix(suffix)
    return "".join(part.capitalize() for part in kafka_name.split("_")) + "Error"


# -- the table ------------------------------------------------------------------------------


def test_table_lists_every_code_once_in_order() -> None:
    codes = [info.code for info in ERROR_TABLE]
    assert codes == sorted(set(codes))
    # -1 (UNKNOWN_SERVER_ERROR) and then 1..N without gaps; 0 (NONE) is not an error.
    assert codes == [-1, *range(1, codes[-1] + 1)]
    assert codes[-1] >= 133  # SHARE_SESSION_LIMIT_REACHED, Kafka 4.1
    names = [info.name for info in ERROR_TABLE]
    assert len(set(names)) == len(names)


def test_every_row_has_exactly_one_class_that_agrees_with_it() -> None:
    for info in ERROR_TABLE:
        cls = error_for_code(info.code)
        assert cls.__name__ == class_name_for(info.name)
        assert getattr(protocol_errors, cls.__name__) is cls
        assert cls.__name__ in protocol_errors.__all__
        assert (cls.errno, cls.name) == (info.code, info.name)
        assert (cls.retriable, cls.invalid_metadata) == (info.retriable, info.invalid_metadata)
        assert cls.message == info.message
        assert info.message.endswith(".")
        # Java's InvalidMetadataException extends RetriableException.
        assert cls.retriable or not cls.invalid_metadata


def test_no_class_without_a_row() -> None:
    table_codes = {info.code for info in ERROR_TABLE}
    declared = [
        value
        for value in vars(protocol_errors).values()
        if inspect.isclass(value)
        and issubclass(value, BrokerResponseError)
        and value not in (BrokerResponseError, UnknownErrorCodeError)
    ]
    assert {cls.errno for cls in declared} == table_codes


def test_codes_agree_with_aiokafka() -> None:
    """aiokafka (installed for interop tests) knows the older codes: the numbers must match.

    Its names differ only where Kafka renamed a code or aiokafka chose its own name.
    """
    import aiokafka.errors as aiokafka_errors

    renamed = {
        -1: "UNKNOWN",
        6: "NOT_LEADER_FOR_PARTITION",
        10: "MESSAGE_SIZE_TOO_LARGE",
        13: "STALE_LEADER_EPOCH_CODE",
        17: "INVALID_TOPIC",
        39: "INVALID_REPLICATION_ASSIGNMENT",
    }
    ours = {info.code: info.name for info in ERROR_TABLE}
    base = aiokafka_errors.BrokerResponseError
    checked = 0
    for value in vars(aiokafka_errors).values():
        if inspect.isclass(value) and issubclass(value, base) and value is not base:
            found: Any = value  # aiokafka is untyped here
            errno, name = found.errno, found.message
            if errno == 0:  # NoError
                continue
            assert renamed.get(errno, ours[errno]) == name
            checked += 1
    assert checked > 60


@pytest.mark.parametrize(
    ("cls", "code", "retriable", "invalid_metadata"),
    [
        (NotLeaderOrFollowerError, 6, True, True),
        (UnknownTopicOrPartitionError, 3, True, True),
        (error_for_code(5), 5, True, True),  # LEADER_NOT_AVAILABLE
        (error_for_code(29), 29, False, False),  # TOPIC_AUTHORIZATION_FAILED
        (error_for_code(19), 19, True, False),  # NOT_ENOUGH_REPLICAS
        (error_for_code(7), 7, True, False),  # REQUEST_TIMED_OUT
        (error_for_code(8), 8, False, False),  # BROKER_NOT_AVAILABLE: not retriable in Java
        (CoordinatorLoadInProgressError, 14, True, False),
        (NotCoordinatorError, 16, True, False),
        (NotControllerError, 41, True, False),
        (ConcurrentTransactionsError, 51, True, False),
        (OutOfOrderSequenceNumberError, 45, False, False),
        (DuplicateSequenceNumberError, 46, False, False),
        (UnknownProducerIdError, 59, False, False),
        (ProducerFencedError, 90, False, False),
        (UnsupportedVersionError, 35, False, False),
        (SaslAuthenticationFailedError, 58, False, False),
        (MessageTooLargeError, 10, False, False),
        (error_for_code(27), 27, False, False),  # REBALANCE_IN_PROGRESS
        (error_for_code(-1), -1, False, False),  # UNKNOWN_SERVER_ERROR
        (error_for_code(133), 133, True, False),  # SHARE_SESSION_LIMIT_REACHED
    ],
)
def test_well_known_flags(
    cls: type[BrokerResponseError], code: int, retriable: bool, invalid_metadata: bool
) -> None:
    assert error_for_code(code) is cls
    assert cls.errno == code
    assert (cls.retriable, cls.invalid_metadata) == (retriable, invalid_metadata)


def test_aliases_are_the_same_class() -> None:
    assert MessageSizeTooLargeError is MessageTooLargeError
    assert NotLeaderForPartitionError is NotLeaderOrFollowerError
    assert public_errors.MessageSizeTooLargeError is MessageTooLargeError


# -- instances, lookup and raising ----------------------------------------------------------


def test_str_shows_name_code_and_server_message() -> None:
    err = UnknownTopicOrPartitionError("This server does not host topic t-1")
    assert str(err) == "UNKNOWN_TOPIC_OR_PARTITION (3): This server does not host topic t-1"
    assert err.detail == "This server does not host topic t-1"
    bare = NotLeaderOrFollowerError()
    assert str(bare) == f"NOT_LEADER_OR_FOLLOWER (6): {NotLeaderOrFollowerError.message}"
    assert bare.detail is None


def test_unknown_codes_get_a_class_that_carries_the_code() -> None:
    cls = error_for_code(4242)
    assert issubclass(cls, UnknownErrorCodeError)
    assert issubclass(cls, KafkaError)
    assert cls.errno == 4242
    assert error_for_code(4242) is cls  # one class per code
    assert error_for_code(4243) is not cls
    assert not cls.retriable
    err = cls("from the future")
    assert err.errno == 4242
    assert "4242" in str(err)
    assert "from the future" in str(err)
    assert error_for_code(-9).errno == -9


def test_code_zero_is_not_an_error() -> None:
    raise_for_code(0)
    raise_for_code(0, "ignored")
    with pytest.raises(ValueError, match="NONE"):
        error_for_code(0)


def test_raise_for_code() -> None:
    with pytest.raises(UnknownTopicOrPartitionError) as info:
        raise_for_code(3, "no such topic")
    assert str(info.value) == "UNKNOWN_TOPIC_OR_PARTITION (3): no such topic"
    with pytest.raises(UnknownErrorCodeError) as unknown:
        raise_for_code(31000)
    assert unknown.value.errno == 31000


@pytest.mark.parametrize(
    "err",
    [
        UnknownTopicOrPartitionError("detail"),
        NotLeaderOrFollowerError(),
        error_for_code(5555)("detail"),
        ConfigError({"acks": "must be 0, 1 or all"}),
        KafkaConnectionError("127.0.0.1:1 refused"),
        ProtocolError("negative length"),
    ],
)
def test_errors_survive_pickling(err: KafkaError) -> None:
    # Exceptions cross process boundaries (e.g. Spark workers), so they must pickle.
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy).__name__ == type(err).__name__
    assert copy.errno == err.errno
    assert str(copy) == str(err)


def test_protocol_error() -> None:
    assert issubclass(ProtocolError, KafkaError)
    assert not issubclass(ProtocolError, BrokerResponseError)
    assert ProtocolError.errno is None
    assert ProtocolError.retriable
    assert str(ProtocolError("frame too short")) == "frame too short"
    assert str(ProtocolError()) == ProtocolError.message


# -- public module and client-level errors --------------------------------------------------


def test_public_module_reexports_every_protocol_name() -> None:
    assert set(protocol_errors.__all__) <= set(public_errors.__all__)
    assert len(public_errors.__all__) == len(set(public_errors.__all__))
    for name in public_errors.__all__:
        value = getattr(public_errors, name)
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, KafkaError), name


def test_config_error_names_every_bad_key() -> None:
    problems = {
        "acks": "must be 0, 1 or 'all'",
        "linger_ms": "must be >= 0",
        "bootstrap_servers": "must not be empty",
    }
    err = ConfigError(problems)
    assert isinstance(err, ValueError)
    assert isinstance(err, KafkaError)
    assert err.errors == problems
    text = str(err)
    for key, problem in problems.items():
        assert f"{key}: {problem}" in text
    assert "3 bad keys" in text
    assert "1 bad key)" in str(ConfigError({"acks": "bad"}))
    with pytest.raises(ValueError):
        raise err


def test_client_error_flags_and_hierarchy() -> None:
    assert KafkaConnectionError.retriable
    assert issubclass(CorrelationIdMismatchError, KafkaConnectionError)
    assert KafkaTimeoutError.retriable
    assert issubclass(RequestTimeoutError, KafkaTimeoutError)
    assert issubclass(BufferExhaustedError, KafkaTimeoutError)
    assert issubclass(ProducerClosedError, IllegalStateError)
    assert not ProducerClosedError.retriable
    assert NoBrokersAvailableError.retriable
    for cls in (KafkaConnectionError, KafkaTimeoutError, IllegalStateError, ConfigError):
        assert cls.errno is None
        assert not cls.invalid_metadata
    assert str(ProducerClosedError()) == "The producer is closed."
    assert str(KafkaConnectionError("reset by peer")) == "reset by peer"
