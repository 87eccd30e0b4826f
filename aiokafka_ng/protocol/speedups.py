"""The optional C kernel (``_speedups.c``, ``_column.c``, ``_decode.c``,
``producer/_send.c``), or None for each of its parts: the producer's bulk loops, murmur2,
``send()``'s common case, Arrow columns read in place, the Spark source's batch decoder,
and GC (un)tracking of decoded records.

``setup.py`` builds ``aiokafka_ng.protocol._speedups`` beside the mypyc modules when a C
compiler is present (both or neither: see ``aiokafka_ng._native``, the switch);
``AIOKAFKA_NG_PURE_PYTHON=1`` (at build or at run time) leaves it out. Its functions are
bound here, once, and nowhere else in the package (``_native.compiled_modules`` only
reports whether it loads).

The convention, the same in every module that uses it: the module binds each function it
calls into a module global named ``_C_<NAME>``, all from ``kernel(__name__)`` at import
(``_C_APPEND_RUN = _KERNEL.append_run``: a local alias, read without an attribute lookup in
the hot path), and runs its own Python loop when that global is None. That loop is the one
Python reference the C function is tested against: ``_native.load_pure_twin`` executes the
module a second time under another name, for which :func:`kernel` answers :data:`NO_KERNEL`,
so the twin runs exactly as the pure build does (``docs/internals.md`` lists each function,
its forms and the test holding them together).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from aiokafka_ng._native import PURE_TWIN_SUFFIX

if TYPE_CHECKING:
    from aiokafka_ng.protocol import _speedups as _stub

__all__ = ["AVAILABLE", "KERNEL", "NO_KERNEL", "BinaryColumn", "Kernel", "kernel"]

AppendRecord = Callable[[bytearray, int, bytes, int, Any, Any, bytes], bool]
AppendRun = Callable[
    [
        bytearray,
        int,
        bytes,
        int,
        Sequence[bytes | None] | None,
        Sequence[bytes | None],
        int,
        int,
        bytes,
    ],
    int,
]
RecordSizes = Callable[[Sequence[Any], Sequence[Any] | None, int], list[int] | None]
SplitKeyed = Callable[
    [Sequence[bytes | None], Sequence[bytes | None], list[int], int, list[int] | None],
    list[tuple[list[int], Sequence[bytes | None], Sequence[bytes | None], list[int]] | None],
]

#: ``decode_columns(data, pos, end, count, base_offset, log_append, low, high, index,
#: next_offset, offset_runs, buffers) -> (added, next_offset, key_nulls, value_nulls) | None``
DecodeColumns = Callable[..., tuple[int, int, int, int] | None]

#: ``send_fast(intake, topic, value, key, partition, timestamp_ms, headers)`` -> the
#: record's future, or None (nothing done: ``Producer.send`` takes the record); see
#: :mod:`aiokafka_ng.producer.intake`.
SendFast = Callable[[Any, str, Any, Any, Any, Any, Any], Any]


class Kernel:
    """The kernel's functions (each None without the kernel)."""

    __slots__ = (
        "BinaryColumn",
        "append_record",
        "append_run",
        "decode_columns",
        "murmur2",
        "record_sizes",
        "send_fast",
        "send_fast_setup",
        "split_keyed",
        "track",
        "untrack",
    )

    def __init__(self, ext: ModuleType | None) -> None:
        def get(name: str) -> Any:
            return None if ext is None else getattr(ext, name)

        self.append_record: AppendRecord | None = get("append_record")
        self.append_run: AppendRun | None = get("append_run")
        self.decode_columns: DecodeColumns | None = get("decode_columns")
        #: Kafka's murmur2 as a signed int32 (``partitioner.murmur2`` where built).
        self.murmur2: Callable[[bytes], int] | None = get("murmur2")
        self.record_sizes: RecordSizes | None = get("record_sizes")
        self.split_keyed: SplitKeyed | None = get("split_keyed")
        self.send_fast: SendFast | None = get("send_fast")
        self.send_fast_setup: Callable[..., None] | None = get("send_fast_setup")
        #: Off and back on the cyclic GC's lists (``record_reader.ConsumerRecord``'s
        #: ``_C_TRACK``, delivered futures' ``_C_UNTRACK``).
        self.untrack: Callable[[object], None] | None = get("untrack")
        self.track: Callable[[object], None] | None = get("track")
        #: An Arrow binary array, its data buffer read in place.
        self.BinaryColumn: type[_stub.BinaryColumn] | None = get("BinaryColumn")


try:
    from aiokafka_ng.protocol import _speedups
except ImportError:  # not built (no compiler), or AIOKAFKA_NG_PURE_PYTHON=1
    _ext: ModuleType | None = None
else:
    _ext = _speedups

#: What this process runs: the built kernel, or none of it.
KERNEL = Kernel(_ext)
#: No kernel: what a pure twin binds (see :func:`kernel`).
NO_KERNEL = Kernel(None)
#: Whether the C kernel was built and imported.
AVAILABLE = _ext is not None
#: ``_speedups.BinaryColumn`` (an Arrow binary array, its data buffer read in place), or None.
BinaryColumn = KERNEL.BinaryColumn


def kernel(module: str) -> Kernel:
    """What the module named ``module`` binds its ``_C_*`` globals from (call it with
    ``__name__``): :data:`KERNEL`, or :data:`NO_KERNEL` for a pure twin."""
    return NO_KERNEL if module.endswith(PURE_TWIN_SUFFIX) else KERNEL
