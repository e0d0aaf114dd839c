"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class UsageError(ValueError):
    """Bad input: unknown names, malformed sizes, impossible settings."""


class UnsupportedModelError(UsageError):
    """A model whose layers kvcalc cannot yet account for; refused rather than computed wrongly."""


def shown(value: object, limit: int = 40) -> str:
    """User input as an error message quotes it: repr'd (newlines and control characters escaped, so the message
    stays one line) and clipped, so a 10,000-character argument cannot flood the terminal."""
    text = repr(str(value)) if not isinstance(value, (int, float)) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 4]}...{text[0]} ({len(str(value)):,} characters)"
