"""Run test files against the C kernel built with AddressSanitizer and UBSan.

``python -m tests.sanitizer [test paths] [-- pytest args]`` (and ``nox -s sanitize``) builds
the kernel's sources (:data:`SOURCES`) with ``-fsanitize=address,undefined
-fno-sanitize-recover=all`` into a temporary directory, then runs pytest on the test files in
a child process whose ``aiokafka_ng.protocol._speedups`` is that build. Any sanitizer report
(a heap overflow, a use after free, signed overflow, a misaligned load...) aborts the child,
so the run fails; ``tests/protocol/test_sanitized_kernel.py`` runs it in the normal suite at
a short hypothesis budget (``HYPOTHESIS_PROFILE=sanitize``, see ``tests/fuzz/fuzz_budget``).

How the sanitized copy is used without touching the normal in-place build: the child starts
through :func:`_child`, which loads the sanitized ``.so`` under the module's full name and
puts it in ``sys.modules`` before anything imports ``aiokafka_ng``; ``from
aiokafka_ng.protocol import _speedups`` then finds it there, and the rest of the package
(the mypyc modules included) is the working tree's. The child checks that it really got
the sanitized module. Python itself is not built with ASan, so ``libasan`` is preloaded
(``LD_PRELOAD``, it must come first), ``PYTHONMALLOC=malloc`` makes every Python allocation
(bytearray buffers included) an ASan-tracked malloc, and leak detection is off (the
interpreter keeps its objects until exit on purpose).

To put another test file under the sanitizers, add its path to :data:`KERNEL_TESTS` (the
normal suite then runs it too: keep its examples few under the ``sanitize`` profile by using
``budget()``), or pass it on the command line for a one-off run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = ROOT / "aiokafka_ng" / "protocol"
#: setup.py's C_EXTENSION sources (tests/protocol/test_speedups.py checks they agree).
SOURCES = (
    "aiokafka_ng/protocol/_speedups.c",
    "aiokafka_ng/protocol/_column.c",
    "aiokafka_ng/protocol/_decode.c",
    "aiokafka_ng/producer/_send.c",
)
MODULE = "aiokafka_ng.protocol._speedups"

#: The test files that exercise the C kernel, run under the sanitizers by the normal suite.
KERNEL_TESTS = (
    "tests/protocol/test_decode_overflow.py",
    "tests/protocol/test_record_columns.py",
    "tests/protocol/test_speedups.py",
    "tests/protocol/test_binary_column_mutation.py",
    "tests/producer/test_send_fast.py",
)

_FLAGS = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
    "-O1",
    "-shared",
    "-fPIC",
)
_REPORT_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "SUMMARY: UndefinedBehavior")


def compiler() -> str | None:
    return shutil.which("gcc")


def build(dest: Path) -> Path:
    """Compile the kernel with the sanitizers into ``dest``; return the ``.so`` path."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("gcc is needed to build the sanitized kernel")
    out = dest / ("_speedups" + str(sysconfig.get_config_var("EXT_SUFFIX")))
    include = sysconfig.get_paths()["include"]
    cmd = [cc, *_FLAGS, f"-I{include}", f"-I{PROTOCOL}"]
    cmd += [str(ROOT / s) for s in SOURCES] + ["-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _runtime(cc: str, lib: str) -> str:
    path = subprocess.run(
        [cc, f"-print-file-name={lib}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not os.path.isabs(path):
        raise RuntimeError(f"{cc} does not know where {lib} is")
    return path


def environment(so: Path, profile: str | None) -> dict[str, str]:
    """The child's environment: the runtime preloaded, reports fatal, pymalloc off."""
    cc = compiler()
    assert cc is not None
    env = dict(os.environ)
    env.pop("AIOKAFKA_NG_PURE_PYTHON", None)  # the kernel is what is tested
    env["LD_PRELOAD"] = _runtime(cc, "libasan.so")
    env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:abort_on_error=1"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    env["PYTHONMALLOC"] = "malloc"
    env["AIOKAFKA_NG_SANITIZED_KERNEL"] = str(so)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if profile is not None:
        env["HYPOTHESIS_PROFILE"] = profile
    else:
        env.pop("HYPOTHESIS_PROFILE", None)
    return env


def run(
    tests: tuple[str, ...] | list[str] = KERNEL_TESTS,
    pytest_args: tuple[str, ...] | list[str] = (),
    *,
    profile: str | None = "sanitize",
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Build the sanitized kernel and run pytest on ``tests`` with it; the finished child
    (output captured). It failed if its return code is not 0 or :func:`reports` is not
    empty."""
    with tempfile.TemporaryDirectory(prefix="aiokafka-ng-sanitize-") as tmp:
        so = build(Path(tmp))
        # --capture=sys: a report is written to fd 2 as the child aborts; pytest's fd-level
        # capture would hold it in a temporary file that nobody reads.
        cmd = [sys.executable, "-m", "tests.sanitizer", "--child", "-q", "-p", "no:cacheprovider"]
        cmd += ["--capture=sys"]
        cmd += ["-o", "addopts=--strict-markers --strict-config", *pytest_args, *tests]
        return subprocess.run(
            cmd,
            cwd=ROOT,
            env=environment(so, profile),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def reports(output: str) -> list[str]:
    """The sanitizer reports' first lines in a child's output."""
    return [line for line in output.splitlines() if any(m in line for m in _REPORT_MARKERS)]


def _child(pytest_args: list[str]) -> int:
    """In the child: the sanitized module under its real name, then pytest."""
    import importlib.machinery
    import importlib.util

    path = os.environ["AIOKAFKA_NG_SANITIZED_KERNEL"]
    loader = importlib.machinery.ExtensionFileLoader(MODULE, path)
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE] = module  # (its package is not imported yet: pytest's plugin is)
    import pytest

    class CheckKernel:
        """Stops the session if the package did not take the sanitized module."""

        @staticmethod
        def pytest_sessionstart(session: pytest.Session) -> None:
            from aiokafka_ng.protocol import _speedups, speedups

            if (
                _speedups.__file__ != path
                or speedups.KERNEL.decode_columns is not module.decode_columns
            ):
                pytest.exit(f"not the sanitized kernel: {_speedups.__file__}", 3)

    return int(pytest.main(pytest_args, plugins=[CheckKernel()]))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    tests, extra = argv, []
    if "--" in argv:
        cut = argv.index("--")
        tests, extra = argv[:cut], argv[cut + 1 :]
    profile = os.environ.get("HYPOTHESIS_PROFILE")  # the CI budgets unless one is named
    if profile == "fuzz":
        # Fuzz budgets under ASan take longer than pytest-timeout's 300 s per test.
        extra = ["--timeout=0", *extra]
    done = run(tests or KERNEL_TESTS, extra, profile=profile)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    found = reports(done.stdout + done.stderr)
    if found:
        print(f"\n{len(found)} sanitizer report(s)", file=sys.stderr)
    return done.returncode or (1 if found else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
