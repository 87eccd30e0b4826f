"""aiokafka_ng.testing.SchemaRegistry: the real registry on loopback, and what it says when
it cannot run."""

from __future__ import annotations

import json
import os
import stat
import urllib.request
from pathlib import Path

import pytest

from aiokafka_ng.testing import SchemaRegistry, SchemaRegistryProcessError
from aiokafka_ng.testing._registry import (
    APICURIO_VERSION,
    HOME_ENV_VAR,
    JAVA_ENV_VAR,
    ensure_distribution,
    find_java21,
    java_major,
    missing_tools,
)


def _script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_fixture_serves_the_confluent_api_on_loopback_only(schema_registry: SchemaRegistry) -> None:
    assert schema_registry.url.startswith("http://127.0.0.1:")
    assert schema_registry.url.endswith("/apis/ccompat/v7")
    with urllib.request.urlopen(schema_registry.url + "/subjects", timeout=30) as response:
        assert isinstance(json.loads(response.read()), list)
    # Left to its defaults, the management interface would listen on 0.0.0.0:9000.
    assert "Management interface listening on http://127.0.0.1:" in schema_registry.log_tail(10_000)
    assert java_major(schema_registry.java) is not None
    assert (java_major(schema_registry.java) or 0) >= 21


def test_java_17_alone_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    java17 = Path("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
    if not java17.exists():
        pytest.skip("no Java 17 at /usr/lib/jvm/java-17-openjdk-amd64 to try")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java17)
    empty = tmp_path / "jvms"
    empty.mkdir()
    env = {"PATH": str(bin_dir)}
    with pytest.raises(
        SchemaRegistryProcessError, match=r"no Java 21\+ for Apicurio Registry"
    ) as info:
        find_java21(env, jvm_dir=empty)
    assert "(17)" in info.value.reason
    assert missing_tools(env, jvm_dir=empty) == info.value.reason


def test_no_maven_and_nothing_cached_is_named(tmp_path: Path) -> None:
    java = find_java21()
    env = {HOME_ENV_VAR: str(tmp_path / "home"), JAVA_ENV_VAR: java, "PATH": str(tmp_path)}
    reason = missing_tools(env)
    assert reason is not None
    assert reason.startswith("no Maven (mvn) to fetch Apicurio Registry")
    with pytest.raises(SchemaRegistryProcessError, match=r"no Maven \(mvn\)"):
        ensure_distribution(env)


def test_a_refused_fetch_names_the_artifact_and_leaves_nothing_usable(tmp_path: Path) -> None:
    # An mvn that fails as Maven does when a registry refuses the artifact.
    _script(
        tmp_path,
        "mvn",
        'echo "[ERROR] Failed to execute goal: Could not resolve artifact (403 Forbidden)"\n'
        "exit 1\n",
    )
    home = tmp_path / "home"
    env = {HOME_ENV_VAR: str(home), "PATH": str(tmp_path)}
    with pytest.raises(SchemaRegistryProcessError) as info:
        ensure_distribution(env)
    assert f"apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all" in info.value.reason
    assert "403 Forbidden" in info.value.reason
    assert not (home / "dist").exists()


@pytest.mark.broker  # starts a registry of its own (see tests/conftest.py)
def test_a_jvm_that_exits_fails_the_start_with_its_reason_and_is_cleaned_up() -> None:
    registry = SchemaRegistry(java_options=["-XX:+NoSuchOptionAtAll"])
    with pytest.raises(SchemaRegistryProcessError) as info:
        registry.start_sync()
    assert "exited with code" in info.value.reason
    assert "NoSuchOptionAtAll" in info.value.log_tail
    assert not registry.running
    assert registry.log_path is None  # its directory is gone


@pytest.mark.broker  # starts a registry of its own (see tests/conftest.py)
def test_stop_ends_the_process_group() -> None:
    with SchemaRegistry() as registry:
        pid = registry.pid
        assert pid is not None
        assert os.getpgid(pid) == pid  # a group of its own, which stop() signals
        with urllib.request.urlopen(registry.url + "/subjects", timeout=30) as response:
            assert response.status == 200
    assert not registry.running
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    with pytest.raises(SchemaRegistryProcessError, match="not running"):
        _ = registry.url


@pytest.mark.broker  # fetches the registry (159 MB) when not cached: not for the quick command
def test_cli_fetch_only_prints_the_distribution_and_java(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from aiokafka_ng.cli import main

    assert main(["registry", "--fetch-only"]) == 0
    out = capsys.readouterr().out
    assert f"apicurio-registry-{APICURIO_VERSION}" in out
    assert "registry_java=" in out
    java = out.split("registry_java=")[1].split()[0]
    assert (java_major(java) or 0) >= 21
