"""A griffe extension for the API reference (mkdocs.yml loads it): the package's docstrings
use a few reStructuredText forms, and mkdocstrings renders docstrings as Markdown.

What it rewrites, on every docstring as griffe reads it (the source stays as it is):

- cross-reference roles -- ``:class:`~aiokafka_ng.x.Producer``` and ``:meth:`send``` --
  become inline code (``Producer``, ``send()``), as Sphinx would show them. They do not
  become links: a target that has no page of its own (a private module's helper) would be
  a dangling reference, which ``mkdocs build --strict`` rightly refuses.
- a literal-block marker -- a paragraph ending in ``::`` before an indented block -- loses
  the marker (Markdown already shows the indented block as code); a ``::`` alone on its line
  goes away, ``text::`` keeps one colon, as reStructuredText prints it.

Everything else in the docstrings (````literal````, ``*emphasis*``, lists) reads the same
in both languages.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    kind, short, target = match.groups()
    target = target.strip()
    if short:
        target = target.rsplit(".", 1)[-1]
    if kind in ("meth", "func") and not target.endswith(")"):
        target += "()"
    return f"`{target}`"


def rst_to_markdown(text: str) -> str:
    """The docstring ``text`` with the reStructuredText forms above rewritten."""
    text = _ROLE.sub(_role, text)
    lines = []
    for line in text.split("\n"):
        stripped = line.rstrip()
        if stripped.strip() == "::":
            continue
        if stripped.endswith("::"):
            # "Example::" prints "Example:"; "as follows ::" prints "as follows".
            stripped = stripped[:-2].rstrip() if stripped[-3:-2].isspace() else stripped[:-1]
            line = stripped
        lines.append(line)
    return "\n".join(lines)


class RstDocstrings(griffe.Extension):
    """Rewrites each object's docstring once, when griffe creates the object."""

    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
