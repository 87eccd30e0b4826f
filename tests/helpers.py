"""Helpers every part of the suite shares (``from tests.helpers import topic_name``).

Per-area helpers stay beside their tests (``tests/consumer/helpers.py``,
``tests/reliability/helpers.py``, ``tests/kafka/helpers.py``); what two areas need lives here.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.testing._kafka_procs import free_ports

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry

    from aiokafka_ng.producer import DeliveryFuture, Producer


def topic_name(prefix: str = "t") -> str:
    """A name no other test (nor an earlier run against the same broker) uses:
    ``prefix-<10 hex digits>``. For topics, and for group and transactional ids too."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    """A 127.0.0.1 port nothing listened on a moment ago (below the ephemeral range, so no
    outgoing connection is handed it meanwhile): for a broker that is not there yet."""
    return free_ports(1)[0]


def assert_dialled_at_reconnect_backoff(
    attempts: Sequence[float], reconnect_ms: float, reconnect_max_ms: float
) -> None:
    """``attempts`` (the times of the refused dials that followed a cut, oldest first) came
    at the reconnect policy's pauses and at no slower rhythm of a client's own: the n-th
    dial after the cut is the pool's (n+1)-th failure in a row, so the gap before the next
    one is the un-jittered pause for n+1 failures, ``min(max, base * 2**n)``, within its
    ±20% jitter. For the producer's and the consumer's reconnect pacing tests."""
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    for n, gap in enumerate(gaps, start=2):
        expected = min(reconnect_max_ms, reconnect_ms * 2 ** (n - 1)) / 1000
        assert 0.8 * expected - 1e-9 <= gap <= 1.2 * expected + 1e-9, (n, gaps)


async def send_numbered_until(
    producer: Producer,
    topic: str,
    stop: anyio.Event,
    sent: list[DeliveryFuture],
    *,
    distinct_keys: int | None = 30,
) -> None:
    """Send ``b"%06d" % i`` for i = 0, 1, 2, ... until ``stop`` is set, appending each
    delivery future to ``sent`` (record i's future is ``sent[i]``). Keys ``k<i % distinct_keys>``
    (every record its own key when None) spread the records over the partitions. A short
    pause every 20 sends is pacing, not synchronisation: it leaves the fault under test,
    and the consumers, time to run."""
    i = 0
    while not stop.is_set():
        key = b"k%d" % (i if distinct_keys is None else i % distinct_keys)
        sent.append(await producer.send(topic, b"%06d" % i, key=key))
        i += 1
        if i % 20 == 0:
            await anyio.sleep(0.01)


async def acked_numbers(sent: Sequence[DeliveryFuture]) -> dict[int, list[int]]:
    """partition -> the numbers of the records acknowledged there, in send order: what a
    partition's log must hold, in that order, for "lost 0, duplicated 0, reordered 0".
    Raises what a failed send raised: a test that allows none needs no other check."""
    acked: dict[int, list[int]] = {}
    for i, future in enumerate(sent):
        meta = await future
        acked.setdefault(meta.partition, []).append(i)
    return acked


def require_kerberos() -> None:
    """At the top of a GSSAPI test module, before importing gssapi: the gssapi package and
    the MIT KDC binaries must be here. Without them the module is skipped with the reason on
    a developer's machine (the README's command must pass without system Kerberos) and fails
    under ``CI=true`` (.ci/run installs them)."""
    import importlib.util
    import os
    import shutil

    import pytest

    missing = [
        what
        for what, present in (
            ("the gssapi package (pip install 'aiokafka-ng[gssapi]')",
             importlib.util.find_spec("gssapi") is not None),
            ("the MIT Kerberos KDC (Debian: krb5-kdc, krb5-admin-server)",
             shutil.which("krb5kdc", path=os.pathsep.join([os.environ.get("PATH", ""),
                                                           "/usr/sbin", "/sbin"])) is not None),
        )
        if not present
    ]  # fmt: skip
    if not missing:
        return
    reason = "GSSAPI tests need " + " and ".join(missing)
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


@contextmanager
def confluent_registry(url: str) -> Iterator[ConfluentRegistry]:
    """confluent-kafka's schema registry client for the registry at ``url`` (Apicurio
    Registry, :class:`aiokafka_ng.testing.SchemaRegistry`), closed on exit (it holds
    sockets), which does not ask Apicurio for subject associations.

    confluent-kafka's serializers (2.16, subject name strategy ``ASSOCIATED`` by default)
    first GET ``/associations/resources/-/<topic>`` for every topic they serialize to, and
    use ``<topic>-value`` when it answers 404. Apicurio 3.3.3 has no such route, and a path
    it has no route for is sometimes never answered: replayed with plain GETs on fresh
    connections, 0-4 in each 2,000 to an unknown path (16 in 18,000; at a hang every
    registry thread was idle: the request is dropped), none in 7,000 to known routes (6,000
    of them answering 404 for an unknown subject). The client's timeout then stalled a test
    (to pytest's 300 s before it had one; 10 or 30 s since, once or twice a run). So this
    client answers that lookup with the 404 Apicurio gives when it answers, without asking:
    the serializers' fallback to the topic strategy runs as before. The timeout (10 s)
    stays for anything else the registry leaves unanswered.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    class WithoutAssociations(SchemaRegistryClient):
        def get_associations_by_resource_name(self, *args: object, **kwargs: object) -> Any:
            raise SchemaRegistryError(404, 404, "Apicurio Registry has no associations")

    with WithoutAssociations({"url": url, "timeout": 10}) as registry:
        yield registry
