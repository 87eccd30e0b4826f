"""The documentation: the configuration reference matches the models, the site builds with
``mkdocs build --strict``, and every Python snippet in it at least parses."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from aiokafka_ng.admin.config import AdminConfig
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer.config import ConsumerConfig

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "tools" / "gen_config_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_matches_the_models() -> None:
    rendered = load_generator().render()
    current = (DOCS / "configuration.md").read_text()
    assert current == rendered, (
        "docs/configuration.md is stale: run python tools/gen_config_docs.py"
    )


def test_every_setting_is_in_the_reference() -> None:
    text = (DOCS / "configuration.md").read_text()
    for model in (ProducerConfig, ConsumerConfig, AdminConfig):
        for name in model.model_fields:
            assert f"| `{name}` |" in text, name
            dotted = name.replace("_", ".")
            assert f"`{dotted}`" in text or name == "ssl_context", dotted
    assert "`linger.ms` | float | `5`" in text
    assert "`session.timeout.ms` | int | `45000`" in text


def test_generator_check_mode_detects_drift(tmp_path: Path) -> None:
    gen = load_generator()
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    assert gen.main(["--check", "--output", str(stale)]) == 1
    assert gen.main(["--output", str(stale)]) == 0
    assert gen.main(["--check", "--output", str(stale)]) == 0


def python_snippets() -> list[tuple[str, str]]:
    return [
        (page.name, block)
        for page in sorted(DOCS.glob("*.md"))
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    ]


@pytest.mark.parametrize(("page", "code"), python_snippets(), ids=lambda v: str(v)[:24])
def test_python_snippets_parse(page: str, code: str) -> None:
    ast.parse(code, filename=page, feature_version=(3, 11), type_comments=False)
    compile(code, page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").exists()
