"""The one lookup both engines' release tables use (vllm_versions.py, sglang_versions.py): a release follows the
newest row of its table at or below it. Each table keeps its own version parsing and its refusals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Row = TypeVar("Row")


def newest_at_or_below(rows: Sequence[Row], key: tuple, since_key: Callable[[str], tuple]) -> Row:
    """The last of `rows` (oldest release first, each with a `since` release) whose since_key(since) <= key; the first
    row when none is (the caller refuses releases below its oldest row before asking)."""
    chosen = rows[0]
    for row in rows:
        if since_key(row.since) <= key:
            chosen = row
    return chosen
