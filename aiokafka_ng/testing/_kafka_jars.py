"""Finding Java and fetching the pinned Apache Kafka jars from Maven Central, once.

The jars of ``org.apache.kafka:kafka_2.13`` (the broker), ``kafka-tools`` and
``kafka-clients`` at :data:`KAFKA_VERSION`, with their runtime dependencies and a log4j2
binding for SLF4J, are copied by ``mvn dependency:copy-dependencies`` from a pom written at
run time into ``<home>/libs``. ``<home>`` defaults to ``~/.cache/aiokafka_ng/kafka-<version>``
and is shared by the tests and ``.ci/run``; ``AIOKAFKA_NG_KAFKA_HOME`` and
``AIOKAFKA_NG_KAFKA_VERSION`` override it.

Concurrency: several pytest processes may want the jars at once, so the fetch holds an
exclusive ``flock`` on ``<home>/.lock``, copies into ``libs.partial`` and renames it to
``libs`` only when Maven succeeded; a directory named ``libs`` is therefore always complete,
and a fetch killed half-way leaves nothing that looks usable.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

#: The Apache Kafka release the cluster runs (4.2+ has share groups production-ready).
KAFKA_VERSION: Final = "4.4.0"
#: log4j2's SLF4J 1.x binding, so the broker's logging reaches its log file.
_LOG4J_VERSION: Final = "2.25.5"

HOME_ENV_VAR: Final = "AIOKAFKA_NG_KAFKA_HOME"
VERSION_ENV_VAR: Final = "AIOKAFKA_NG_KAFKA_VERSION"
JAVA_ENV_VAR: Final = "AIOKAFKA_NG_JAVA"

_FETCH_TIMEOUT: Final = 900.0

_POM: Final = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by aiokafka_ng.testing: the jars of Apache Kafka {version} for the test cluster. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>aiokafka-ng.testing</groupId>
  <artifactId>kafka-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


class KafkaSetupError(RuntimeError):
    """Java, Maven or the Kafka jars are missing or could not be fetched (one-line reason)."""


def kafka_version(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(VERSION_ENV_VAR) or KAFKA_VERSION


def kafka_home(env: Mapping[str, str] | None = None) -> Path:
    """Where the jars of this version live (``libs/`` inside it)."""
    env = os.environ if env is None else env
    if env.get(HOME_ENV_VAR):
        return Path(env[HOME_ENV_VAR])
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "aiokafka_ng" / f"kafka-{kafka_version(env)}"


def find_java(env: Mapping[str, str] | None = None) -> str:
    """The ``java`` to run: ``AIOKAFKA_NG_JAVA``, ``$JAVA_HOME/bin/java``, then the PATH's."""
    env = os.environ if env is None else env
    for candidate in (
        env.get(JAVA_ENV_VAR),
        str(Path(env["JAVA_HOME"]) / "bin" / "java") if env.get("JAVA_HOME") else None,
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java", path=env.get("PATH"))
    if found is None:
        raise KafkaSetupError("no Java found (install a JDK 17+, or set JAVA_HOME)")
    return found


def jars_present(env: Mapping[str, str] | None = None) -> bool:
    return (kafka_home(env) / "libs").is_dir()


def missing_tools(env: Mapping[str, str] | None = None) -> str | None:
    """Why a Kafka cluster cannot be started here, in one line, or None if it can."""
    env = os.environ if env is None else env
    try:
        find_java(env)
    except KafkaSetupError as exc:
        return str(exc)
    if not jars_present(env) and shutil.which("mvn", path=env.get("PATH")) is None:
        return "no Maven (mvn) to fetch the Kafka jars, and they are not cached"
    return None


def ensure_jars(env: Mapping[str, str] | None = None) -> Path:
    """The ``libs`` directory with every jar, fetched first if it is not there yet."""
    env = os.environ if env is None else env
    home = kafka_home(env)
    libs = home / "libs"
    if libs.is_dir():
        return libs
    mvn = shutil.which("mvn", path=env.get("PATH"))
    if mvn is None:
        raise KafkaSetupError(f"no Maven (mvn) to fetch the Kafka jars into {libs}")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching: wait for it
        if libs.is_dir():
            return libs
        _fetch(mvn, home, kafka_version(env))
    return libs


def _fetch(mvn: str, home: Path, version: str) -> None:
    partial = home / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    pom = home / "pom.xml"
    pom.write_text(_POM.format(version=version, log4j=_LOG4J_VERSION))
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
        "-DincludeScope=runtime",
    ]
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_FETCH_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaSetupError(
            f"fetching the Kafka {version} jars with Maven took over {_FETCH_TIMEOUT:g} s"
        ) from exc
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        errors = [line for line in lines if "ERROR" in line] or lines
        last = errors[0] if errors else f"exit code {result.returncode}"
        raise KafkaSetupError(f"Maven could not fetch the Kafka {version} jars: {last}")
    partial.rename(home / "libs")
    (home / "fetch-seconds").write_text(f"{time.monotonic() - started:.1f}\n")
