"""The same client under trio: a producer and a consumer in one nursery.

Usage::

    python examples/trio_example.py 127.0.0.1:9092 [topic]

aiokafka_ng is built on anyio, so it runs under ``trio.run`` unchanged. The consumer reads
partition 0 of a new topic while a producer task writes to it; the consumer task stops
after the last record and the nursery ends when both are done.
"""

from __future__ import annotations

import argparse
import uuid

import trio

from aiokafka_ng.admin import AdminClient, NewTopic
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer

COUNT = 500


async def produce(bootstrap_servers: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap_servers) as producer:
        for i in range(COUNT):
            await producer.send(topic, f"message {i}".encode())
        await producer.flush()
    print(f"producer: sent {COUNT} records")


async def consume(bootstrap_servers: str, topic: str) -> None:
    async with Consumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        received = 0
        with trio.fail_after(60):
            while received < COUNT:
                batches = await c.getmany(timeout_ms=1000)
                for records in batches.values():
                    for record in records:
                        assert record.value == f"message {received}".encode()
                        received += 1
    print(f"consumer: received {received} records, in order")


async def main(bootstrap_servers: str, topic: str) -> None:
    async with AdminClient(bootstrap_servers=bootstrap_servers) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume, bootstrap_servers, topic)
        nursery.start_soon(produce, bootstrap_servers, topic)
    print("done under trio")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap_servers", metavar="HOST:PORT")
    parser.add_argument("topic", nargs="?", default=None, help="default: a new random name")
    args = parser.parse_args()
    trio.run(main, args.bootstrap_servers, args.topic or f"trio-example-{uuid.uuid4().hex[:8]}")
