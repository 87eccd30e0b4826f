"""AdminClient under a 3-node FakeKafka (in memory, on virtual time): the controller moves
between calls, so the node the client remembers as controller answers NOT_CONTROLLER; the
client must refresh metadata, find the new controller and succeed there (within the
operation's timeout). Kafka 4's brokers forward admin requests to the controller and never
answer NOT_CONTROLLER themselves; older clusters and a controller that moves during a call
do, so the old controller's answer is injected."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.admin import AdminClient
from aiokafka_ng.admin.models import NewTopic
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

CREATE_TOPICS, DELETE_TOPICS = 19, 20
NOT_CONTROLLER = 41


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_not_controller_after_controller_moves() -> None:
    """Create (controller 1 -> 2) then delete (2 -> 3): each first attempt goes to the old
    controller, gets NOT_CONTROLLER, and the retry succeeds at the new one."""
    names = ["adm-0", "adm-1", "adm-2"]
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        config = kafka.client_config()
        async with AdminClient(**config, retry_backoff_ms=10, retry_backoff_max_ms=100) as admin:
            with anyio.fail_after(30):
                before = await admin.describe_cluster()
                assert before.controller is not None and before.controller.node_id == 1
                kafka.move_controller(2)
                kafka.inject(CREATE_TOPICS, NOT_CONTROLLER, times=None, match=1)
                created = await admin.create_topics(
                    [NewTopic(n, num_partitions=2, replication_factor=1) for n in names]
                )
                created.raise_on_error()
                assert kafka.errors(CREATE_TOPICS, NOT_CONTROLLER, node=1) == 3  # one per topic
                assert kafka.requests(2)[CREATE_TOPICS] == 1
                after = await admin.describe_cluster()
                assert after.controller is not None and after.controller.node_id == 2

                kafka.move_controller(3)
                kafka.inject(DELETE_TOPICS, NOT_CONTROLLER, times=None, match=2)
                deleted = await admin.delete_topics(names[:2])
                deleted.raise_on_error()
                assert kafka.requests(2)[DELETE_TOPICS] == 1
                assert kafka.errors(DELETE_TOPICS, NOT_CONTROLLER, node=2) == 2
                assert kafka.requests(3)[DELETE_TOPICS] == 1
        # What the cluster itself holds, not the client's word for it.
        assert set(kafka.cluster.topics) & set(names) == {names[2]}


async def test_killed_controller_fails_over() -> None:
    """The controller node dies and the role fails over to a live node (the dead one
    refuses connections): create_topics must find the new controller -- a failed
    connection to the cached controller has to make the client refresh metadata, as
    Java's admin client does on a disconnect -- well within the operation's timeout."""
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        config = kafka.client_config()
        async with AdminClient(**config, retry_backoff_ms=10, retry_backoff_max_ms=100) as admin:
            (await admin.create_topics([NewTopic("adm-a", 1, 1)])).raise_on_error()
            old = kafka.controller
            kafka.kill(old)
            assert kafka.controller != old
            started = anyio.current_time()
            with anyio.fail_after(20):
                results = await admin.create_topics([NewTopic("adm-b", 1, 1)], timeout_ms=5000)
            seconds = anyio.current_time() - started
            results.raise_on_error()
        assert kafka.requests(kafka.controller)[CREATE_TOPICS] == 1
        # The client learned of the dead controller from its cut connection or from a
        # refused reconnect (either, depending on which it met first), never from a timeout:
        assert seconds < 2  # virtual seconds: a refresh, not the operation's timeout
