"""The release artifacts, built once and each installed into a clean virtualenv.

The session fixture builds, as ``tools/release.py`` does for a release but for the running
interpreter only (``nox -s release`` builds every supported one): the sdist; from it the
compiled wheel, repaired into a manylinux one by auditwheel, and the pure-Python wheel; and,
from the same sdist, an install on a machine without a C compiler (``CC`` pointing nowhere).
The builds take setuptools and mypy from this environment (``--no-isolation``; the
``[dev]`` extra has both) instead of downloading them per build.

Each artifact then goes into a virtualenv of its own (with the ``trio`` extra), where
``tests/packaging_smoke.py`` checks from outside the checkout: the import is the installed
copy, the version is the metadata's, LICENSE and NOTICE are installed, the build is the one
expected (compiled: every mypyc module and the C kernel; pure: with the reason the build
recorded), and records make a produce/consume round trip through ``FakeKafka`` on asyncio
and trio. ``aiokafka-ng --version`` says the same about the build.

Measured on the 2-core dev machine, shared with four other jobs (load 3-7): 177 s of wall
time, the builds 120 s of it; 82 s of CPU (user time of the test and its processes), most of
it mypyc's type check and the compiled wheel's C. (943 s at load 10-13, before setup.py
stopped running mypyc for the metadata and the sdist.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import aiokafka_ng

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import release  # noqa: E402

SMOKE = Path(__file__).with_name("packaging_smoke.py")
NO_COMPILER = "/nonexistent/cc"
PURE_WHEEL_REASON = "AIOKAFKA_NG_PURE_PYTHON was set when it was built"
NO_COMPILER_REASON = f"the C build failed with '{NO_COMPILER}'"
PY_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"

pytestmark = [
    pytest.mark.slow,
    # The first test builds everything: 120 s measured, 864 s on a machine loaded five-fold.
    pytest.mark.timeout(1800),
    pytest.mark.skipif(sys.platform != "linux", reason="manylinux wheels are built on Linux"),
]


@dataclass(frozen=True)
class Artifacts:
    sdist: Path
    manylinux: release.Repaired
    pure: Path
    #: A virtualenv where the sdist was installed with no working C compiler.
    no_compiler_venv: Path


def _venv(path: Path) -> Path:
    """A clean virtualenv (no system site-packages) with a current pip; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def _pip_install(python: Path, target: str, env: dict[str, str] | None = None) -> None:
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", target]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _install_without_compiler(sdist: Path, venv: Path) -> Path:
    python = _venv(venv)
    env = {k: v for k, v in os.environ.items() if k != "AIOKAFKA_NG_PURE_PYTHON"}
    env["CC"] = NO_COMPILER  # what setuptools compiles with; it does not exist
    _pip_install(python, f"{sdist}[trio]", env)
    return venv


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Artifacts]:
    out = tmp_path_factory.mktemp("artifacts")
    sdist = release.build_sdist(out / "sdist", isolated=False)
    # Side by side: the compiled wheel's C is one long gcc run; the other two mostly wait
    # for mypyc's type check, pip and the network.
    with ThreadPoolExecutor(max_workers=3) as pool:
        compiled = pool.submit(
            release.build_wheel, sys.executable, sdist, out / "compiled", isolated=False
        )
        pure = pool.submit(
            release.build_wheel, sys.executable, sdist, out / "pure", pure=True, isolated=False
        )
        no_compiler = pool.submit(_install_without_compiler, sdist, out / "venv-no-compiler")
        repaired = release.repair(compiled.result(), out / "manylinux")
        yield Artifacts(sdist, repaired, pure.result(), no_compiler.result())


def _smoke(python: Path, cwd: Path, *expect: str) -> dict[str, object]:
    """Run the smoke check with ``python`` (isolated: no checkout on sys.path)."""
    done = subprocess.run(
        [str(python), "-I", str(SMOKE), *expect],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "AIOKAFKA_NG_PURE_PYTHON"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["version"] == aiokafka_ng.__version__
    assert seen["round_trip_asyncio"] == seen["round_trip_trio"] == 500
    return seen


def _cli_version(python: Path) -> str:
    done = subprocess.run(
        [str(python.parent / "aiokafka-ng"), "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_sdist_holds_the_package_and_its_legal_files_not_the_tests(
    artifacts: Artifacts,
) -> None:
    members = set(release.sdist_members(artifacts.sdist))
    tracked = subprocess.run(
        ["git", "ls-files", "aiokafka_ng"], cwd=ROOT, capture_output=True, text=True
    )
    if tracked.returncode == 0:  # a git checkout: every tracked file of the package is there
        assert set(tracked.stdout.split()) <= members
    for name in ("LICENSE", "NOTICE", "CHANGELOG.md", "README.md", "setup.py", "pyproject.toml"):
        assert name in members
    assert not [m for m in members if m.startswith("tests/") or m.startswith("test_")]
    assert not [m for m in members if m.endswith((".so", "_build.json"))]


def test_the_manylinux_wheel_installs_compiled(artifacts: Artifacts, tmp_path: Path) -> None:
    wheel = artifacts.manylinux.wheel
    assert re.fullmatch(
        rf"aiokafka_ng-{re.escape(aiokafka_ng.__version__)}-{PY_TAG}-{PY_TAG}-"
        r"(manylinux_2_\d+_x86_64|manylinux\w*\.manylinux_2_\d+_x86_64)(\.manylinux\w+)*\.whl",
        wheel.name,
    ), wheel.name
    assert "is consistent with the following platform tag" in artifacts.manylinux.show
    names = _wheel_names(wheel)
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in names)
    assert any(n.endswith("dist-info/licenses/NOTICE") for n in names)
    python = _venv(tmp_path / "venv")
    _pip_install(python, f"{wheel}[trio]")
    seen = _smoke(python, tmp_path, "compiled")
    assert seen["build"] == "compiled: mypyc and the C kernel"
    assert _cli_version(python) == (
        f"aiokafka-ng {aiokafka_ng.__version__} (compiled: mypyc and the C kernel)"
    )


def test_the_pure_wheel_installs_pure_and_says_why(artifacts: Artifacts, tmp_path: Path) -> None:
    wheel = artifacts.pure
    assert wheel.name == f"aiokafka_ng-{aiokafka_ng.__version__}-py3-none-any.whl"
    names = _wheel_names(wheel)
    assert not [n for n in names if n.endswith(".so")]
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in names)
    python = _venv(tmp_path / "venv")
    _pip_install(python, f"{wheel}[trio]")
    seen = _smoke(python, tmp_path, "pure", PURE_WHEEL_REASON)
    assert PURE_WHEEL_REASON in str(seen["build"])
    assert _cli_version(python).startswith(
        f"aiokafka-ng {aiokafka_ng.__version__} (pure Python: {PURE_WHEEL_REASON}"
    )


def test_the_sdist_without_a_c_compiler_installs_pure_and_says_why(
    artifacts: Artifacts, tmp_path: Path
) -> None:
    python = artifacts.no_compiler_venv / "bin" / "python"
    seen = _smoke(python, tmp_path, "pure", NO_COMPILER_REASON)
    assert NO_COMPILER in str(seen["build"])
    version = _cli_version(python)
    assert version.startswith(f"aiokafka-ng {aiokafka_ng.__version__} (pure Python: ")
    assert NO_COMPILER_REASON in version
