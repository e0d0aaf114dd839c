"""Sizes in, sizes out. Tokens use binary suffixes ("32k" = 32768, as context lengths are quoted);
bytes keep GiB (2**30) and GB (10**9) strictly apart."""

from __future__ import annotations

import re

from .errors import UsageError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12


def ceil_div(a: int, b: int) -> int:
    """Integer ceiling of a / b (vLLM's vllm.utils.math_utils.cdiv)."""
    return -(-a // b)

_TOKEN_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
_BYTE_SUFFIX = {
    "": 1, "b": 1,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
    "kb": KB, "mb": MB, "gb": GB, "tb": TB,
}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_tokens(text: str | int, what: str = "token count") -> int:
    """'32k' -> 32768, '8192' -> 8192, '1.5k' -> 1536. Positive integers only."""
    if isinstance(text, int):
        value = text
    else:
        match = _NUMBER.match(str(text).replace(",", "").replace("_", ""))
        if not match or match.group(2).lower() not in _TOKEN_SUFFIX:
            raise UsageError(
                f"{what} {text!r} is not a size: use a whole number with an optional k or m suffix, e.g. 32k or 8192"
            )
        exact = float(match.group(1)) * _TOKEN_SUFFIX[match.group(2).lower()]
        if exact != int(exact):
            raise UsageError(f"{what} {text!r} is not a whole number of tokens ({exact:g})")
        value = int(exact)
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {text!r}")
    return value


def parse_bytes(text: str | int, what: str = "size") -> int:
    """'16GiB' -> 17179869184, '80GB' -> 80000000000, '512' -> 512 bytes."""
    if isinstance(text, int):
        value = text
    else:
        match = _NUMBER.match(str(text).replace(",", "").replace("_", ""))
        if not match or match.group(2).lower() not in _BYTE_SUFFIX:
            raise UsageError(f"{what} {text!r} is not a byte size: use e.g. 16GiB, 80GB or 512MiB")
        value = int(round(float(match.group(1)) * _BYTE_SUFFIX[match.group(2).lower()]))
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {text!r}")
    return value


def gib(n_bytes: int | float) -> float:
    return n_bytes / GiB


def fmt_gib(n_bytes: int | float, digits: int = 2) -> str:
    return f"{n_bytes / GiB:.{digits}f} GiB"


def fmt_bytes(n_bytes: int | float) -> str:
    """Human size in binary units, the unit always printed (KiB/MiB/GiB)."""
    size = float(n_bytes)
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(size) >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{int(size)} B"


def fmt_tokens(n: int | float) -> str:
    return f"{int(n):,}"
