"""The limits on what an answer may make the client allocate, piece by piece.

Decoder: DecodeLimits (per-field and per-answer struct counts, shared with tagged fields),
errors naming the field, no traceback kept. Frame cap: refused at the size prefix, derived
from each client's settings, enforced per connection. Cluster: a Metadata answer is held
to the topics asked for. Producer: the keyed bulk path's per-partition allocation is held
to the per-topic limit. The canned answers come from FakeKafka's scripts, in memory on
virtual time (a real broker never sends them: that is the point); the producer row uses
the real broker.
"""

from __future__ import annotations

import gc
import struct
import uuid
from typing import Any

import pytest
from hostile_answers import METADATA_VERSION, many_partitions, peak_rss_growth, raw_answer

from aiokafka_ng.admin.config import AdminConfig
from aiokafka_ng.cluster import Cluster, ClusterConfig
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import KafkaConnectionError, KafkaTimeoutError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer import accumulator as accumulator_module
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import FrameReader, decode_response, encode_response
from aiokafka_ng.protocol.limits import (
    DEFAULT_LIMITS,
    MAX_PARTITIONS_PER_TOPIC,
    DecodeLimits,
    ResponseLimitError,
)
from aiokafka_ng.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from aiokafka_ng.protocol.messages.fetch import FetchResponse, NodeEndpoint
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from aiokafka_ng.testing import FakeKafka, LocalBroker, virtual_time
from aiokafka_ng.testing.fake import RawFrames, Received

_MB = 1024 * 1024


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Virtual time for the FakeKafka tests (in memory); real time for the one on the real
    broker, whose bytes come over TCP (the virtual clock would jump past them)."""
    if "kafka_broker" in request.fixturenames:
        return str(request.param)
    return virtual_time.backend(request.param)


def metadata(topics: int, partitions: int) -> MetadataResponse:
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=1, host="h", port=1)],
        topics=[
            MetadataResponseTopic(
                name=f"t{i}",
                partitions=[
                    MetadataResponsePartition(partition_index=p) for p in range(partitions)
                ],
            )
            for i in range(topics)
        ],
    )


def frame_of(response: Any, version: int = METADATA_VERSION) -> bytes:
    return encode_response(response, version, 7)[4:]  # without the size prefix


# -- decoder -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 7, 9, 12])
def test_partitions_per_topic_limit_names_the_field(version: int) -> None:
    frame = frame_of(metadata(1, 5), version)
    limits = DecodeLimits(per_field={"MetadataResponseTopic.partitions": 4})
    with pytest.raises(ResponseLimitError, match=r"MetadataResponseTopic\.partitions has 5 "):
        decode_response(MetadataResponse, version, frame, limits)
    ok = DecodeLimits(per_field={"MetadataResponseTopic.partitions": 5})
    assert len(decode_response(MetadataResponse, version, frame, ok)[1].topics[0].partitions) == 5


def test_the_struct_budget_counts_every_array_of_the_answer() -> None:
    frame = frame_of(metadata(3, 3))  # 1 broker + 3 topics + 9 partitions = 13 structs
    with pytest.raises(ResponseLimitError, match=r"past 12 structs in all"):
        decode_response(MetadataResponse, METADATA_VERSION, frame, DecodeLimits(max_structs=12))
    _, ok = decode_response(MetadataResponse, METADATA_VERSION, frame, DecodeLimits(max_structs=13))
    assert [len(t.partitions) for t in ok.topics] == [3, 3, 3]


def test_tagged_fields_share_the_answers_budget() -> None:
    # node_endpoints is a tagged field of FetchResponse: its Reader is a separate one and
    # must not start a fresh budget (nesting would otherwise multiply it).
    response = FetchResponse(
        node_endpoints=[NodeEndpoint(node_id=i, host="h", port=1) for i in range(4)]
    )
    frame = encode_response(response, 16, 1)[4:]
    with pytest.raises(ResponseLimitError, match=r"FetchResponse\.node_endpoints has 4 elements"):
        decode_response(FetchResponse, 16, frame, DecodeLimits(max_structs=3))
    _, ok = decode_response(FetchResponse, 16, frame, DecodeLimits(max_structs=4))
    assert len(ok.node_endpoints) == 4


def test_the_default_limits_stop_an_array_before_it_is_decoded() -> None:
    assert DEFAULT_LIMITS.max_structs == 1_000_000
    assert DEFAULT_LIMITS.per_field == {
        "MetadataResponseTopic.partitions": MAX_PARTITIONS_PER_TOPIC,
        "MetadataResponse.topics": 100_000,
        "MetadataResponse.brokers": 10_000,
        "ApiVersionsResponse.api_keys": 32_768,
    }
    frame = many_partitions(7, 9092, MAX_PARTITIONS_PER_TOPIC + 1)[4:]  # 3 MB
    limit = r"has 100001 elements, more than the limit"
    with peak_rss_growth() as growth, pytest.raises(ResponseLimitError, match=limit):
        decode_response(MetadataResponse, METADATA_VERSION, frame)
    assert growth() < 10 * _MB  # decoded, the partitions would take ~40 MB
    brokers = [MetadataResponseBroker(node_id=i, host="h", port=1) for i in range(10_001)]
    frame = frame_of(MetadataResponse(brokers=brokers))
    with pytest.raises(ResponseLimitError, match=r"MetadataResponse\.brokers has 10001 "):
        decode_response(MetadataResponse, METADATA_VERSION, frame)
    keys = [ApiVersion(api_key=i % 32_768, min_version=0, max_version=1) for i in range(32_769)]
    frame = encode_response(ApiVersionsResponse(api_keys=keys), 3, 1)[4:]
    with pytest.raises(ResponseLimitError, match=r"ApiVersionsResponse\.api_keys has 32769 "):
        decode_response(ApiVersionsResponse, 3, frame)


@pytest.mark.parametrize(
    ("mangle", "field"),
    [
        (lambda b: b[: b.index(b"\x03t0") + 1] + b"t", "MetadataResponseTopic.name: need 2"),
        (lambda b: b.replace(b"\x02h", b"\x02\xff"), "MetadataResponseBroker.host: invalid"),
        (lambda b: b[:-3], "MetadataResponseTopic.topic_authorized_operations: need 4"),
        (
            lambda b: b[: b.index(b"\x03t0") + 3 + 16 + 1 + 1 + 5],  # in a partition's fixed run
            "MetadataResponsePartition.error_code/partition_index/leader_id/leader_epoch: need 14",
        ),
    ],
    ids=["string_past_the_end", "invalid_utf8", "truncated", "fixed_run_cut"],
)
def test_decode_errors_name_the_field_and_keep_no_traceback(mangle: Any, field: str) -> None:
    frame = mangle(frame_of(metadata(1, 1)))
    with pytest.raises(ProtocolError) as caught:
        decode_response(MetadataResponse, METADATA_VERSION, frame)
    assert str(caught.value).startswith(f"MetadataResponse v{METADATA_VERSION}, ")
    assert field in str(caught.value), str(caught.value)
    # The original error's frames (which hold the answer's bytes) are let go.
    cause = caught.value.__cause__
    assert cause is not None and cause.__traceback__ is None


# -- frame cap -------------------------------------------------------------------------------


def test_a_frame_over_the_cap_is_refused_at_its_prefix() -> None:
    reader = FrameReader(1024)
    reader.feed(struct.pack(">i", 1025))
    with pytest.raises(ResponseLimitError, match="frame of 1025 bytes is larger than the 1024"):
        reader.next_frame()
    fine = FrameReader(1024)
    fine.feed(struct.pack(">i", 1024) + b"x" * 1024)
    assert fine.next_frame() == b"x" * 1024


def test_each_client_derives_its_frame_cap_from_its_own_settings() -> None:
    consumer = ConsumerConfig(group_id="g").connection_config()
    assert consumer.max_response_bytes == 50 * _MB + 32 * _MB
    big = ConsumerConfig(group_id="g", fetch_max_bytes=1, max_partition_fetch_bytes=200 * _MB)
    assert big.connection_config().max_response_bytes == 232 * _MB
    assert ProducerConfig().connection_config().max_response_bytes == 32 * _MB
    large = ProducerConfig(max_request_size=64 * _MB)
    assert large.cluster_config().connection.max_response_bytes == 64 * _MB
    assert AdminConfig().connection_config().max_response_bytes == 100 * _MB
    with pytest.raises(ValueError, match="max_response_bytes"):
        ConnectionConfig(max_response_bytes=10)


def in_memory(kafka: FakeKafka, **settings: Any) -> ConnectionConfig:
    return ConnectionConfig(transport=kafka.transport, **settings)


@pytest.mark.anyio
async def test_the_connection_enforces_its_frame_cap_and_per_request_limits() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        host, port = "127.0.0.1", kafka.nodes[1].port
        answers = iter([metadata(2, 1), metadata(1, 5000)])
        kafka.answer(MetadataRequest.API_KEY, lambda call: next(answers))
        config = in_memory(kafka, max_response_bytes=64 * 1024)
        async with connect(host, port, config) as conn:
            # Per request: an answer with more topics than the caller allows.
            limits = DecodeLimits(per_field={"MetadataResponse.topics": 1})
            pending = await conn.submit(MetadataRequest(topics=None), limits=limits)
            with pytest.raises(KafkaConnectionError) as caught:
                await pending.wait()
            assert f"{host}:{port}" in str(caught.value)
            assert "MetadataResponse.topics has 2 elements, more than the limit of 1" in str(
                caught.value
            )
            assert conn.closed
        async with connect(host, port, config) as conn:
            # The frame cap: a 100 KiB answer to a 64 KiB client.
            pending = await conn.submit(MetadataRequest(topics=None))
            with pytest.raises(KafkaConnectionError, match=r"larger than the 65536"):
                await pending.wait()
        assert kafka.connections(1) == 2


# -- cluster -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_metadata_answer_is_held_to_the_topics_asked_for() -> None:
    """The cluster asks for one topic; the answer claims 11 topics of 99,999 partitions (a
    33 MB frame, over a million partition structs: ~400 MB and ~5 s to decode before the
    per-answer budget would stop it). Held to one topic, it fails at the topic count."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        port = kafka.nodes[1].port
        kafka.api_versions[MetadataRequest.API_KEY] = (METADATA_VERSION, METADATA_VERSION)
        hostile = many_partitions(0, port, 99_999, topics=11)
        broker = MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port)
        sane = encode_response(MetadataResponse(brokers=[broker]), METADATA_VERSION, 0)

        def answer(call: Received) -> RawFrames:
            return raw_answer(call, hostile if call.request.topics else sane)

        kafka.answer(MetadataRequest.API_KEY, answer)
        config = ClusterConfig(
            bootstrap_servers=[("127.0.0.1", port)],
            connection=in_memory(kafka, request_timeout_s=2),
            retry_backoff_ms=10,
            retry_backoff_max_ms=20,
        )
        gc.collect()
        with peak_rss_growth() as growth:
            async with Cluster(config) as cluster:
                with pytest.raises(KafkaTimeoutError):
                    await cluster.wait_for_topics(["t0"], timeout=0.5)
                error = cluster.last_error
        asked = [r.request.topics for r in kafka.received(MetadataRequest.API_KEY)]
    assert error is not None
    assert "MetadataResponse.topics has 11 elements, more than the limit of 1" in str(error)
    assert growth() < 100 * _MB  # two 33 MB frames at most; no partition decoded
    assert any(asked) and not all(asked)  # the bootstrap's, then the topic's


# -- producer ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_keyed_bulk_run_is_held_to_the_partition_limit(
    kafka_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """split_keyed_run allocates a slot per partition of the topic, a count that comes from
    the broker: the call site refuses a topic over the per-topic limit. Lowered here to one
    under the real topic's count, since no real topic has 100,000 partitions."""
    topic = f"lim-{uuid.uuid4().hex[:10]}"
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
        partitions = len(await p.partitions_for(topic))
        assert partitions >= 2
        monkeypatch.setattr(accumulator_module, "MAX_PARTITIONS_PER_TOPIC", partitions - 1)
        run = await p.send_many(topic, [b"a", b"b"], keys=[b"k1", b"k2"])
        with pytest.raises(ResponseLimitError, match=rf"has {partitions} partitions, more than"):
            await run
        assert run.failed == 2
        memory = p.statistics().memory
        assert memory.available == memory.total  # the run's memory came back
        monkeypatch.setattr(accumulator_module, "MAX_PARTITIONS_PER_TOPIC", partitions)
        metas = await p.send_many(topic, [b"a", b"b"], keys=[b"k1", b"k2"])
        assert len(await metas) == 2
