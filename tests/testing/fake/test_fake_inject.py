"""The error answers of FakeKafka.inject, without a cluster: every API and version the fake
can fail gives an answer that encodes and decodes back to the same bytes, and itemized
answers carry the error on every item."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.messages import add_partitions_to_txn as apt
from aiokafka_ng.protocol.messages import alter_configs as ac
from aiokafka_ng.protocol.messages import create_partitions as cp
from aiokafka_ng.protocol.messages import delete_topics as dt
from aiokafka_ng.protocol.messages import incremental_alter_configs as iac
from aiokafka_ng.protocol.messages import offset_fetch as of
from aiokafka_ng.protocol.messages import produce as pr
from aiokafka_ng.protocol.messages import txn_offset_commit as toc
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing.fake._inject import error_response


class _Topology:
    controller = 0

    def endpoints(self) -> list[tuple[int, str, int]]:
        return [(0, "127.0.0.1", 1000), (1, "127.0.0.1", 1001)]

    def leader(self, topic: str, partition: int) -> int:
        return 1

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 3

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return None


def test_every_error_answer_encodes_in_every_version() -> None:
    checked = 0
    for api_key, request_type in sorted(REQUEST_TYPES.items()):
        for version in range(request_type.MIN_VERSION, request_type.MAX_VERSION + 1):
            try:
                request = request_type.decode(request_type().encode(version), version)
            except ValueError:
                continue  # a default request that is not valid in this version
            response = error_response(_Topology(), request, version, 42)
            if response is None:
                continue
            data = response.encode(version)
            assert RESPONSE_TYPES[api_key].decode(data, version).encode(version) == data
            checked += 1
    assert checked > 150


def test_itemized_error_answers_carry_the_error_per_item() -> None:
    cases: list[tuple[ApiMessage, int, Callable[[Any], list[tuple[str | None, int]]]]] = [
        (
            dt.DeleteTopicsRequest(topic_names=["a", "b"]),
            5,
            lambda r: [(x.name, x.error_code) for x in r.responses],
        ),
        (
            dt.DeleteTopicsRequest(topics=[dt.DeleteTopicState(name="a")]),
            6,
            lambda r: [(x.name, x.error_code) for x in r.responses],
        ),
        (
            cp.CreatePartitionsRequest(topics=[cp.CreatePartitionsTopic(name="a", count=3)]),
            3,
            lambda r: [(x.name, x.error_code) for x in r.results],
        ),
        (
            ac.AlterConfigsRequest(resources=[ac.AlterConfigsResource(2, "a")]),
            2,
            lambda r: [(x.resource_name, x.error_code) for x in r.responses],
        ),
        (
            iac.IncrementalAlterConfigsRequest(resources=[iac.AlterConfigsResource(2, "a")]),
            1,
            lambda r: [(x.resource_name, x.error_code) for x in r.responses],
        ),
        # No top-level error code in these versions: the error goes on each item.
        (
            of.OffsetFetchRequest(groups=[of.OffsetFetchRequestGroup(group_id="a")]),
            9,
            lambda r: [(x.group_id, x.error_code) for x in r.groups],
        ),
        (
            toc.TxnOffsetCommitRequest(
                topics=[
                    toc.TxnOffsetCommitRequestTopic(
                        name="a",
                        partitions=[toc.TxnOffsetCommitRequestPartition(partition_index=0)],
                    )
                ]
            ),
            4,
            lambda r: [(x.name, p.error_code) for x in r.topics for p in x.partitions],
        ),
        (
            apt.AddPartitionsToTxnRequest(
                v3_and_below_topics=[apt.AddPartitionsToTxnTopic(name="a", partitions=[0])]
            ),
            3,
            lambda r: [
                (x.name, p.partition_error_code)
                for x in r.results_by_topic_v3_and_below
                for p in x.results_by_partition
            ],
        ),
    ]
    for request, version, items in cases:
        response = error_response(_Topology(), request, version, 41)
        assert response is not None
        decoded = type(response).decode(response.encode(version), version)
        expected = [(n, 41) for n in (["a", "b"] if version == 5 else ["a"])]
        assert items(decoded) == expected, type(request).__name__


def test_not_leader_in_produce_names_the_leader_kip_951() -> None:
    request = pr.ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            pr.TopicProduceData(
                name="t", partition_data=[pr.PartitionProduceData(index=0, records=b"")]
            )
        ],
    )
    response = error_response(_Topology(), request, 10, 6)
    assert isinstance(response, pr.ProduceResponse)
    [part] = response.responses[0].partition_responses
    assert (part.error_code, part.current_leader.leader_id, part.current_leader.leader_epoch) == (
        6,
        1,
        3,
    )
    assert [(e.node_id, e.port) for e in response.node_endpoints] == [(1, 1001)]
