"""What the group membership tests against FakeKafka share (test_group_canned.py: the
classic member, test_kip848_canned.py: the KIP-848 member): one member of group ``g``
subscribed to topic ``t`` (4 partitions) on a 3-node FakeKafka in memory, joined and settled
before the test's body runs; a listener that records the callbacks; the faults a coordinator
can show a request (no answer at all) and a count of the coordinator lookups between two
requests, read off the wire (``FakeKafka.received``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer import ConsumerRebalanceListener
from aiokafka_ng.consumer.membership import GroupMembership, GroupSettings, MemberProtocol
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

T = "t"
ALL = frozenset(TopicPartition(T, p) for p in range(4))
FIND_COORDINATOR = 10


class Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", frozenset(lost)))


Body = Callable[[GroupMembership, FakeKafka, Cluster, Listener], Any]


async def run_group(
    body: Body,
    protocol: Callable[[GroupMembership], MemberProtocol],
    *,
    listener: Listener | None = None,
    within: float,
    **settings: Any,
) -> FakeKafka:
    """One member of group ``g`` speaking ``protocol``, subscribed to ``t`` (4 partitions)
    with ``listener``: joined and settled, then ``body``, then closed, all ``within``
    seconds (virtual ones on virtual time). ``settings`` are the member's
    (:class:`GroupSettings`; auto-commit off unless told). Returns the FakeKafka, whose
    ``received`` is what the member wrote."""
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(T, partitions=4)
        async with Cluster(ProducerConfig(**kafka.client_config()).cluster_config()) as cluster:
            group_settings = GroupSettings(
                group_id="g", **{"enable_auto_commit": False, **settings}
            )
            subs = SubscriptionState(lambda: None)
            offsets = OffsetsClient(
                cluster, group_id="g", isolation_level=0, backoff=ExponentialBackoff(1, 5),
                timeout_s=5,
            )  # fmt: skip
            group = GroupMembership(cluster, group_settings, subs, offsets, protocol=protocol)
            listener = listener or Listener()
            async with anyio.create_task_group() as tg:
                await tg.start(group.run)
                with anyio.fail_after(within):
                    subs.subscribe([T], listener)
                    group.request_rejoin()
                    while not group.settled:
                        await group.wait_joined()
                    await body(group, kafka, cluster, listener)
                    await group.close()
                tg.cancel_scope.cancel()
    return kafka


async def dropped(call: Received) -> None:
    """A script for ``FakeKafka.answer``: the connection is closed, the request unanswered."""
    return None


async def unanswered(call: Received) -> None:
    """A script for ``FakeKafka.answer``: no answer past the request timeout (the tests'
    are shorter), then the connection is closed."""
    await anyio.sleep(60)


def lookups_between(kafka: FakeKafka, first: Received, last: Received) -> int:
    """FindCoordinator requests received after ``first`` and before ``last`` (in arrival
    order: on virtual time a lookup and the request it serves arrive at the same instant)."""
    order = kafka.received()
    start = next(i for i, x in enumerate(order) if x is first)
    end = next(i for i, x in enumerate(order) if x is last)
    return sum(x.api_key == FIND_COORDINATOR for x in order[start:end])
