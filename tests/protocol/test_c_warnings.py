"""The C extension compiles without warnings under the flags CPython builds extensions with.

``setup.py`` compiles the kernel with the interpreter's ``CFLAGS`` (``-O3 -Wall`` on a
CPython built with gcc). At that optimisation gcc follows values across the inlined helpers
and warns where one may be read unset: in ``append_run``'s second pass the key and value
pointers and lengths once came from calls whose result was ignored (issue 49). A warning in
this file is a bug to fix, not to silence, so the test compiles each source with
``-Werror`` at every optimisation level a build might use.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests import sanitizer

LEVELS = ("-O1", "-O2", "-O3")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("source", sanitizer.SOURCES, ids=lambda s: Path(s).name)
def test_compiles_without_warnings(source: str, level: str, tmp_path: Path) -> None:
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("gcc is not installed here")
    include = sysconfig.get_paths()["include"]
    headers = {f"-I{(sanitizer.ROOT / s).parent}" for s in sanitizer.SOURCES}
    cmd = [cc, level, "-Wall", "-Werror", "-fPIC", "-fwrapv", f"-I{include}", *sorted(headers)]
    cmd += ["-c", str(sanitizer.ROOT / source), "-o", str(tmp_path / "out.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
