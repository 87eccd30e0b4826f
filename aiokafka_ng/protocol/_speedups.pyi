# Types of the C kernel (``_speedups.c``); ``speedups.py`` loads it when it was built.
from collections.abc import Sequence
from typing import Any, overload

from typing_extensions import Buffer

class BinaryColumn(Sequence[bytes | None]):
    def __init__(
        self,
        offsets: Buffer,
        data: Buffer | None,
        validity: Buffer | None = None,
        offset: int = 0,
        length: int = -1,
        large: bool = False,
    ) -> None: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> bytes | None: ...
    @overload
    def __getitem__(self, index: slice) -> BinaryColumn: ...
    def take(self, indexes: list[int]) -> BinaryColumn: ...
    def copy(self) -> BinaryColumn: ...
    def nbytes(self) -> int: ...
    def null_count(self) -> int: ...

def append_record(
    buf: bytearray,
    limit: int,
    ts_enc: bytes,
    delta: int,
    key: bytes | None,
    value: bytes | None,
    headers_enc: bytes,
) -> bool: ...
def append_run(
    buf: bytearray,
    limit: int,
    ts_enc: bytes,
    delta: int,
    keys: Sequence[bytes | None] | None,
    values: Sequence[bytes | None],
    start: int,
    stop: int,
    headers_enc: bytes,
) -> int: ...
def record_sizes(
    values: Sequence[object], keys: Sequence[object] | None, overhead: int
) -> list[int] | None: ...
def split_keyed(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    sizes: list[int],
    num_partitions: int,
    positions: list[int] | None,
) -> list[tuple[list[int], Sequence[bytes | None], Sequence[bytes | None], list[int]] | None]: ...
def murmur2(data: bytes) -> int: ...
def decode_columns(
    data: Buffer,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    log_append: bool,
    low: int,
    high: int,
    index: int,
    next_offset: int,
    offset_runs: list[int],
    buffers: tuple[object, ...],
) -> tuple[int, int, int, int] | None: ...
def untrack(obj: object) -> None: ...
def track(obj: object) -> None: ...
def send_fast(
    intake: object,
    topic: str,
    value: object,
    key: object,
    partition: object,
    timestamp_ms: object,
    headers: object,
) -> Any: ...
def send_fast_setup(
    intake: type,
    engine: type,
    topic: type,
    partition_queue: type,
    batch: type,
    future: type,
    pool: type,
    record_overhead: int,
    pending: BaseException,
) -> None: ...
