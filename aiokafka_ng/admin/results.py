"""Per-item outcomes of admin operations that act on many things at once.

One bad topic must not hide what happened to the others, so a batch operation returns an
``ItemResults``: a read-only mapping from each item (topic name, partition, resource, ...)
to either its result or the exception that item failed with. ``succeeded`` / ``failed``
split it, ``result(key)`` returns or raises for one item, and ``raise_on_error()`` raises
one ``AdminBatchError`` naming every failure (or returns the successes when there is none).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from aiokafka_ng.errors import KafkaError

__all__ = ["AdminBatchError", "ItemResults"]

K = TypeVar("K")
V = TypeVar("V")


class AdminBatchError(KafkaError):
    """Some items of an admin operation failed; ``errors`` maps each to its exception."""

    def __init__(self, operation: str, errors: Mapping[Any, BaseException]) -> None:
        self.operation = operation
        self.errors: dict[Any, BaseException] = dict(errors)
        lines = [f"{k!r}: {type(e).__name__}: {e}" for k, e in self.errors.items()]
        super().__init__(f"{operation}: {len(lines)} item(s) failed\n  " + "\n  ".join(lines))

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.operation, self.errors))


class ItemResults(Mapping[K, "V | BaseException"], Generic[K, V]):
    """Mapping of item -> result or exception, in the order the caller gave the items."""

    __slots__ = ("_items", "_operation")

    def __init__(self, operation: str, items: Mapping[K, V | BaseException]) -> None:
        self._operation = operation
        self._items: dict[K, V | BaseException] = dict(items)

    @property
    def operation(self) -> str:
        return self._operation

    def __getitem__(self, key: K) -> V | BaseException:
        return self._items[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def succeeded(self) -> dict[K, V]:
        """Items that succeeded, with their results."""
        return {k: v for k, v in self._items.items() if not isinstance(v, BaseException)}

    @property
    def failed(self) -> dict[K, BaseException]:
        """Items that failed, with their exceptions."""
        return {k: v for k, v in self._items.items() if isinstance(v, BaseException)}

    def result(self, key: K) -> V:
        """The result of one item; raises that item's exception if it failed."""
        value = self._items[key]
        if isinstance(value, BaseException):
            raise value
        return value

    def raise_on_error(self) -> dict[K, V]:
        """Return every result, or raise ``AdminBatchError`` listing every failure."""
        failed = self.failed
        if failed:
            raise AdminBatchError(self._operation, failed)
        return self.succeeded

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{k!r}: {type(v).__name__}" if isinstance(v, BaseException) else f"{k!r}: ok"
            for k, v in self._items.items()
        )
        return f"ItemResults({self._operation}, {{{parts}}})"
