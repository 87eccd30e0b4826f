"""Read a topic as a member of a consumer group and commit what was processed.

Usage::

    python examples/consumer_script.py 127.0.0.1:9092 topic [max-records] [group]

Starts from the earliest offset when the group has no committed offset yet, stops after
``max-records`` records (default 100) or 10 s without a new one, then commits. Run it twice:
the second run starts where the first one stopped.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from aiokafka_ng.consumer import Consumer


async def main(bootstrap_servers: str, topic: str, limit: int, group: str) -> int:
    seen = 0
    async with Consumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,  # commit explicitly, after processing
        # A short session: partitions of a crashed instance move on within 6 s. (Some
        # brokers also hold a new group's first join for half of it.)
        session_timeout_ms=6000,
        heartbeat_interval_ms=2000,
    ) as consumer:
        while seen < limit:
            batches = await consumer.getmany(timeout_ms=10000, max_records=limit - seen)
            if not batches:
                break
            for tp, records in batches.items():
                for record in records:
                    print(f"{tp.topic}[{tp.partition}]@{record.offset}: {record.value!r}")
                seen += len(records)
            await consumer.commit()
    print(f"consumed and committed {seen} records")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap_servers", metavar="HOST:PORT")
    parser.add_argument("topic")
    parser.add_argument("max_records", nargs="?", type=int, default=100)
    parser.add_argument("group", nargs="?", default="example-group")
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.bootstrap_servers, args.topic, args.max_records, args.group))
