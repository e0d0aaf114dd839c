"""A memo for pure functions of objects that cannot be hashed (ModelSpec holds its config dict).

A search calls a few per-model functions tens of thousands of times with the same spec (forward_kernels over every
GPU x format x TP x batch); their results depend on the spec alone. Entries are keyed by the objects' identities and
hold the objects themselves, so an id is never reused for another object while its entry lives. Bounded: the table
is cleared when full (a process plans a handful of models at a time)."""

from __future__ import annotations

from typing import Any, Callable

_TABLE: dict[tuple, tuple[tuple, Any]] = {}
MAX_ENTRIES = 256


def per_object(kind: str, objects: tuple, extra: tuple, compute: Callable[[], Any]) -> Any:
    """compute()'s value for these objects (by identity) and these hashable extras, computed once."""
    key = (kind,) + tuple(id(o) for o in objects) + extra
    hit = _TABLE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], objects)):
        return hit[1]
    value = compute()
    if len(_TABLE) >= MAX_ENTRIES:
        _TABLE.clear()
    _TABLE[key] = (objects, value)
    return value
