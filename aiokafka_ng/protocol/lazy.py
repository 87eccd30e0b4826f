"""Generated message classes by API key, each module imported the first time it is needed.

The generated package :mod:`aiokafka_ng.protocol.messages` holds one module per Kafka API
(72 of them, ~200 ms to import all). A producer uses a handful, so nothing is imported up
front: the package resolves its class names on first access (PEP 562 ``__getattr__``) and
its ``REQUEST_TYPES``/``RESPONSE_TYPES`` are :class:`ApiTable` objects, which import an
API's module when its key is first looked up. Keys, ``len`` and ``in`` need no import;
iterating ``values()``/``items()`` imports every module (as the tests that walk all APIs
expect).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from aiokafka_ng.protocol.primitives import ApiMessage

__all__ = ["ApiTable", "load"]

T = TypeVar("T", bound=ApiMessage)


def load(package: str, module: str, name: str, base: type[T]) -> type[T]:
    """Class ``name`` of ``package.module``, checked to be a subclass of ``base``."""
    cls: object = getattr(importlib.import_module(f"{package}.{module}"), name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{package}.{module}.{name} is not a {base.__name__}")
    return cls


class ApiTable(Mapping[int, type[T]], Generic[T]):
    """Read-only ``{api_key: class}``; a key's module is imported on its first lookup."""

    __slots__ = ("_base", "_entries", "_loaded", "_package")

    def __init__(self, package: str, entries: Mapping[int, tuple[str, str]], base: type[T]):
        self._package = package
        self._entries = dict(entries)  # api key -> (module, class name)
        self._base = base
        self._loaded: dict[int, type[T]] = {}

    def __getitem__(self, api_key: int) -> type[T]:
        cls = self._loaded.get(api_key)
        if cls is None:
            module, name = self._entries[api_key]  # KeyError for an unknown key, as a dict
            cls = self._loaded[api_key] = load(self._package, module, name, self._base)
        return cls

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._entries

    def __iter__(self) -> Iterator[int]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<ApiTable of {len(self)} APIs, {len(self._loaded)} loaded>"
