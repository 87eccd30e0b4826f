"""Create, describe and delete topics with the admin client.

Usage::

    python examples/admin_script.py 127.0.0.1:9092 [topic-prefix]

Runs under ``anyio.run`` (asyncio); prints what it did and exits non-zero on failure.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from aiokafka_ng.admin import AdminClient, ConfigResource, NewTopic
from aiokafka_ng.errors import UnknownTopicOrPartitionError


async def until_known(call: Callable[[], Awaitable[Any]]) -> Any:
    """Kafka creates topics asynchronously: for a moment after create_topics() returns, a
    broker that has not applied the creation yet answers UNKNOWN_TOPIC_OR_PARTITION for
    the new topics. Ask again until none does (bounded)."""
    with anyio.fail_after(30):
        while True:
            results = await call()
            unknown = [
                e for e in results.failed.values() if isinstance(e, UnknownTopicOrPartitionError)
            ]
            if not unknown:
                return results
            await anyio.sleep(0.1)


async def main(bootstrap_servers: str, prefix: str) -> None:
    names = [f"{prefix}-orders", f"{prefix}-payments"]
    async with AdminClient(bootstrap_servers=bootstrap_servers) as admin:
        cluster = await admin.describe_cluster()
        print(f"cluster {cluster.cluster_id}: {len(cluster.brokers)} broker(s)")

        created = await admin.create_topics(
            [
                NewTopic(
                    names[0],
                    num_partitions=3,
                    replication_factor=1,
                    topic_configs={"retention.ms": "3600000"},
                ),
                NewTopic(names[1], num_partitions=1, replication_factor=1),
            ]
        )
        for name, topic in created.raise_on_error().items():
            print(f"created {name}: {topic.num_partitions} partition(s)")

        described = await until_known(lambda: admin.describe_topics(names))
        for name, desc in described.raise_on_error().items():
            leaders = [p.leader.node_id if p.leader else None for p in desc.partitions]
            print(f"described {name}: id={desc.topic_id} leaders={leaders}")

        configs = await until_known(
            lambda: admin.describe_configs([ConfigResource.topic(names[0])])
        )
        entry = configs.result(ConfigResource.topic(names[0])).get("retention.ms")
        print(f"{names[0]} retention.ms={entry.value if entry else None}")

        deleted = await admin.delete_topics(names)
        deleted.raise_on_error()
        print(f"deleted {', '.join(names)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap_servers", metavar="HOST:PORT")
    parser.add_argument("prefix", nargs="?", default="example", help="topic name prefix")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap_servers, args.prefix)
