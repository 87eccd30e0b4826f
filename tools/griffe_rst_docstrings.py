"""A griffe extension for the API reference (mkdocs.yml loads it): the package's docstrings
use a few reStructuredText forms, and mkdocstrings renders docstrings as Markdown.

What it rewrites, on every docstring as griffe reads it (the source stays as it is):

- cross-reference roles -- ``:class:`~aiokafka_ng.x.Producer``` and ``:meth:`send``` --
  become inline code (``Producer``, ``send()``), as Sphinx would show them. They do not
  become links: a target that has no page of its own (a private module's helper) would be
  a dangling reference, which ``mkdocs build --strict`` rightly refuses.
- a literal block -- a paragraph ending in ``::``, then an indented block -- becomes a
  fenced Python block (highlighted); a ``::`` alone on its line goes away, ``text::`` keeps
  one colon, as reStructuredText prints it.

An attribute documented by ``#:`` comment lines right above it (Sphinx's form, which
griffe does not read) gets those lines as its docstring.

Everything else in the docstrings (````literal````, ``*emphasis*``, lists) reads the same
in both languages.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
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
    lines = _ROLE.sub(_role, text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line.endswith("::"):
            out.append(line)
            continue
        # "Example::" prints "Example:"; "as follows ::" prints "as follows"; "::" nothing.
        if line.strip() != "::":
            out.append(line[:-2].rstrip() if line[-3:-2].isspace() else line[:-1])
        base = len(line) - len(line.lstrip())
        block: list[str] = []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base
        ):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            block.pop()
        body = textwrap.dedent("\n".join(block)).strip("\n")
        if body:
            indent = " " * base
            fenced = ["```python", *body.split("\n"), "```"]
            out += ["", *[indent + row if row else row for row in fenced], ""]
    return "\n".join(out)


def comment_docstring(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (1-based) as one text, if any:
    Sphinx's documentation comment for an attribute, which griffe does not read."""
    found: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        found.insert(0, lines[index].lstrip()[2:].removeprefix(" "))
        index -= 1
    return "\n".join(found) if found else None


class RstDocstrings(griffe.Extension):
    """Rewrites each object's docstring once, when griffe creates the object; gives an
    attribute documented by ``#:`` comments that text as its docstring."""

    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        if obj.docstring is None and obj.is_attribute and obj.lineno is not None:
            path = obj.filepath  # a list only for a namespace package
            lines = obj.lines_collection[path] if isinstance(path, Path) else []
            text = comment_docstring(lines, obj.lineno) if lines else None
            if text is not None:
                obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
