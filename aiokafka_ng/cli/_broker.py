"""``aiokafka-ng broker``: a local Kafka-compatible broker (Tansu) in the foreground.

Prints ``bootstrap_servers=127.0.0.1:PORT`` once the broker accepts connections, then runs
until Ctrl-C (SIGINT, exit 130) or SIGTERM (exit 143), stopping the broker first. Exits 1 with
one line if the broker cannot start or dies.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from aiokafka_ng.cli._common import CliError, exit_code_for_signal, first_line

_WATCH_INTERVAL = 0.5


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("broker", help="run a local dev broker in the foreground")
    p.add_argument("--port", type=int, default=None, help="listener port (default: a free one)")
    p.set_defaults(func=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    from aiokafka_ng.testing import LocalBroker, LocalBrokerError

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        broker = LocalBroker(port=args.port)
        broker.start_sync()
    except (LocalBrokerError, ValueError) as exc:
        raise CliError(f"the local broker could not start: {first_line(exc)}") from None
    try:
        print(f"bootstrap_servers={broker.bootstrap_servers}", flush=True)
        print("broker running; press Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(_WATCH_INTERVAL):
            if not broker.running:
                raise CliError("the broker exited on its own")
    finally:
        broker.stop_sync()
    return exit_code_for_signal(received[0])


__all__ = ["register"]
