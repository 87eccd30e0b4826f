"""Send records and print where they landed.

Usage::

    python examples/producer_script.py 127.0.0.1:9092 [topic] [count]

``send()`` only queues a record and returns its delivery future; awaiting the future gives
the ``RecordMetadata`` (partition, offset) once the broker acknowledged the record. Leaving
``async with`` delivers everything still queued. Exits non-zero if any record failed.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import anyio

from aiokafka_ng.producer import Producer


async def main(bootstrap_servers: str, topic: str, count: int) -> int:
    async with Producer(bootstrap_servers=bootstrap_servers, linger_ms=5) as producer:
        # Queue everything first (send() never waits for the network)...
        futures = [
            await producer.send(topic, f"order {i}".encode(), key=f"customer-{i % 5}".encode())
            for i in range(count)
        ]
        # ...then collect the outcomes. Same key -> same partition, in send order.
        per_partition: Counter[int] = Counter()
        for fut in futures:
            meta = await fut
            per_partition[meta.partition] += 1
        # One more, waited for on the spot.
        meta = await producer.send_and_wait(topic, b"last order", key=b"customer-0")
    print(f"sent {count + 1} records to {topic}")
    for partition, n in sorted(per_partition.items()):
        print(f"  partition {partition}: {n} records")
    print(f"last record: partition {meta.partition} offset {meta.offset}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap_servers", metavar="HOST:PORT")
    parser.add_argument("topic", nargs="?", default="example-orders")
    parser.add_argument("count", nargs="?", type=int, default=100)
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.bootstrap_servers, args.topic, args.count))
