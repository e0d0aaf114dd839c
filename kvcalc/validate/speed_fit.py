"""`kvcalc calibrate --bench FILE`: fit the speed model's per-GPU constants from `vllm bench serve` /
`vllm bench throughput` results of the user's own server (kvcalc/calibrate.py SpeedCalibration says what and why).

The model is kvcalc's own (kvcalc/workload.py's closed form, on kvcalc/throughput.py's speed model v2), run with the settings the
paired start-up log states; only the constants that belong to the GPU and the vLLM build move:
- decode bandwidth B and step overhead t0, from TPOTs (and throughput results): a decode step costs t0 plus the bytes
  it reads over B (plus compute where the batch is large). One TPOT cannot fix both: the benches must read different
  bytes per step relative to their compute (another context at low concurrency), else the two are not told apart.
- tensor efficiency f (share of the datasheet dense peak, GEMMs and attention alike), from the TTFT of a lone prompt
  (a run at concurrency 1 or at a request rate: a long prompt's prefill is GEMM-bound) or from decode at a batch
  large enough to be compute-bound (and the other requests' prefills a TPOT includes). A burst's TTFT (all prompts at
  once) is not used: it measures how vLLM's scheduler queues the prompts, which kvcalc models only coarsely. A
  one-prompt run with prefix caching on is not used either: vllm bench's warm-up request sends the first prompt before
  the run (benchmarks/benchmark_serving.py / vllm/benchmarks/serve.py "Starting initial single prompt test run"), so
  that prompt's prefill comes from the prefix cache.
Which constants move (identifiable()): taken in the order B, f, t0 (what kvcalc knows least about a GPU it has not
measured first), each kept only while the benches fix every constant taken to +-15% at 3% noise per figure (the
linearised least-squares spread). The fit minimises the squared log errors (Gauss-Newton with a halving step) over
those; the others keep kvcalc's values and the reason is stored and printed. Refused (one line,
exit 2, nothing written): benches of another model or GPU, benches that contradict each other (the same workload
more than 25% apart, or a fit that leaves a bench more than 25% off), a result faster than the GPU's datasheet allows,
and benches that fix no constant at all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..calibrate import SpeedCalibration, with_speed
from ..errors import UsageError

PARAMS_ORDER = ("bandwidth", "tensor", "comm", "link", "step")
LABEL = {"bandwidth": "decode bandwidth", "step": "step overhead", "tensor": "tensor efficiency",
         "comm": "TP all-reduce time", "link": "TP all-reduce bandwidth"}
NOISE = 0.03  # relative error of one bench figure (repeat runs of one workload agree to a few percent)
MAX_SPREAD = 0.15  # a constant is fitted only where the benches fix its log to +-15% at that noise
AGREE = 0.25  # two benches of one workload, or a bench after the fit: at most this far apart (relative)
BOUNDS = {"bandwidth": (1e10, 1e14), "step": (1e-5, 0.2), "tensor": (0.01, 2.0), "comm": (1e-8, 0.01), "link": (1e8, 1e13)}


@dataclass
class Row:
    """One measured quantity of one bench file and kvcalc's prediction of it under given constants."""

    bench: str
    quantity: str  # "tpot" (s), "ttft" (s) or "tokens_per_s"
    measured: float
    predict: Callable[[Any], float]  # GPU profile (with a speed calibration) -> predicted value
    role: str  # "decode" or "prefill"
    workload: tuple = ()  # (input, output, concurrency, rate, burst): two benches of one workload must agree
    tp: int = 1  # the server's tensor-parallel size (the all-reduce time shows only at TP > 1)


def _metadata_gpu(data: dict) -> str | None:
    """The GPU a bench file names, where its writer recorded one (`--metadata gpu=...`, or a `gpu` / `gpu_type` /
    `device` key): vLLM's own result JSON has no GPU field."""
    for key in ("gpu", "gpu_type", "gpu_name", "device"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _names_gpu(text: str, profile) -> bool:
    """'4xNVIDIA_L40S' names the L40S; 'NVIDIA A100-SXM4-80GB' the A100 80GB: the text without a count prefix and
    vendor word contains the profile's id or an alias, or the other way round."""
    from ..hardware.profile import normalize_name

    def tokens(name: str) -> tuple[str, ...]:
        return tuple(x for x in normalize_name(name).split("-") if x not in ("nvidia", "amd", "geforce", ""))

    def within(a: tuple, b: tuple) -> bool:  # a's tokens appear in b in a row ('a10' is not within 'a100-80gb')
        return bool(a) and any(b[i:i + len(a)] == a for i in range(len(b) - len(a) + 1))

    t = tokens(re.sub(r"^\d+\s*x\s*", "", text, flags=re.I))
    return any(within(n, t) or within(t, n) for n in map(tokens, (profile.id, profile.name, *profile.aliases)))


def _figure(data: dict, key: str) -> float | None:
    """A positive, finite figure of the file (None when absent or not one: such a figure is not used)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e12:
        return None
    return float(value)


def _lone_prompt(data: dict, wl) -> bool:
    """The TTFT is one prompt's prefill: the run keeps one request in flight, or sends them at a request rate."""
    return wl.concurrency == 1 or wl.request_rate is not None


def rows_for(path: str, fig: dict, input_len: int | None, output_len: int | None,
             notes: list[str]) -> list[Row]:
    """The rows one bench file gives, predicted under the settings its paired log states (fig: calibration_fit's
    per-log figures). Refuses a bench of another model or GPU."""
    from ..catalog import catalog_entry, catalog_names
    from ..engines import vllm as vllm_engine
    from ..engines.vllm_versions import rules_for
    from ..workload import closed_form_bench
    from .bench import read_bench, same_model, workload_of

    name = Path(path).name
    data = read_bench(path)
    spec, profile, settings = fig["spec"], fig["profile"], fig["settings"]
    gpu_named = _metadata_gpu(data)
    if gpu_named and not _names_gpu(gpu_named, profile):
        raise UsageError(f"bench {name} says it ran on {gpu_named!r}, not on {profile.name} (the logs' GPU): "
                         "calibrate one GPU at a time")
    hf_id = catalog_entry(spec.name).get("hf_id") if spec.name in catalog_names() else None
    if data["kind"] == "serve" and data.get("model_id") and not same_model(str(data["model_id"]), spec.name,
                                                                           hf_id or fig.get("served_model")):
        raise UsageError(f"bench {name} is a benchmark of {str(data['model_id'])[:80]!r}, not of the logs' model "
                         f"{spec.name}: calibrate each model's benches with its own logs")
    if data["kind"] == "throughput" and not (input_len and output_len):
        raise UsageError(f"bench {name}: a `vllm bench throughput` result holds no lengths: give --input-len and "
                         "--output-len (the ones it ran with)")
    try:
        wl = workload_of(data, input_len if data["kind"] == "throughput" else None,
                         output_len if data["kind"] == "throughput" else None)
        prompts = int(_figure(data, "num_prompts") or data.get("completed") or data.get("num_requests") or 1)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"bench {name}: its request_rate / num_prompts / max_concurrency are not numbers: not a "
                         "vllm bench result") from None
    try:
        wl.check(settings.max_model_len)
    except UsageError as exc:
        raise UsageError(f"bench {name}: {exc} (the log's max_model_len)") from None
    est = vllm_engine.estimate(spec, profile, settings)
    slots = max(1, min(est.max_num_seqs, est.concurrency_at(wl.context)))

    def predict(gpu) -> Any:
        return closed_form_bench(spec, gpu, settings.weights, settings.kv, wl, chunk_tokens=est.max_num_batched_tokens,
                          slots=slots, kv_bytes_per_token=est.deployment_kv_bytes_per_token,
                          tp=settings.tensor_parallel, pp=settings.pipeline_parallel,
                          enforce_eager=settings.enforce_eager)

    out: list[Row] = []
    key = (data["kind"], wl.input_len, wl.output_len, wl.concurrency, wl.request_rate, wl.burst,
           settings.tensor_parallel, settings.pipeline_parallel)
    if data["kind"] == "throughput":
        per = wl.input_len + wl.output_len
        tps = _figure(data, "tokens_per_second")
        if tps is not None:
            out.append(Row(name, "tokens_per_s", tps, lambda g: predict(g).request_throughput * per,
                           "decode", key, settings.tensor_parallel))
        return out
    tpot = _figure(data, "mean_tpot_ms")
    if tpot is not None and wl.output_len > 1:
        out.append(Row(name, "tpot", tpot / 1e3, lambda g: predict(g).tpot_s, "decode", key,
                       settings.tensor_parallel))
    ttft = _figure(data, "mean_ttft_ms")
    if ttft is not None:
        cached = fig.get("prefix_caching")
        if cached is None:
            cached = rules_for(settings.version).prefix_caching
        if not _lone_prompt(data, wl):
            notes.append(f"{name}: TTFT not used (all {wl.concurrency} prompts at once: it measures vLLM's "
                         "queueing of the prompts, not one prefill)")
        elif prompts == 1 and cached:
            notes.append(f"{name}: TTFT not used (one prompt with prefix caching on: vllm bench's warm-up request "
                         "sent it before the run, so it came from the prefix cache)")
        else:
            out.append(Row(name, "ttft", ttft / 1e3, lambda g: predict(g).ttft_s, "prefill", key,
                           settings.tensor_parallel))
    return out


def _rates_base(profile) -> dict[str, float]:
    from ..constants import load
    from ..throughput import gpu_rates

    r = gpu_rates(profile, calibrated=False)
    peak = (profile.flops_for("bf16") if profile.native_bf16 else None) or profile.flops_for("fp16") or \
        profile.flops_for("fp32") or 1e12
    return {"bandwidth": r.bandwidth, "step": r.step_overhead_s, "tensor": r.tensor / peak,
            "comm": load("throughput")["engines"]["vllm"]["tp_comm_per_layer_s"],
            "link": 5e10}  # a start for the fit only: kvcalc models no link term of its own


def _gpu_with(profile, values: dict[str, float], free: tuple[str, ...]):
    return with_speed(profile, SpeedCalibration(
        bandwidth_bytes_per_s=values["bandwidth"] if "bandwidth" in free else None,
        step_overhead_s=values["step"] if "step" in free else None,
        tensor_fraction=values["tensor"] if "tensor" in free else None,
        tp_comm_per_layer_s=values["comm"] if "comm" in free else None,
        link_bandwidth_bytes_per_s=values["link"] if "link" in free else None))


def _log_errors(rows: list[Row], gpu) -> list[float]:
    return [math.log(max(r.predict(gpu), 1e-12) / r.measured) for r in rows]


def _jacobian(rows: list[Row], profile, values: dict[str, float], names: tuple[str, ...]) -> list[list[float]]:
    """d ln(predicted) / d ln(constant), by central differences (1% steps)."""
    h = 0.01
    cols = []
    for p in names:
        up, down = dict(values), dict(values)
        up[p], down[p] = values[p] * math.exp(h), values[p] * math.exp(-h)
        a = _log_errors(rows, _gpu_with(profile, up, names))  # the others at kvcalc's own values, as in the fit
        b = _log_errors(rows, _gpu_with(profile, down, names))
        cols.append([(x - y) / (2 * h) for x, y in zip(a, b)])
    return [list(row) for row in zip(*cols)]  # rows x params


def _spread(rows: list[Row], profile, base: dict[str, float], names: tuple[str, ...]) -> list[float]:
    """How well the rows fix each constant: the standard deviation of its log under NOISE relative error per figure
    (the linearised least-squares covariance NOISE^2 (J^T J)^-1; inf where the rows cannot tell it from the others)."""
    import numpy as np

    jac = np.array(_jacobian(rows, profile, base, names), dtype=float)
    if jac.shape[0] < len(names):
        return [math.inf] * len(names)
    gram = jac.T @ jac
    if np.linalg.cond(gram) > 1e12:
        return [math.inf] * len(names)
    return [float(NOISE * math.sqrt(max(v, 0.0))) for v in np.diag(np.linalg.inv(gram))]


def _within(spread: float) -> str:
    return f" (they fix it to +-{spread:.0%} only)" if spread < 1 else ""


def identifiable(rows: list[Row], profile, base: dict[str, float]
                 ) -> tuple[tuple[str, ...], list[str], dict[str, float]]:
    """(the constants the rows determine, why each other one stays kvcalc's, their fitted values). Constants are
    taken in the order of what kvcalc knows least about a GPU it has not measured (its decode bandwidth, from the
    datasheet x an assumed fraction; its tensor efficiency; the all-reduce's time and bandwidth, set by the
    interconnect; then the step overhead, a property of the engine and host measured on the H200), each kept only
    while, fitted together, every constant taken so far stays fixed to +-MAX_SPREAD at NOISE error per figure (the
    spread is judged at the fitted values: how much a figure moves with a constant depends on where it stands)."""
    why: list[str] = []
    free: tuple[str, ...] = ()
    values = dict(base)
    violation = ""
    decode = [r for r in rows if r.role == "decode"]
    for p in PARAMS_ORDER:
        if p in ("bandwidth", "step") and not decode:
            why.append(f"{LABEL[p]}: no TPOT (vllm bench serve) or throughput result")
            continue
        if p in ("comm", "link") and not any(r.tp > 1 for r in decode):
            if p == "comm":
                why.append("TP all-reduce time and bandwidth: no bench of a tensor-parallel server")
            continue
        trial = free + (p,)
        fitted = fit_constants(rows, profile, trial, values)
        try:
            _physical(fitted, trial, profile)
        except UsageError as exc:  # refused at the end if no set of constants the data fixes is physical
            violation = violation or str(exc)
            why.append(f"{LABEL[p]}: fitted beyond what the GPU can do")
            continue
        spread = _spread(rows, profile, fitted, trial)
        if max(spread) <= MAX_SPREAD:
            free, values = trial, fitted
            continue
        if p in ("comm", "link"):
            why.append(f"{LABEL[p]}: the tensor-parallel benches do not tell it from the other constants"
                       f"{_within(spread[-1])}: add TP benches at a few concurrencies (1 to 100s)")
        elif p == "tensor":
            why.append(f"{LABEL[p]}: no TTFT of a lone prompt long enough to be compute-bound (a run with "
                       "--max-concurrency 1 or a --request-rate) and no decode at a batch large enough")
        elif p == "step" and len(decode) == 1:
            why.append(f"{LABEL[p]}: one decode figure ({decode[0].bench}) cannot fix both the bandwidth and the "
                       "step overhead: add a bench at another concurrency or context")
        elif p == "step":
            why.append(f"{LABEL[p]}: the {len(decode)} decode figures do not tell it from the bandwidth"
                       f"{_within(spread[-1])}: add a bench at a much longer or shorter context at low concurrency")
        else:
            why.append(f"{LABEL[p]}: the benches do not fix it{_within(spread[-1])}")
    if not free and violation:
        raise UsageError(violation)
    return free, why, values


def _physical(values: dict[str, float], free: tuple[str, ...], profile) -> None:
    """Refuse constants no run on this GPU can have: decode faster than its datasheet bandwidth, prefill faster than
    its dense tensor peak."""
    datasheet = profile.memory_bandwidth_bytes_per_s
    if "bandwidth" in free and values["bandwidth"] > datasheet:
        raise UsageError(f"the benches imply decode reading {values['bandwidth'] / 1e12:.2f} TB/s, more than "
                         f"{profile.name}'s {datasheet / 1e12:.2f} TB/s datasheet peak: they did not run on this GPU "
                         "(or their prompts came from the prefix cache)")
    if "tensor" in free and values["tensor"] > 1.0:
        raise UsageError(f"the benches imply GEMMs at {values['tensor']:.0%} of {profile.name}'s dense tensor peak: "
                         "faster than the GPU allows (another GPU, or prompts served from the prefix cache)")


def fit_constants(rows: list[Row], profile, free: tuple[str, ...], base: dict[str, float],
                  iterations: int = 40) -> dict[str, float]:
    """Gauss-Newton in log space on the free constants, with a halving step that never raises the squared error."""
    import numpy as np

    values = dict(base)

    def cost(v: dict[str, float]) -> float:
        return float(sum(e * e for e in _log_errors(rows, _gpu_with(profile, v, free))))

    current = cost(values)
    for _ in range(iterations):
        errs = np.array(_log_errors(rows, _gpu_with(profile, values, free)))
        jac = np.array(_jacobian(rows, profile, values, free))
        step, *_ = np.linalg.lstsq(jac, -errs, rcond=None)
        scale, improved = 1.0, False
        while scale > 1e-3:
            trial = dict(values)
            for p, d in zip(free, step):
                lo, hi = BOUNDS[p]
                step_log = max(-5.0, min(5.0, scale * float(d)))  # at most x148 per step: no overflow
                trial[p] = min(hi, max(lo, values[p] * math.exp(step_log)))
            c = cost(trial)
            if c < current:
                values, improved = trial, current - c > 1e-12
                current = c
                break
            scale /= 2
        if not improved:
            break
    return values


def check_agreement(rows: list[Row]) -> None:
    """Two benches of one workload (lengths, concurrency, rate) whose figure differs by more than 25%."""
    def same(a: Row, b: Row) -> bool:  # lengths are token totals / requests: a few percent apart for one workload
        (ka, ia, oa, *rest_a), (kb, ib, ob, *rest_b) = a.workload, b.workload
        return (a.quantity == b.quantity and ka == kb and rest_a == rest_b
                and abs(ia - ib) <= 0.05 * max(ia, ib) and abs(oa - ob) <= 0.05 * max(oa, ob))

    for i, r in enumerate(rows):
        other = next((o for o in rows[:i] if same(o, r)), None)
        if other is not None:
            lo, hi = sorted((other.measured, r.measured))
            if hi > lo * (1 + AGREE):
                unit, k = ("tok/s", 1.0) if r.quantity == "tokens_per_s" else ("ms", 1e3)
                raise UsageError(f"contradicting benches: {other.bench} and {r.bench} ran the same workload but their "
                                 f"{r.quantity.upper()} is {other.measured * k:.2f} vs {r.measured * k:.2f} {unit} "
                                 "(more than 25% apart): calibrate one environment at a time")


def fit_speed(rows: list[Row], profile, notes: list[str]) -> tuple[SpeedCalibration, list[dict]]:
    """(the speed calibration, per row: measured, kvcalc before, after). UsageError when the rows fix nothing, the
    result is faster than the GPU allows, or a bench stays more than 25% off (the files contradict each other)."""
    check_agreement(rows)
    base = _rates_base(profile)
    free, why, values = identifiable(rows, profile, base)
    if not free:
        raise UsageError("insufficient bench data: " + "; ".join(why))
    _physical(values, free, profile)
    for p in free:
        lo, hi = BOUNDS[p]
        if not lo * 1.001 < values[p] < hi * 0.999:
            raise UsageError(f"contradicting benches: fitting them pushes the {p} constant to its bound "
                             f"({values[p]:.3g}); no one environment explains them")
    before = [r.predict(profile) for r in rows]
    gpu = _gpu_with(profile, values, free)
    after = [r.predict(gpu) for r in rows]
    report = [{"bench": r.bench, "quantity": r.quantity, "measured": r.measured, "before": b, "after": a}
              for r, b, a in zip(rows, before, after)]
    worst = max(report, key=lambda x: abs(math.log(x["after"] / x["measured"])))
    if abs(worst["after"] / worst["measured"] - 1) > AGREE:
        raise UsageError(f"contradicting benches: after the fit {worst['bench']}'s {worst['quantity'].upper()} is "
                         f"still {worst['after'] / worst['measured'] - 1:+.0%} off: no one set of constants explains "
                         "every file (another GPU, server settings or vLLM build?)")
    cal = SpeedCalibration(
        bandwidth_bytes_per_s=round(values["bandwidth"]) if "bandwidth" in free else None,
        step_overhead_s=round(values["step"], 7) if "step" in free else None,
        tensor_fraction=round(values["tensor"], 4) if "tensor" in free else None,
        tp_comm_per_layer_s=round(values["comm"], 9) if "comm" in free else None,
        link_bandwidth_bytes_per_s=round(values["link"]) if "link" in free else None,
        benches=tuple(sorted({r.bench for r in rows})), not_fitted=tuple(why))
    return cal, report
