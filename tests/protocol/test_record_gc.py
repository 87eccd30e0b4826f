"""Decoded consumer records are off the cyclic GC's lists until a field could hold a cycle.

``record_reader.ConsumerRecord`` is untracked by the decoder (where the C kernel is built:
``speedups.KERNEL.untrack``), since a record holding only ints, str, bytes/None and tuples of those
cannot be part of a reference cycle; any field set to a value of another type tracks it
again. These tests hold both halves: decoded records are untracked (so decoding thousands
of them does not feed the collector), and a cycle made through any field of such a record,
by assigning an object that refers back to it, is still collected. The pure-Python twin
never untracks (the reference behaviour).
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from aiokafka_ng import _native
from aiokafka_ng.protocol import record_reader, speedups
from aiokafka_ng.protocol.records import RecordBatchBuilder

reader_pure = _native.load_pure_twin("aiokafka_ng.protocol.record_reader")


def _decoded(mod: Any = record_reader, n: int = 3) -> list[Any]:
    b = RecordBatchBuilder(max_size=1 << 20)
    for i in range(n):
        b.append(1000 + i, None if i % 2 else b"k%d" % i, b"v%d" % i, [("h", b"x")] if i else ())
    (batch,) = mod.iter_batches(b.build())
    return list(batch.consumer_records("topic", 2))


def test_decoded_records_are_untracked_and_the_pure_twin_keeps_them_tracked() -> None:
    assert speedups.AVAILABLE
    records = _decoded(n=50)
    assert not any(gc.is_tracked(r) for r in records)
    assert all(gc.is_tracked(r) for r in _decoded(reader_pure))
    # Built any other way (the constructor, a copy, unpickling), a record is tracked.
    import copy
    import pickle

    assert gc.is_tracked(copy.copy(records[0])) and gc.is_tracked(
        pickle.loads(pickle.dumps(records[1]))
    )


#: Tags of the referrers whose finalizer ran (int and str subclasses take no weakrefs).
_FINALIZED: list[str] = []


class _Finalized:
    tag = ""

    def __del__(self) -> None:
        _FINALIZED.append(self.tag)


class _Str(_Finalized, str):
    pass


class _Int(_Finalized, int):
    pass


class _Holder(_Finalized):
    pass


class _List(_Finalized, list[Any]):
    pass


#: Per field, a value that can refer back to the record (the field's type, subclassed).
_REFERRERS = {
    "topic": lambda: _Str("topic"),
    "partition": lambda: _Int(2),
    "offset": lambda: _Int(7),
    "timestamp": lambda: _Int(1000),
    "timestamp_type": lambda: _Int(0),
    "key": _Holder,
    "value": _Holder,
    "checksum": lambda: _Int(5),
    "serialized_key_size": lambda: _Int(1),
    "serialized_value_size": lambda: _Int(1),
    "headers": _List,
    "leader_epoch": lambda: _Int(-1),
}


@pytest.mark.parametrize("field", sorted(_REFERRERS))
def test_a_cycle_through_any_field_is_collected(field: str) -> None:
    _FINALIZED.clear()
    assert set(_REFERRERS) == set(record_reader._CONSUMER_FIELDS)
    (record,) = _decoded(n=1)
    assert not gc.is_tracked(record)
    referrer = _REFERRERS[field]()
    referrer.tag = field
    if isinstance(referrer, list):
        referrer.append(record)
    else:
        referrer.ref = record
    setattr(record, field, referrer)
    assert getattr(record, field) == referrer
    # Compiled, an int field keeps a machine int, not the subclass object (so no cycle
    # there); wherever the record holds the referrer it must be tracked.
    assert gc.is_tracked(record) or getattr(record, field) is not referrer
    del record, referrer
    gc.collect()
    assert field in _FINALIZED, f"a cycle through {field} leaked"


def test_atomic_values_keep_a_record_untracked() -> None:
    # A deserializer that returns str (or None, ints...) keeps the record off the GC's
    # lists; any container (a dict, even a tuple) puts it back.
    (record,) = _decoded(n=1)
    record.value = "decoded text"
    record.key = None
    record.offset = 12
    record.checksum = None
    assert not gc.is_tracked(record)
    assert (record.value, record.key, record.offset) == ("decoded text", None, 12)
    record.headers = ()
    assert gc.is_tracked(record)
    (record,) = _decoded(n=1)
    record.value = {"decoded": "json"}
    assert gc.is_tracked(record)
