"""GPU prices (US dollars per GPU-hour, on demand): shipped data, a user file, and command-line overrides.

Precedence, lowest to highest: kvcalc/data/prices.yaml < the user's file ($XDG_CONFIG_HOME/kvcalc/prices.yaml, else
~/.config/kvcalc/prices.yaml, replaced by --prices FILE when given) < --price GPU=USD. A user file is either the shipped
format (`prices: {gpu: {usd_per_gpu_hour: 1.2, ...}}`) or a plain mapping (`l4: 0.7`). GPU names go through the
same lookup as --gpu (ids and aliases); an unknown name or a negative price is a usage error.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from .errors import UsageError, shown
from .input_files import is_file

MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class InstanceOffer:
    """A machine a provider rents whole: gpus_per_instance GPUs of one type at one hourly price per tier (None where
    the provider publishes none). Read from prices.yaml `offers`; search rents a replica inside one instance."""

    gpu: str
    provider: str
    gpus_per_instance: int
    on_demand: float | None
    spot: float | None
    reserved: float | None
    reserved_term: str
    date: str
    source: str
    estimate: bool = False

    def usd_per_hour(self, tier: str) -> float | None:
        return {"on-demand": self.on_demand, "spot": self.spot, "reserved": self.reserved}[tier]


@dataclass(frozen=True)
class Price:
    gpu: str
    usd_per_gpu_hour: float
    source: str  # where the number comes from: a URL and date, a file, or "--price"
    estimate: bool = False
    # the instance shapes the shipped data offers for this GPU (none for a --price or user-file price: the user's
    # number is what the user pays, per GPU)
    offers: tuple[InstanceOffer, ...] = ()


TIERS = ("on-demand", "spot", "reserved")


@dataclass(frozen=True)
class Rental:
    """How a deployment of `replicas` replicas of gpus_per_replica GPUs is rented at the lowest price found."""

    usd_per_hour: float
    provider: str
    gpus_per_instance: int  # 1: priced per GPU (the per-GPU offer, or the user's --price)
    instances: int
    source: str
    estimate: bool


def rent(price: Price, gpus_per_replica: int, replicas: int, tier: str = "on-demand",
         published_only: bool = False) -> Rental | None:
    """The cheapest way to rent the deployment: per GPU at the GPU's own price (on demand only), or whole instances of
    an offer, each holding floor(gpus_per_instance / gpus_per_replica) replicas (a replica never spans two machines:
    kvcalc has no inter-node cost model). None when the tier has no price for this GPU; with published_only, prices
    marked estimates count as none."""
    options: list[Rental] = []
    if tier == "on-demand":
        n = gpus_per_replica * replicas
        options.append(Rental(price.usd_per_gpu_hour * n, "per GPU", 1, n, price.source, price.estimate))
    for offer in price.offers:
        usd = offer.usd_per_hour(tier)
        per_instance = offer.gpus_per_instance // gpus_per_replica
        if usd is None or per_instance < 1:
            continue
        instances = -(-replicas // per_instance)
        options.append(Rental(usd * instances, offer.provider, offer.gpus_per_instance, instances,
                              f"{offer.source} ({offer.date})", offer.estimate))
    if published_only:
        options = [o for o in options if not o.estimate]
    return min(options, key=lambda r: (r.usd_per_hour, r.gpus_per_instance)) if options else None


def has_published_price(price: Price, tier: str = "on-demand") -> bool:
    """Whether some rental of this GPU at the tier is a published price, not an estimate."""
    return rent(price, 1, 1, tier, published_only=True) is not None


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

    data = yaml.safe_load(resources.files("kvcalc").joinpath("data/prices.yaml").read_text())
    prices = _entries({k: v for k, v in data.items() if k != "offers"}, "kvcalc/data/prices.yaml")
    by_gpu: dict[str, list[InstanceOffer]] = {}
    for offer in _offers(data.get("offers") or [], "kvcalc/data/prices.yaml"):
        by_gpu.setdefault(offer.gpu, []).append(offer)
    return {gpu: replace(p, offers=tuple(by_gpu.get(gpu, ()))) for gpu, p in prices.items()}


def shipped_offers() -> list[InstanceOffer]:
    """Every instance offer of the shipped price data (`kvcalc gpus --offers`, docs)."""
    return [o for p in shipped_prices().values() for o in p.offers]


def _offers(items, where: str) -> list[InstanceOffer]:
    if not isinstance(items, list):
        raise UsageError(f"{where}: offers must be a list")
    out = []
    for i, item in enumerate(items):
        at = f"{where}: offers[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f"{at} must be a mapping")
        n = item.get("gpus_per_instance")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
            raise UsageError(f"{at}: gpus_per_instance must be an integer from 1 to 1024")
        tiers = {t: (None if item.get(k) is None else _number(item[k], f"{at}: {k}"))
                 for t, k in (("on_demand", "on_demand_usd_per_hour"), ("spot", "spot_usd_per_hour"),
                              ("reserved", "reserved_usd_per_hour"))}
        if all(v is None for v in tiers.values()):
            raise UsageError(f"{at}: no price (on_demand_usd_per_hour, spot_usd_per_hour or reserved_usd_per_hour)")
        out.append(InstanceOffer(_gpu_id(str(item.get("gpu")), at), str(item.get("provider", "")), n,
                                 tiers["on_demand"], tiers["spot"], tiers["reserved"],
                                 str(item.get("reserved_term", "")), str(item.get("date", "undated")),
                                 str(item.get("source", where)), bool(item.get("estimate", False))))
    return out


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
