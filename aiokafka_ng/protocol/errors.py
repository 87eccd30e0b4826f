"""Kafka error codes and the exceptions they map to (pure).

Theory of operation
-------------------
``_TABLE`` below is the one place that states the facts about every error code of the Kafka
protocol: code, name, flags and a short message. Every code also has an explicitly declared
class (``class UnknownTopicOrPartitionError(BrokerResponseError, errno=3): ...``) so that mypy,
IDEs and ``except`` clauses see real classes; ``BrokerResponseError.__init_subclass__`` copies the
table row into the class and registers it for :func:`error_for_code`. A class naming a code the
table lacks, or two classes for one code, fail at import; a unit test checks that every row has
exactly one class named after it.

Flags follow the Java client, which defines them (``Errors.java`` and the exception classes):

- ``R``: retriable -- the Java exception extends ``RetriableException``; the same request may
  succeed later.
- ``M``: invalid_metadata -- the Java exception extends ``InvalidMetadataException`` (always
  retriable too); the client's view of leaders is stale: refresh metadata, then retry.
- ``-``: neither.

Messages are ours, kept short; the broker's own error message (when a response carries one) is
passed to the exception instance and shown by ``str()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# Columns: code, name, flags (see the module docstring), message.
_TABLE = """
  -1 UNKNOWN_SERVER_ERROR                  -  The broker failed with an unexpected error.
   1 OFFSET_OUT_OF_RANGE                   -  The offset is outside the partition's range.
   2 CORRUPT_MESSAGE                       R  A record is corrupt (bad CRC or size).
   3 UNKNOWN_TOPIC_OR_PARTITION            RM The broker does not host this topic-partition.
   4 INVALID_FETCH_SIZE                    -  The requested fetch size is not valid.
   5 LEADER_NOT_AVAILABLE                  RM The partition has no leader (election in progress).
   6 NOT_LEADER_OR_FOLLOWER                RM The broker is not the partition's leader or follower.
   7 REQUEST_TIMED_OUT                     R  The broker timed out while handling the request.
   8 BROKER_NOT_AVAILABLE                  -  The broker is not available.
   9 REPLICA_NOT_AVAILABLE                 RM The replica is not available for this partition.
  10 MESSAGE_TOO_LARGE                     -  A record batch is larger than the broker accepts.
  11 STALE_CONTROLLER_EPOCH                -  The controller has moved to another broker.
  12 OFFSET_METADATA_TOO_LARGE             -  The offset commit's metadata string is too large.
  13 NETWORK_EXCEPTION                     RM A broker-side network error interrupted the request.
  14 COORDINATOR_LOAD_IN_PROGRESS          R  The coordinator is still loading its state.
  15 COORDINATOR_NOT_AVAILABLE             R  The coordinator is not available.
  16 NOT_COORDINATOR                       R  The broker is not the coordinator for this key.
  17 INVALID_TOPIC_EXCEPTION               -  The topic name is not valid for this operation.
  18 RECORD_LIST_TOO_LARGE                 -  The batch is larger than the broker's log segment.
  19 NOT_ENOUGH_REPLICAS                   R  Too few in-sync replicas: nothing was written.
  20 NOT_ENOUGH_REPLICAS_AFTER_APPEND      R  Written, but to too few in-sync replicas.
  21 INVALID_REQUIRED_ACKS                 -  The acks value of the produce request is not valid.
  22 ILLEGAL_GENERATION                    -  The group generation id is stale or not valid.
  23 INCONSISTENT_GROUP_PROTOCOL           -  The member's protocols do not match the group's.
  24 INVALID_GROUP_ID                      -  The group id is not valid.
  25 UNKNOWN_MEMBER_ID                     -  The coordinator does not know this member id.
  26 INVALID_SESSION_TIMEOUT               -  The session timeout is outside the broker's range.
  27 REBALANCE_IN_PROGRESS                 -  The group is rebalancing: the member must rejoin.
  28 INVALID_COMMIT_OFFSET_SIZE            -  The offset commit data has an invalid size.
  29 TOPIC_AUTHORIZATION_FAILED            -  Not authorized to access the topic.
  30 GROUP_AUTHORIZATION_FAILED            -  Not authorized to access the group.
  31 CLUSTER_AUTHORIZATION_FAILED          -  Not authorized to perform this cluster operation.
  32 INVALID_TIMESTAMP                     -  A record timestamp is outside the accepted range.
  33 UNSUPPORTED_SASL_MECHANISM            -  The broker does not support this SASL mechanism.
  34 ILLEGAL_SASL_STATE                    -  The request is not valid in the current SASL state.
  35 UNSUPPORTED_VERSION                   -  The broker does not support this request version.
  36 TOPIC_ALREADY_EXISTS                  -  The topic already exists.
  37 INVALID_PARTITIONS                    -  The number of partitions is not valid.
  38 INVALID_REPLICATION_FACTOR            -  The replication factor is not valid.
  39 INVALID_REPLICA_ASSIGNMENT            -  The replica assignment is not valid.
  40 INVALID_CONFIG                        -  The configuration is not valid.
  41 NOT_CONTROLLER                        R  The broker is not the active controller.
  42 INVALID_REQUEST                       -  The broker found the request malformed.
  43 UNSUPPORTED_FOR_MESSAGE_FORMAT        -  The topic's message format cannot serve this request.
  44 POLICY_VIOLATION                      -  The request violates a broker policy.
  45 OUT_OF_ORDER_SEQUENCE_NUMBER          -  The broker received a sequence number out of order.
  46 DUPLICATE_SEQUENCE_NUMBER             -  The broker already has a batch with this sequence.
  47 INVALID_PRODUCER_EPOCH                -  The producer epoch is stale.
  48 INVALID_TXN_STATE                     -  Not valid in the transaction's current state.
  49 INVALID_PRODUCER_ID_MAPPING           -  The producer id does not match the transactional id.
  50 INVALID_TRANSACTION_TIMEOUT           -  The transaction timeout exceeds the broker's maximum.
  51 CONCURRENT_TRANSACTIONS               R  Another transactional operation is in progress.
  52 TRANSACTION_COORDINATOR_FENCED        -  A newer transaction coordinator has taken over.
  53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED -  Not authorized to use the transactional id.
  54 SECURITY_DISABLED                     -  Security features are disabled on the broker.
  55 OPERATION_NOT_ATTEMPTED               -  Skipped because another part of the request failed.
  56 KAFKA_STORAGE_ERROR                   RM The broker's disk holding the partition is offline.
  57 LOG_DIR_NOT_FOUND                     -  The log directory does not exist on the broker.
  58 SASL_AUTHENTICATION_FAILED            -  SASL authentication failed.
  59 UNKNOWN_PRODUCER_ID                   -  The broker holds no state for this producer id.
  60 REASSIGNMENT_IN_PROGRESS              -  A partition reassignment is in progress.
  61 DELEGATION_TOKEN_AUTH_DISABLED        -  Delegation token authentication is disabled.
  62 DELEGATION_TOKEN_NOT_FOUND            -  The delegation token does not exist.
  63 DELEGATION_TOKEN_OWNER_MISMATCH       -  The principal does not own the delegation token.
  64 DELEGATION_TOKEN_REQUEST_NOT_ALLOWED  -  Delegation tokens cannot be requested on this channel.
  65 DELEGATION_TOKEN_AUTHORIZATION_FAILED -  Not authorized for this delegation token operation.
  66 DELEGATION_TOKEN_EXPIRED              -  The delegation token has expired.
  67 INVALID_PRINCIPAL_TYPE                -  The principal type is not supported.
  68 NON_EMPTY_GROUP                       -  The group still has members.
  69 GROUP_ID_NOT_FOUND                    -  The group does not exist.
  70 FETCH_SESSION_ID_NOT_FOUND            R  The broker does not know this fetch session.
  71 INVALID_FETCH_SESSION_EPOCH           R  The fetch session epoch is not valid.
  72 LISTENER_NOT_FOUND                    RM The leader has no listener of the request's name.
  73 TOPIC_DELETION_DISABLED               -  Topic deletion is disabled on the broker.
  74 FENCED_LEADER_EPOCH                   RM The request's leader epoch is older than the broker's.
  75 UNKNOWN_LEADER_EPOCH                  R  The request's leader epoch is newer than the broker's.
  76 UNSUPPORTED_COMPRESSION_TYPE          -  The client cannot read the topic's compression type.
  77 STALE_BROKER_EPOCH                    -  The broker epoch is stale.
  78 OFFSET_NOT_AVAILABLE                  R  The leader's high watermark has not caught up yet.
  79 MEMBER_ID_REQUIRED                    -  The member must rejoin with the member id given.
  80 PREFERRED_LEADER_NOT_AVAILABLE        RM The preferred leader is not available.
  81 GROUP_MAX_SIZE_REACHED                -  The group has reached its maximum size.
  82 FENCED_INSTANCE_ID                    -  Fenced by another member with the same instance id.
  83 ELIGIBLE_LEADERS_NOT_AVAILABLE        RM No eligible leader is available for the partition.
  84 ELECTION_NOT_NEEDED                   RM The leader election was not needed.
  85 NO_REASSIGNMENT_IN_PROGRESS           -  No partition reassignment is in progress.
  86 GROUP_SUBSCRIBED_TO_TOPIC             -  The group is still subscribed to this topic.
  87 INVALID_RECORD                        -  The broker rejected a record as not valid.
  88 UNSTABLE_OFFSET_COMMIT                R  A transactional offset commit is pending.
  89 THROTTLING_QUOTA_EXCEEDED             R  The request exceeded the throttling quota.
  90 PRODUCER_FENCED                       -  A newer producer with this transactional id exists.
  91 RESOURCE_NOT_FOUND                    -  The resource does not exist.
  92 DUPLICATE_RESOURCE                    -  The request names the same resource more than once.
  93 UNACCEPTABLE_CREDENTIAL               -  The credential does not meet the broker's rules.
  94 INCONSISTENT_VOTER_SET                -  The leader's and follower's voter sets disagree.
  95 INVALID_UPDATE_VERSION                -  The update version is not valid.
  96 FEATURE_UPDATE_FAILED                 -  The controller could not apply the feature update.
  97 PRINCIPAL_DESERIALIZATION_FAILURE     -  The forwarded principal could not be deserialized.
  98 SNAPSHOT_NOT_FOUND                    -  The requested snapshot does not exist.
  99 POSITION_OUT_OF_RANGE                 -  The requested position is outside the snapshot.
 100 UNKNOWN_TOPIC_ID                      RM The broker does not host a topic with this id.
 101 DUPLICATE_BROKER_REGISTRATION         -  The broker id is already registered.
 102 BROKER_ID_NOT_REGISTERED              -  The broker id is not registered.
 103 INCONSISTENT_TOPIC_ID                 RM The topic id does not match the broker's.
 104 INCONSISTENT_CLUSTER_ID               -  The cluster id does not match the broker's.
 105 TRANSACTIONAL_ID_NOT_FOUND            -  The transactional id does not exist.
 106 FETCH_SESSION_TOPIC_ID_ERROR          R  The fetch session found a missing or changed topic id.
 107 INELIGIBLE_REPLICA                    -  The new ISR contains at least one ineligible replica.
 108 NEW_LEADER_ELECTED                    -  A new leader was elected while the request waited.
 109 OFFSET_MOVED_TO_TIERED_STORAGE        -  The requested offset now lives in tiered storage.
 110 FENCED_MEMBER_EPOCH                   -  The member epoch is fenced: the member must rejoin.
 111 UNRELEASED_INSTANCE_ID                -  The group instance id is still in use.
 112 UNSUPPORTED_ASSIGNOR                  -  The group does not support the requested assignor.
 113 STALE_MEMBER_EPOCH                    -  The member epoch is stale.
 114 MISMATCHED_ENDPOINT_TYPE              -  The request was sent to an endpoint of the wrong type.
 115 UNSUPPORTED_ENDPOINT_TYPE             -  This endpoint type does not support the request.
 116 UNKNOWN_CONTROLLER_ID                 -  The controller id is not known.
 117 UNKNOWN_SUBSCRIPTION_ID               -  The telemetry subscription id is not known.
 118 TELEMETRY_TOO_LARGE                   -  The pushed telemetry is larger than the broker allows.
 119 INVALID_REGISTRATION                  -  The controller rejected the broker registration.
 120 TRANSACTION_ABORTABLE                 -  The transaction failed and must be aborted.
 121 INVALID_RECORD_STATE                  -  The record's state does not allow this operation.
 122 SHARE_SESSION_NOT_FOUND               R  The broker does not know this share session.
 123 INVALID_SHARE_SESSION_EPOCH           R  The share session epoch is not valid.
 124 FENCED_STATE_EPOCH                    -  The share-group state epoch did not match.
 125 INVALID_VOTER_KEY                     -  The voter key does not match the receiving replica.
 126 DUPLICATE_VOTER                       -  The voter is already in the voter set.
 127 VOTER_NOT_FOUND                       -  The voter is not in the voter set.
 128 INVALID_REGULAR_EXPRESSION            -  The regular expression is not valid.
 129 REBOOTSTRAP_REQUIRED                  -  Metadata is stale: the client must bootstrap again.
 130 STREAMS_INVALID_TOPOLOGY              -  The streams topology is not valid.
 131 STREAMS_INVALID_TOPOLOGY_EPOCH        -  The streams topology epoch is not valid.
 132 STREAMS_TOPOLOGY_FENCED               -  The streams topology epoch is outdated.
 133 SHARE_SESSION_LIMIT_REACHED           R  The broker has reached its share-session limit.
"""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """One row of the error table."""

    code: int
    name: str
    retriable: bool
    invalid_metadata: bool
    message: str


def _parse_table(text: str) -> tuple[ErrorInfo, ...]:
    rows = []
    for line in text.strip().splitlines():
        code, name, flags, message = line.split(maxsplit=3)
        if flags not in ("-", "R", "RM"):
            raise ValueError(f"bad flags {flags!r} for error code {code}")
        rows.append(ErrorInfo(int(code), name, "R" in flags, "M" in flags, message))
    return tuple(rows)


#: Every error code of the Kafka protocol except 0 (NONE), in code order.
ERROR_TABLE: tuple[ErrorInfo, ...] = _parse_table(_TABLE)
_INFO_BY_CODE: dict[int, ErrorInfo] = {info.code: info for info in ERROR_TABLE}
_CLASS_BY_CODE: dict[int, type[BrokerResponseError]] = {}
_UNKNOWN_CLASS_BY_CODE: dict[int, type[UnknownErrorCodeError]] = {}


class KafkaError(Exception):
    """Base class of every error aiokafka_ng raises.

    Class attributes describe the kind of error:

    - ``errno``: the Kafka error code, or ``None`` for errors that did not come from a broker.
    - ``retriable``: sending the same request again may succeed.
    - ``invalid_metadata``: the client's metadata is stale; refresh it before retrying.
    - ``message``: a short description, used by ``str()`` when the instance has no text.
    """

    errno: ClassVar[int | None] = None
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    message: ClassVar[str] = ""

    def __str__(self) -> str:
        return super().__str__() or self.message or type(self).__name__


class ProtocolError(KafkaError):
    """Bytes that do not decode as the Kafka protocol says they must.

    Not a Kafka error code. Retriable: the connection that produced the bytes is dropped and
    the request can be sent again on a fresh one.
    """

    retriable = True
    message = "The bytes received do not follow the Kafka protocol."


class BrokerResponseError(KafkaError):
    """An error code a broker returned in a response.

    ``detail`` is the broker's own error message when the response carried one (or context the
    client adds); ``str()`` shows ``NAME (code): detail`` or, without detail, the class message.
    """

    errno: ClassVar[int] = -1
    #: The protocol's name of the error code, e.g. ``"NOT_LEADER_OR_FOLLOWER"``.
    name: ClassVar[str] = ""

    def __init_subclass__(cls, errno: int | None = None) -> None:
        super().__init_subclass__()
        if errno is None:
            return  # a base class, a user subclass, or an unknown-code class (see below)
        info = _INFO_BY_CODE[errno]  # KeyError: a class for a code the table lacks
        if errno in _CLASS_BY_CODE:
            raise TypeError(f"{cls.__name__}: error code {errno} already has a class")
        cls.errno = info.code
        cls.name = info.name
        cls.retriable = info.retriable
        cls.invalid_metadata = info.invalid_metadata
        cls.message = info.message
        _CLASS_BY_CODE[errno] = cls

    def __init__(self, detail: str | None = None) -> None:
        # Keep args pickle-friendly: Exception pickling calls cls(*args).
        super().__init__(*(() if detail is None else (detail,)))
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.name or type(self).__name__} ({self.errno}): {self.detail or self.message}"


class UnknownErrorCodeError(BrokerResponseError):
    """A broker answered with an error code this client does not know.

    :func:`error_for_code` makes one subclass per unknown code, so ``errno`` is the code the
    broker sent. Not retriable, as the Java client treats unknown codes as UNKNOWN_SERVER_ERROR.
    """

    name = "UNKNOWN_ERROR_CODE"
    message = "The broker answered with an error code this client does not know."

    def __reduce__(self) -> tuple[object, ...]:
        # The per-code class is made at run time, so pickle rebuilds it from the code.
        return (_unknown_error, (self.errno, self.detail))


def _unknown_error(code: int, detail: str | None) -> BrokerResponseError:
    return error_for_code(code)(detail)


def error_for_code(code: int) -> type[BrokerResponseError]:
    """Return the exception class for a Kafka error code.

    A code missing from the table gets a subclass of :class:`UnknownErrorCodeError` whose
    ``errno`` is that code (one class per code, reused). Code 0 means success: ValueError.
    """
    cls = _CLASS_BY_CODE.get(code)
    if cls is not None:
        return cls
    if code == 0:
        raise ValueError("error code 0 (NONE) is not an error")
    unknown = _UNKNOWN_CLASS_BY_CODE.get(code)
    if unknown is None:
        suffix = str(code) if code >= 0 else f"Minus{-code}"
        unknown = type(f"UnknownErrorCode{suffix}Error", (UnknownErrorCodeError,), {})
        unknown.errno = code
        unknown = _UNKNOWN_CLASS_BY_CODE.setdefault(code, unknown)
    return unknown


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception for ``code`` with the broker's ``message``; do nothing for 0."""
    if code != 0:
        raise error_for_code(code)(message)


# One class per row of the table; the attributes come from the table (see __init_subclass__).


class UnknownServerError(BrokerResponseError, errno=-1): ...


class OffsetOutOfRangeError(BrokerResponseError, errno=1): ...


class CorruptMessageError(BrokerResponseError, errno=2): ...


class UnknownTopicOrPartitionError(BrokerResponseError, errno=3): ...


class InvalidFetchSizeError(BrokerResponseError, errno=4): ...


class LeaderNotAvailableError(BrokerResponseError, errno=5): ...


class NotLeaderOrFollowerError(BrokerResponseError, errno=6): ...


class RequestTimedOutError(BrokerResponseError, errno=7): ...


class BrokerNotAvailableError(BrokerResponseError, errno=8): ...


class ReplicaNotAvailableError(BrokerResponseError, errno=9): ...


class MessageTooLargeError(BrokerResponseError, errno=10): ...


class StaleControllerEpochError(BrokerResponseError, errno=11): ...


class OffsetMetadataTooLargeError(BrokerResponseError, errno=12): ...


class NetworkError(BrokerResponseError, errno=13): ...


class CoordinatorLoadInProgressError(BrokerResponseError, errno=14): ...


class CoordinatorNotAvailableError(BrokerResponseError, errno=15): ...


class NotCoordinatorError(BrokerResponseError, errno=16): ...


class InvalidTopicError(BrokerResponseError, errno=17): ...


class RecordListTooLargeError(BrokerResponseError, errno=18): ...


class NotEnoughReplicasError(BrokerResponseError, errno=19): ...


class NotEnoughReplicasAfterAppendError(BrokerResponseError, errno=20): ...


class InvalidRequiredAcksError(BrokerResponseError, errno=21): ...


class IllegalGenerationError(BrokerResponseError, errno=22): ...


class InconsistentGroupProtocolError(BrokerResponseError, errno=23): ...


class InvalidGroupIdError(BrokerResponseError, errno=24): ...


class UnknownMemberIdError(BrokerResponseError, errno=25): ...


class InvalidSessionTimeoutError(BrokerResponseError, errno=26): ...


class RebalanceInProgressError(BrokerResponseError, errno=27): ...


class InvalidCommitOffsetSizeError(BrokerResponseError, errno=28): ...


class TopicAuthorizationFailedError(BrokerResponseError, errno=29): ...


class GroupAuthorizationFailedError(BrokerResponseError, errno=30): ...


class ClusterAuthorizationFailedError(BrokerResponseError, errno=31): ...


class InvalidTimestampError(BrokerResponseError, errno=32): ...


class UnsupportedSaslMechanismError(BrokerResponseError, errno=33): ...


class IllegalSaslStateError(BrokerResponseError, errno=34): ...


class UnsupportedVersionError(BrokerResponseError, errno=35): ...


class TopicAlreadyExistsError(BrokerResponseError, errno=36): ...


class InvalidPartitionsError(BrokerResponseError, errno=37): ...


class InvalidReplicationFactorError(BrokerResponseError, errno=38): ...


class InvalidReplicaAssignmentError(BrokerResponseError, errno=39): ...


class InvalidConfigError(BrokerResponseError, errno=40): ...


class NotControllerError(BrokerResponseError, errno=41): ...


class InvalidRequestError(BrokerResponseError, errno=42): ...


class UnsupportedForMessageFormatError(BrokerResponseError, errno=43): ...


class PolicyViolationError(BrokerResponseError, errno=44): ...


class OutOfOrderSequenceNumberError(BrokerResponseError, errno=45): ...


class DuplicateSequenceNumberError(BrokerResponseError, errno=46): ...


class InvalidProducerEpochError(BrokerResponseError, errno=47): ...


class InvalidTxnStateError(BrokerResponseError, errno=48): ...


class InvalidProducerIdMappingError(BrokerResponseError, errno=49): ...


class InvalidTransactionTimeoutError(BrokerResponseError, errno=50): ...


class ConcurrentTransactionsError(BrokerResponseError, errno=51): ...


class TransactionCoordinatorFencedError(BrokerResponseError, errno=52): ...


class TransactionalIdAuthorizationFailedError(BrokerResponseError, errno=53): ...


class SecurityDisabledError(BrokerResponseError, errno=54): ...


class OperationNotAttemptedError(BrokerResponseError, errno=55): ...


class KafkaStorageError(BrokerResponseError, errno=56): ...


class LogDirNotFoundError(BrokerResponseError, errno=57): ...


class SaslAuthenticationFailedError(BrokerResponseError, errno=58): ...


class UnknownProducerIdError(BrokerResponseError, errno=59): ...


class ReassignmentInProgressError(BrokerResponseError, errno=60): ...


class DelegationTokenAuthDisabledError(BrokerResponseError, errno=61): ...


class DelegationTokenNotFoundError(BrokerResponseError, errno=62): ...


class DelegationTokenOwnerMismatchError(BrokerResponseError, errno=63): ...


class DelegationTokenRequestNotAllowedError(BrokerResponseError, errno=64): ...


class DelegationTokenAuthorizationFailedError(BrokerResponseError, errno=65): ...


class DelegationTokenExpiredError(BrokerResponseError, errno=66): ...


class InvalidPrincipalTypeError(BrokerResponseError, errno=67): ...


class NonEmptyGroupError(BrokerResponseError, errno=68): ...


class GroupIdNotFoundError(BrokerResponseError, errno=69): ...


class FetchSessionIdNotFoundError(BrokerResponseError, errno=70): ...


class InvalidFetchSessionEpochError(BrokerResponseError, errno=71): ...


class ListenerNotFoundError(BrokerResponseError, errno=72): ...


class TopicDeletionDisabledError(BrokerResponseError, errno=73): ...


class FencedLeaderEpochError(BrokerResponseError, errno=74): ...


class UnknownLeaderEpochError(BrokerResponseError, errno=75): ...


class UnsupportedCompressionTypeError(BrokerResponseError, errno=76): ...


class StaleBrokerEpochError(BrokerResponseError, errno=77): ...


class OffsetNotAvailableError(BrokerResponseError, errno=78): ...


class MemberIdRequiredError(BrokerResponseError, errno=79): ...


class PreferredLeaderNotAvailableError(BrokerResponseError, errno=80): ...


class GroupMaxSizeReachedError(BrokerResponseError, errno=81): ...


class FencedInstanceIdError(BrokerResponseError, errno=82): ...


class EligibleLeadersNotAvailableError(BrokerResponseError, errno=83): ...


class ElectionNotNeededError(BrokerResponseError, errno=84): ...


class NoReassignmentInProgressError(BrokerResponseError, errno=85): ...


class GroupSubscribedToTopicError(BrokerResponseError, errno=86): ...


class InvalidRecordError(BrokerResponseError, errno=87): ...


class UnstableOffsetCommitError(BrokerResponseError, errno=88): ...


class ThrottlingQuotaExceededError(BrokerResponseError, errno=89): ...


class ProducerFencedError(BrokerResponseError, errno=90): ...


class ResourceNotFoundError(BrokerResponseError, errno=91): ...


class DuplicateResourceError(BrokerResponseError, errno=92): ...


class UnacceptableCredentialError(BrokerResponseError, errno=93): ...


class InconsistentVoterSetError(BrokerResponseError, errno=94): ...


class InvalidUpdateVersionError(BrokerResponseError, errno=95): ...


class FeatureUpdateFailedError(BrokerResponseError, errno=96): ...


class PrincipalDeserializationFailureError(BrokerResponseError, errno=97): ...


class SnapshotNotFoundError(BrokerResponseError, errno=98): ...


class PositionOutOfRangeError(BrokerResponseError, errno=99): ...


class UnknownTopicIdError(BrokerResponseError, errno=100): ...


class DuplicateBrokerRegistrationError(BrokerResponseError, errno=101): ...


class BrokerIdNotRegisteredError(BrokerResponseError, errno=102): ...


class InconsistentTopicIdError(BrokerResponseError, errno=103): ...


class InconsistentClusterIdError(BrokerResponseError, errno=104): ...


class TransactionalIdNotFoundError(BrokerResponseError, errno=105): ...


class FetchSessionTopicIdError(BrokerResponseError, errno=106): ...


class IneligibleReplicaError(BrokerResponseError, errno=107): ...


class NewLeaderElectedError(BrokerResponseError, errno=108): ...


class OffsetMovedToTieredStorageError(BrokerResponseError, errno=109): ...


class FencedMemberEpochError(BrokerResponseError, errno=110): ...


class UnreleasedInstanceIdError(BrokerResponseError, errno=111): ...


class UnsupportedAssignorError(BrokerResponseError, errno=112): ...


class StaleMemberEpochError(BrokerResponseError, errno=113): ...


class MismatchedEndpointTypeError(BrokerResponseError, errno=114): ...


class UnsupportedEndpointTypeError(BrokerResponseError, errno=115): ...


class UnknownControllerIdError(BrokerResponseError, errno=116): ...


class UnknownSubscriptionIdError(BrokerResponseError, errno=117): ...


class TelemetryTooLargeError(BrokerResponseError, errno=118): ...


class InvalidRegistrationError(BrokerResponseError, errno=119): ...


class TransactionAbortableError(BrokerResponseError, errno=120): ...


class InvalidRecordStateError(BrokerResponseError, errno=121): ...


class ShareSessionNotFoundError(BrokerResponseError, errno=122): ...


class InvalidShareSessionEpochError(BrokerResponseError, errno=123): ...


class FencedStateEpochError(BrokerResponseError, errno=124): ...


class InvalidVoterKeyError(BrokerResponseError, errno=125): ...


class DuplicateVoterError(BrokerResponseError, errno=126): ...


class VoterNotFoundError(BrokerResponseError, errno=127): ...


class InvalidRegularExpressionError(BrokerResponseError, errno=128): ...


class RebootstrapRequiredError(BrokerResponseError, errno=129): ...


class StreamsInvalidTopologyError(BrokerResponseError, errno=130): ...


class StreamsInvalidTopologyEpochError(BrokerResponseError, errno=131): ...


class StreamsTopologyFencedError(BrokerResponseError, errno=132): ...


class ShareSessionLimitReachedError(BrokerResponseError, errno=133): ...


# aiokafka's names for two codes, so code written against aiokafka keeps working.
MessageSizeTooLargeError = MessageTooLargeError
NotLeaderForPartitionError = NotLeaderOrFollowerError

__all__ = [
    "ERROR_TABLE",
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
    "BrokerResponseError",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "DelegationTokenAuthDisabledError",
    "DelegationTokenAuthorizationFailedError",
    "DelegationTokenExpiredError",
    "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError",
    "DelegationTokenRequestNotAllowedError",
    "DuplicateBrokerRegistrationError",
    "DuplicateResourceError",
    "DuplicateSequenceNumberError",
    "DuplicateVoterError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "ErrorInfo",
    "FeatureUpdateFailedError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "FencedStateEpochError",
    "FetchSessionIdNotFoundError",
    "FetchSessionTopicIdError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentClusterIdError",
    "InconsistentGroupProtocolError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "IneligibleReplicaError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigError",
    "InvalidFetchSessionEpochError",
    "InvalidFetchSizeError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidPrincipalTypeError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidRecordStateError",
    "InvalidRegistrationError",
    "InvalidRegularExpressionError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidShareSessionEpochError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "InvalidVoterKeyError",
    "KafkaError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "ListenerNotFoundError",
    "LogDirNotFoundError",
    "MemberIdRequiredError",
    "MessageSizeTooLargeError",
    "MessageTooLargeError",
    "MismatchedEndpointTypeError",
    "NetworkError",
    "NewLeaderElectedError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderForPartitionError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetMovedToTieredStorageError",
    "OffsetNotAvailableError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PolicyViolationError",
    "PositionOutOfRangeError",
    "PreferredLeaderNotAvailableError",
    "PrincipalDeserializationFailureError",
    "ProducerFencedError",
    "ProtocolError",
    "ReassignmentInProgressError",
    "RebalanceInProgressError",
    "RebootstrapRequiredError",
    "RecordListTooLargeError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SaslAuthenticationFailedError",
    "SecurityDisabledError",
    "ShareSessionLimitReachedError",
    "ShareSessionNotFoundError",
    "SnapshotNotFoundError",
    "StaleBrokerEpochError",
    "StaleControllerEpochError",
    "StaleMemberEpochError",
    "StreamsInvalidTopologyEpochError",
    "StreamsInvalidTopologyError",
    "StreamsTopologyFencedError",
    "TelemetryTooLargeError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TopicDeletionDisabledError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownControllerIdError",
    "UnknownErrorCodeError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownSubscriptionIdError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnreleasedInstanceIdError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedCompressionTypeError",
    "UnsupportedEndpointTypeError",
    "UnsupportedForMessageFormatError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "VoterNotFoundError",
    "error_for_code",
    "raise_for_code",
]
