"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input: unknown names, malformed sizes, impossible settings."""


class UnsupportedModelError(UsageError):
    """A model whose layers kvcalc cannot yet account for; refused rather than computed wrongly."""


def shown(value: object, limit: int = 60, *, quote: bool = True) -> str:
    """User input as an error message may echo it: on one line (repr escapes newlines) and at most ~limit characters,
    so a 10,000-character name or a value with a newline cannot turn a one-line error into a page. The middle is
    dropped: a path's file name and a number's last digits stay readable."""
    text = repr(value) if quote else " ".join(str(value).split())
    if len(text) <= limit:
        return text
    size = f" ({len(value):,} characters)" if isinstance(value, str) else ""
    tail = max(limit // 3, 4)
    return text[: max(limit - tail - 1, 4)] + "…" + text[-tail:] + size
