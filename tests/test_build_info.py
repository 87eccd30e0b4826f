"""aiokafka_ng.build_info() and ``aiokafka-ng --version``: which build runs, and why it is the
pure one (issue 49 item 12: a machine without a C compiler fell back silently). The installs
that fall back -- the pure wheel, the sdist without a compiler -- are tests/test_packaging.py.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import aiokafka_ng
from aiokafka_ng import _native, build_info

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**{k: v for k, v in os.environ.items() if k != "AIOKAFKA_NG_PURE_PYTHON"}, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_build_info_agrees_with_what_is_loaded() -> None:
    info = build_info()
    assert info.compiled == aiokafka_ng.__compiled__ == all(info.modules.values())
    assert set(info.modules) == {*_native.COMPILED_MODULES, _native.C_EXTENSION}
    assert (info.reason == "") == info.compiled
    assert str(info).startswith("compiled: " if info.compiled else "pure Python: ")


def test_the_pure_python_switch_is_named_as_the_reason() -> None:
    code = "import aiokafka_ng; i = aiokafka_ng.build_info(); print(i.compiled, '|', i)"
    out = _run(code, AIOKAFKA_NG_PURE_PYTHON="1")
    assert out == "False | pure Python: AIOKAFKA_NG_PURE_PYTHON is set"
    code = "import sys; from aiokafka_ng.cli import main; sys.argv[1:] = ['--version']; main()"
    out = _run(code, AIOKAFKA_NG_PURE_PYTHON="1")
    assert (
        out
        == f"aiokafka-ng {aiokafka_ng.__version__} (pure Python: AIOKAFKA_NG_PURE_PYTHON is set)"
    )


def test_setup_py_writes_the_record_build_info_reads() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text())
    (record,) = (
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "BUILD_RECORD" for t in node.targets)
    )
    assert record == _native.BUILD_RECORD


def test_the_version_is_written_once() -> None:
    # pyproject.toml takes it from the package (dynamic), so the two cannot disagree.
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "aiokafka_ng.__version__"
