"""Sizes in, sizes out. Tokens use binary suffixes ("32k" = 32768, as context lengths are quoted);
bytes keep GiB (2**30) and GB (10**9) strictly apart."""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import UsageError, shown

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
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")  # ASCII digits only
MAX_DIGITS = 24  # more digits than any size kvcalc can use: refused before any arithmetic on them


def _number(text: str, what: str, suffixes: dict[str, int], example: str) -> Fraction:
    """The exact value of `text` (digits, an optional fraction and a suffix from `suffixes`); never a float, so
    '1.5k' is exactly 1536 and a 400-digit size is refused instead of overflowing to inf."""
    match = _NUMBER.match(str(text).replace(",", "").replace("_", ""))
    if not match or match.group(2).lower() not in suffixes:
        raise UsageError(f"{what} {shown(text)} is not a size: {example}")
    if len(match.group(1).replace(".", "").lstrip("0")) > MAX_DIGITS:
        raise UsageError(f"{what} {shown(text)} is too large")
    return Fraction(match.group(1)) * suffixes[match.group(2).lower()]


def parse_tokens(text: str | int, what: str = "token count") -> int:
    """'32k' -> 32768, '8192' -> 8192, '1.5k' -> 1536. Positive integers only."""
    if isinstance(text, int):
        value = text
    else:
        exact = _number(text, what, _TOKEN_SUFFIX,
                        "use a whole number with an optional k or m suffix, e.g. 32k or 8192")
        if exact.denominator != 1:
            raise UsageError(f"{what} {shown(text)} is not a whole number of tokens ({float(exact):g})")
        value = int(exact)
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {shown(text)}")
    return value


def parse_bytes(text: str | int, what: str = "size") -> int:
    """'16GiB' -> 17179869184, '80GB' -> 80000000000, '512' -> 512 bytes."""
    if isinstance(text, int):
        value = text
    else:
        value = round(_number(text, what, _BYTE_SUFFIX, "use e.g. 16GiB, 80GB or 512MiB"))
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {shown(text)}")
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


def fmt_shortfall(n_bytes: int | float) -> str:
    """What is missing, in GiB, or in MiB/KiB when it rounds to 0.00 GiB (never "-0.00 GiB")."""
    return f"-{n_bytes / GiB:.2f} GiB" if n_bytes >= 0.005 * GiB else f"-{fmt_bytes(n_bytes)}"


def fmt_tokens(n: int | float) -> str:
    return f"{int(n):,}"


_VLLM_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)")
_VLLM_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_VLLM_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_vllm_int(text: str | int, what: str = "value") -> int:
    """vLLM's number rule for its own flags (engine/arg_utils.py:human_readable_int): a lower-case suffix is decimal
    (k = 1,000, m = 10**6, g = 10**9, t = 10**12; decimals allowed: '25.6k' = 25,600), an upper-case one binary
    (K = 1,024, M, G, T; whole numbers only). So `--max-model-len 32k` is 32,000 tokens and 32K is 32,768, while
    kvcalc's own --context keeps its rule (32k = 32,768). Positive whole numbers only."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raw = str(text).strip()
        match = _VLLM_INT.fullmatch(raw)
        if match and len(match.group(1).replace(".", "").lstrip("0")) > MAX_DIGITS:
            raise UsageError(f"{what} {shown(text)} is too large")
        if not match:
            raise UsageError(f"{what} {shown(text)} is not a whole number as vLLM reads it (e.g. 32768, 32k = "
                             "32,000, 32K = 32,768)")
        number, suffix = match.groups()
        if suffix in _VLLM_BINARY:
            if "." in number:
                raise UsageError(f"{what} {shown(text)}: vLLM allows no decimals with the binary suffix {suffix} "
                                 f"(did you mean {number}{suffix.lower()}?)")
            value = int(number) * _VLLM_BINARY[suffix]
        else:
            exact = Fraction(number) * _VLLM_DECIMAL.get(suffix, 1)
            if suffix == "" and "." in number:
                raise UsageError(f"{what} {shown(text)} is not a whole number")
            value = int(exact)  # vLLM: int(float(number) * mult), truncating
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {shown(text)}")
    return value
