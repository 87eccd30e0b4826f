"""The optional C kernel (``_speedups.c``, ``_column.c``, ``_decode.c``), or None for each of
its parts: the producer's bulk loops, Arrow columns read in place, the Spark source's batch
decoder, and GC (un)tracking of decoded records.

``setup.py`` builds ``aiokafka_ng.protocol._speedups`` beside the mypyc modules when a C
compiler is present; ``AIOKAFKA_NG_PURE_PYTHON=1`` (at build or at run time) leaves it out.
Modules that use it keep each function in a module global named ``_C_<NAME>`` and run their
own Python loop when it is None: that loop is the reference the C code is tested against
(``_native.load_pure_twin`` loads a twin with every ``_C_*`` global set to None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiokafka_ng.protocol import _speedups as _stub

__all__ = [
    "AVAILABLE",
    "BinaryColumn",
    "append_record",
    "append_run",
    "decode_columns",
    "record_sizes",
    "send_fast",
    "send_fast_setup",
    "split_keyed",
    "track",
    "untrack",
]

AppendRecord = Callable[[bytearray, int, bytes, int, Any, Any, bytes], bool]
AppendRun = Callable[
    [bytearray, int, bytes, int, Sequence[bytes | None] | None, Sequence[bytes | None], int, int],
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

append_record: AppendRecord | None = None
append_run: AppendRun | None = None
decode_columns: DecodeColumns | None = None
record_sizes: RecordSizes | None = None
split_keyed: SplitKeyed | None = None
send_fast: SendFast | None = None
send_fast_setup: Callable[..., None] | None = None
#: Off and back on the cyclic GC's lists (``record_reader.ConsumerRecord``'s ``_C_TRACK``).
untrack: Callable[[object], None] | None = None
track: Callable[[object], None] | None = None
#: ``_speedups.BinaryColumn`` (an Arrow binary array, its data buffer read in place), or None.
BinaryColumn: type[_stub.BinaryColumn] | None = None

try:
    from aiokafka_ng.protocol import _speedups
except ImportError:  # not built (no compiler), or AIOKAFKA_NG_PURE_PYTHON=1
    pass
else:
    append_record = _speedups.append_record
    append_run = _speedups.append_run
    decode_columns = _speedups.decode_columns
    record_sizes = _speedups.record_sizes
    split_keyed = _speedups.split_keyed
    send_fast = _speedups.send_fast
    send_fast_setup = _speedups.send_fast_setup
    untrack = _speedups.untrack
    track = _speedups.track
    BinaryColumn = _speedups.BinaryColumn

#: Whether the C kernel was built and imported.
AVAILABLE = append_run is not None
