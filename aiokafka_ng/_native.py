"""Which hot modules run compiled (mypyc), and the switch back to pure Python.

The modules in :data:`COMPILED_MODULES` are plain, ``mypy --strict``-clean Python that
``setup.py`` also compiles with mypyc when the installing machine has a C compiler. An
extension module sits beside its ``.py`` twin and wins the import; the ``.py`` file stays
the reference (tests run the two side by side, ``tests/protocol/test_compiled_twins.py``).
:data:`C_EXTENSION` is the one hand-written C module (loops that copy bytes: record batches
built from runs and decoded into columns; murmur2; GC tracking of decoded records); the
modules using it bind its functions through :func:`aiokafka_ng.protocol.speedups.kernel`
into ``_C_*`` globals beside their own Python code, which is its twin
(``tests/protocol/test_speedups.py``, ``test_record_columns.py``, ``test_record_gc.py``).

This module is the one switch between the two builds, and there are only two: compiled
(every module of :data:`COMPILED_MODULES` *and* the C kernel) or pure Python (none of
them). ``setup.py`` builds all of them or none, and ``AIOKAFKA_NG_PURE_PYTHON=1`` in the
environment when ``aiokafka_ng`` is first imported switches all of them off: the modules
load from their ``.py`` files even where the compiled ones exist, and the C extension
fails to import (:func:`honour_pure_python_env` puts a finder ahead of the normal ones for
just those names). So no module asks whether it is itself compiled: code that differs by
build keys on whether the C kernel is bound (a ``_C_*`` global is None), which is the same
question.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "BUILD_RECORD",
    "COMPILED_MODULES",
    "C_EXTENSION",
    "PURE_TWIN_SUFFIX",
    "BuildInfo",
    "build_info",
    "compiled_modules",
    "honour_pure_python_env",
    "is_compiled",
    "load_pure_twin",
    "pure_python_requested",
]

#: Compiled by ``setup.py`` (keep the two lists equal; a test checks).
COMPILED_MODULES = (
    "aiokafka_ng.protocol.record_reader",
    "aiokafka_ng.protocol.records",
    "aiokafka_ng.protocol.record_columns",
    "aiokafka_ng.producer.partitioner",
    "aiokafka_ng.producer.runs",
    "aiokafka_ng.consumer.buffer",
)
#: Built by ``setup.py`` from ``aiokafka_ng/protocol/_speedups.c`` and the other sources its
#: ``C_EXTENSION`` lists (a test checks the two agree).
C_EXTENSION = "aiokafka_ng.protocol._speedups"
#: A pure twin of module ``m`` is registered as ``m + PURE_TWIN_SUFFIX``;
#: ``speedups.kernel`` gives such a module no C functions.
PURE_TWIN_SUFFIX = "_pure_twin"
#: The file ``setup.py`` writes into the package: ``{"compiled": bool, "reason": str}``
#: (keep equal to ``setup.py``'s ``BUILD_RECORD``; a test checks).
BUILD_RECORD = "_build.json"
_TRUE = {"1", "true", "yes", "on"}
_log = logging.getLogger("aiokafka_ng")


def pure_python_requested() -> bool:
    return os.environ.get("AIOKAFKA_NG_PURE_PYTHON", "").strip().lower() in _TRUE


def _source_path(name: str) -> str:
    package, _, leaf = name.rpartition(".")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"cannot locate package {package}")
    for directory in spec.submodule_search_locations:
        path = os.path.join(directory, leaf + ".py")
        if os.path.exists(path):
            return path
    raise ImportError(f"no source file for {name}")


class _PureFinder(importlib.abc.MetaPathFinder):
    """Resolves the compiled modules' names to their ``.py`` files; the C extension's to
    an ImportError (its users then run their Python loops)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == C_EXTENSION:
            raise ImportError(f"{fullname}: AIOKAFKA_NG_PURE_PYTHON is set", name=fullname)
        if fullname not in COMPILED_MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, _source_path(fullname))


def honour_pure_python_env() -> None:
    """Install the pure-Python finder when ``AIOKAFKA_NG_PURE_PYTHON`` asks for it."""
    if pure_python_requested() and not any(isinstance(f, _PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PureFinder())


def compiled_modules() -> dict[str, bool]:
    """Each hot module's name (and the C extension's) and whether it was loaded from a
    compiled extension."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    out = {}
    for name in COMPILED_MODULES:
        module = importlib.import_module(name)
        out[name] = (getattr(module, "__file__", None) or "").endswith(suffixes)
    try:
        importlib.import_module(C_EXTENSION)
        out[C_EXTENSION] = True
    except ImportError:
        out[C_EXTENSION] = False
    return out


@dataclass(frozen=True)
class BuildInfo:
    """Which build of aiokafka_ng runs (:func:`build_info`)."""

    #: True when every mypyc module and the C kernel run compiled.
    compiled: bool
    #: Why it is the pure-Python build; empty when compiled.
    reason: str
    #: Each compiled module's name (and the C kernel's) and whether it loaded compiled.
    modules: Mapping[str, bool]

    def __str__(self) -> str:
        return (
            "compiled: mypyc and the C kernel" if self.compiled else f"pure Python: {self.reason}"
        )


def _read_record() -> dict[str, object] | None:
    try:
        record = json.loads(Path(__file__).with_name(BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def build_info() -> BuildInfo:
    """Which build runs: compiled (the mypyc modules and the C kernel, several times faster
    on the producer's and consumer's hot paths) or pure Python, and why.

    A machine without a C compiler (or where mypyc fails) installs the pure build with only
    a warning in pip's build output, which pip hides unless ``-v``: the reason the build
    gave is kept in the package and returned here, as is ``AIOKAFKA_NG_PURE_PYTHON`` set
    now, or a compiled module that is missing or does not import.
    """
    modules = compiled_modules()
    if all(modules.values()):
        return BuildInfo(True, "", modules)
    if pure_python_requested():
        return BuildInfo(False, "AIOKAFKA_NG_PURE_PYTHON is set", modules)
    record = _read_record()
    if record is not None and record.get("compiled") is False:
        return BuildInfo(False, f"{record.get('reason')} (when this copy was built)", modules)
    missing = ", ".join(name for name, ok in modules.items() if not ok)
    if record is None:
        why = "no build record: a source tree without its compiled modules"
    else:
        why = "the build compiled them, but they do not load"
    try:
        importlib.import_module(C_EXTENSION)
    except ImportError as exc:
        why += f" ({C_EXTENSION}: {exc})"
    return BuildInfo(False, f"{why}; pure: {missing}", modules)


def is_compiled() -> bool:
    """True when every hot module runs compiled (``aiokafka_ng.__compiled__``)."""
    compiled = compiled_modules()
    result = all(compiled.values())
    if result:
        _log.debug("aiokafka_ng: compiled (mypyc) hot modules: %s", ", ".join(compiled))
    else:
        _log.debug("aiokafka_ng: pure-Python build (compiled modules: %s)", compiled)
    return result


def load_pure_twin(name: str) -> ModuleType:
    """A fresh copy of module ``name`` executed from its ``.py`` file, registered as
    ``name + PURE_TWIN_SUFFIX`` (for differential tests; the normal import is untouched).
    It runs as the pure build does: ``speedups.kernel`` binds its ``_C_*`` globals to None
    (checked here: a ``_C_*`` global bound some other way would make the twin run C)."""
    twin_name = name + PURE_TWIN_SUFFIX
    if twin_name in sys.modules:
        return sys.modules[twin_name]
    spec = importlib.util.spec_from_file_location(twin_name, _source_path(name))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the pure twin of {name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[twin_name] = module
    spec.loader.exec_module(module)
    bound = [attr for attr, value in vars(module).items() if attr.startswith("_C_") and value]
    if bound:
        del sys.modules[twin_name]
        raise ImportError(f"{name}: {bound} not bound through speedups.kernel(__name__)")
    return module
