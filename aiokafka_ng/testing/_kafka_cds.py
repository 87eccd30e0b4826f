"""The class-data archive that lets a Kafka node's JVM start faster (dynamic AppCDS, JEP 350).

Why. Most of a node's start is the JVM reading, parsing and verifying the few thousand
classes of the broker's jars, and the suite starts nodes often (the shared cluster, the
one-node clusters of the OAuth, Kerberos and re-bootstrap tests, and every restart in the
fault tests). On this 2-core machine with both cores kept busy, one node's restart took
16 s without the archive and 13.6 s with it (7 s with it and the C1-only JIT that
``_kafka.py`` also sets); a 3-node cluster's start 25 s -> 16 s.

How. A JVM started with ``-XX:ArchiveClassesAtExit=F`` (JDK 13+) writes the classes it loaded
to ``F`` when it exits; one started with ``-XX:SharedArchiveFile=F`` maps them instead of
loading them from the jars. :func:`make_archive` (run by ``aiokafka-ng broker --kafka
--fetch-only``, so by ``.ci/run``) starts a one-node cluster with the first option, sends it
one record, and stops it with SIGTERM, the way out on which the JVM writes the archive.
:func:`archive_for` names the file after the ``java`` binary (its resolved path, size and
mtime) beside the jars; a node is started with the archive only if that file exists. A JVM
that cannot use a given archive (another build, jars changed under it) logs a warning in
the node's log and loads the classes the usual way, so a stale archive costs time, never a
start.

Concurrency. Made under the same ``flock`` as the jars' fetch, written under a
``.partial`` name and renamed when complete: an archive under the final name is whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Final

import anyio

from aiokafka_ng.testing._kafka_jars import KafkaSetupError, ensure_jars, find_java, kafka_home

#: A one-node cluster's start, one record, and the stop: generous for a loaded machine.
_MAKE_TIMEOUT: Final = 300.0


def archive_for(java: str, home: Path) -> Path:
    """Where the archive of ``java`` for the jars under ``home`` lives (it may not exist)."""
    resolved = os.path.realpath(java)
    stat = os.stat(resolved)
    key = hashlib.sha256(f"{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    return home / f"classes-{key[:16]}.jsa"


def make_archive() -> Path:
    """The archive for this machine's ``java`` and Kafka jars, made first if it is missing."""
    java = find_java()
    ensure_jars()
    home = kafka_home()
    target = archive_for(java, home)
    if target.is_file():
        return target
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be making it: wait for it
        if target.is_file():
            return target
        partial = target.with_name(target.name + ".partial")
        partial.unlink(missing_ok=True)
        anyio.run(_run_once, partial)
        if not partial.is_file() or partial.stat().st_size == 0:
            raise KafkaSetupError(f"{java} wrote no class archive to {partial}")
        partial.rename(target)
    return target


async def _run_once(archive: Path) -> None:
    # Imported here: _kafka imports this module (archive_for), and only this needs a client.
    from aiokafka_ng.errors import KafkaError
    from aiokafka_ng.producer import Producer
    from aiokafka_ng.testing._kafka import KafkaCluster, KafkaClusterError

    cluster = KafkaCluster(brokers=1, java_options=[f"-XX:ArchiveClassesAtExit={archive}"])
    try:
        with anyio.fail_after(_MAKE_TIMEOUT):
            async with cluster:
                async with Producer(
                    bootstrap_servers=cluster.bootstrap_servers, enable_idempotence=False
                ) as producer:
                    await producer.send_and_wait("class-archive", b"warm-up")
                # SIGTERM, not the SIGKILL that closing the cluster sends: only a JVM that
                # exits on its own writes the archive.
                await cluster.brokers[0].stop()
    except (KafkaClusterError, KafkaError, TimeoutError) as exc:
        raise KafkaSetupError(f"no class archive: the one-node cluster failed: {exc}") from exc
