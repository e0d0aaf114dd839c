"""GPU prices (US dollars per GPU-hour, on demand): shipped data, a user file, and command-line overrides.

Precedence, lowest to highest: kvcalc/data/prices.yaml < the user's file ($XDG_CONFIG_HOME/kvcalc/prices.yaml, else
~/.config/kvcalc/prices.yaml, replaced by --prices FILE when given) < --price GPU=USD. A user file is either the shipped
format (`prices: {gpu: {usd_per_gpu_hour: 1.2, ...}}`) or a plain mapping (`l4: 0.7`). GPU names go through the
same lookup as --gpu (ids and aliases); an unknown name or a negative price is a usage error.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import UsageError, shown
from .input_files import is_file

MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Price:
    gpu: str
    usd_per_gpu_hour: float
    source: str  # where the number comes from: a URL and date, a file, or "--price"
    estimate: bool = False


def user_prices_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kvcalc" / "prices.yaml"


def _number(value, where: str) -> float:
    if isinstance(value, bool):
        raise UsageError(f"{where}: price {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: price {value!r} is not a number of US dollars per GPU-hour") from None
    if not math.isfinite(number) or number < 0:
        raise UsageError(f"{where}: price must be a non-negative number of US dollars per GPU-hour, got {value!r}")
    return number


def _gpu_id(name: str, where: str) -> str:
    from .hardware import get_gpu

    try:
        return get_gpu(str(name)).id
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _entries(data, where: str) -> dict[str, Price]:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of GPU names to prices")
    table = data.get("prices", data) if "prices" in data else data
    if not isinstance(table, dict):
        raise UsageError(f"{where}: 'prices' must be a mapping of GPU names to prices")
    out: dict[str, Price] = {}
    for name, entry in table.items():
        if name in ("schema", "currency", "unit"):
            continue
        gpu = _gpu_id(name, where)
        if isinstance(entry, dict):
            if "usd_per_gpu_hour" not in entry:
                raise UsageError(f"{where}: {name}: no usd_per_gpu_hour")
            usd = _number(entry["usd_per_gpu_hour"], f"{where}: {name}")
            src = f"{entry.get('source', where)} ({entry.get('date', 'undated')})"
            out[gpu] = Price(gpu, usd, src, bool(entry.get("estimate", False)))
        else:
            out[gpu] = Price(gpu, _number(entry, f"{where}: {name}"), where)
    return out


def _read_yaml(path: Path, where: str):
    """A user's price file as data: capped, regular UTF-8 files only, no YAML anchors or tags (input_files)."""
    from .input_files import parse_yaml, read_text

    return parse_yaml(read_text(path, "price file", MAX_FILE_BYTES), where)


def shipped_prices() -> dict[str, Price]:
    import yaml

    text = resources.files("kvcalc").joinpath("data/prices.yaml").read_text()
    return _entries(yaml.safe_load(text), "kvcalc/data/prices.yaml")


def parse_override(text: str) -> tuple[str, float]:
    """'l4=0.7' -> ('l4', 0.7)."""
    if "=" not in text:
        raise UsageError(f"--price {text!r}: use GPU=USD, e.g. --price l4=0.70")
    name, value = text.split("=", 1)
    return _gpu_id(name.strip(), f"--price {text}"), _number(value.strip(), f"--price {text}")


def load_prices(overrides: tuple[str, ...] | list[str] = (), prices_file: str | None = None,
                use_user_file: bool = True) -> dict[str, Price]:
    """Every known price, keyed by GPU id, after the user's file and overrides."""
    prices = shipped_prices()
    if prices_file:
        path = Path(prices_file)
        if not is_file(prices_file):  # (a NUL byte or an over-long name is "no such file", not a traceback)
            raise UsageError(f"--prices {shown(prices_file)}: no such file")
        prices.update(_entries(_read_yaml(path, f"--prices {prices_file}"), f"--prices {prices_file}"))
    elif use_user_file and user_prices_path().is_file():
        path = user_prices_path()
        prices.update(_entries(_read_yaml(path, str(path)), str(path)))
    for text in overrides:
        gpu, usd = parse_override(text)
        prices[gpu] = Price(gpu, usd, "--price")
    return prices
