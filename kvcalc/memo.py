"""A memo for pure functions of objects that cannot be hashed (ModelSpec holds its config dict).

A search calls a few per-model functions tens of thousands of times with the same spec (forward_kernels over every
GPU x format x TP x batch); their results depend on the spec alone. Entries are keyed by the objects' identities and
hold the objects themselves, so an id is never reused for another object while its entry lives. Bounded: the table
is cleared when full (a process plans a handful of models at a time)."""

from __future__ import annotations

from typing import Any, Callable

_TABLE: dict[tuple, tuple[tuple, Any]] = {}
MAX_ENTRIES = 4096  # a search of one model over every GPU, format, TP and max_num_seqs fills ~2,000


def per_object(kind: str, objects: tuple, extra: tuple, compute: Callable[[], Any]) -> Any:
    """compute()'s value for these objects (by identity) and these hashable extras, computed once. The entry holds
    the objects, so while it lives no other object can carry their ids: a hit is always theirs."""
    key = (kind, *map(id, objects), *extra)
    hit = _TABLE.get(key)
    if hit is not None:
        return hit[1]
    value = compute()
    if len(_TABLE) >= MAX_ENTRIES:
        _TABLE.clear()
    _TABLE[key] = (objects, value)
    return value
