"""Build script: compiles the hot modules with mypyc when it can, else installs pure Python.

Everything else about the package is in ``pyproject.toml``. The compiled modules are the
same ``.py`` files, so the pure-Python build is the reference twin; ``docs/internals.md``
says why mypyc and what it buys. Beside them one small hand-written C extension
(``_speedups.c`` and the files in ``C_EXTENSION``) holds the loops that copy bytes and the
GC-tracking helpers; the modules that call it keep Python twins of its loops.
``AIOKAFKA_NG_PURE_PYTHON=1`` skips compiling; a machine without a C compiler
(or where mypyc fails) gets the pure build with a warning, never a failed install. Keep
``COMPILED_MODULES`` equal to ``aiokafka_ng._native.COMPILED_MODULES`` (a test checks).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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
_TRUE = {"1", "true", "yes", "on"}


def _warn(message: str) -> None:
    bar = "=" * 78
    print(f"\n{bar}\naiokafka_ng: {message}\n{bar}\n", file=sys.stderr)


def _extensions() -> list[Any]:
    if os.environ.get("AIOKAFKA_NG_PURE_PYTHON", "").strip().lower() in _TRUE:
        _warn("AIOKAFKA_NG_PURE_PYTHON is set: installing the pure-Python build")
        return []
    try:
        from mypyc.build import mypycify

        paths = [mod.replace(".", "/") + ".py" for mod in COMPILED_MODULES]
        # mypy only needs to type the compiled modules themselves: the build environment
        # does not have the runtime dependencies, and the package is checked under
        # --strict by the test suite anyway.
        options = ["--follow-imports=silent", "--ignore-missing-imports", "--config-file="]
        compiled = list(mypycify(options + paths, group_name="aiokafka_ng._hot", opt_level="3"))
    except (Exception, SystemExit) as exc:  # mypyc missing, or it failed
        # A type error mypyc finds ends its run with SystemExit, not an Exception: without
        # catching it the whole install failed instead of falling back to pure Python.
        _warn(f"mypyc could not compile the hot modules ({exc!r}): pure-Python build")
        return []
    name, sources = C_EXTENSION
    headers = [
        "aiokafka_ng/protocol/_column.h",
        "aiokafka_ng/protocol/_decode.h",
        "aiokafka_ng/producer/_send.h",
    ]
    return [*compiled, Extension(name, sources, depends=headers)]


class _OptionalBuildExt(build_ext):
    """Build the extensions, or none of them: a half-built group would fail at import."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers, ...
            # Only this build's outputs (in place for an editable install, else under
            # build/): a compiled module left from an earlier build would not match the
            # sources, and one removed from the source tree by a wheel build would be lost.
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            _warn(f"the C build failed ({exc!r}): installing the pure-Python build")


setup(ext_modules=_extensions(), cmdclass={"build_ext": _OptionalBuildExt})
