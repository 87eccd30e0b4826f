"""``python -m aiokafka_ng.testing``: run a local broker in the foreground.

Prints ``bootstrap_servers=127.0.0.1:PORT`` once the broker accepts connections, then runs
until SIGINT (Ctrl-C) or SIGTERM and stops the broker. Exits 1 if the broker cannot start or
dies on its own.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from aiokafka_ng.testing._broker import LocalBroker, LocalBrokerError

# How often to check that the broker is still alive while waiting for a signal.
_WATCH_INTERVAL = 0.5


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aiokafka_ng.testing",
        description="Run a local Kafka-compatible broker (Tansu) on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=None, help="listener port (default: free)")
    parser.add_argument(
        "--advertised-port", type=int, default=None, help="port named in metadata (default: --port)"
    )
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    broker = LocalBroker(port=args.port, advertised_port=args.advertised_port)
    try:
        broker.start_sync()
    except LocalBrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"bootstrap_servers={broker.bootstrap_servers}", flush=True)
        while not stop.wait(_WATCH_INTERVAL):
            if not broker.running:
                tail = "\n".join(broker.log().splitlines()[-40:])
                print(f"error: the broker exited on its own; log:\n{tail}", file=sys.stderr)
                return 1
    finally:
        broker.stop_sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
