"""One connection's request path, without a broker's cost: requests per second through
``Connection.send`` against an in-process responder on 127.0.0.1 that answers every frame at
once (ApiVersions properly, anything else with an empty Metadata answer).

What it measures is the client's per-request work (the sans-IO ClientConnection and its
anyio driver: permits, the write lock, framing, matching, decoding) plus the responder's,
which is the same for every client version; it prints the rate and the process's CPU time
per request: so it is for A/B runs of this package against
itself (``PYTHONPATH=<other checkout> python bench/bench_connection.py``), alternating, not an
absolute figure.

Run: ``python bench/bench_connection.py [--requests N] [--senders K] [--backend trio]``.
"""

from __future__ import annotations

import argparse
import time

import anyio
import anyio.abc

from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.framing import FrameReader, decode_request_header, encode_response
from aiokafka_ng.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataResponse

_VERSION = 12


async def _respond(stream: anyio.abc.ByteStream) -> None:
    reader = FrameReader()
    metadata = encode_response(MetadataResponse(), _VERSION, 0)
    try:
        while True:
            reader.feed(await stream.receive())
            out = []
            while (frame := reader.next_frame()) is not None:
                header, _ = decode_request_header(frame)
                if header.api_key == ApiVersionsResponse.API_KEY:
                    versions = ApiVersionsResponse(
                        api_keys=[ApiVersion(18, 0, 4), ApiVersion(3, 0, _VERSION)]
                    )
                    out.append(encode_response(versions, 0, header.correlation_id))
                else:
                    out.append(metadata[:4] + frame[4:8] + metadata[8:])
            if out:
                await stream.send(b"".join(out))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


async def _run(requests: int, senders: int) -> tuple[float, float]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _respond)
        config = ConnectionConfig(max_in_flight=senders)
        async with connect("127.0.0.1", port, config) as conn:

            async def sender(n: int) -> None:
                for _ in range(n):
                    await conn.send(MetadataRequest(), version=_VERSION)

            started = time.perf_counter()
            cpu = time.process_time()
            async with anyio.create_task_group() as senders_tg:
                for _ in range(senders):
                    senders_tg.start_soon(sender, requests // senders)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu
            assert conn.statistics().responses_received == 1 + requests // senders * senders
        tg.cancel_scope.cancel()
    done = requests // senders * senders
    return done / elapsed, cpu / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--senders", type=int, default=5, help="also max_in_flight")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    rate, cpu_us = anyio.run(_run, args.requests, args.senders, backend=args.backend)
    # CPU per request (client and responder: one process) is steadier than the rate on a
    # loaded machine.
    print(
        f"{rate:,.0f} requests/s, {cpu_us:.1f} us CPU/request "
        f"({args.senders} senders, {args.backend})"
    )


if __name__ == "__main__":
    main()
