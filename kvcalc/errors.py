"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class UsageError(ValueError):
    """Bad input: unknown names, malformed sizes, impossible settings."""


class UnsupportedModelError(UsageError):
    """A model whose layers kvcalc cannot yet account for; refused rather than computed wrongly."""
