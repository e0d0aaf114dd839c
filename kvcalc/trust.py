"""How far to trust a figure: the class of evidence behind a speed or capacity figure, what backs it, and the range the
held-out residuals of that class give it (issue 18 item 3; issue 24 "trust on every row").

Classes of evidence (LABELS), decided per figure from what kvcalc knows about the GPU and the configuration:
- "measured on this GPU": the speed constants were fitted on this GPU's own runs (the H200 host, or the user's
  `kvcalc calibrate --bench`); the range is the spread of that fit's held-out errors;
- "held-out error on a similar case": public results exist for this GPU (docs/validation/data/speed-corpus/), and the
  range is the spread of the corpus errors with each GPU held out of the fit (leave-one-GPU-out);
- "extrapolated from datasheet": no result for this GPU; its datasheet x the class constants of its memory
  technology / generation fitted on other GPUs (range: leave-one-GPU-out spread), or the datasheet x the H200's
  fractions where no class constant applies (range: the corpus errors of that no-fit model);
- "assumption": the figure rests on a constant no run measured (named in `assumptions`);
- "known miss": a configuration measured to be off by more than the range (named in the backing).

The ranges are data in kvcalc/data/speed.yaml `intervals`, written by scripts/speed_corpus_report.py
--write-classes; a figure's range is figure x (1 + low) .. figure x (1 + high), covering ~80% of its class's cases.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .constants import load
from .formats import KvFormat, WeightFormat
from .hardware import GpuProfile

LABELS = ("measured on this GPU", "held-out error on a similar case", "extrapolated from datasheet", "assumption",
          "known miss")
MIN_ROWS = 3  # public results a GPU needs before its label says "held-out error on a similar case"


@dataclass(frozen=True)
class Trust:
    label: str  # one of LABELS
    backing: str  # what the figure rests on, one line
    low: float  # the measured value lies in figure x (1 + low) .. figure x (1 + high) for ~80% of this class
    high: float
    assumptions: tuple[str, ...] = ()

    def bounds(self, value: float) -> tuple[float, float]:
        return value * (1 + self.low), value * (1 + self.high)

    def short(self) -> str:
        """'-12%/+9%' as the table prints it."""
        return f"{self.low:+.0%}/{self.high:+.0%}"

    def to_json(self) -> dict:
        out = asdict(self)
        out["assumptions"] = list(self.assumptions)
        return out


def _intervals() -> dict:
    return load("speed").get("intervals") or {}


def _band(kind: str, metric: str, inverse: bool = False) -> tuple[float, float]:
    """low/high of `metric` ('TPOT', 'TTFT', 'TTFT-load', 'throughput', 'single-stream') in the evidence class `kind` ('measured',
    'held_out', 'datasheet'). inverse: the figure is the reciprocal of the metric (tok/s from a TPOT band)."""
    table = _intervals().get(kind) or {}
    # a tensor-parallel figure ('TPOT-tp') has its own residual class where the corpus holds enough of them (the
    # all-reduce over the host's link is the least transferable part); else the metric's own, then its base metric
    # (one TTFT-tp class, lone or loaded: a TP prefill's all-reduce bytes dominate both)
    plain = metric.removesuffix("-tp")
    band = table.get(metric) or table.get(metric.replace("-load-tp", "-tp")) or table.get(plain) \
        or table.get(plain.split("-")[0]) or table.get("TPOT") or {"low": -0.5, "high": 1.0}
    low, high = float(band["low"]), float(band["high"])
    if inverse:
        low, high = 1 / (1 + high) - 1, 1 / (1 + low) - 1
    return round(low, 3), round(high, 3)


def gpu_corpus_stats(gpu_id: str) -> dict | None:
    return (_intervals().get("by_gpu") or {}).get(gpu_id)


def speed_basis(gpu: GpuProfile) -> tuple[str, str]:
    """(label, backing) of a GPU's vLLM speed, before any configuration-specific caveat: what `kvcalc gpus` prints."""
    from .throughput import class_factors, class_labels

    data = load("speed")
    cal = getattr(gpu, "speed_calibration", None)
    if cal is not None:
        return LABELS[0], f"{gpu.id}: your calibration ({cal.describe()})"
    if gpu.id in data["measured"]:
        band = _intervals().get("measured", {}).get("TPOT")
        spread = f", held-out decode within {band['low']:+.0%}/{band['high']:+.0%}" if band else ""
        return LABELS[0], f"{gpu.id}: measured (speed model v2 fitted on its own runs{spread})"
    from .throughput import gemm_ratio

    ratio = gemm_ratio(gpu)
    gemm = f"; tensor rate x{ratio:.2f} from a public torch.mm measurement" if ratio != 1.0 else ""
    stats = gpu_corpus_stats(gpu.id)
    if stats and stats.get("n", 0) >= MIN_ROWS:
        return LABELS[1], (f"{gpu.id}: {stats['n']} public results ({stats.get('sources', '?')} sources), "
                           f"held-out median {stats['median_abs']:.0%}, mean {stats['mean_signed']:+.0%}{gemm}")
    factors = {k: v for k, v in class_factors(gpu).items() if v is not None}
    if factors:
        labels = class_labels(gpu)
        used = ", ".join(f"{k} {labels[k]}" for k in factors)
        return LABELS[2], (f"{gpu.id}: no public result; datasheet x class constants fitted on other GPUs ({used})"
                           + gemm + (f"; {stats['n']} public result(s) too few to judge" if stats else ""))
    return LABELS[2], (f"{gpu.id}: datasheet only (no public result for its memory technology or generation)"
                       + gemm)


def speed_trust(gpu: GpuProfile, engine: str, weights: WeightFormat, kv: KvFormat, metric: str = "TPOT",
                inverse: bool = False, batch: int = 1, tp: int = 1) -> Trust:
    """The trust of one speed figure: `metric` is the class of the quantity ('TPOT' for a decode step or its tok/s
    with inverse=True, 'TTFT', 'throughput', 'single-stream'); tp > 1: the tensor-parallel residual class."""
    from .throughput import fp8_kv_path

    label, backing = speed_basis(gpu)
    kind = {LABELS[0]: "measured", LABELS[1]: "held_out"}.get(label, "held_out" if "class constants" in backing
                                                               else "datasheet")
    assumptions: list[str] = []
    if engine == "hf":
        if gpu.id in load("throughput").get("fitted_bandwidth", {}):
            label, backing = LABELS[0], (f"{gpu.id}: transformers' step fitted on its own runs "
                                         "(kvcalc/data/throughput.yaml hf) at the median of nine leases' hosts; "
                                         "the range is the other leases' spread (eager launches follow the host CPU)")
            kind = "measured"
            if f"hf-{metric}" in (_intervals().get("measured") or {}):
                metric = f"hf-{metric}"
        else:
            label, kind = LABELS[2], "datasheet"
            backing = (f"{gpu.id}: transformers' per-layer launch time fitted on the H200 only, bandwidth from the "
                       "datasheet")
            assumptions.append(f"achievable_bandwidth_fraction {gpu.achievable_bandwidth_fraction} (hardware profile)")
    if engine == "hf" and batch > 1 and not kv.hf_quantized:
        label = LABELS[4]
        backing += ("; known miss: one lease of nine (v1 runs, 3B and 8B, batch 8) measured transformers' default "
                    "cache at 75 ms a step against 23-29 ms at batch 1; the v2, v4 and v5 leases measured batch 8 at "
                    "0.97-1.4x their batch 1, as kvcalc's step has it")
    if kv.vllm_name is not None and kv.bits == 8 and engine == "vllm" and fp8_kv_path(gpu) == "emulated-legacy":
        label = LABELS[3]
        assumptions.append("fp8_emulated_extra 75 operations/element (speed.yaml; no GPU below sm_80 measured)")
    if engine == "vllm" and weights.name.startswith("nf4") and gpu.id not in load("speed")["measured"]:
        assumptions.append("bitsandbytes nf4_gemv / nf4_dequant operations fitted on two H200 points (speed.yaml)")
    low, high = _band(kind, f"{metric}-tp" if tp > 1 and engine == "vllm" else metric, inverse)
    if label == LABELS[4]:  # off by more than any class spread: say so with the spread measured
        low, high = min(low, -0.7), max(high, 0.3)
    if label == LABELS[3]:  # an unmeasured constant: the datasheet-only spread at least
        d_low, d_high = _band("datasheet", metric, inverse)
        low, high = min(low, d_low), max(high, d_high)
    return Trust(label, backing, low, high, tuple(assumptions))


# KV tokens on the H200 itself (docs/validation/README.md): the v2 layouts -0.60..+0.04%, the v3 engines worst 0.43%,
# the five held-out engines within 0.30%; as measured / figure - 1
MEASURED_CAPACITY_BAND = (-0.006, 0.006)


def capacity_trust(gpu: GpuProfile, engine: str) -> Trust:
    """The trust of a capacity figure (KV tokens, max concurrency, fits): the memory ledger is engine code replayed,
    validated on the H200 and on public start-up logs of other GPUs (docs/validation/README.md)."""
    band = (_intervals().get("capacity") or {}).get(engine)
    if engine == "vllm":
        low, high = (band["low"], band["high"]) if band else (-0.05, 0.05)
        n = band.get("n", "?") if band else "?"
        if gpu.id in load("speed")["measured"]:  # its own runs, not other GPUs' public logs, bound it
            return Trust(LABELS[0], f"{gpu.id}: KV capacity replayed from vLLM's code, held-out H200 runs within "
                         "0.3%, every H200 run within 0.6%", *MEASURED_CAPACITY_BAND)
        return Trust(LABELS[1], f"vLLM's memory ledger replayed; {n} public start-up logs of other GPUs "
                     "(docs/validation/public_logs.json)", low, high)
    low, high = (band["low"], band["high"]) if band else (-0.05, 0.05)
    label = LABELS[0] if gpu.id in load("speed")["measured"] else LABELS[2]
    return Trust(label, f"{gpu.id}: transformers' cache bytes exact; static and peak bytes fitted on the H200",
                 low, high)
