"""Build and test the package on every supported CPython beside the one running the suite.

For each version (default: 3.12 and 3.13; 3.11 is the interpreter of the main suite):

1. find the interpreter (``python3.X`` on the PATH, else a pyenv install under
   ``$PYENV_ROOT/versions``);
2. build a wheel from this checkout with pip (mypyc and the C kernel compiled for that
   version, in pip's isolated build environment);
3. install the wheel alone in a clean virtualenv and check, from outside the checkout, that
   it imports compiled: every mypyc module and the C kernel loaded (``__compiled__``);
4. install the test dependencies and run the interpreter-sensitive part of the suite
   against the installed wheel (``python -P``, so the checkout's own ``aiokafka_ng`` is not
   imported), compiled, and on ``PURE_VERSION`` once more with ``AIOKAFKA_NG_PURE_PYTHON=1``.

The main suite runs every test on 3.11; here the other versions run the directories whose
behaviour depends on the interpreter: the codec and its compiled twins, the producer and
consumer hot paths against the real broker, the connection layer and the fuzz tests
(``SUITE``), and, with ``AIOKAFKA_NG_PURE_PYTHON=1``, the codec, the producer and the
consumer against the broker again (``PURE_SUITE``): the fallback a machine without a
compiler installs. The whole suite on
three interpreters would triple CI's time for tests of the admin, CLI and docs layers that
run no version-specific code.

The versions run at the same time, each building from its own copy of the checkout (mypyc
writes its C sources into ``build/`` under fixed names, so two builds in one tree would
overwrite each other's) and writing its own log (printed when all have ended, a failed
version's last): one after the other they took 20 of CI's 77 minutes. The pure pass runs
on ``PURE_VERSION`` only: what it tests (the twins instead of the compiled modules) is the
same Python code on every interpreter, so a second interpreter repeated it for nothing.

Usage: ``python tools/pythons.py [--versions 3.12 3.13] [--keep DIR] [--jobs N]``. Exits
non-zero if a version fails; a version that cannot be found fails too (``--missing-ok`` turns
that into a note, for a laptop without it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.12", "3.13")
#: The one interpreter of the pure pass (the newest: a user without a compiler most likely
#: runs a Python newer than the last wheel they could build).
PURE_VERSION = VERSIONS[-1]
SUITE = (
    "tests/protocol",
    "tests/producer",
    "tests/consumer",
    "tests/net",
    "tests/fuzz",
    "tests/transactions",
)
#: The group tests spend their minute in the broker's first-join delay, not in our code.
#: The GSSAPI tests need the gssapi package built against the system's Kerberos, which
#: .ci/run installs for the main interpreter only; the SASL code they run is version-neutral.
IGNORED = ("tests/consumer/test_group_broker.py", "tests/net/test_kerberos.py")
#: The consumer's tests add about 35 s to the pure pass (154 tests, measured with
#: ``AIOKAFKA_NG_PURE_PYTHON=1`` on the embedded broker).
PURE_SUITE = ("tests/protocol", "tests/producer", "tests/consumer")
#: What only the compiled build has (the C kernel, BinaryColumn, untracked records): not
#: run in the pure pass. Everything else of PURE_SUITE runs on the pure-Python twins
#: (``IGNORED`` is left out of both passes).
PURE_EXCLUDED = (
    "--ignore=tests/protocol/test_speedups.py",
    "--ignore=tests/protocol/test_binary_column_mutation.py",
    "--ignore=tests/protocol/test_record_gc.py",
    "--ignore=tests/producer/test_send_fast.py",  # send()'s C path against its Python twin
    "--deselect=tests/protocol/test_record_columns.py::test_the_c_decoder_takes_well_formed_batches",
    # The C entry points called directly (decode_columns, record_sizes) at their edges.
    "--deselect=tests/protocol/test_decode_overflow.py::test_the_input_as_an_output_buffer",
    "--deselect=tests/protocol/test_decode_overflow.py::test_record_sizes_at_int64_edges",
    "--deselect=tests/protocol/test_decode_overflow.py::test_record_sizes_with_an_overhead_that",
    "-k",
    "not column or record_columns",  # send_many's BinaryColumn cases
)
#: Of the ``dev`` extra, what the suites above never reach: Spark (pyspark alone is most of a
#: minute to install) and the docs builder. Everything else stays: the suites also run mypy
#: (typed requests) and the docs' code blocks (the MSK signer's recipe).
NOT_NEEDED = frozenset({"pyspark", "mkdocs"})


def suite_requirements() -> list[str]:
    """The ``dev`` extra of pyproject.toml without ``NOT_NEEDED``."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
    return [r for r in dev if re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0] not in NOT_NEEDED]


#: Checked in a clean venv, from a directory outside the checkout.
IMPORT_CHECK = """
import aiokafka_ng, sys
from aiokafka_ng import _native
from aiokafka_ng.protocol import _speedups
assert aiokafka_ng.__compiled__, "the wheel did not import compiled"
assert "site-packages" in aiokafka_ng.__file__, aiokafka_ng.__file__
print(f"{sys.version.split()[0]}: compiled, C kernel at {_speedups.__file__}")
"""


def find_interpreter(version: str) -> Path | None:
    """``python3.X`` that runs (a pyenv shim may exist and still refuse), else pyenv's copy."""
    name = f"python{version}"
    found = shutil.which(name)
    if found and _runs(Path(found), version):
        return Path(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted((pyenv_root / "versions").glob(f"{version}.*"), reverse=True):
        exe = candidate / "bin" / name
        if exe.exists() and _runs(exe, version):
            return exe
    return None


def _runs(exe: Path, version: str) -> bool:
    try:
        out = subprocess.run(
            [str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def _run(cmd: list[str], *, cwd: Path, log: TextIO, env: dict[str, str] | None = None) -> None:
    start = time.monotonic()
    print(f"$ {' '.join(cmd)}", file=log, flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    print(f"({time.monotonic() - start:.0f} s)", file=log, flush=True)


def copy_checkout(dest: Path) -> None:
    """The files of the checkout a build reads: git's list (tracked, and new files not
    ignored) where there is a git work tree, else the tree without build products."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        shutil.copytree(
            ROOT,
            dest,
            ignore=shutil.ignore_patterns(
                ".*", "build", "dist", "*.so", "__pycache__", "*.egg-info"
            ),
        )
        return
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a deleted file git still lists is skipped
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def check_version(version: str, work: Path, log: TextIO) -> float:
    exe = find_interpreter(version)
    if exe is None:
        raise LookupError(f"Python {version} not found (python{version} or pyenv)")
    start = time.monotonic()
    dist = work / f"dist-{version}"
    venv = work / f"venv-{version}"
    source = work / f"src-{version}"
    copy_checkout(source)
    _run([str(exe), "-m", "venv", str(venv)], cwd=work, log=log)
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], cwd=work, log=log)
    # The wheel is built from the checkout as a user's `pip install` would build it.
    env = {k: v for k, v in os.environ.items() if k != "AIOKAFKA_NG_PURE_PYTHON"}
    wheel_cmd = [py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)]
    _run(wheel_cmd, cwd=work, log=log, env=env)
    (wheel,) = dist.glob("aiokafka_ng-*.whl")
    _run([py, "-m", "pip", "install", "-q", str(wheel)], cwd=work, log=log)
    _run([py, "-c", IMPORT_CHECK], cwd=work, log=log, env=env)
    _run([py, "-m", "pip", "install", "-q", *suite_requirements()], cwd=work, log=log)
    # `-P`: the checkout is not put on sys.path, so `aiokafka_ng` is the installed wheel. The
    # tests import their helpers as `tests.…`: a directory holding only a link to tests/
    # gives them that package and nothing else of the checkout.
    helpers = work / "tests-only"
    helpers.mkdir(exist_ok=True)
    if not (helpers / "tests").exists():
        (helpers / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    env["PYTHONPATH"] = str(helpers)
    # --broker=tansu: the interpreter-sensitive code runs the same on either broker; the
    # Kafka pass of the broker suites is the main interpreter's.
    # `-n 0`: one process each (the versions already run side by side).
    pytest = [py, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--broker=tansu"]
    ignored = [f"--ignore={path}" for path in IGNORED]
    _run([*pytest, *SUITE, *ignored], cwd=ROOT, log=log, env=env)
    if version == PURE_VERSION:
        pure = {**env, "AIOKAFKA_NG_PURE_PYTHON": "1"}
        _run([*pytest, *PURE_SUITE, *PURE_EXCLUDED, *ignored], cwd=ROOT, log=log, env=pure)
    return time.monotonic() - start


def _one(version: str, work: Path, missing_ok: bool) -> tuple[bool, str, Path]:
    """(passed, the result line, its log) for one version."""
    log_path = work / f"pythons-{version}.log"
    with log_path.open("w") as log:
        try:
            took = check_version(version, work, log)
        except LookupError as exc:
            return missing_ok, f"{version}: skipped ({exc})", log_path
        except subprocess.CalledProcessError as exc:
            return False, f"pythons: {version} failed: {' '.join(map(str, exc.cmd))}", log_path
    return True, f"{version}: wheel built, imports compiled, suite passed ({took:.0f} s)", log_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS))
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    parser.add_argument("--missing-ok", action="store_true", help="note a missing version")
    parser.add_argument("--jobs", type=int, default=len(VERSIONS), help="versions at once")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="aiokafka-ng-pythons-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            done = list(pool.map(lambda v: _one(v, work, args.missing_ok), args.versions))
        # The logs of failed versions last, where a reader of the output's tail looks.
        for _ok, _, log_path in sorted(done, key=lambda d: d[0], reverse=True):
            print(f"===== {log_path.name} =====\n{log_path.read_text()}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for ok, line, _ in done:
        print(line, file=sys.stdout if ok else sys.stderr, flush=True)
    return 0 if all(ok for ok, _, _ in done) else 1


if __name__ == "__main__":
    sys.exit(main())
