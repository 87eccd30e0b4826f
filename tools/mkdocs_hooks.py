"""mkdocs hooks (mkdocs.yml loads this file): parts of the site rendered from the package at
build time, so they cannot drift from it.

- ``<!-- broker-error-table -->`` in a page becomes the table of every broker error code:
  its class in ``aiokafka_ng.errors``, name, flags and message (from
  ``aiokafka_ng.protocol.errors.ERROR_TABLE``, the one place those facts are stated).
- ``css/pygments.css``, the colours of the code blocks Pygments highlighted at build time
  (mkdocs.yml), is written into the built site.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

BROKER_ERROR_MARKER = "<!-- broker-error-table -->"


def broker_error_table() -> str:
    """The Markdown table of every broker error code, in code order."""
    from aiokafka_ng.errors import ERROR_TABLE, error_for_code

    rows = [
        "| code | class | name | retriable | invalid metadata | message |",
        "|---:|---|---|:-:|:-:|---|",
    ]
    for info in ERROR_TABLE:
        cls = error_for_code(info.code)
        rows.append(
            f"| {info.code} | `{cls.__name__}` | `{info.name}` "
            f"| {'yes' if info.retriable else ''} | {'yes' if info.invalid_metadata else ''} "
            f"| {info.message} |"
        )
    return "\n".join(rows) + "\n"


def pygments_css() -> str:
    """The stylesheet for Pygments' classes in ``.highlight`` blocks (light theme)."""
    # Imported by name: Pygments ships no type information (and mkdocs brings it along).
    formatters = importlib.import_module("pygments.formatters")
    return str(formatters.HtmlFormatter(style="default").get_style_defs(".highlight"))


def on_post_build(*, config: Any, **kwargs: Any) -> None:
    css = Path(config["site_dir"]) / "css" / "pygments.css"
    css.parent.mkdir(parents=True, exist_ok=True)
    css.write_text(pygments_css())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if BROKER_ERROR_MARKER in markdown:
        markdown = markdown.replace(BROKER_ERROR_MARKER, broker_error_table())
    return markdown
