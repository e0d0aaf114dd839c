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
--write-classes (or --write-intervals); a figure's range is figure x (1 + low) .. figure x (1 + high), covering ~80% of
its class's cases. A GPU with public results has its own range too (`intervals.by_gpu.<gpu>.bands`, from its own
leave-one-GPU-out errors: scripts/speed_corpus_report.py gpu_band, bounds that hold >= 80% of results like them):
with at least 10 results of the figure's class they replace the class range ('own'); with fewer they widen it
('family': its decode or prefill results, as speed residuals; 'pooled': all of its results; 'few': each of them held).
A GPU measured on the project's host keeps its own runs' range at TP 1. `range_basis` says which a figure carries; the
report publishes each GPU's coverage (docs/validation/speed-gpus.md, speed.yaml by_gpu.<gpu>.coverage).
SGLang's figures take SGLang's own held-out errors (speed.yaml `sglang_intervals`, scripts/sglang_speed_report.py),
or no range where too few SGLang results exist (low/high None, `range_basis` says how many).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .constants import load
from .formats import KvFormat, WeightFormat
from .hardware import GpuProfile

LABELS = ("measured on this GPU", "held-out error on a similar case", "extrapolated from datasheet", "assumption",
          "known miss")
MIN_ROWS = 3  # public results a GPU needs before its label says "held-out error on a similar case"
MIN_SGLANG_ROWS = 10  # held-out SGLang results of a metric before they make a range


@dataclass(frozen=True)
class Trust:
    label: str  # one of LABELS
    backing: str  # what the figure rests on, one line
    low: float | None  # the measured value lies in figure x (1 + low) .. figure x (1 + high) for ~80% of this class
    high: float | None  # (None, None): no range (SGLang off the H200: too few held-out results; range_basis says)
    assumptions: tuple[str, ...] = ()
    range_basis: str = ""  # whose held-out errors the range is: the GPU's own, its class's (and how many)

    def bounds(self, value: float) -> tuple[float, float] | None:
        if self.low is None or self.high is None:
            return None
        return value * (1 + self.low), value * (1 + self.high)

    def short(self) -> str:
        """'-12%/+9%' as the table prints it ('no range' without one)."""
        return range_text(self.low, self.high)

    def to_json(self) -> dict:
        out = asdict(self)
        out["assumptions"] = list(self.assumptions)
        return out


def capacity_range_text(span: dict) -> str:
    """What a capacity range's two ends mean (plan's trust_lines and search's note say it in these words)."""
    return (f"low end = the freed compile segment pinned ({span['pinned_bytes'] / 2**30:.2f} GiB a rank less KV), "
            "high end = not pinned: " + span["reason"])


def range_text(low: float | None, high: float | None) -> str:
    """'-12%/+9%', or 'no range' where the figure has none."""
    return "no range" if low is None or high is None else f"{low:+.0%}/{high:+.0%}"


def _intervals() -> dict:
    return load("speed").get("intervals") or {}


def _invert(low: float, high: float) -> tuple[float, float]:
    """The range of 1 / figure from the range of a figure (tok/s from a TPOT range)."""
    return 1 / (1 + high) - 1, 1 / (1 + low) - 1


def gpu_band(gpu_id: str, metric: str) -> dict | None:
    """The GPU's own range of a `metric` figure (speed.yaml intervals.by_gpu.<gpu>.bands: low, high, n, basis), in
    the metric's direction; None where the corpus holds no result of this GPU."""
    bands = (gpu_corpus_stats(gpu_id) or {}).get("bands") or {}
    plain = metric.removesuffix("-tp")
    return bands.get(metric) or bands.get(metric.replace("-load-tp", "-tp")) or (
        None if metric.endswith("-tp") else bands.get(plain.split("-")[0]))


def _class_key(kind: str, metric: str) -> str:
    """The key of the class range a `metric` figure takes in `kind` (_band's fallback order), '' for the default."""
    table = _intervals().get(kind) or {}
    plain = metric.removesuffix("-tp")
    for key in (metric, metric.replace("-load-tp", "-tp"), plain, plain.split("-")[0], "TPOT"):
        if key in table:
            return key
    return ""


def _class_text(kind: str, metric: str) -> str:
    key = _class_key(kind, metric)
    name = CLASS_NAMES.get(kind, kind)
    if not key:
        return f"{name} default (no class range)"
    n = ((_intervals().get(kind) or {}).get(key) or {}).get("n", "?")
    return f"{name} class ({key}, {n} held-out rows)"


CLASS_NAMES = {"measured": "measured-on-this-GPU", "held_out": "public-results (held out)",
               "datasheet": "datasheet-only"}


def _gpu_range(gpu_id: str, kind: str, metric: str, inverse: bool) -> tuple[float, float, str]:
    """(low, high, range_basis) of a figure on a GPU: its own range where the corpus has one (gpu_band), else its
    evidence class's."""
    low, high = _band(kind, metric, inverse)
    cls = _class_text(kind, metric)
    band = gpu_band(gpu_id, metric)
    if not band:
        return low, high, cls
    g_low, g_high = float(band["low"]), float(band["high"])
    if inverse:
        g_low, g_high = _invert(g_low, g_high)
    n = band.get("n", "?")
    if band.get("basis") == "own":  # enough of its own results of this very class: they set the range
        return round(g_low, 3), round(g_high, 3), f"{gpu_id}'s own {n} held-out public {metric} results"
    low, high = round(min(low, g_low), 3), round(max(high, g_high), 3)
    fam = "prefill" if metric.startswith("TTFT") else "decode"
    if band.get("basis") == "family":
        why = f"{cls}, widened to {gpu_id}'s own {n} held-out public {fam} results"
    elif band.get("basis") == "pooled":
        why = f"{cls}, widened to {gpu_id}'s own {n} held-out public results (all metrics)"
    else:
        why = f"{cls}, widened to hold each of {gpu_id}'s {n} held-out public result(s)"
    return low, high, why


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

    if engine == "sglang":  # SGLang's own held-out errors (or no range); the shared model's assumptions are its too
        t = sglang_speed_trust(gpu, metric, inverse, tp)
        shared = speed_trust(gpu, "vllm", weights, kv, metric, inverse, batch, tp).assumptions
        return replace(t, assumptions=t.assumptions + tuple(a for a in shared if a not in t.assumptions))
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
    figure = f"{metric}-tp" if tp > 1 and engine == "vllm" else metric
    cal = getattr(gpu, "speed_calibration", None)
    # the GPU's own public results set or widen its range (vLLM's figures: the corpus is vLLM's); a GPU measured on
    # the project's host keeps its own runs' range where they measured it (one GPU), its public results beyond
    if engine == "vllm" and cal is None and (kind != "measured" or tp > 1):
        low, high, range_basis = _gpu_range(gpu.id, kind, figure, inverse)
    else:
        low, high = _band(kind, figure, inverse)
        range_basis = _class_text(kind, figure)
    if label == LABELS[4]:  # off by more than any class spread: say so with the spread measured
        low, high = min(low, -0.7), max(high, 0.3)
    if label == LABELS[3]:  # an unmeasured constant: the datasheet-only spread at least
        d_low, d_high = _band("datasheet", metric, inverse)
        low, high = min(low, d_low), max(high, d_high)
        range_basis += "; widened to the datasheet-only class's (an unmeasured constant)"
    if label == LABELS[4]:
        range_basis += "; widened to -70%/+30% at least (a known miss)"
    return Trust(label, backing, low, high, tuple(assumptions), range_basis)


def _sglang_intervals() -> dict:
    return load("speed").get("sglang_intervals") or {}


def sglang_speed_trust(gpu: GpuProfile, metric: str = "TPOT", inverse: bool = False, tp: int = 1) -> Trust:
    """The trust of an SGLang speed figure, from SGLang's own held-out errors (speed.yaml `sglang_intervals`, written
    by scripts/sglang_speed_report.py --write): on the GPU SGLang ran on on the project's host (one GPU), those runs'
    range; elsewhere the public SGLang results of the speed corpus, per metric where at least MIN_SGLANG_ROWS of them
    exist; else no range (low/high None), `range_basis` saying how many results there are."""
    data = _sglang_intervals()
    measured = data.get("measured") or {}
    public = data.get("public") or {}
    vlabel, vbacking = speed_basis(gpu)
    shared = vbacking.split(": ", 1)[-1]
    plain = metric.removesuffix("-tp")
    if gpu.id == measured.get("gpu") and tp == 1 and getattr(gpu, "speed_calibration", None) is None:
        band = measured.get(metric) or measured.get(plain.split("-")[0])
        if band:
            low, high = float(band["low"]), float(band["high"])
            if inverse:
                low, high = _invert(low, high)
            return Trust(LABELS[0], f"{gpu.id}: SGLang {measured.get('version', '')} runs on the project's host "
                         "(docs/validation/sglang.md), every scored row held out of the fits", round(low, 3),
                         round(high, 3), (), f"SGLang's own {band.get('n', '?')} held-out {band.get('metric', metric)} "
                         f"results on {gpu.id} ({band.get('rows', 'the H200 runs')})")
    n_gpu = int((public.get("by_gpu") or {}).get(gpu.id, 0))
    figure = f"{plain}-tp" if tp > 1 else plain
    band = (public.get("bands") or {}).get(figure) or (public.get("bands") or {}).get(plain)
    # SGLang's own step overhead is taken as vLLM's (plan._sglang_row): on a GPU without SGLang results no run
    # measured it there, an assumption the row names
    assumptions: tuple[str, ...] = ()
    if n_gpu >= MIN_ROWS:
        label = LABELS[1]
    else:
        label = LABELS[3]
        assumptions = (f"SGLang's per-step overhead on {gpu.id} taken as vLLM's ({n_gpu} SGLang result(s) on it)",)
    backing = (f"{gpu.id}: SGLang on the shared speed model ({vlabel}: {shared}); {n_gpu} public SGLang result(s) on "
               f"this GPU, {public.get('n', 0)} on all GPUs (docs/validation/sglang.md)")
    if band:
        low, high = float(band["low"]), float(band["high"])
        if inverse:
            low, high = _invert(low, high)
        return Trust(label, backing, round(low, 3), round(high, 3), assumptions,
                     f"SGLang's {band.get('n', '?')} public held-out {figure} results (10th-90th percentile)")
    n_metric = int((public.get("by_metric") or {}).get(plain.split("-")[0], 0))
    return Trust(label, backing, None, None, assumptions,
                 f"no range: {n_metric} public SGLang {plain} result(s) ({n_gpu} of any metric on {gpu.id}), fewer "
                 f"than the {MIN_SGLANG_ROWS} a 10th-90th percentile needs")


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
                         "0.3%, every H200 run within 0.6%", *MEASURED_CAPACITY_BAND, (), "the H200 runs' KV errors")
        return Trust(LABELS[1], f"vLLM's memory ledger replayed; {n} public start-up logs of other GPUs "
                     "(docs/validation/public_logs.json)", low, high, (),
                     "the public vLLM start-up logs' KV errors, 10th-90th percentile")
    if engine == "sglang":  # SGLang's ledger against the public start-up logs (scripts/sglang_speed_report.py)
        band = _sglang_intervals().get("capacity")
        low, high = (band["low"], band["high"]) if band else (-0.05, 0.05)
        return Trust(LABELS[1], f"SGLang's memory ledger replayed; {band.get('n', '?') if band else '?'} public "
                     "start-up logs (KV pool; docs/validation/sglang.md), the H200 runs within 0.3%", low, high, (),
                     "the public SGLang start-up logs' KV-pool errors, 10th-90th percentile")
    low, high = (band["low"], band["high"]) if band else (-0.05, 0.05)
    label = LABELS[0] if gpu.id in load("speed")["measured"] else LABELS[2]
    return Trust(label, f"{gpu.id}: transformers' cache bytes exact; static and peak bytes fitted on the H200",
                 low, high)


def speed_range_summary(gpu: GpuProfile) -> dict:
    """What `kvcalc gpus` says of a GPU's speed range: a 16-bit decode's tok/s at TP 1 (low, high, range_basis), and
    how many of the GPU's own held-out public results its per-GPU ranges hold (speed.yaml by_gpu.<gpu>.coverage:
    'loo_row', each result scored against the range built without it; 'class', against its class's range alone)."""
    from .formats import kv_format, weight_format

    t = speed_trust(gpu, "vllm", weight_format("bf16"), kv_format("auto"), "TPOT", inverse=True)
    cov = None if getattr(gpu, "speed_calibration", None) else (gpu_corpus_stats(gpu.id) or {}).get("coverage")
    text = f"decode tok/s range {t.short()} ({t.range_basis})"
    if cov:
        where = "its TP > 1 ranges (its own runs set TP 1's)" if t.label == LABELS[0] else "its ranges"
        text += (f"; {where} hold {cov['loo_row']:.0%} of its {cov['n']} held-out public results, each left out of "
                 f"its own range ({cov['class']:.0%} with the class ranges alone)")
    return {"low": t.low, "high": t.high, "range_basis": t.range_basis, "coverage": cov, "text": text}
