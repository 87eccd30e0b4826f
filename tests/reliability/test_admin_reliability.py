"""AdminClient under a simulated 3-node cluster: the controller moves between calls, so the
node the client remembers as controller answers NOT_CONTROLLER; the client must refresh
metadata, find the new controller and succeed there (within the operation's timeout)."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng.admin import AdminClient
from aiokafka_ng.admin.models import NewTopic
from tests.helpers import topic_name
from tests.reliability.helpers import Stopwatch, simulated_cluster

# broker: it starts its own brokers, no fixture says so (see tests/conftest.py)
pytestmark = [pytest.mark.anyio, pytest.mark.broker]

CREATE_TOPICS, DELETE_TOPICS = 19, 20
NOT_CONTROLLER = 41


async def test_not_controller_after_controller_moves(anyio_backend: str) -> None:
    """Create (controller 0 -> 1) then delete (1 -> 2): each first attempt goes to the old
    controller, gets NOT_CONTROLLER, and the retry succeeds at the new one."""
    names = [topic_name("adm") for _ in range(3)]
    async with (
        simulated_cluster(seed=31) as (broker, sim),
        AdminClient(
            bootstrap_servers=sim.bootstrap_servers, retry_backoff_ms=10, retry_backoff_max_ms=100
        ) as admin,
    ):
        watch = Stopwatch()
        with anyio.fail_after(30):
            before = await admin.describe_cluster()
            assert before.controller is not None and before.controller.node_id == 0
            sim.move_controller(1)
            created = await admin.create_topics(
                [NewTopic(n, num_partitions=2, replication_factor=1) for n in names]
            )
            created.raise_on_error()
            assert sim.errors(CREATE_TOPICS, NOT_CONTROLLER, node=0) == 1
            assert sim.requests[1][CREATE_TOPICS] == 1
            after = await admin.describe_cluster()
            assert after.controller is not None and after.controller.node_id == 1

            sim.move_controller(2)
            deleted = await admin.delete_topics(names[:2])
            deleted.raise_on_error()
            assert sim.errors(DELETE_TOPICS, NOT_CONTROLLER, node=1) == 1
            assert sim.requests[2][DELETE_TOPICS] == 1
        seconds = watch.seconds
        # What the broker itself holds, not the client's word for it.
        async with AdminClient(bootstrap_servers=broker.bootstrap_servers) as direct:
            listed = await direct.list_topics()
    assert names[2] in listed and not {names[0], names[1]} & set(listed)
    print(
        f"[reliability] admin NOT_CONTROLLER ({anyio_backend}): 2 controller moves, "
        f"NOT_CONTROLLER answered {sim.errors(error_code=NOT_CONTROLLER)}, "
        f"create+delete succeeded, time={seconds:.2f}s"
    )


async def test_killed_controller_fails_over(anyio_backend: str) -> None:
    """The controller node dies and the role fails over to a live node (the dead one
    refuses connections): create_topics must find the new controller -- a failed
    connection to the cached controller has to make the client refresh metadata, as
    Java's admin client does on a disconnect -- well within the operation's timeout."""
    async with (
        simulated_cluster(seed=32) as (_, sim),
        AdminClient(
            bootstrap_servers=sim.bootstrap_servers, retry_backoff_ms=10, retry_backoff_max_ms=100
        ) as admin,
    ):
        (await admin.create_topics([NewTopic(topic_name("adm"), 1, 1)])).raise_on_error()
        old = sim.controller
        sim.kill(old, failover=True)
        watch = Stopwatch()
        with anyio.fail_after(20):
            results = await admin.create_topics(
                [NewTopic(topic_name("adm"), 1, 1)], timeout_ms=5000
            )
        seconds = watch.seconds
        print(
            f"[reliability] admin controller killed ({anyio_backend}): {old} -> "
            f"{sim.controller}, refused connections {sim.refused[old]}, "
            f"failed {results.failed}, time={seconds:.2f}s"
        )
        results.raise_on_error()
        assert sim.requests[sim.controller][CREATE_TOPICS] == 1
        assert seconds < 2
