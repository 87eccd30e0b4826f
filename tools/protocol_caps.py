"""The highest version of each request the client's code is written for (gen_protocol.py).

The generator takes Kafka's schemas from the kafka-clients jar of the pinned Kafka release,
and a newer release brings newer versions of requests the client already sends. Some are
only new optional fields; others change what a request means (Produce v13 names topics by
id, EndTxn v5 bumps the producer epoch at every commit). The version handshake picks the
highest version both sides support, so a version the schemas bring in would be sent at once,
before any code reads its new fields. Each request below is therefore held at the version
its code and tests were written for: ``MAX_STABLE_VERSION`` is the smaller of this cap and
the schema's latest stable version. Raising a cap is a change of the client, made with the
code that handles the new version and the same tests as the old ones (on Apache Kafka), one
request at a time.

Requests not listed here take their schema's latest stable version: those the client does
not send yet, and those whose versions did not move since the code was written.
"""

from __future__ import annotations

#: Request name (without ``Request``) -> highest version the client negotiates, and what
#: the next version would need.
CAPS: dict[str, tuple[int, str]] = {
    "AddRaftVoter": (0, "v1: AckWhenCommitted"),
    "AlterPartitionReassignments": (0, "v1: AllowReplicationFactorChange"),
    "DeleteGroups": (2, "v3: per-group error message"),
    "DescribeCluster": (1, "v2: IncludeFencedBrokers (KIP-1073)"),
    "DescribeGroups": (5, "v6: GROUP_ID_NOT_FOUND for an unknown group (KIP-1043)"),
    "DescribeLogDirs": (4, "v5: new response fields"),
    # Transactions v2 (KIP-890): the producer itself holds these at v4/v11/v4 unless the
    # cluster's transaction.version is 2 (producer/transactions.py).
    "EndTxn": (5, "v5 is transactions v2: the epoch bumped at every commit"),
    "Fetch": (17, "v18: high watermark in the request (KIP-1166)"),
    "ListConfigResources": (0, "v1: ResourceTypes; v0 lists client metrics resources"),
    "ListOffsets": (10, "v11: earliest pending upload offset (KIP-1023)"),
    "ListTransactions": (1, "v2: TransactionalIdPattern (KIP-1152)"),
    "OffsetCommit": (9, "v10: topic ids instead of names (KIP-848)"),
    "OffsetFetch": (9, "v10: topic ids instead of names (KIP-848)"),
    "Produce": (12, "v12 is transactions v2 (implicit AddPartitionsToTxn); v13: topic ids"),
    "TxnOffsetCommit": (5, "v5 is transactions v2 (implicit AddOffsetsToTxn); v6: topic ids"),
    "WriteTxnMarkers": (1, "v2: TransactionVersion per marker (KIP-1228)"),
}
