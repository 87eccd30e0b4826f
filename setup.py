"""Build script: compiles the hot modules with mypyc when it can, else installs pure Python.

Everything else about the package is in ``pyproject.toml``. The compiled modules are the
same ``.py`` files, so the pure-Python build is the reference twin; ``docs/internals.md``
says why mypyc and what it buys. Beside them one small hand-written C extension
(``_speedups.c`` and the files in ``C_EXTENSION``) holds the loops that copy bytes and the
GC-tracking helpers; the modules that call it keep Python twins of its loops.
``AIOKAFKA_NG_PURE_PYTHON=1`` skips compiling; a machine without a C compiler
(or where mypyc fails) gets the pure build with a warning, never a failed install. pip
shows a build's output only with ``-v``, so the build also writes which one it produced and
why into the package (``BUILD_RECORD``): ``aiokafka_ng.build_info()`` and ``aiokafka-ng
--version`` report it at run time. Keep ``COMPILED_MODULES`` equal to
``aiokafka_ng._native.COMPILED_MODULES`` (a test checks).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

COMPILED_MODULES = (
    "aiokafka_ng.protocol.record_reader",
    "aiokafka_ng.protocol.records",
    "aiokafka_ng.protocol.record_columns",
    "aiokafka_ng.producer.partitioner",
    "aiokafka_ng.producer.runs",
    "aiokafka_ng.consumer.buffer",
)
#: The hand-written C extension (``aiokafka_ng._native.C_EXTENSION``) and its sources.
C_EXTENSION = (
    "aiokafka_ng.protocol._speedups",
    [
        "aiokafka_ng/protocol/_speedups.c",
        "aiokafka_ng/protocol/_column.c",
        "aiokafka_ng/protocol/_decode.c",
        "aiokafka_ng/producer/_send.c",
    ],
)
#: The build's record, in the package: {"compiled": bool, "reason": str} (keep equal to
#: ``aiokafka_ng._native.BUILD_RECORD``; a test checks).
BUILD_RECORD = "_build.json"
_TRUE = {"1", "true", "yes", "on"}
#: Why this build is pure Python, once something decided it (else it is compiled).
_pure_reason: list[str] = []


def _go_pure(reason: str) -> None:
    _pure_reason[:] = [reason]
    bar = "=" * 78
    print(
        f"\n{bar}\naiokafka_ng: {reason}: installing the pure-Python build (slower; "
        f"`aiokafka-ng --version` and aiokafka_ng.build_info() say so at run time)\n{bar}\n",
        file=sys.stderr,
    )


def _write_record(package_dir: Path) -> None:
    record = {"compiled": not _pure_reason, "reason": _pure_reason[0] if _pure_reason else ""}
    package_dir.mkdir(parents=True, exist_ok=True)
    (package_dir / BUILD_RECORD).write_text(json.dumps(record) + "\n")


def _c_extension() -> Extension:
    name, sources = C_EXTENSION
    headers = [
        "aiokafka_ng/protocol/_column.h",
        "aiokafka_ng/protocol/_decode.h",
        "aiokafka_ng/producer/_send.h",
    ]
    return Extension(name, sources, depends=headers)


def _planned() -> list[Any]:
    """The extensions ``setup()`` is given: none for the pure build, else the C extension,
    which the mypyc modules join when ``build_ext`` runs (:func:`_mypyc_extensions`).

    mypyc type-checks and writes C for every module when asked (20-30 s), and setup.py runs
    several times per build (metadata, sdist, wheel): asked here it would do that work for
    runs that build nothing."""
    if os.environ.get("AIOKAFKA_NG_PURE_PYTHON", "").strip().lower() in _TRUE:
        _go_pure("AIOKAFKA_NG_PURE_PYTHON was set when it was built")
        return []
    try:
        import mypyc.build  # noqa: F401
    except ImportError as exc:
        _go_pure(f"mypyc is not installed ({exc!r})")
        return []
    return [_c_extension()]


def _mypyc_extensions() -> list[Any] | None:
    """The mypyc-compiled modules' extensions, or None (and the pure build) if mypyc fails."""
    try:
        from mypyc.build import mypycify

        paths = [mod.replace(".", "/") + ".py" for mod in COMPILED_MODULES]
        # mypy only needs to type the compiled modules themselves: the build environment
        # does not have the runtime dependencies, and the package is checked under
        # --strict by the test suite anyway.
        options = ["--follow-imports=silent", "--ignore-missing-imports", "--config-file="]
        return list(mypycify(options + paths, group_name="aiokafka_ng._hot", opt_level="3"))
    except (Exception, SystemExit) as exc:  # mypyc failed
        # A type error mypyc finds ends its run with SystemExit, not an Exception: without
        # catching it the whole install failed instead of falling back to pure Python.
        _go_pure(f"mypyc could not compile the hot modules ({exc!r})")
        return None


#: setup.py's commands that build the extensions (pip and build run bdist_wheel or
#: editable_wheel; the others are what a direct `python setup.py ...` may run).
_BUILDING_COMMANDS = frozenset(
    {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop", "bdist_egg"}
)


class _OptionalBuildExt(build_ext):
    """Build the extensions, or none of them: a half-built group would fail at import."""

    def finalize_options(self) -> None:
        planned = self.distribution.ext_modules
        # egg_info (for the metadata, and for the sdist's file list) finalizes this command
        # to list the extensions' sources: mypyc's C is generated, not a source, so only a
        # run that builds asks mypyc for it.
        building = _BUILDING_COMMANDS.intersection(self.distribution.commands)
        if building and planned and not any(ext.name == "aiokafka_ng._hot" for ext in planned):
            compiled = _mypyc_extensions()
            self.distribution.ext_modules = [*compiled, *planned] if compiled else []
        super().finalize_options()

    def run(self) -> None:
        if not self.extensions:  # mypyc failed
            self._record()
            return
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers, ...
            # Only this build's outputs (in place for an editable install, else under
            # build/): a compiled module left from an earlier build would not match the
            # sources, and one removed from the source tree by a wheel build would be lost.
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            # The compiler it ran: a missing one is otherwise only "No such file or directory".
            compiler = getattr(getattr(self, "compiler", None), "compiler_so", None)
            used = f" with {compiler[0]!r}" if compiler else ""
            _go_pure(f"the C build failed{used} ({exc!r})")
            self._record()

    def _record(self) -> None:
        # build_py wrote "compiled" before this ran, into the package directory the outputs
        # go to: the build tree, and for an editable install also the sources (setuptools
        # builds there in the build tree and copies the extensions over).
        _write_record(Path(self.get_ext_fullpath(C_EXTENSION[0])).parents[1])
        if getattr(self, "editable_mode", False):
            _write_record(Path("aiokafka_ng"))


class _RecordingBuildPy(build_py):
    """Copy the package, and write the build record beside it."""

    def run(self) -> None:
        super().run()
        # An editable install runs the sources in place: the record goes there (it is
        # ignored by git and left out of the sdist).
        editable = getattr(self, "editable_mode", False)
        _write_record(Path("aiokafka_ng") if editable else Path(self.build_lib, "aiokafka_ng"))


setup(
    ext_modules=_planned(),
    cmdclass={"build_ext": _OptionalBuildExt, "build_py": _RecordingBuildPy},
)
