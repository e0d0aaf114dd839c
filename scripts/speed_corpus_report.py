#!/usr/bin/env python3
"""kvcalc's speed against the public speed corpus (docs/validation/data/speed-corpus/corpus.jsonl), issue 18.

Every row that states enough to be predicted (a catalog model, the lengths, the concurrency or request rate or batch)
is predicted through `kvcalc plan`'s own path (plan.plan -> workload.vllm_bench on throughput.py's speed model), so the
figure compared is the one a user reads. Errors are pred / measured - 1 (signed), reported:

- in-sample: with the class constants of kvcalc/data/speed.yaml `classes` fitted on every row (what kvcalc ships);
- leave-one-GPU-out: each GPU type's rows predicted with the class constants refitted on the other GPUs' rows only
  (a GPU whose generation no other GPU shares falls back to the H200-derived tensor rate);
- leave-one-source-out: likewise per source (a blog, an issue, a result folder).

The class constants are few and physical (kvcalc/throughput.py class_factors): achieved decode bandwidth (one
fraction pooled over the memory technologies: throughput.POOLED), tensor efficiency per architecture generation, the step overhead of the software stack (CUDA vs ROCm).
The fit is a coordinate search on a grid of each factor (median |log error| of the rows that the factor moves).

    python3 scripts/speed_corpus_report.py [--json OUT] [--markdown OUT] [--write-classes] [--quick]

--write-classes writes the in-sample fit into kvcalc/data/speed.yaml `classes` (the held-out errors published with
it are those this script prints). --quick skips the held-out refits.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CORPUS = ROOT / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"

# corpus weight names -> kvcalc formats (the source's kernel name kept in the corpus; kvcalc prices the kernel vLLM
# picks for the format, Marlin for AWQ/GPTQ on sm_80+)
WEIGHTS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8-dynamic": "fp8", "awq": "awq", "awq-marlin": "awq",
           "gptq": "gptq", "gptq-marlin": "gptq", "w4a16": "w4a16", "nf4": "nf4", "gptq-int8": "w8a8",
           "gptq-marlin-int8": "w8a8",
           # compressed-tensors INT8 W8A8 (per-channel INT8 weights, per-token INT8 activations: CutlassInt8ScaledMM)
           "w8a8-int8": "w8a8",
           # the checkpoint's own quantization (ModelOpt NVFP4, gpt-oss's MXFP4): kvcalc reads it from the catalog
           # model's quantization config (checkpoint.baseline_weights), as plan's baseline row does
           "nvfp4": None, "mxfp4": None,
           # Meta's FBGEMM FP8 checkpoint (Llama-3.1-405B-FP8: self-attention and the first and last layers' MLPs
           # stay bf16): the catalog model llama-3.1-405b-fp8's own quantization_config
           "fbgemm-fp8": None}
# the metric classes of the issue's targets
CLASS = {"tpot_ms": "TPOT", "itl_ms": "TPOT", "ttft_ms": "TTFT", "output_throughput": "throughput",
         "total_throughput": "throughput", "single_stream_tok_s": "single-stream",
         "output_tok_s_per_user": "single-stream"}
TARGET = {"TPOT": 0.15, "throughput": 0.15, "single-stream": 0.15, "TTFT": 0.25}


def load_rows(path: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def why_not(row: dict) -> str | None:
    """Why a row cannot be predicted (None: it can)."""
    if row.get("engine", "vllm") != "vllm":  # never in a fit here: held out against kvcalc's SGLang rows
        return f"engine {row['engine']}: scripts/sglang_speed_report.py"
    if row.get("kvcalc_model") is None:
        return "no catalog model with the checkpoint's layout"
    if row["metric"] not in CLASS:
        return f"metric {row['metric']} not modelled"
    if row.get("weights") not in WEIGHTS:
        return f"weights {row.get('weights')} not mapped"
    if row.get("input_len") is None and row["mode"] != "offline":
        return "input length not stated"
    if row.get("output_len") is None:
        return "output length not stated"
    if row.get("concurrency") is None and row.get("request_rate") in (None,) :
        return "concurrency not stated"
    if row.get("concurrency") is None and row.get("request_rate") == "inf" and not row.get("num_prompts"):
        return "concurrency and prompt count not stated"
    return None


def _workload(row: dict):
    from kvcalc.workload import Workload

    inp = max(1, round(row["input_len"] if row.get("input_len") is not None else 32))
    out = max(2, round(row["output_len"]))
    rate = row.get("request_rate")
    n = row.get("num_prompts")  # the run's --num-prompts: a saturated run's queue (and TTFT) grows with it
    # a ShareGPT run's lengths spread around its stated means (serve_sim.sharegpt_lengths) when its prompts are
    # counted (the spread needs a run of them); the others keep the fixed lengths they state
    ds = {"dataset": "sharegpt"} if row.get("dataset") == "sharegpt" and n and n > 1 else {}
    if row.get("random_range_ratio"):  # the random dataset's --random-range-ratio: lengths uniform around the means
        ds["random_range_ratio"] = float(row["random_range_ratio"])
    if isinstance(rate, (int, float)):
        return Workload(inp, out, concurrency=row.get("concurrency"), request_rate=float(rate), num_prompts=n, **ds)
    if row["mode"].startswith("offline"):  # LLM.generate / benchmark_latency: one batch, every prompt at once
        return Workload(inp, out, concurrency=row["concurrency"], burst=True)
    if row.get("concurrency") is None:  # rate inf, no cap: every prompt at once, vLLM holds what it can
        return Workload(inp, out, concurrency=int(row["num_prompts"]), num_prompts=n, **ds)
    return Workload(inp, out, concurrency=row["concurrency"], burst=bool(n) and n <= row["concurrency"],
                    num_prompts=None if (n and n <= row["concurrency"]) else n, **ds)


_SETUP: dict[str, tuple] = {}
# kvcalc before issue 18's classes: every GPU its datasheet x the H200's fractions, the H200 host's front end
BASELINE = {"frontend": {"public": 0.0208}}


def setup(row: dict):
    """The row's deployment as `kvcalc plan` builds it: the request, and the vLLM estimate's chunk size, slots and KV
    bytes per token (memory only: the speed classes do not move them, so they are computed once per row)."""
    if row["id"] in _SETUP:
        return _SETUP[row["id"]]
    from kvcalc.catalog import load_model
    from kvcalc.hardware import get_gpu
    from kvcalc.plan import PlanRequest

    wl = _workload(row)
    spec = load_model(row["kvcalc_model"])
    version = row.get("vllm_version")
    kwargs = {"vllm_version": version} if version else {}
    req = PlanRequest(spec=spec, gpu=get_gpu(row["gpu"]), context=wl.input_len + wl.output_len, engines=("vllm",),
                      weights=WEIGHTS[row["weights"]] or None, kv=row.get("kv") or "auto", tp=int(row.get("tp") or 1),
                      entrypoint="offline" if row["mode"].startswith("offline") else "serve", workload=wl,
                      # server flags the source states (--enforce-eager, --gpu-memory-utilization, --max-num-seqs,
                      # --max-num-batched-tokens) reach the plan request as `kvcalc plan` is told them; absent: vLLM's
                      enforce_eager=bool(row.get("enforce_eager")), util=row.get("gpu_memory_utilization"),
                      max_num_seqs=row.get("max_num_seqs"), max_num_batched_tokens=row.get("max_num_batched_tokens"),
                      **kwargs)
    # the engine estimate plan's row is built from (kvcalc/plan.py _vllm_row), without timing the workload
    from kvcalc.engines import vllm as vllm_engine
    from kvcalc.checkpoint import baseline_weights
    from kvcalc.plan import FormatChoice

    if WEIGHTS[row["weights"]] is None and baseline_weights(spec) is None:
        raise ValueError(f"{row['kvcalc_model']}: weights {row['weights']} are the checkpoint's, but the catalog "
                         "model's config has no quantization")
    choice = FormatChoice("corpus", "corpus row", req.weights_or_default, req.asked_kv, None)
    est = vllm_engine.estimate(spec, req.gpu, req.vllm_settings(choice))
    concurrency = est.concurrency_at(req.context)
    args = dict(chunk_tokens=est.max_num_batched_tokens, slots=max(1, min(est.max_num_seqs, concurrency)),
                kv_bytes_per_token=est.deployment_kv_bytes_per_token, tp=req.tp, pp=req.pp,
                enforce_eager=req.enforce_eager)
    weights = req.weights_or_default
    if est.fits and wl.context > est.max_model_len:
        # a ShareGPT run's longest request (up to the dataset filter's 2,048 tokens) under the model's own
        # max_model_len, as the runs served it; the pool and the slots are the stated means' (plan's)
        import dataclasses

        est = dataclasses.replace(est, max_model_len=wl.context)
    _SETUP[row["id"]] = (spec, req.gpu, weights, req.asked_kv, wl, args, est if est.fits else None, req.entrypoint,
                         req.vllm_version)
    return _SETUP[row["id"]]


LONE_IN_FLIGHT = 16  # the same small-batch bound as _informs' decode-bound rows (concurrency <= 16)


def _run_key(row: dict) -> tuple:
    return (row.get("source_url"), row["gpu"], row.get("tp"), row["model"], row.get("weights"), row.get("kv"),
            row.get("vllm_version"), row["mode"], row.get("input_len"), row.get("output_len"),
            row.get("request_rate"), row.get("concurrency"), row.get("num_prompts"))


_RUN_FIGURES: dict = {}


def in_flight(row: dict) -> float | None:
    """Requests in flight during a request-rate run, from its own measured figures (Little's law): rate x the mean
    end-to-end latency, TTFT + (output_len - 1) x TPOT of the same run (its sibling rows: same source, config,
    lengths and rate). None where the run states no TTFT and TPOT."""
    if not _RUN_FIGURES:
        for r in load_rows():
            if r.get("stat", "mean") == "mean":
                _RUN_FIGURES.setdefault(_run_key(r), {})[r["metric"]] = r["value"]
    figs, rate = _RUN_FIGURES.get(_run_key(row), {}), row.get("request_rate")
    if not isinstance(rate, float) or "ttft_ms" not in figs or "tpot_ms" not in figs or not row.get("output_len"):
        return None
    n = rate * (figs["ttft_ms"] + (row["output_len"] - 1) * figs["tpot_ms"]) / 1e3
    return min(n, row["num_prompts"]) if row.get("num_prompts") else n  # a short run never reaches Little's steady state


def lone(row: dict) -> bool:
    """A prompt served alone: concurrency 1, or at most 1 request/s with a small batch in flight (its TTFT is the
    front end plus one prefill that waits at most for a weight-bound decode step, where the simulation and the closed
    form agree). The batch in flight is the run's own (in_flight: rate x measured end-to-end latency): DGX Spark's
    0.2 req/s reasoning runs keep 42-50 (their 50 prompts) four-thousand-token requests in flight and are loaded, not lone; the io.net
    1 req/s rows keep 1-11 of ~200 tokens."""
    rate, conc = row.get("request_rate"), row.get("concurrency")
    if conc == 1:
        return True
    if not (isinstance(rate, float) and rate <= 1.0):
        return False
    n = in_flight(row)
    return n is None or n <= LONE_IN_FLIGHT


def row_frontend(row: dict, public_s: float | None) -> float | None:
    """The serve front end a row's TTFT carries: the LLM class (offline, benchmark_latency) has none; a GPU measured
    on the project's host keeps that host's figure (None: workload.frontend_s decides); any other the public hosts'
    figure of this fit."""
    from kvcalc.constants import load

    if row["mode"].startswith("offline"):
        return 0.0
    if public_s is None or row["gpu"] in load("speed")["measured"]:
        return None
    return public_s


FIT_PROMPTS = 40  # the fit simulates a lone prompt's run with at most this many prompts (its mean TTFT has settled)


def predict(row: dict, simulate: bool = True, frontend: float | None = None, max_prompts: int | None = None) -> float:
    """kvcalc's figure for the row's metric, in the row's unit. simulate=True: workload.vllm_bench with the settings
    plan() gives it (the simulation plan's rows show, kvcalc/plan.py _vllm_row), the release's scheduling default
    included; False: the closed form the speed fit uses as its fast surrogate (workload.closed_form_bench, as
    `kvcalc calibrate --bench` does: the fit evaluates the model thousands of times), with the same front end.
    `frontend`: seconds of serve front end (None: workload.frontend_s for the row's GPU)."""
    from kvcalc.workload import closed_form_bench, frontend_s, vllm_bench

    spec, gpu, weights, kv, wl, args, est, entry, version = setup(row)
    import dataclasses

    if max_prompts:
        # the fit's surrogate (its lone prompts' short runs) keeps the stated mean lengths, as the closed form does:
        # 40 draws of a spread would move its classes by which prompts came out long, not by the GPU
        wl = dataclasses.replace(wl, dataset="random")
    if max_prompts and wl.request_rate is not None and wl.prompts() > max_prompts:
        wl = dataclasses.replace(wl, num_prompts=max_prompts)
    fe = frontend_s(entry, gpu) if frontend is None else frontend
    if simulate:
        b = vllm_bench(spec, gpu, weights, kv, wl, **args, est=est, entrypoint=entry, vllm_version=version,
                       first_token_s=fe)
    else:  # the closed form knows fixed lengths only (the stated means)
        b = closed_form_bench(spec, gpu, weights, kv, dataclasses.replace(wl, dataset="random"), **args,
                              vllm_version=version)
        b.ttft_s += fe
        b.e2e_s += fe
    replicas = int(row.get("replicas") or 1)
    metric = row["metric"]
    rate, n = row.get("request_rate"), row.get("num_prompts")
    if isinstance(rate, (int, float)) and n and metric in ("output_throughput", "total_throughput") \
            and rate * b.e2e_s <= args["slots"] and not (simulate and wl.dataset == "sharegpt"):
        # vllm bench's throughput is the run's tokens over its duration: n prompts arrive over n / rate seconds and
        # the last one still takes its e2e latency (benchmarks/serve.py: total output / benchmark duration); a
        # simulated ShareGPT run's duration ends with its longest answer instead, which the simulation has
        per_s = n * wl.output_len / (n / rate + b.e2e_s)
        return per_s * replicas * ((wl.input_len + wl.output_len) / wl.output_len if metric == "total_throughput" else 1)
    if metric in ("tpot_ms", "itl_ms"):
        return b.tpot_s * 1000
    if metric == "ttft_ms":
        return b.ttft_s * 1000
    if metric == "output_throughput":
        return b.output_tokens_per_s * replicas
    if metric == "total_throughput":
        return b.output_tokens_per_s * replicas * (wl.input_len + wl.output_len) / wl.output_len
    if metric in ("single_stream_tok_s", "output_tok_s_per_user"):
        return 1.0 / b.tpot_s
    raise ValueError(metric)


def needs_simulation(row: dict) -> bool:
    """A lone prompt at a request rate: it waits for the step in flight (and, from vLLM 0.14, one more), which only
    the simulation has; at concurrency 1 the closed form is the simulation exactly (tests/test_serve_sim.py)."""
    return row["metric"] == "ttft_ms" and not row["mode"].startswith("offline") and lone(row) \
        and row.get("concurrency") != 1


def evaluate(rows: list[dict], classes: dict | None = None, simulate: bool | None = True) -> list[dict]:
    """Predictions for the predictable rows under `classes` (None: speed.yaml's own); simulate: see predict (None:
    the closed form but for the rows that need the simulation, needs_simulation: the fit's setting)."""
    from kvcalc import throughput

    out = []
    public = ((classes or {}).get("frontend") or {}).get("public")
    with throughput.class_override(classes):
        for row in rows:
            if why_not(row):
                continue
            try:
                sim = needs_simulation(row) if simulate is None else simulate
                p = predict(row, sim, row_frontend(row, public), FIT_PROMPTS if simulate is None else None)
            except Exception as exc:  # noqa: BLE001 - a row kvcalc refuses is reported, not fatal
                out.append({"id": row["id"], "error": f"{type(exc).__name__}: {exc}"[:200]})
                continue
            out.append({"id": row["id"], "gpu": row["gpu"], "source": row["source"], "metric": row["metric"],
                        "class": CLASS[row["metric"]], "measured": row["value"], "predicted": p,
                        "error": p / row["value"] - 1 if row["value"] else None,
                        **({"known_miss": row["outlier"]} if row.get("outlier") else {})})
    return out


def _loss(results: list[dict]) -> float:
    """Mean |log error|, each row's capped at log 3 (a row a mechanism cannot explain must not drag the fit)."""
    errs = [min(abs(math.log(1 + r["error"])), math.log(3)) for r in results
            if isinstance(r.get("error"), float) and r["error"] > -1]
    return statistics.fmean(errs) if errs else 0.0


# which rows inform each kind of class constant (the quantity the mechanism moves)
def _informs(kind: str, key: str, row: dict) -> bool:
    tp, cls, serve = int(row.get("tp") or 1), CLASS[row["metric"]], not row["mode"].startswith("offline")
    # decode-bound: a TPOT, or a throughput at a concurrency or request rate that keeps the batch small
    small = (row.get("concurrency") or 10**6) <= 16 or (isinstance(row.get("request_rate"), float)
                                                       and row["request_rate"] <= 4)
    if kind == "bandwidth":
        return tp == 1 and (cls in ("TPOT", "single-stream") or (cls == "throughput" and small))
    if kind == "step":  # CUDA's step overhead is the H200's measurement; ROCm's has no H200 to come from
        return key != "cuda" and cls in ("TPOT", "single-stream", "throughput")
    if kind == "comm":
        return tp > 1 and cls in ("TPOT", "single-stream", "throughput")
    if kind == "tensor":  # prefill of a lone prompt (at a request rate through the simulation, needs_simulation):
        # the tensor rate's cleanest evidence; large-batch throughput is left to test it (the fit's closed form
        # prices a loaded run coarsely, and fitting the tensor rate to it moved prefill, not the batch)
        return cls == "TTFT" and lone(row)
    return False


def fit_frontend(rows: list[dict], classes: dict) -> float | None:
    """The public hosts' serve front end: the median of measured minus engine TTFT (no front end; the simulation for a
    prompt at a request rate, needs_simulation) over the lone served prompts of `rows` on GPUs not measured on the
    project's host; at least 0 (None: no such row)."""
    from kvcalc import throughput
    from kvcalc.constants import load

    measured = load("speed")["measured"]
    lone_rows = [r for r in rows if not why_not(r) and not r.get("outlier") and r["metric"] == "ttft_ms"
                 and not r["mode"].startswith("offline") and lone(r) and r["gpu"] not in measured]
    if not lone_rows:
        return None
    with throughput.class_override(classes):
        gaps = [r["value"] / 1e3 - predict(r, needs_simulation(r), 0.0, FIT_PROMPTS) / 1e3 for r in lone_rows]
    return round(max(0.0, statistics.median(gaps)), 4)


def fit_classes(rows: list[dict], grid_steps: int = 6, sweeps: int = 2) -> dict:
    """Coordinate search over the class factors that `rows` can inform (each factor's rows only), and the public
    hosts' front end (fit_frontend) between sweeps: prefill (tensor) and the front end share the lone TTFTs."""
    from kvcalc import throughput
    from kvcalc.hardware import get_gpu

    classes = throughput.default_classes()
    classes["frontend"] = {}
    fe = fit_frontend(rows, classes)
    if fe is not None:
        classes["frontend"]["public"] = fe
    usable = [r for r in rows if not why_not(r) and not r.get("outlier")]
    by_key: dict[tuple[str, str], list[dict]] = {}
    for r in usable:
        gpu = get_gpu(r["gpu"])
        for kind, key in throughput.class_keys(gpu).items():
            # decode bandwidth: one fraction pooled over the memory technologies (throughput.POOLED): each
            # technology's rows come from one GPU type, so a class per technology was one GPU's own fit
            by_key.setdefault((kind, throughput.POOLED if kind == "bandwidth" else key), []).append(r)
    # the TP all-reduce is not fitted: kvcalc/allreduce.py prices it from published NCCL/RCCL numbers per link
    kinds = ("bandwidth", "tensor", "step")
    order = sorted((k for k in by_key if k[0] in kinds), key=lambda k: (kinds.index(k[0]), k[1]))
    for _ in range(sweeps):  # bandwidth and tensor interact through the compute-bound rows
        for kind, key in order:
            subset = [r for r in by_key[(kind, key)] if _informs(kind, key, r)]
            if len(subset) < 3 or len({r["source"] for r in subset}) < 1:
                continue
            lo, hi = throughput.CLASS_BOUNDS[kind]
            best, best_loss = classes[kind].get(key, 1.0), None
            for i in range(grid_steps):
                value = lo * (hi / lo) ** (i / (grid_steps - 1))
                trial = json.loads(json.dumps(classes))
                trial[kind][key] = value
                loss = _loss(evaluate(subset, trial, simulate=None))
                if best_loss is None or loss < best_loss - 1e-9:
                    best, best_loss = value, loss
            # one refinement around the best grid point
            for f in (0.92, 0.96, 1.04, 1.08):
                value = min(hi, max(lo, best * f))
                trial = json.loads(json.dumps(classes))
                trial[kind][key] = value
                loss = _loss(evaluate(subset, trial, simulate=None))
                if loss < best_loss - 1e-9:
                    best, best_loss = value, loss
            classes[kind][key] = round(best, 4)
        fe = fit_frontend(rows, classes)
        if fe is not None:
            classes["frontend"]["public"] = fe
    return classes


def summarize(results: list[dict]) -> dict:
    """Errors per metric class and per GPU; rows the corpus marks as known misses (an outlier the source itself
    questions, or a stall no mechanism of kvcalc's explains) are counted apart, never silently dropped."""
    misses = [r for r in results if isinstance(r.get("error"), float) and r.get("known_miss")]
    ok = [r for r in results if isinstance(r.get("error"), float) and not r.get("known_miss")]
    by_class = {}
    for c in TARGET:
        errs = [r["error"] for r in ok if r["class"] == c]
        if errs:
            by_class[c] = {"n": len(errs), "median_abs": statistics.median(abs(e) for e in errs),
                           "mean_signed": statistics.mean(errs), "target": TARGET[c]}
    by_gpu = {}
    for g in sorted({r["gpu"] for r in ok}):
        errs = [r["error"] for r in ok if r["gpu"] == g]
        by_gpu[g] = {"n": len(errs), "median_abs": statistics.median(abs(e) for e in errs),
                     "mean_signed": statistics.mean(errs)}
    return {"n": len(ok), "by_class": by_class, "by_gpu": by_gpu,
            "known_misses": {"n": len(misses), "median_abs": statistics.median(abs(r["error"]) for r in misses)
                             if misses else None}}


def held_out(rows: list[dict], field: str) -> list[dict]:
    """Each group of `field` predicted with the classes (and the public front end) fitted on the other groups. The
    fit runs on the closed form (its fast surrogate); the held-out figures are the simulation's, what plan shows."""
    out = []
    for value in sorted({r[field] for r in rows if not why_not(r)}):
        train = [r for r in rows if r[field] != value]
        test = [r for r in rows if r[field] == value]
        out += evaluate(test, fit_classes(train), simulate=True)
    return out


def band_class(result: dict, row: dict | None) -> str:
    """The range class of a result: TTFT of a lone prompt (concurrency 1, or at most 1 request/s) and TTFT under
    load (queueing behind other prompts, which kvcalc's workload model prices only coarsely) are apart."""
    if row is None:
        return result["class"]
    # tensor-parallel figures apart: their all-reduce runs over the host's link (kvcalc/allreduce.py), the part of a
    # step that transfers least between hosts (kvcalc/trust.py reads the '-tp' classes for TP > 1); a TP prefill's
    # all-reduce bytes dominate lone and loaded TTFTs alike, so TTFT-tp is one class
    if int(row.get("tp") or 1) > 1:
        return f"{result['class']}-tp"
    return result["class"] if result["class"] != "TTFT" else ("TTFT" if lone(row) else "TTFT-load")


MIN_BAND_ROWS = 10  # a class's 10th/90th percentiles from fewer rows are one or two rows' errors: it takes its metric's
BAND_CLASSES = (*TARGET, "TTFT-load", *(f"{c}-tp" for c in TARGET))


def table_band(table: dict, c: str) -> dict | None:
    """The band a figure of class `c` carries, with kvcalc/trust.py's fallback (a '-tp' class the corpus has too few
    rows for takes its metric's band)."""
    return table.get(c) or table.get(c.removesuffix("-tp"))


def interval_table(results: list[dict]) -> dict:
    """Per residual class (band_class: the metric, lone or loaded TTFT, tensor-parallel or not), the 10th and 90th
    percentile of the held-out log errors: a figure's low/high (the measured value lies within figure x (1 + low) ..
    figure x (1 + high) for 80% of held-out rows). `results` may hold both held-out splits (leave-one-GPU-out and
    leave-one-source-out: each row's two held-out predictions); a class needs MIN_BAND_ROWS distinct rows."""
    table = {}
    by_id = {r["id"]: r for r in load_rows()}
    for c in BAND_CLASSES:
        mine = [r for r in results if isinstance(r.get("error"), float) and band_class(r, by_id.get(r["id"])) == c
                and r["error"] > -1 and not r.get("known_miss")]
        errs = sorted(math.log(1 + r["error"]) for r in mine)
        if len({r["id"] for r in mine}) >= MIN_BAND_ROWS:
            q = statistics.quantiles(errs, n=10)
            # a range always holds the figure itself: where the held-out rows of a class are all on one side (the
            # all-reduce fallback makes held-out TPOT too fast), the bound on the other side is the figure
            table[c] = {"low": round(min(0.0, math.exp(-q[-1]) - 1), 3), "high": round(max(0.0, math.exp(-q[0]) - 1), 3),
                        "n": len(errs)}
    return table


def _band(errors: list[float]) -> dict | None:
    """low/high (measured / figure - 1 at the 10th and 90th percentile) from errors defined figure / measured - 1."""
    logs = sorted(math.log(1 + e) for e in errors if e > -1)
    if len(logs) < 5:
        return None
    q = statistics.quantiles(logs, n=10)
    return {"low": round(math.exp(-q[-1]) - 1, 3), "high": round(math.exp(-q[0]) - 1, 3), "n": len(logs)}


def _hf_known_miss(r: dict) -> bool:
    """The v1 lease's transformers default cache at batch > 1 (75-91 ms a step where its batch 1 took 23-36 ms; no
    other lease saw it): kvcalc/trust.py labels the class a known miss with its own wider range, so it is not in the
    measured band."""
    return r["kind"] == "hf-decode" and r["kv"] == "auto" and r["batch"] > 1 and r["source"] in (
        "data/hf.jsonl", "data/hf-holdout.jsonl")


def measured_bands() -> dict:
    """The H200's own held-out errors (docs/validation/speed-errors.json): the range of a measured GPU's figures."""
    rows = json.loads((ROOT / "docs" / "validation" / "speed-errors.json").read_text())
    out = {}
    for cls, kinds in (("TPOT", ("decode",)), ("TTFT", ("ttft",)), ("hf-TPOT", ("hf-decode",)),
                       ("hf-TTFT", ("hf-ttft",))):
        band = _band([r["error"] for r in rows if r["kind"] in kinds and r["held_out"] and not _hf_known_miss(r)])
        if band:
            out[cls] = band
    if "TPOT" in out:  # throughput and single-stream are decode steps over the output
        out.setdefault("throughput", {"low": round(1 / (1 + out["TPOT"]["high"]) - 1, 3),
                                      "high": round(1 / (1 + out["TPOT"]["low"]) - 1, 3), "n": out["TPOT"]["n"]})
        out.setdefault("single-stream", out["throughput"])
    return out


def capacity_bands() -> dict:
    """vLLM's capacity figures against public start-up logs (docs/validation/public_logs.json)."""
    rows = json.loads((ROOT / "docs" / "validation" / "public_logs.json").read_text())
    band = _band([r["error"] for r in rows if isinstance(r.get("error"), (int, float))])
    return {"vllm": band} if band else {}


def gpu_stats(results: list[dict], rows: list[dict]) -> dict:
    sources = {}
    for r in rows:
        sources.setdefault(r["gpu"], set()).add(r["source"])
    out = {}
    for g in sorted({r["gpu"] for r in results if isinstance(r.get("error"), float)}):
        errs = [r["error"] for r in results if r.get("gpu") == g and isinstance(r.get("error"), float)
                and not r.get("known_miss")]
        if errs:
            out[g] = {"n": len(errs), "sources": len(sources.get(g, ())),
                      "median_abs": round(statistics.median(abs(e) for e in errs), 3),
                      "mean_signed": round(statistics.mean(errs), 3)}
    return out


def coverage(results: list[dict], table: dict) -> float | None:
    by_id = {r["id"]: r for r in load_rows()}
    hits = []
    for r in results:
        c = band_class(r, by_id.get(r["id"])) if isinstance(r.get("error"), float) else None
        band = table_band(table, c) if c else None
        if band and not r.get("known_miss"):
            hits.append(band["low"] <= (r["measured"] / r["predicted"] - 1) <= band["high"])
    return sum(hits) / len(hits) if hits else None


# -- per-GPU ranges (issue 18 item 3): a GPU's own held-out residuals widen (or, with enough rows of the figure's own
# class, set) the range its figures carry; kvcalc/trust.py reads them from speed.yaml `intervals.by_gpu.<gpu>.bands`
MIN_GPU_BAND_ROWS = 10  # a GPU's own 10th/90th percentiles need as many rows as a class's (MIN_BAND_ROWS)
GPU_BAND_CLASSES = ("TPOT", "throughput", "TTFT", "TTFT-load", "TPOT-tp", "throughput-tp", "TTFT-tp")
TIME_CLASSES = ("TPOT", "TTFT")  # a time: measured / kvcalc > 1 is kvcalc too fast; a rate the other way


def is_time(c: str) -> bool:
    return c.split("-")[0] in TIME_CLASSES


def log_residual(result: dict) -> float:
    """log(measured / kvcalc) of a result (its error is kvcalc / measured - 1)."""
    return -math.log(1 + result["error"])


def speed_residual(result: dict, c: str) -> float:
    """log(kvcalc speed / measured speed) of a result of class c: > 0 where kvcalc is too fast, whatever the metric
    (a time too short, a rate too high), so one GPU's TPOT, TTFT and throughput rows pool into one residual."""
    m = log_residual(result)
    return m if is_time(c) else -m


def order_bounds(values: list[float], share: float = 0.8) -> tuple[float, float]:
    """The k-th smallest and k-th largest of `values`, k = floor((n + 1) x (1 - share) / 2) (at least 1): for a new
    value exchangeable with these n, P(k-th smallest <= it <= k-th largest) = (n + 1 - 2k) / (n + 1) >= share (the
    split-conformal bound). A percentile interpolated from n values covers `share` of new ones only on average; with
    the 10-40 rows one GPU has, that average leaves half the GPUs short of it."""
    v = sorted(values)
    k = max(1, math.floor((len(v) + 1) * (1 - share) / 2 + 1e-9))  # (1 - 0.8) / 2 is 0.0999..: 20 x it floors to 1
    return v[k - 1], v[len(v) - k]


def band_from_logs(logs: list[float]) -> tuple[float, float]:
    """(low, high) of measured / figure - 1 from the order_bounds of log(measured / figure), the range always holding
    the figure itself (as interval_table)."""
    lo, hi = order_bounds(logs)
    return min(0.0, math.exp(lo) - 1), max(0.0, math.exp(hi) - 1)


def envelope(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return min(a[0], b[0]), max(a[1], b[1])


def family(c: str) -> str:
    """'prefill' (a TTFT: the compute-bound part of a request) or 'decode' (TPOT, throughput, single-stream: the
    bandwidth-bound steps), the mechanism a figure's error mostly comes from."""
    return "prefill" if c.startswith("TTFT") else "decode"


def gpu_band(mine: list[tuple[str, dict]], c: str, class_band: dict | None) -> dict | None:
    """The range of a class-c figure on one GPU from that GPU's own held-out results `mine` ((band class, result)
    pairs, leave-one-GPU-out), the bounds being order_bounds (>= 80% for an exchangeable new result):
    - 'own': at least MIN_GPU_BAND_ROWS results of class c (a '-tp' class: of c itself): their bounds;
    - 'family': fewer, but at least MIN_GPU_BAND_ROWS of c's family (decode or prefill, lone or loaded, TP or not):
      the class band widened to the bounds of their speed residuals (speed_residual, turned back into c's direction);
    - 'pooled': fewer, but at least MIN_GPU_BAND_ROWS over all its classes: the same over all of them;
    - 'few': 1 .. MIN_GPU_BAND_ROWS - 1 results: the class band widened to hold each of them (as speed residuals);
    None without a result (the class band stands)."""
    own = [log_residual(r) for k, r in mine if k == c]
    cls = (class_band["low"], class_band["high"]) if class_band else (0.0, 0.0)
    if len(own) >= MIN_GPU_BAND_ROWS:
        low, high = band_from_logs(own)
        basis, n = "own", len(own)
    else:
        speed = [speed_residual(r, k) for k, r in mine]
        kin = [speed_residual(r, k) for k, r in mine if family(k) == family(c)]
        if not speed:
            return None
        if len(kin) >= MIN_GPU_BAND_ROWS:
            (lo_s, hi_s), basis, speed = order_bounds(kin), "family", kin
        elif len(speed) >= MIN_GPU_BAND_ROWS:
            (lo_s, hi_s), basis = order_bounds(speed), "pooled"
        else:
            lo_s, hi_s, basis = min(speed), max(speed), "few"
        # a speed residual s (kvcalc too fast by e^s) is measured / figure = e^s for a time, e^-s for a rate
        lo_m, hi_m = (lo_s, hi_s) if is_time(c) else (-hi_s, -lo_s)
        low, high = envelope(cls, (min(0.0, math.exp(lo_m) - 1), max(0.0, math.exp(hi_m) - 1)))
        n = len(speed)
    # rounded outward to 3 decimals: the stored range holds the results it was built from (a bound rounded inward
    # would drop its own order statistic)
    return {"low": _round_out(low, math.floor), "high": _round_out(high, math.ceil), "n": n, "basis": basis}


def _round_out(x: float, direction) -> float:
    """x to 3 decimals, rounded down (math.floor) or up (math.ceil); a value already on 3 decimals (a class band's
    bound) is kept, not moved by its float error."""
    r = round(x, 3)
    return r if abs(x - r) < 1e-9 else direction(x * 1000) / 1000


def _gpu_results(results: list[dict]) -> dict[str, list[tuple[str, dict]]]:
    """Per GPU, its scorable held-out results as (band class, result) pairs (known misses left out, as the class
    bands leave them)."""
    by_id = {r["id"]: r for r in load_rows()}
    out: dict[str, list[tuple[str, dict]]] = {}
    for r in results:
        if isinstance(r.get("error"), float) and r["error"] > -1 and not r.get("known_miss"):
            out.setdefault(r["gpu"], []).append((band_class(r, by_id.get(r["id"])), r))
    return out


def gpu_bands(results: list[dict], table: dict) -> dict:
    """Per GPU, per figure class (GPU_BAND_CLASSES), the range gpu_band gives it from the GPU's leave-one-GPU-out
    `results` over the class bands `table`."""
    out = {}
    for g, mine in sorted(_gpu_results(results).items()):
        bands = {c: b for c in GPU_BAND_CLASSES if (b := gpu_band(mine, c, table_band(table, c)))}
        if bands:
            out[g] = bands
    return out


def _inside(band: dict | None, r: dict) -> bool:
    lo, hi = (band["low"], band["high"]) if band else (-0.5, 1.0)
    return lo - 1e-9 <= r["measured"] / r["predicted"] - 1 <= hi + 1e-9  # a bound is a result's own ratio, rounded


def gpu_coverage(results: list[dict], table: dict) -> dict:
    """Per GPU, the share of its held-out results (leave-one-GPU-out predictions) inside the range of its class:
    - 'class': the class band alone (kvcalc before per-GPU ranges);
    - 'in_sample': the per-GPU range built from all of the GPU's results, the scored one included (optimistic);
    - 'loo_row': built from the GPU's other results (the scored row left out);
    - 'loo_source': built from the GPU's results of other sources (a one-source GPU: the class band, which is all the
      rule would give it had that source not been published): the honest figure.
    The class bands themselves come from every GPU's rows (one row among hundreds: stated, not removed)."""
    out = {}
    per = _gpu_results(results)
    for g, mine in sorted(per.items()):
        hits = {"class": [], "in_sample": [], "loo_row": [], "loo_source": []}
        for i, (c, r) in enumerate(mine):
            cb = table_band(table, c)
            hits["class"].append(_inside(cb, r))
            hits["in_sample"].append(_inside(gpu_band(mine, c, cb) or cb, r))
            rest = mine[:i] + mine[i + 1:]
            hits["loo_row"].append(_inside(gpu_band(rest, c, cb) or cb, r))
            other = [(k, x) for k, x in mine if x["source"] != r["source"]]
            hits["loo_source"].append(_inside(gpu_band(other, c, cb) or cb, r))
        out[g] = {"n": len(mine), "sources": len({r["source"] for _, r in mine}),
                  **{k: round(sum(v) / len(v), 3) for k, v in hits.items()}}
    total = sum(s["n"] for s in out.values())
    out["all"] = {"n": total, "sources": len({r["source"] for m in per.values() for _, r in m}),
                  **{k: round(sum(s[k] * s["n"] for s in out.values()) / total, 3) if total else None
                     for k in ("class", "in_sample", "loo_row", "loo_source")}}
    return out


def gpu_range_section(report: dict) -> list[str]:
    """The per-GPU ranges (gpu_band) and how many of each GPU's held-out results they hold (gpu_coverage)."""
    cov = report.get("gpu_coverage") or {}
    by_gpu = (report.get("intervals") or {}).get("by_gpu") or {}
    if not cov:
        return []
    out = ["## Ranges per GPU (its own held-out errors)", "",
           "A GPU with public results carries its own range (kvcalc/data/speed.yaml `intervals.by_gpu.<gpu>.bands`, "
           "kvcalc/trust.py): from its leave-one-GPU-out errors, the k-th smallest and largest of them with k = "
           f"floor((n + 1) x 0.1) (order_bounds: at least 80% for a new result like them). With at least "
           f"{MIN_GPU_BAND_ROWS} results of the figure's class they set the range (`own`); with fewer, the class range "
           "is widened to the bounds of the GPU's results of the same family (`family`: decode = TPOT, throughput, "
           "single-stream; prefill = TTFT; each as a speed residual, kvcalc too fast > 0, turned back into the "
           f"figure's direction), or of all its results (`pooled`), where those number at least {MIN_GPU_BAND_ROWS}; "
           "with fewer still, to hold each of them (`few`). A GPU without a result keeps its class's range.", "",
           "Coverage: the share of the GPU's held-out results (leave-one-GPU-out predictions, known misses left out) "
           "inside the range of their class. `class`: the class ranges alone (kvcalc before per-GPU ranges). "
           "`in sample`: the per-GPU range built from all of the GPU's results, the scored one included (optimistic). "
           "`row left out`: built from the GPU's other results. `source left out`: built from the GPU's results of "
           "other sources only; a GPU whose results all come from one source then has none and keeps its class "
           "range, which is what kvcalc would say had that source not been published (the strictest test, and for a "
           "one-source GPU the same as `class`). The class ranges are built from all GPUs' rows, the scored row "
           "among several hundred.", "",
           "| GPU | rows | sources | decode tok/s range (basis, rows) | TTFT range (basis, rows) | coverage: class | "
           "in sample | row left out | source left out |", "|---|---:|---:|---|---|---:|---:|---:|---:|"]

    def rng(band: dict | None, inverse: bool = False) -> str:
        if not band:
            return "class"
        lo, hi = band["low"], band["high"]
        if inverse:
            lo, hi = 1 / (1 + hi) - 1, 1 / (1 + lo) - 1
        return f"{lo:+.0%}/{hi:+.0%} ({band['basis']}, {band['n']})"

    short = []
    for g, c in cov.items():
        if g == "all":
            continue
        bands = (by_gpu.get(g) or {}).get("bands") or {}
        out.append(f"| {g} | {c['n']} | {c['sources']} | {rng(bands.get('TPOT'), True)} | {rng(bands.get('TTFT'))} | "
                   f"{c['class']:.0%} | {c['in_sample']:.0%} | {c['loo_row']:.0%} | {c['loo_source']:.0%} |")
        if c["loo_row"] < 0.8:
            short.append(f"{g} {c['loo_row']:.0%} of {c['n']}")
    a = cov.get("all") or {}
    if a:
        out.append(f"| all | {a['n']} | {a['sources']} | | | {a['class']:.0%} | {a['in_sample']:.0%} | "
                   f"{a['loo_row']:.0%} | {a['loo_source']:.0%} |")
    measured = [g for g in load_speed_measured() if g in cov]
    if measured:
        out += ["", f"{', '.join(measured)}: measured on the project's host, whose own held-out runs set its ranges at "
                "TP 1 (the `measured` class above); the per-GPU range here, from its public results, is what its TP > 1 "
                "figures carry (kvcalc/trust.py: the host's runs are TP 1)."]
    out += ["", "GPUs whose results fall below 80% with the row left out: " + (", ".join(short) if short else "none")
            + ". A GPU whose results come from one source has no out-of-source evidence: its `source left out` column "
            "is its class range's coverage, and says how far that range would mislead without its own results."]
    return out


def markdown(report: dict) -> str:
    """docs/validation/speed-gpus.md: the page is this function's output (re-run the script to refresh it)."""
    ins, logo, loso = report["in_sample"], report["logo"], report["loso"]
    iv = report.get("intervals", {})
    out = ["# Speed on other GPUs: the public corpus, held out (issue 18)", "",
           "Generated by `python3 scripts/speed_corpus_report.py --markdown docs/validation/speed-gpus.md` "
           "(do not edit by hand). The corpus: `docs/validation/data/speed-corpus/` (one row per published vLLM "
           "measurement, with its source line). Each predictable row is predicted through `kvcalc plan`'s own path "
           "(plan -> workload.vllm_bench -> the speed model v2); error = kvcalc / measured - 1.", "",
           f"Rows: {report['rows']}; predictable: {report['predictable']} (the others state no concurrency, no "
           "catalog model or no lengths: `scripts/speed_corpus_report.py --json` lists why). Known misses "
           f"(rows the corpus marks and the fit leaves out): {ins['known_misses']['n']}.", "",
           "## Against the targets (held out of every fit)", "",
           "| metric | target | H200 defaults only | in-sample | leave-one-GPU-out | leave-one-source-out | rows |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for c, t in TARGET.items():
        cells = [report.get(k, {}).get("by_class", {}).get(c) for k in ("baseline", "in_sample", "logo", "loso")]
        if not cells[1]:
            continue
        out.append(f"| {c} | {t:.0%} | " + " | ".join(f"{x['median_abs']:.0%}" if x else "-" for x in cells)
                   + f" | {cells[1]['n']} |")
    out += ["", "Median |error|. The H200-defaults column is kvcalc before issue 18's classes (every GPU = its datasheet "
            "x the H200's fractions, the H200 host's 20.8 ms front end; the TP all-reduce per link, kvcalc/allreduce.py, is in every column). Every column is the serve simulation `kvcalc "
            "plan` shows (workload.vllm_bench) with the constants of its column; the fit itself runs on the closed "
            "form (see below).", "",
            "## Per GPU", "",
            "| GPU | rows | defaults only: median / mean | leave-one-GPU-out: median | mean signed | "
            "leave-one-source-out: median |", "|---|---:|---:|---:|---:|---:|"]
    for g, s in logo["by_gpu"].items():
        b = report["baseline"]["by_gpu"].get(g, {})
        o = loso["by_gpu"].get(g, {})
        out.append(f"| {g} | {s['n']} | {b.get('median_abs', float('nan')):.0%} / {b.get('mean_signed', float('nan')):+.0%}"
                   f" | {s['median_abs']:.0%} | {s['mean_signed']:+.0%} | {o.get('median_abs', float('nan')):.0%} |")
    out += ["", *bias_table(report), "", *tpot_residuals(report)]
    bias = [g for g, s in logo["by_gpu"].items() if abs(s["mean_signed"]) > 0.20]
    out += ["", "GPU types with a held-out mean bias beyond 20%: " + (", ".join(bias) if bias else "none") + ".",
            "", "## Ranges (error bars)", "",
            "A figure's range is figure x (1 + low) .. figure x (1 + high): the 10th-90th percentile of measured / "
            "kvcalc over the held-out rows of its class (kvcalc/trust.py reads them from kvcalc/data/speed.yaml "
            "`intervals`).", "", "| evidence class | metric | low | high | rows |", "|---|---|---:|---:|---:|"]
    for kind in ("measured", "held_out", "datasheet", "capacity"):
        for metric, band in (iv.get(kind) or {}).items():
            if isinstance(band, dict) and "low" in band:
                out.append(f"| {kind} | {metric} | {band['low']:+.0%} | {band['high']:+.0%} | {band.get('n', '')} |")
    cov = report.get("interval_coverage") or {}
    out += ["", f"Coverage of the held-out ranges: leave-one-GPU-out {cov.get('logo') or 0:.0%}, "
            f"leave-one-source-out {cov.get('loso') or 0:.0%} (target: at least 80%).", "",
            *gpu_range_section(report), "",
            "## Class constants (the in-sample fit on this corpus; kvcalc/data/speed.yaml `classes` ships)", "",
            "The fit column is this run's in-sample fit; the shipped column is what kvcalc uses "
            "(kvcalc/data/speed.yaml `classes`, kvcalc/data/serve.yaml `public_hosts_s`), written only by "
            "`--write-classes`; where they differ, the corpus grew after the last write.", "",
            "| kind | class | fit | shipped | meaning |", "|---|---|---:|---:|---|"]
    meaning = {"bandwidth": "achieved fraction of the datasheet bandwidth in decode",
               "tensor": "x the H200-derived tensor efficiency", "step": "x the step overhead",
               "frontend": "seconds of serve front end on a public host (kvcalc/data/serve.yaml public_hosts_s)"}
    shipped = shipped_classes()
    for kind, table in report["classes"].items():
        for key in sorted(set(table) | set(shipped.get(kind, {}))):
            value, ship = table.get(key), shipped.get(kind, {}).get(key)
            out.append(f"| {kind} | {key} | {'-' if value is None else f'{value:g}'} | "
                       f"{'-' if ship is None else f'{ship:g}'} | {meaning.get(kind, '')} |")
    out += ["", *link_table(report)]
    def med(k, c):
        x = report.get(k, {}).get("by_class", {}).get(c)
        return f"{x['median_abs']:.0%}" if x else "-"

    def band(c):
        x = iv.get("held_out", {}).get(c)
        return f"{x['low']:+.0%} .. {x['high']:+.0%}" if x else "-"

    bias_text = ", ".join(f"{g} {v['mean_signed']:+.0%}" for g, v in logo["by_gpu"].items()
                          if abs(v["mean_signed"]) > 0.20) or "none"
    out += ["", *before_after_v0(report)]
    out += ["", *piecewise_section(report)]
    out += ["", *gemm_section(report)]
    out += ["", *new_gpus_section(report)]
    out += ["", *before_after(report)]
    out += ["", "## What is met, what is missed, and why", "", NOTES.format(
        verdicts=target_verdicts(report, logo, cov), thr_logo=med("logo", "throughput"), thr_loso=med("loso", "throughput"), tpot_logo=med("logo", "TPOT"),
        tpot_loso=med("loso", "TPOT"), tpot_in=med("in_sample", "TPOT"), ttft_logo=med("logo", "TTFT"),
        ttft_loso=med("loso", "TTFT"), ttft_in=med("in_sample", "TTFT"), ttft_base=med("baseline", "TTFT"),
        cov_logo=f"{cov.get('logo') or 0:.0%}", cov_loso=f"{cov.get('loso') or 0:.0%}", bias=bias_text,
        ttft_lone=band("TTFT"), ttft_load=band("TTFT-load"), cf_tpot=med("in_sample_closed_form", "TPOT"),
        cf_ttft=med("in_sample_closed_form", "TTFT"),
        tpot_logo_mean=f"{(logo['by_class'].get('TPOT') or {}).get('mean_signed', 0):+.0%}",
        bw_all=f"{(report['classes'].get('bandwidth') or {}).get('all', float('nan')):.3g} of the datasheet",
        **source_stats(report, "gpustack-h100-latency", "h100-sxm"),
        pcie_tensor=f"{(report['classes'].get('tensor') or {}).get('Hopper-pcie', float('nan')):.2f}",
        sxm_burst=burst_range(report),
        pw_us=f"{(report.get('piecewise') or {}).get('shipped', float('nan')) * 1e6:.0f}",
        **row_errors(report, e_tt06="tt340-a100-qwen3-0.6b-128-128-c1-tpot"),
        **row_errors(report, e_tt="tenstorrent-gpu-ref-qwen72b-002", e_a100="gpustack-quant-006",
                     e_awq="gpustack-quant-009", e_int8="gpustack-quant-011", e_bnb="gpustack-quant-012",
                     e_mi1="oracle-mi300x-405b-001", e_mi32="oracle-mi300x-405b-006", e_mi256="oracle-mi300x-405b-009",
                     e_q32ttft="iog-llm-inference-benchmarks-037", e_q32thr="iog-llm-inference-benchmarks-039",
                     e_q32bttft="iog-llm-inference-benchmarks-064", e_q7thr="iog-llm-inference-benchmarks-003",
                     e_l70thr="iog-llm-inference-benchmarks-006", e_l70ttft="iog-llm-inference-benchmarks-055",
                     e_fp8_32b="gpustack-qwen3-32b-a100-fp8-sharegpt1000-output",
                     e_fp8_235b="gpustack-qwen3-235b-a100-fp8tp4-sharegpt1000-output",
                     e_awq_32b="gpustack-qwen3-32b-a100-awq-sharegpt1000-output"),
        t4_thr=f"{(metric_bias(report).get(('t4', 'throughput')) or (0, 0.0, 0.0))[2]:+.0%}",
        fp8_awq=fp8_awq_ratio(report),
        **{f"pcie_{c.lower()}_{k}": f"{v:+.0%}" for c in ("TTFT", "TPOT")
           for k, v in zip(("median", "mean"), metric_bias(report).get(("h100-pcie", c), (0, 0.0, 0.0))[1:])},
        frontend=f"{1e3 * ((report['classes'].get('frontend') or {}).get('public') or 0):.1f} ms",
        mi_bias=f"{((report.get('logo', {}).get('by_gpu', {}).get('mi300x') or {}).get('mean_signed') or 0):+.0%}",
        rocm_step=f"{(report['classes'].get('step') or {}).get('rocm', float('nan')):.2f}",
        **board_reading())]
    out += hf_section()
    return "\n".join(out) + "\n"


HF_HEADING = "## transformers decode on the H200 (v4 runs, docs/validation/data/v4/hf_decode.jsonl)"


def hf_section() -> list[str]:
    """The page's last section, transformers on the H200 (item 4): the v4 runs of scripts/gpu_v4/hf_decode.py with
    kvcalc as shipped (`--hf-section`: rewrite only this section of docs/validation/speed-gpus.md)."""
    out: list[str] = []
    try:  # transformers on the H200 (item 4): the v4 runs of scripts/gpu_v4/hf_decode.py
        sys.path.insert(0, str(ROOT / "scripts"))
        import hf_decode_report

        hf = hf_decode_report.rows()
        held = hf_decode_report.host_refit(hf)["held_out"]
        sm = hf_decode_report.summary(hf)
        t0, t1, q0, q1 = sm["tested_shipped"], sm["tested_scaled"], sm["quantized_shipped"], sm["quantized_scaled"]
        out += ["", HF_HEADING, "",
                hf_decode_report.markdown(hf), "", HF_NOTES.format(
                    within=held["shipped_within_15"], n=held["n"], sr_tested=t1["n"], sr_before=f"{t0['median']:.0%}",
                    sr_after=f"{t1['median']:.0%}", sr_w0=t0["within_15"], sr_w1=t1["within_15"],
                    sq_before=f"{q0['median']:.0%}", sq_after=f"{q1['median']:.0%}", sq_w0=q0["within_15"],
                    sq_w1=q1["within_15"], rep_med=f"{sm['repeat_spread_median']:.0%}",
                    rep_max=f"{sm['repeat_spread_max']:.0%}")]
    except FileNotFoundError:
        pass
    return out


def metric_bias(report: dict) -> dict:
    """Held-out (leave-one-GPU-out) errors per GPU and metric class: (n, median signed, mean signed)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for r in report.get("predictions_logo", []):
        if isinstance(r.get("error"), float) and not r.get("known_miss"):
            cells.setdefault((r["gpu"], r["class"]), []).append(r["error"])
    return {k: (len(v), statistics.median(v), statistics.mean(v)) for k, v in sorted(cells.items())}


def bias_table(report: dict) -> list[str]:
    """A GPU's mean bias split by metric: which quantity carries it (a few loaded TTFTs the simulation queues move a
    mean over every metric by tens of points while the decode is close)."""
    out = ["Mean bias by metric (leave-one-GPU-out, signed: median / mean):", "",
           "| GPU | metric | rows | median | mean |", "|---|---|---:|---:|---:|"]
    for (g, c), (n, med, mean) in metric_bias(report).items():
        out.append(f"| {g} | {c} | {n} | {med:+.0%} | {mean:+.0%} |")
    return out


def burst_range(report: dict) -> str:
    """The held-out error range of gpustack's quantization page on the H100 (its 1,000-prompt bursts)."""
    errs = [r["error"] for r in report.get("predictions_logo", []) if r["id"].startswith("gpustack-quant-")
            and r.get("gpu") == "h100-sxm" and isinstance(r.get("error"), float)]
    return f"{min(errs):+.0%} .. {max(errs):+.0%}" if errs else "-"


def fp8_awq_ratio(report: dict) -> str:
    """kvcalc's held-out (leave-one-GPU-out) FP8 over AWQ output throughput on gpustack's A100 Qwen3-32B page."""
    by_id = {r["id"]: r for r in report.get("predictions_logo", [])}
    fp8, awq = (by_id.get(f"gpustack-qwen3-32b-a100-{w}-sharegpt1000-output") or {} for w in ("fp8", "awq"))
    if not (fp8.get("predicted") and awq.get("predicted")):
        return "-"
    return f"{fp8['predicted'] / awq['predicted']:.2f}"


def row_errors(report: dict, **ids: str) -> dict:
    """Named rows' held-out (leave-one-GPU-out) errors, for the prose (each figure read from the report, not typed)."""
    by_id = {r["id"]: r for r in report.get("predictions_logo", [])}
    return {k: (f"{by_id[i]['error']:+.0%}" if isinstance((by_id.get(i) or {}).get("error"), float) else "-")
            for k, i in ids.items()}


def source_stats(report: dict, source: str, gpu: str) -> dict:
    """A source's held-out (leave-one-GPU-out) error range per metric class, and its GPU's mean bias without it."""
    by_id = {r["id"]: r for r in load_rows()}
    mine = [r for r in report.get("predictions_logo", []) if isinstance(r.get("error"), float)
            and not r.get("known_miss")]
    out = {}
    for key, c in (("lat_tpot", "TPOT"), ("lat_thr", "throughput"), ("lat_ttft", "TTFT")):
        errs = [r["error"] for r in mine if r["class"] == c and (by_id.get(r["id"]) or {}).get("source") == source]
        out[key] = f"{min(errs):+.0%} .. {max(errs):+.0%}" if errs else "-"
    rest = [r["error"] for r in mine if r["gpu"] == gpu and (by_id.get(r["id"]) or {}).get("source") != source]
    out["sxm_without"] = f"{statistics.mean(rest):+.0%}" if rest else "-"
    return out


def tpot_residuals(report: dict) -> list[str]:
    """Held-out TPOT errors by GPU, TP size and load (request rate or concurrency): the breakdown that tells a per-layer
    host floor (small models and TP > 1, whatever the load) from a per-sequence cost (growing with the load) or the
    bandwidth (every TP 1 row of a GPU alike)."""
    by_id = {r["id"]: r for r in load_rows()}
    cells: dict[tuple, list[float]] = {}
    for r in report.get("predictions_logo", []):
        row = by_id.get(r["id"])
        if row is None or r.get("class") != "TPOT" or not isinstance(r.get("error"), float) or r.get("known_miss"):
            continue
        load = (f"{row['request_rate']:g} req/s" if isinstance(row.get("request_rate"), (int, float))
                else f"concurrency {row.get('concurrency')}")
        level = row["request_rate"] if isinstance(row.get("request_rate"), (int, float)) else row.get("concurrency") or 0
        cells.setdefault((r["gpu"], int(row.get("tp") or 1), float(level), load), []).append(r["error"])
    out = ["TPOT held out (leave-one-GPU-out) by GPU, TP and load (median signed error, range):", "",
           "| GPU | TP | load | rows | median | min .. max |", "|---|---:|---|---:|---:|---|"]
    for (g, tp, _, load), errs in sorted(cells.items()):
        out.append(f"| {g} | {tp} | {load} | {len(errs)} | {statistics.median(errs):+.0%} | "
                   f"{min(errs):+.0%} .. {max(errs):+.0%} |")
    return out


# the declared fit of throughput.yaml engines.vllm piecewise_layer_cpu_s (vllm_versions.piecewise_decode_floor_s): the
# lightest-load row of the smallest model a vLLM 0.8.5 source served on one H100 PCIe; the source's 4 and 16 req/s
# rows of the same model are its checks (in-sample too: same host, same model). Every other row is held out of it.
PIECEWISE_FIT_ROW = "iog-llm-inference-benchmarks-095"  # DeepSeek-R1-Distill-Qwen-1.5B, 1 req/s, mean TPOT 4.08 ms
PIECEWISE_CHECK_ROWS = ("iog-llm-inference-benchmarks-167", "iog-llm-inference-benchmarks-023")  # 4, 16 req/s


def fit_piecewise_layer_cpu(lo: float = 0.0, hi: float = 1e-3, steps: int = 24) -> dict:
    """The per-layer CPU of a piecewise-graph step that makes kvcalc's simulated TPOT of PIECEWISE_FIT_ROW equal the
    measured one (bisection, at the shipped classes), and the fit and check rows' errors at the shipped figure."""
    from kvcalc.constants import load

    by_id = {r["id"]: r for r in load_rows()}
    consts = load("throughput")["engines"]["vllm"]
    shipped = consts.get("piecewise_layer_cpu_s", 0.0)
    row = by_id[PIECEWISE_FIT_ROW]
    try:
        for _ in range(steps):
            mid = (lo + hi) / 2
            consts["piecewise_layer_cpu_s"] = mid
            lo, hi = (mid, hi) if predict(row) < row["value"] else (lo, mid)
        refit = (lo + hi) / 2
        errors = {}
        for c, tag in ((0.0, "without"), (shipped, "shipped")):
            consts["piecewise_layer_cpu_s"] = c
            errors[tag] = {i: predict(by_id[i]) / by_id[i]["value"] - 1 for i in (PIECEWISE_FIT_ROW, *PIECEWISE_CHECK_ROWS)}
    finally:
        consts["piecewise_layer_cpu_s"] = shipped
    return {"shipped": shipped, "refit": refit, "errors": errors}


def piecewise_section(report: dict) -> list[str]:
    """vLLM 0.8-0.10's piecewise CUDA graphs: the fit of the per-layer CPU floor, and every TPOT row of those releases
    by source, GPU, TP and model with its measured time per layer (what a per-layer host floor would have to be) and
    kvcalc's held-out error."""
    from kvcalc.catalog import load_model
    from kvcalc.engines.vllm_versions import FULL_DECODE_GRAPHS_SINCE, piecewise_decode_floor_s

    fit = report.get("piecewise") or fit_piecewise_layer_cpu()
    e = fit["errors"]
    ids = (PIECEWISE_FIT_ROW, *PIECEWISE_CHECK_ROWS)
    out = [f"## Piecewise CUDA graphs (vLLM 0.8.0 to 0.10.x): the CPU's per-layer floor", "",
           "Before vllm#25444 (v0.11.0, full decode graphs by default) the V1 engine replayed piecewise graphs only: "
           "the forward is split at every attention op (the startup logs of those releases: `\"cudagraph_mode\":1`, "
           "`\"splitting_ops\":[\"vllm.unified_attention\", ...]`), so each decode step launches a graph and the "
           "attention's Python per layer, and takes at least layers x piecewise_layer_cpu_s "
           "(kvcalc/engines/vllm_versions.py piecewise_decode_floor_s; releases from "
           f"{FULL_DECODE_GRAPHS_SINCE} and V0 are not floored). Fitted on ONE row ({PIECEWISE_FIT_ROW}: an H100 PCIe "
           "host of vLLM 0.8.5, a 28-layer 1.5B model at 1 req/s): "
           f"{fit['refit'] * 1e6:.1f} us a layer (shipped: {fit['shipped'] * 1e6:.1f} us). That row and its 4 / 16 "
           "req/s checks: " + ", ".join(f"{e['without'][i]:+.0%} -> {e['shipped'][i]:+.0%}" for i in ids)
           + " (without the floor -> with it, at the shipped classes).", "",
           "Every TPOT row of those releases, measured time per layer (the floor a per-layer host cost would need) "
           "and kvcalc held out (leave-one-GPU-out, median signed):", "",
           "| source | GPU | TP | model | rows | layers | measured TPOT (median, ms) | ms a layer | floor here (ms) | "
           "held out |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    by_id = {r["id"]: r for r in load_rows()}
    cells: dict[tuple, list[tuple[float, float]]] = {}
    for r in report.get("predictions_logo", []):
        row = by_id.get(r["id"])
        if row is None or r.get("class") != "TPOT" or not isinstance(r.get("error"), float) or r.get("known_miss"):
            continue
        if piecewise_decode_floor_s(row.get("vllm_version"), 1) <= 0:
            continue
        key = (row["source"], row["gpu"], int(row.get("tp") or 1), row["kvcalc_model"])
        cells.setdefault(key, []).append((float(row["value"]), r["error"], r["id"] in ids))
    per_layer = {}
    for (src, g, tp, m), vals in sorted(cells.items()):
        layers = load_model(m).num_layers
        tpot = statistics.median(v for v, _, _ in vals)
        per_layer[(src, g, tp, m)] = tpot / layers
        floor = piecewise_decode_floor_s("0.8.5", layers) * 1e3
        fitted = " (the fit's rows: in-sample)" if any(f for _, _, f in vals) else ""
        out.append(f"| {src} | {g} | {tp} | {m} | {len(vals)} | {layers} | {tpot:.1f} | {tpot / layers:.2f} | "
                   f"{floor:.1f} | {statistics.median(x for _, x, _ in vals):+.0%}{fitted} |")
    small = [per_layer.get(("iog-llm-inference-benchmarks", g, 1, "qwen2.5-1.5b")) for g in ("rtx-4090", "h100-pcie")]
    if all(small):
        out += ["", f"The same source's 1.5B at TP 1 takes {small[0]:.2f} ms a layer on its RTX 4090 host and "
                f"{small[1]:.2f} ms on its H100 PCIe host ({small[0] / small[1]:.1f}x, same release, same model, a "
                "steady step: p99 ITL within 10% of the median on both), and its RTX 4090 TP 2-8 rows run at "
                "0.4-1.0 ms a layer whatever the model: those hosts' CPUs bound the step, not the GPU or the "
                "all-reduce (their TP rows' ITL p90 is 3-4x the median, stalls a per-call latency would not "
                "make: the result files at 1 req/s). A floor at the 4090 host's rate would be fitted on the rows it is tested on (the corpus has "
                "no other 4090 TPOT source), so kvcalc keeps the H100 host's figure and these rows stay a miss."]
    return out


def board_reading() -> dict:
    """kvcalc on gpustack's 'H100 80GB' BF16 row read as either board (the evidence of the H100 SXM note)."""
    row = next(r for r in load_rows() if r["id"] == "gpustack-quant-016")
    out = {}
    for key, gpu in (("h100_sxm_as_sxm", "h100-sxm"), ("h100_sxm_as_pcie", "h100-pcie")):
        res = evaluate([dict(row, gpu=gpu, id=f"{row['id']}-{gpu}")], None, simulate=True)
        out[key] = f"{res[0]['error']:+.0%}" if isinstance(res[0].get("error"), float) else "-"
    return out


LINK_EXAMPLES = (("nvlink", "h100-sxm"), ("nvlink-bridge", "h100-nvl"), ("pcie-p2p", "h100-pcie"),
                 ("pcie-p2p", "l4"), ("pcie-host", "rtx-4090"), ("xgmi", "mi300x"))


def link_table(report: dict) -> list[str]:
    """The TP all-reduce per link (kvcalc/allreduce.py, constants with their sources in kvcalc/data/interconnect.yaml)
    and the held-out TPOT / throughput errors of the corpus's tensor-parallel rows per GPU."""
    from kvcalc.allreduce import link_for
    from kvcalc.hardware import get_gpu

    out = ["## TP all-reduce per link (kvcalc/allreduce.py; constants and sources: kvcalc/data/interconnect.yaml)", "",
           "One all-reduce = latency + 2 (n-1)/n x bytes / bus bandwidth, two per layer; published NCCL/RCCL figures, "
           "none fitted on the corpus.", "",
           "| link | example GPU | latency TP 2 / 4 / 8 (us) | bus bandwidth (GB/s) at TP 2 / 8 |", "|---|---|---:|---:|"]
    for name, gpu_id in LINK_EXAMPLES:
        gpu = get_gpu(gpu_id)
        tps = (2,) if name == "nvlink-bridge" else (2, 4, 8)
        lat = " / ".join(f"{link_for(gpu, t).latency_s(t) * 1e6:.1f}" for t in tps)
        bw = " / ".join(f"{link_for(gpu, t).bus_bytes_per_s / 1e9:.0f}" for t in ((2,) if len(tps) == 1 else (2, 8)))
        out.append(f"| {name} | {gpu_id} | {lat} | {bw} |")
    by_id = {r["id"]: r for r in load_rows()}
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    for split in ("predictions_logo", "predictions_loso"):
        for r in report.get(split, []):
            row = by_id.get(r["id"])
            if not isinstance(r.get("error"), float) or r.get("known_miss") or int((row or {}).get("tp") or 1) < 2:
                continue
            cells.setdefault((r["gpu"], r["class"]), {}).setdefault(split, []).append(r["error"])
    out += ["", "Tensor-parallel rows held out (median |error| / mean signed, leave-one-GPU-out | leave-one-source-out):",
            "", "| GPU | metric | rows | leave-one-GPU-out | leave-one-source-out |", "|---|---|---:|---:|---:|"]
    for (g, c), d in sorted(cells.items()):
        f = [f"{statistics.median(abs(e) for e in d[k]):.0%} / {statistics.mean(d[k]):+.0%}" if d.get(k) else "-"
             for k in ("predictions_logo", "predictions_loso")]
        out.append(f"| {g} | {c} | {len(d.get('predictions_logo', []))} | {f[0]} | {f[1]} |")
    return out


# The held-out figures of this script on the code before the pooled decode bandwidth (branch speed-gpus at
# f8ef995, the previous stop's classes), kept to publish the change's before / after (before_after)
BEFORE = {"commit": "f8ef995", "rows": 307, "logo": {"TPOT": 0.1875, "throughput": 0.0776, "single-stream": 0.0883, "TTFT": 0.1178}, "loso": {"TPOT": 0.1875, "throughput": 0.104, "single-stream": 0.0883, "TTFT": 0.1447}, "coverage": {"logo": 0.8346, "loso": 0.815}, "bias": {"a100-40gb": 0.0883, "a100-80gb": 0.1859, "h100-pcie": 0.2643, "h100-sxm": 0.3367, "l4": 0.0932, "mi300x": 0.247, "rtx-4090": 0.1597}}
# the same figures with the pooled decode bandwidth on the 307 rows of BEFORE (commit 0ce86d8), before the 9 rows
POOLED_ONLY = {"commit": "0ce86d8", "rows": 307, "logo": {"TPOT": 0.1369, "throughput": 0.0716, "single-stream": 0.0336, "TTFT": 0.116}, "loso": {"TPOT": 0.1369, "throughput": 0.1047, "single-stream": 0.0336, "TTFT": 0.1253}, "coverage": {"logo": 0.8228, "loso": 0.8346}, "bias": {"a100-40gb": 0.0336, "a100-80gb": 0.1859, "h100-pcie": 0.3078, "h100-sxm": 0.3462, "l4": 0.1309, "mi300x": 0.2573, "rtx-4090": 0.1665}}

# this page before ShareGPT's length spread (commit 3ff3cdd, 316 rows, every ShareGPT run at its stated mean lengths)
FIXED_LENGTHS = {"commit": "3ff3cdd", "rows": 316, "logo": {"TPOT": 0.1213, "throughput": 0.0827, "single-stream": 0.0336, "TTFT": 0.1798}, "loso": {"TPOT": 0.1239, "throughput": 0.1301, "single-stream": 0.0336, "TTFT": 0.2415}, "coverage": {"logo": 0.8137, "loso": 0.8175}, "bias": {"a100-40gb": 0.0336, "a100-80gb": 0.1858, "h100-pcie": 0.3301, "h100-sxm": 0.1981, "l4": 0.0883, "mi300x": 0.2573, "rtx-4090": 0.1668}}


# the held-out figures of this script at fd9e64c (316 rows), before the V0 engine's per-sequence host work
# (vllm_versions.serial_host_per_seq_s) and the Oracle MI300X rows' release (0.6.2, V0): before_after_v0
V0_BEFORE = {"commit": "fd9e64c", "rows": 316, "logo": {"TPOT": 0.1068, "throughput": 0.0584, "single-stream": 0.0336, "TTFT": 0.1756}, "logo_gpu": {"a100-40gb": [0.0336, 0.0336], "a100-80gb": [0.1368, -0.0622], "h100-pcie": [0.102, 0.0717], "h100-sxm": [0.1323, 0.0314], "l4": [0.0191, 0.0316], "mi300x": [0.1621, 0.2573], "rtx-4090": [0.1422, 0.0052]}, "loso": {"TPOT": 0.1109, "throughput": 0.0582, "single-stream": 0.0336, "TTFT": 0.2285}, "loso_gpu": {"a100-40gb": [0.0336, 0.0336], "a100-80gb": [0.1368, -0.0622], "h100-pcie": [0.1101, 0.0921], "h100-sxm": [0.1528, 0.0549], "l4": [0.0191, 0.0316], "mi300x": [0.1621, 0.2573], "rtx-4090": [0.1238, 0.0012]}, "coverage": {"logo": 0.8099, "loso": 0.8289}, "rocm_step": 1.8903, "mi300x_logo": [0.022, 0.031, 0.057, 0.099, 0.162, 0.245, 0.423, 0.574, 0.704]}


def before_after_v0(report: dict) -> list[str]:
    """Per GPU, held out both ways, before (V0_BEFORE) and after the V0 host work per sequence."""
    out = ["## Before / after per GPU (the V0 engine's host work per sequence; the MI300X rows' release)", "",
           f"Before: this script on commit {V0_BEFORE['commit']} ({V0_BEFORE['rows']} rows; the Oracle MI300X rows "
           "without a release, so read as the newest V1); after: this page (the rows read as vLLM 0.6.2, V0, and "
           "V0's host work per scheduled sequence in every step: 'MI300X' below). Median |error| / mean signed error.",
           "", "| GPU | rows | leave-one-GPU-out before | after | leave-one-source-out before | after |",
           "|---|---:|---|---|---|---|"]
    for g in sorted(V0_BEFORE["logo_gpu"]):
        now = [(report.get(k, {}).get("by_gpu", {}).get(g) or {}) for k in ("logo", "loso")]
        if not now[0]:
            continue
        b = [V0_BEFORE[k + "_gpu"][g] for k in ("logo", "loso")]
        out.append(f"| {g} | {now[0].get('n', '?')} | {b[0][0]:.0%} / {b[0][1]:+.0%} | "
                   f"{now[0]['median_abs']:.0%} / {now[0]['mean_signed']:+.0%} | {b[1][0]:.0%} / {b[1][1]:+.0%} | "
                   f"{now[1]['median_abs']:.0%} / {now[1]['mean_signed']:+.0%} |")
    cov = report.get("interval_coverage") or {}
    for c in TARGET:
        a = [(report.get(k, {}).get("by_class", {}).get(c) or {}).get("median_abs") for k in ("logo", "loso")]
        if None in a:
            continue
        out.append(f"| all: {c} median | | {V0_BEFORE['logo'][c]:.1%} | {a[0]:.1%} | {V0_BEFORE['loso'][c]:.1%} | "
                   f"{a[1]:.1%} |")
    out.append(f"| all: interval coverage | | {V0_BEFORE['coverage']['logo']:.1%} | {(cov.get('logo') or 0):.1%} | "
               f"{V0_BEFORE['coverage']['loso']:.1%} | {(cov.get('loso') or 0):.1%} |")
    mi = sorted((x for x in report.get("predictions_logo", []) if x.get("gpu") == "mi300x"), key=lambda x: x["id"])
    if mi:
        out += ["", "MI300X rows held out (batch 1, 2, 4 .. 256): before "
                + ", ".join(f"{e:+.0%}" for e in V0_BEFORE["mi300x_logo"]) + "; after "
                + ", ".join(f"{x['error']:+.0%}" for x in mi) + f". The in-sample ROCm step class, fitted on these "
                f"rows alone, was x{V0_BEFORE['rocm_step']:.2f} of CUDA's step overhead; with the host work it is "
                f"x{(report['classes'].get('step') or {}).get('rocm', float('nan')):.2f}: the extra ROCm step "
                "overhead it stood for was the V0 host's per-sequence time."]
    return out


def before_after(report: dict) -> list[str]:
    """The held-out medians, coverage and per-GPU biases before the pooled decode bandwidth (BEFORE) and now."""
    cov = report.get("interval_coverage") or {}
    out = ["## Before / after (the pooled decode bandwidth, 9 rows added, then ShareGPT's length spread)", "",
           f"Held out (leave-one-GPU-out / leave-one-source-out); before: this script on commit {BEFORE['commit']} "
           f"({BEFORE['rows']} corpus rows); 316 rows: commit {FIXED_LENGTHS['commit']} (the 9 added are gpustack's "
           "H100 SXM latency rows, below), every ShareGPT run at its stated mean lengths; after: this page, ShareGPT "
           "runs with their lengths spread (serve_sim.sharegpt_lengths, 'ShareGPT lengths' below).", "",
           "| quantity | target | before | pooled bandwidth (307 rows) | 316 rows, fixed lengths | after |",
           "|---|---:|---|---|---|---|"]
    for c, t in TARGET.items():
        a = [(report.get(k, {}).get("by_class", {}).get(c) or {}).get("median_abs") for k in ("logo", "loso")]
        b = [BEFORE[k].get(c) for k in ("logo", "loso")]
        if None in a or None in b:
            continue
        m = [POOLED_ONLY[k].get(c) for k in ("logo", "loso")]
        f = [FIXED_LENGTHS[k].get(c) for k in ("logo", "loso")]
        out.append(f"| {c} median abs error | {t:.0%} | {b[0]:.1%} / {b[1]:.1%} | {m[0]:.1%} / {m[1]:.1%} | "
                   f"{f[0]:.1%} / {f[1]:.1%} | {a[0]:.1%} / {a[1]:.1%} |")
    fc = FIXED_LENGTHS["coverage"]
    out.append(f"| interval coverage | 80% | {BEFORE['coverage']['logo']:.1%} / {BEFORE['coverage']['loso']:.1%} | "
               f"{POOLED_ONLY['coverage']['logo']:.1%} / {POOLED_ONLY['coverage']['loso']:.1%} | "
               f"{fc['logo']:.1%} / {fc['loso']:.1%} | {(cov.get('logo') or 0):.1%} / {(cov.get('loso') or 0):.1%} |")
    for g, v in BEFORE["bias"].items():
        now = (report.get("logo", {}).get("by_gpu", {}).get(g) or {}).get("mean_signed")
        mid, fx = POOLED_ONLY["bias"].get(g), FIXED_LENGTHS["bias"].get(g)
        if now is not None and max(abs(v), abs(now), abs(mid or 0), abs(fx or 0)) > 0.20:
            out.append(f"| {g} mean bias (leave-one-GPU-out) | 20% | {v:+.0%} | {mid:+.0%} | {fx:+.0%} | {now:+.0%} |")
    return out


# the held-out figures of this script at 4a331cd (316 rows, 7 GPU types predictable), before issue 18 item 1's rows
# for DGX Spark, RTX 5090 and the public H200 were added
BEFORE_GPUS = {"commit": "4a331cd", "rows": 316, "predictable": 288, "types": 7,
               "logo": {"TPOT": 0.107, "throughput": 0.058, "single-stream": 0.034, "TTFT": 0.176},
               "loso": {"TPOT": 0.111, "throughput": 0.058, "single-stream": 0.034, "TTFT": 0.229},
               "coverage": {"logo": 0.810, "loso": 0.829},
               "bias": {"a100-40gb": 0.03, "a100-80gb": -0.06, "h100-pcie": 0.07, "h100-sxm": 0.03, "l4": 0.03,
                        "mi300x": 0.12, "rtx-4090": 0.01}}
NEW_SOURCES = {"djangodevreng-dgx-spark": "dgx-spark", "pegainfer-5090": "rtx-5090", "gpustack-dsr1-h200": "h200"}


# the held-out figures of this script at 9d8a4a3 (374 rows), before the measured GEMM rate (throughput.gemm_ratio)
BEFORE_GEMM = {"commit": "9d8a4a3",
               "logo": {"TPOT": 0.140, "throughput": 0.063, "single-stream": 0.136, "TTFT": 0.215},
               "loso": {"TPOT": 0.140, "throughput": 0.062, "single-stream": 0.136, "TTFT": 0.221},
               "coverage": {"logo": 0.811, "loso": 0.817},
               "bias": {"a100-40gb": 0.03, "a100-80gb": -0.06, "dgx-spark": 0.28, "h100-pcie": 0.05, "h100-sxm": 0.03,
                        "h200": 0.12, "l4": 0.04, "mi300x": 0.12, "rtx-4090": 0.00, "rtx-5090": 1.85},
               "classes": {"Ada-pcie": 1.2619, "Hopper-module": 1.4174, "Hopper-pcie": 0.8599}}


def gemm_section(report: dict) -> list[str]:
    """The measured GEMM rate (hardware_profiles measured_bf16_matmul_flops, throughput.gemm_ratio): each corpus
    GPU's ratio, the in-sample tensor classes and the held-out errors before / after (every 'after' figure read from
    the report)."""
    from kvcalc import throughput
    from kvcalc.hardware import get_gpu

    by_gpu = report.get("logo", {}).get("by_gpu", {})
    ada = (report.get("classes", {}).get("tensor") or {}).get("Ada-pcie", "-")
    fe_ms = 1e3 * ((report.get("classes", {}).get("frontend") or {}).get("public") or 0.0)
    out = ["## Measured GEMM rate (the tensor rate's base: datasheet x measured / datasheet)", "",
           "A GPU without its own fit took its tensor rate as its datasheet's dense BF16 peak x the H200's fitted "
           "fraction (0.6364). The datasheet peak is the rated boost clock's: a GeForce card runs its GEMMs above it, a "
           "power-limited PCIe board below, the H200 at 0.80 of it. Each profile now carries the BF16 rate a large "
           "torch.mm reaches on that GPU (`measured_bf16_matmul_flops`, from one public benchmark script run on every "
           "card: https://github.com/zzc0721/torch-performance-test-data, database.md at 9d82827, the lines in each "
           "profile's sources), and the tensor efficiency is the H200's x (measured / datasheet) over the H200's "
           "(kvcalc/throughput.py gemm_ratio). Not fitted on the corpus, it is close to the tensor classes the corpus "
           "had fitted without it (RTX 4090 x1.25 against Ada-pcie 1.26; H100 PCIe x0.82 against the in-sample "
           "Hopper-pcie 0.86); the classes refitted on top of it are the rest (last row of the second table). "
           f"Ada-pcie comes out {ada} with the public front end at {fe_ms:.1f} ms: the RTX 4090's lone prompts are "
           "~200 tokens, where prefill and front end trade ('Tensor classes from prefill only' below), so the "
           "in-sample class does not decide the card's prefill rate; the held-out columns, which refit both without "
           "the GPU, are the test.", "",
           "| GPU | datasheet BF16 (TFLOPS) | measured torch.mm | measured / datasheet | x on the H200-derived rate | "
           "held-out mean bias before | after |", "|---|---:|---:|---:|---:|---:|---:|"]
    for g in sorted(set(BEFORE_GEMM["bias"]) | set(by_gpu)):
        gpu = get_gpu(g)
        peak, meas = gpu.flops_for("bf16") or gpu.flops_for("fp16"), gpu.measured_bf16_matmul_flops
        now, was = (by_gpu.get(g) or {}).get("mean_signed"), BEFORE_GEMM["bias"].get(g)
        out.append(f"| {g} | {peak / 1e12:,.1f} | {'-' if not meas else f'{meas / 1e12:,.1f}'} | "
                   f"{'-' if not meas else f'{meas / peak:.3f}'} | "
                   f"{'fitted (measured)' if g in load_speed_measured() else f'{throughput.gemm_ratio(gpu):.3f}'} | "
                   f"{'-' if was is None else f'{was:+.0%}'} | {'-' if now is None else f'{now:+.0%}'} |")
    out += ["", "| quantity | target | before (" + BEFORE_GEMM["commit"] + ") | after |", "|---|---:|---|---|"]
    for c, t in TARGET.items():
        a = [(report.get(k, {}).get("by_class", {}).get(c) or {}).get("median_abs") for k in ("logo", "loso")]
        b = [BEFORE_GEMM[k].get(c) for k in ("logo", "loso")]
        if None not in a:
            out.append(f"| {c} median abs error (leave-one-GPU-out / leave-one-source-out) | {t:.0%} | "
                       f"{b[0]:.1%} / {b[1]:.1%} | {a[0]:.1%} / {a[1]:.1%} |")
    cov = report.get("interval_coverage") or {}
    out.append(f"| interval coverage | 80% | {BEFORE_GEMM['coverage']['logo']:.1%} / "
               f"{BEFORE_GEMM['coverage']['loso']:.1%} | {(cov.get('logo') or 0):.1%} / {(cov.get('loso') or 0):.1%} |")
    tensor = report.get("classes", {}).get("tensor", {})
    out.append("| tensor classes (in-sample) | | " + ", ".join(f"{k} {v:g}" for k, v in BEFORE_GEMM["classes"].items())
               + " | " + (", ".join(f"{k} {v:g}" for k, v in sorted(tensor.items())) or "none") + " |")
    out += ["", "The FP8 tensor rate takes the same factor (the source measured BF16 only; on the RTX 5090 an "
            "mma.sync peak test reads FP8 with FP32 accumulate at the BF16 rate, 370 TFLOPS, "
            "https://main-horse.github.io/posts/5090-mm-perf, so its FP8 GEMM rate is an upper bound). The DGX Spark "
            "(GB10) has no published torch.mm figure: it keeps its datasheet estimate (62.5 TFLOPS BF16)."]
    return out


def load_speed_measured() -> dict:
    from kvcalc.constants import load

    return load("speed")["measured"]


def shipped_classes() -> dict:
    """The class constants kvcalc ships (speed.yaml `classes`, serve.yaml `frontend.public_hosts_s`)."""
    from kvcalc.constants import load

    classes = {k: dict(v) for k, v in (load("speed").get("classes") or {}).items() if isinstance(v, dict)}
    public = (load("serve").get("frontend") or {}).get("public_hosts_s")
    if public is not None:
        classes["frontend"] = {"public": public}
    return classes


def new_gpus_section(report: dict) -> list[str]:
    """Issue 18 item 1: the GPU types the rows of DGX Spark, RTX 5090 and a public H200 added, before / after, and
    those sources' own held-out errors (every figure read from the report)."""
    rows = {r["id"]: r for r in load_rows()}
    logo = [r for r in report.get("predictions_logo", []) if isinstance(r.get("error"), float)]
    types = sorted({r["gpu"] for r in logo if not r.get("known_miss")})
    cov = report.get("interval_coverage") or {}
    out = ["## GPU types added (issue 18 item 1: DGX Spark, RTX 5090, a public H200)", "",
           f"Before: this script on commit {BEFORE_GPUS['commit']} ({BEFORE_GPUS['rows']} rows, "
           f"{BEFORE_GPUS['predictable']} predictable, {BEFORE_GPUS['types']} GPU types); after: this page "
           f"({report['rows']} rows, {report['predictable']} predictable, {len(types)} GPU types with predictable rows that are "
           f"not known misses: {', '.join(types)}). "
           "Held out (leave-one-GPU-out / leave-one-source-out), median |error|; the held-out columns refit the "
           "existing classes without the row's GPU or source. No Blackwell-pcie tensor class is fitted (no lone "
           "Blackwell TTFT: the DGX Spark's 0.2 req/s TTFTs are loaded rows), so a Blackwell card's prefill is the "
           "H200-derived efficiency x its measured GEMM rate ('Measured GEMM rate' below; the DGX Spark has none "
           "published and keeps its datasheet).", "",
           "| quantity | target | before | after |", "|---|---:|---|---|"]
    for c, t in TARGET.items():
        a = [(report.get(k, {}).get("by_class", {}).get(c) or {}).get("median_abs") for k in ("logo", "loso")]
        b = [BEFORE_GPUS[k].get(c) for k in ("logo", "loso")]
        n = (report.get("logo", {}).get("by_class", {}).get(c) or {}).get("n")
        if None in a:
            continue
        out.append(f"| {c} median abs error | {t:.0%} | {b[0]:.1%} / {b[1]:.1%} | {a[0]:.1%} / {a[1]:.1%} ({n} rows) |")
    out.append(f"| interval coverage | 80% | {BEFORE_GPUS['coverage']['logo']:.1%} / {BEFORE_GPUS['coverage']['loso']:.1%}"
               f" | {(cov.get('logo') or 0):.1%} / {(cov.get('loso') or 0):.1%} |")
    by_gpu = report.get("logo", {}).get("by_gpu", {})
    for g in sorted(set(BEFORE_GPUS["bias"]) | set(by_gpu)):
        now = (by_gpu.get(g) or {}).get("mean_signed")
        was = BEFORE_GPUS["bias"].get(g)
        out.append(f"| {g} mean bias (leave-one-GPU-out) | 20% | {'-' if was is None else f'{was:+.0%}'} | "
                   f"{'-' if now is None else f'{now:+.0%}'} |")
    out += ["", "The added sources held out (leave-one-GPU-out; signed error, kvcalc / measured - 1):", "",
            "| source | GPU | metric | rows | median abs | mean signed | min .. max |", "|---|---|---|---:|---:|---:|---|"]
    for src, gpu in NEW_SOURCES.items():
        mine = [r for r in logo if (rows.get(r["id"]) or {}).get("source") == src and not r.get("known_miss")]
        for c in ("TPOT", "throughput", "single-stream", "TTFT"):
            errs = [r["error"] for r in mine if r["class"] == c]
            if errs:
                out.append(f"| {src} | {gpu} | {c} | {len(errs)} | {statistics.median(abs(e) for e in errs):.0%} | "
                           f"{statistics.mean(errs):+.0%} | {min(errs):+.0%} .. {max(errs):+.0%} |")
    shipped = shipped_classes()
    moved = [f"{kind} {key} {shipped[kind][key]:g} -> {value:g}" if key in shipped.get(kind, {}) else
             f"{kind} {key} (none shipped) -> {value:g}"
             for kind, table in report["classes"].items() for key, value in sorted(table.items())
             if shipped.get(kind, {}).get(key) != value]
    e = row_errors(report, nv26="djangodevreng-gemma-4-26b-a4b-it-nvfp4-reasoning-tpot",
                   bf26="djangodevreng-gemma-4-26b-a4b-it-bf16-reasoning-tpot",
                   oss="djangodevreng-gpt-oss-20b-mxfp4-chat-c1", nem="djangodevreng-nemotron-3-nano-30b-a3b-nvfp4-chat-c1",
                   g31="djangodevreng-gemma-4-31b-it-nvfp4-chat-c1", q1="pegainfer5090-qwen3-4b-qps1-tpot",
                   q12="pegainfer5090-qwen3-4b-qps12-tpot", q12t="pegainfer5090-qwen3-4b-qps12-ttft",
                   c4="gpustack-dsr1-h200-sharegpt-c4-tpot", burst="gpustack-dsr1-h200-sharegpt1000-tpot",
                   q8t="pegainfer5090-qwen3-4b-qps8-ttft", q1t="pegainfer5090-qwen3-4b-qps1-ttft",
                   q16t="pegainfer5090-qwen3-4b-qps16-ttft", q16o="pegainfer5090-qwen3-4b-qps16-out",
                   r128t="gpustack-dsr1-h200-random128-ttft", r128o="gpustack-dsr1-h200-random128-output",
                   r2kt="gpustack-dsr1-h200-random2k-ttft", r2kp="gpustack-dsr1-h200-random2k-tpot",
                   b1t="gpustack-dsr1-h200-sharegpt1000-ttft", bf26c="djangodevreng-gemma-4-26b-a4b-it-bf16-chat-c1",
                   nembf="djangodevreng-nemotron-3-nano-30b-a3b-bf16-chat-c1",
                   bf26o="djangodevreng-gemma-4-26b-a4b-it-bf16-reasoning-output",
                   g31t="djangodevreng-gemma-4-31b-it-nvfp4-reasoning-tpot",
                   nv26c="djangodevreng-gemma-4-26b-a4b-it-nvfp4-chat-c1")
    out += ["", "- **Class constants**: the in-sample fit on this corpus "
            + (("differs from the constants shipped before this page's `--write-classes` run (" + "; ".join(moved)
                + ")") if moved else "is what kvcalc ships") + ". With the measured GEMM rate in every profile that "
            "has one, the tensor classes are what is left of each generation's kernels against cuBLAS's large GEMM. "
            "A prompt at a request rate is lone only with at most 16 requests in flight by its run's "
            "own figures (`in_flight`: rate x measured TTFT + (output_len - 1) x TPOT, at most num_prompts): the DGX "
            "Spark 09-reasoning runs at 0.2 req/s keep 42-50 requests of ~4,000 tokens in flight and are loaded rows, "
            "out of the front-end and tensor-class fits; the io.net 1 req/s rows keep 1-11 of ~200 tokens.",
            f"- **DGX Spark** (GB10, vLLM 0.26.0, FP8 KV), held out. Alone (concurrency 1) decode is close where vLLM "
            f"runs BF16 or a dense model (Gemma 4 31B NVFP4 {e['g31']}, Gemma 4 26B-A4B BF16 {e['bf26c']}, Nemotron 3 "
            f"Nano BF16 {e['nembf']}); the 4-bit MoE checkpoints decode at about half kvcalc's rate (gpt-oss-20b MXFP4 "
            f"{e['oss']}, Gemma 4 26B-A4B NVFP4 {e['nv26c']}, Nemotron 3 Nano NVFP4 "
            f"{e['nem']}). vLLM runs their experts through Marlin on sm_121 (the NVFP4 servers' flags, meta.json: "
            "`--moe-backend marlin --linear-backend marlin`, VLLM_USE_FLASHINFER_MOE_FP4=0; gpt-oss's MXFP4 lands there "
            "by vLLM 0.26.0's own order: oracle/mxfp4.py _get_priority_backends tries FlashInfer TRT-LLM, DeepGEMM, "
            "then Marlin, experts/trtllm_mxfp4_moe.py:85-87 takes compute capability family 100 only, and "
            "experts/marlin_moe.py:610-612 accepts any CUDA GPU from 7.5): a W4A16 kernel that dequantizes FP4 to BF16 "
            "and multiplies in BF16. Its measured extra over kvcalc's bytes is 6-19 ms a step (0.28-0.63 ms per MoE "
            "layer, 23-57 us per expert GEMM, 140-410 FP32 operations per weight element if it were the "
            "dequantization): no per-element, per-layer or per-GEMM constant fits the three, so nothing is priced; the "
            "dense NVFP4 checkpoint through the same Marlin linear backend is on its bytes. Loaded (the 09-reasoning "
            "runs, 50 prompts at 0.2 req/s with up to 49 in flight): the runs' lengths are now drawn as vllm bench drew "
            "them (random_range_ratio 0.9 from each run's own log: outputs uniform in 410-7,782 tokens, so fewer "
            f"requests overlap than at a fixed 4,186), and kvcalc still decodes too slowly (Gemma 4 26B-A4B BF16 TPOT "
            f"{e['bf26']}, output throughput {e['bf26o']}; Gemma 4 31B NVFP4 TPOT {e['g31t']}): the measured 151 ms "
            "step at ~28 requests in flight (throughput x TPOT) reads at most 41 GB at the 273 GB/s peak, where "
            "uniform top-8 routing over 128 experts touches 84% of them (43 GB of BF16 experts and dense weights at "
            "0.83 of the peak, 190 ms): the experts a batch touches are fewer than independent routing gives, or the "
            "achieved LPDDR5X bandwidth is above the pooled 0.831; neither has a source here. Since issue 18's "
            "sliding-window change, decode reads a sliding layer's window only, as vLLM 0.26.0's Triton attention "
            "does (v1/attention/ops/triton_unified_attention.py:399-419, the tile loop bounded by "
            "compute_tile_loop_bounds(..., SLIDING_WINDOW, ...); throughput.decode_windows): before it kvcalc read "
            "every layer over the whole context (Gemma 4 26B-A4B: 112,895 B a token at FP8 = all 30 layers, 2.5x over "
            "at 3,000 tokens), which made these reasoning runs' TPOT +72% / +73% / +39% (Gemma 4) and +15% (gpt-oss).",
            f"- **RTX 5090** (vLLM 0.22.1, Qwen3-4B BF16, 1,024 / 128 Poisson), held out: TPOT at 1 req/s {e['q1']}, "
            f"TTFT {e['q1t']}; 8 req/s TTFT {e['q8t']}; 12 req/s TPOT {e['q12']}, TTFT {e['q12t']}; 16 req/s (past "
            f"saturation) TTFT {e['q16t']}, throughput {e['q16o']}. Its prefill takes the measured GEMM rate (x1.42 "
            "of the H200-derived efficiency, below); before it the held-out prefill was the H200-derived 133 TFLOPS "
            "and the card saturated from 8 req/s in kvcalc (12 req/s TPOT +297%, TTFT +1298%; mean bias +185%). "
            "What is left is the loaded TTFT (8-10 req/s): the measured 68-79 ms is 12-23 ms over the lone prompt's.",
            f"- **H200, public host** (gpustack, 8x H200, DeepSeek-R1-0528 FP8, vLLM v0.11.0 `-tp 8`): the H200 keeps "
            "the project's own constants (speed.yaml `measured`, no class applies), so these rows test them on a "
            "second host and fit nothing. The rows are what the page prints (totals / prompts = the lengths; e.g. the "
            "128-token run: 1,000 x 4 tokens / 181.27 tok/s = 22.1 s), no unit or parsing error. Two things miss, "
            "neither the H200's constants: (1) every prompt at once through the chat endpoint: the first tokens "
            f"wait for the API server, not the GPU (1,000 prompts of 127 tokens: TTFT {e['r128t']}, the measured "
            "19.4 s mean for 127k prompt tokens the GPUs prefill in ~2 s, so ~50 requests/s through the front end, "
            "as the project's own serve run k found its API server saturating at 32-64 req/s; the run's output "
            f"throughput {e['r128o']}; the 1,000-prompt ShareGPT burst's TTFT {e['b1t']}, its TPOT {e['burst']}); "
            "kvcalc books the front end as a latency per request, not as a serial resource; (2) DeepSeek-R1's step at "
            f"TP 8 (MLA, 256 experts each sharded 8 ways, 61 layers): 4 concurrent requests decode {e['c4']} TPOT "
            f"(19.4 ms measured, 8.5 ms in kvcalc) and the 2k-token burst's prefill is ~2x kvcalc's (TTFT {e['r2kt']}, "
            f"TPOT {e['r2kp']}): most of it not priced ('TP 8 decode, step by step' below). One TP cost was missing and is in "
            "now (issue 18): the all-reduce's bytes (two calls a layer of tokens x 7,168 x 2 B, 117 MB at an "
            "8,192-token chunk, ~0.5 ms each over NVLink) had been left out for the measured H200, whose TP model was "
            "only the fitted per-call latency (the 2k burst's output throughput +120% -> +70%, the 4k one's +71% -> "
            "+40%).",
            "- **TP 8 decode, step by step** (the H200 and H100 SXM rows above, issue 18's per-GPU bias): kvcalc's "
            "step for gpustack's 4 concurrent DeepSeek-R1 requests (batch 4, ~440 tokens) is 8.2 ms: fixed 3.9 "
            "(step 1.14, 61 layers x 2 all-reduce latencies of 7.95 us 0.97, MoE routing 61 x 29 us 1.77), routed "
            "experts 3.2 (9.8 GB a rank at the copy bandwidth), dense GEMMs 0.9 (2.9 GB), all-reduce kernel 0.17, "
            "attention 0.03; the run measures 18.5 ms a step (its peak 216 tok/s with 4 in flight) and a 19.4 ms "
            "TPOT. Each suspect, priced: (a) the all-reduce at TP 8 (now in: vLLM's custom all-reduce kernel timed per "
            "call at 2, 4 and 8 H100s, sglang#2904, kvcalc/allreduce.py Link.call_s): 9.3 us at this step's 57 KiB "
            "against 8.2 us before, +0.14 ms; (b) what TP replicates on every rank (now in: MLA's q_a/kv_a down "
            "projections and the router, read whole by each rank, throughput.replicated_linear, the same parts the "
            "capacity model already loads): +1.0 GB, +0.28 ms; (c) kernel count: ~40 kernels a layer in vLLM's "
            "DeepSeek decode at the project's 1.9 us a graph kernel (throughput.yaml graph_kernel_s) is 4.6 ms, of "
            "which the H200 fit's step and MoE-layer overheads already hold 2-3 ms: at most ~2 ms; (d) the fused MoE "
            "at few rows: vLLM's benchmark_moe on an H200 (vllm#36559, Qwen3-Next-80B-A3B FP8, CUDA graphs) takes "
            "30 / 46 / 62 us at batch 1 / 4 / 8, ~22 us over its bytes at the copy bandwidth, which kvcalc's 29 us a "
            "MoE layer already covers. That leaves ~8 ms a step (130 us a layer) that no priced mechanism explains, "
            "and it is vLLM 0.11's: kvcalc is within -4 .. -11% on SGLang 0.5.7's TPOT for the same model on 8x H200 "
            "at 8-64 clients (docs/validation/sglang.md, InferenceX rows; -9 .. -16% before (a) and (b)). Not "
            "fitted: one source, one row of small-batch decode. "
            "The H100 SXM's 405B rows (dstack, vLLM 0.6.3 V0, CUDA graphs) measure 34.8-38.3 ms a step at 4-32 "
            "sequences, flat but for 0.125 ms a sequence (V0's host time, which kvcalc has); (a) moves them most "
            "(131 KiB-1 MiB a call: 11-23 us instead of 8.6-12.8 us, 252 calls a step), with the shipped classes "
            "batch 4 +31% -> +28%, batch 32 +21% -> +12%; ~7 ms a step is left, and the same benchmark's MI300X runs the step in 33.9 ms "
            "without graphs."]
    return out


def target_verdicts(report: dict, logo: dict, cov: dict) -> str:
    """Each target of issue 18 met or missed, from the numbers above (held out both ways; a target is met when both
    leave-one-GPU-out and leave-one-source-out are)."""
    met, missed = [], []
    for c, target in TARGET.items():
        a = (report.get("logo", {}).get("by_class", {}).get(c) or {}).get("median_abs")
        b = (report.get("loso", {}).get("by_class", {}).get(c) or {}).get("median_abs")
        if a is None or b is None:
            continue
        n = (report.get("logo", {}).get("by_class", {}).get(c) or {}).get("n", "?")
        text = f"{c} median |error| {a:.0%} / {b:.0%} (target {target:.0%}, {n} rows)"
        (met if max(a, b) <= target else missed).append(text)
    lo, ls = cov.get("logo") or 0, cov.get("loso") or 0
    (met if min(lo, ls) >= 0.80 else missed).append(f"interval coverage {lo:.1%} / {ls:.1%} (target 80%)")
    per = {g: c for g, c in (report.get("gpu_coverage") or {}).items() if g != "all"}
    if per:
        short = [f"{g} {c['loo_row']:.0%} ({c['n']} rows)" for g, c in per.items() if c["loo_row"] < 0.80]
        (missed if short else met).append(
            "per-GPU coverage, each row left out of its GPU's range, at least 80% on every GPU"
            + (f" (short: {', '.join(short)})" if short else ""))
    biased = [f"{g} {v['mean_signed']:+.0%}" for g, v in logo["by_gpu"].items() if abs(v["mean_signed"]) > 0.20]
    (missed if biased else met).append("no GPU type with a held-out mean bias beyond 20%"
                                       + (f" ({', '.join(biased)})" if biased else ""))
    return ("**Met** (leave-one-GPU-out / leave-one-source-out): " + ("; ".join(met) or "none") + ". **Missed**: "
            + ("; ".join(missed) or "none") + ".")


NOTES = (
    "- {verdicts} In-sample: TPOT {tpot_in}, TTFT {ttft_in}.\n"
    "- **One model per quantity**: every figure here is the serve simulation `kvcalc plan` shows (workload.vllm_bench, "
    "with the release's scheduling default and the row's --num-prompts). The class fit runs on the closed form "
    "(workload.closed_form_bench, its fast surrogate: the fit evaluates the model thousands of times) but for lone "
    "prompts at a request rate, which wait for the step in flight and so go through the simulation (40 prompts a "
    "run in the fit); its in-sample errors with the closed form are in the JSON (`in_sample_closed_form`: TPOT "
    "{cf_tpot}, TTFT {cf_ttft}).\n"
    "- **Tensor classes from prefill only**: a tensor class is fitted on lone-prompt TTFTs (one prefill: the rate's "
    "cleanest evidence); the throughput of loaded runs tests it instead of moving it. Fitting it to loaded runs "
    "through the closed form had pulled the H100 PCIe's prefill to 0.46 of the H200-derived rate and its lone TTFTs "
    "+20-60% high. The lone public prompts are nearly all ~200 tokens, so the prefill rate and the front end trade "
    "against each other: with 200 prompts a run in the fit the pair is 0.76 and 3.9 ms, with 40 it is the table's; "
    "in-sample TTFT is 12-16% either way. GPUs without a lone-prompt TTFT (A100, MI300X, L4, H100 NVL) keep the "
    "H200-derived tensor rate.\n"
    "- **Serve front end**: it is the host's CPU work (HTTP, tokenization, the hop to the engine core), not the GPU's. "
    "The project's H200 host takes 20.8 ms (kvcalc/data/serve.yaml `per_request_s`, kept for the H200); the public "
    "hosts answer a lone ~200-token prompt in 11-41 ms all told, so their front end, fitted as the median of measured "
    "minus engine TTFT over the lone served prompts, is {frontend} (`public_hosts_s`, refitted without the held-out "
    "GPU or source). Offline rows (LLM.generate, benchmark_latency) carry no front end.\n"
    "- **Async scheduling by release**: vLLM schedules step k+1 while step k runs only from v0.14.0 (release notes: "
    "'Async scheduling is now enabled by default', PR #27614); before it a new request waits for the step in flight "
    "only, not one more. The io.net rows are vLLM 0.8.5: with the 0.26 rule their lone TTFTs came out one decode "
    "step (5-15 ms) too long (kvcalc/engines/vllm_versions.py async_scheduling_default, applied by "
    "workload.vllm_bench to the release).\n"
    "- **TP all-reduce by link** (item 2's interconnect mechanism): each link (NVLink with vLLM's custom all-reduce, an "
    "NVLink bridge, PCIe with peer-to-peer, GeForce PCIe staged through host memory, xGMI) has a per-call latency and "
    "a bus bandwidth from published NCCL/RCCL numbers (table above); before it, a fitted per-layer factor per link "
    "class held one GPU type each, so held out the all-reduce fell back to the H200's NVLink time (TP TPOT held out: "
    "RTX 4090 -56%, H100 PCIe -35% mean; MI300X throughput +72% at batch 1 .. +188% at 256). With the link model the "
    "MI300X's RCCL ring (52.7 us a call, 252 calls a step for Llama 3.1 405B) is most of its step: +1% at batch 1.\n"
    "- **Decode bandwidth pooled over memory technologies** (this change; the table 'Before / after' above): the fit had one bandwidth class per memory technology, and each technology's decode-bound rows "
    "come from one GPU type (GDDR6: L4, GDDR6X: RTX 4090, HBM2e: H100 PCIe), so a technology's class was that GPU's "
    "own fit: it came out 0.831 on all three, and held out each GPU fell back to its profile's assumed fraction (0.85 "
    "on the RTX 4090, 0.9 on the H100 PCIe and H100 SXM): held-out H100 PCIe decode was 8% too fast on every row "
    "(TP 1 TPOT -10% .. -17%, in-sample -2% .. +3%). One fraction pooled over every technology measured "
    "(bandwidth `all`, {bw_all}; kvcalc/throughput.py class_factors) transfers to a GPU whose technology has no other "
    "GPU, and to the HBM3 boards (H100 SXM, MI300X) that had none.\n"
    "- **ShareGPT lengths** (this change; the table 'Before / after' above): 248 of the predictable rows are ShareGPT "
    "runs, which the simulation had run at their stated mean lengths (io.net: 205 in, 217 out), so every answer ended "
    "~217 steps after its prompt. vllm bench takes each conversation's own answer length (benchmarks/"
    "benchmark_dataset.py ShareGPTDataset in 0.8.5: 4 .. 1,024 prompt tokens, at most 2,048 with the output), and a "
    "run's duration, the denominator of its output throughput, ends with its longest answer: io.net's Qwen2.5-7B on "
    "one H100 PCIe at 16 requests/s took 19.0 s (43,344 tokens at 2,281 tokens/s) for 200 prompts that arrive over "
    "~12.5 s, where the mean-length run ends at ~15 s (kvcalc +29% before, {e_q7thr} now). The simulation now draws "
    "a ShareGPT run's answers (serve_sim.sharegpt_lengths, Workload.dataset): exponential, the maximum-entropy spread "
    "for a given mean, truncated by vllm bench's filter and rescaled to the run's stated mean; prompts stay at their "
    "mean (io.net's Qwen2.5-7B at 1 request/s has a TTFT spread of std 3.0 ms, p99 26.9 ms: the mean prompt gives "
    "3.2 / 27.5 ms, exponential prompts 4.2 / 34.6 ms, and with them the held-out TTFT median is 21% / 30% instead of 18% / 23%; the "
    "Qwen2.5-32B run's std of 36 ms is wider than either, so the prompts' spread is open). The shape is an "
    "assumption (the conversations are not in kvcalc) and nothing is fitted to it, so every row tests it; the class "
    "fit keeps the mean lengths (its closed form and its 40-prompt lone runs), and its classes are unchanged. The "
    "same spread shortens the KV-saturated runs' queues (short answers free their blocks early): Qwen2.5-32B on one "
    "H100 PCIe at 16 requests/s (7.7 GiB of KV, 31.5k tokens: 61.0 GiB of weights in the 0.9 x 79.2 GiB budget) "
    "TTFT {e_q32ttft} and {e_q32bttft} (were +1,225% and +1,074%), throughput {e_q32thr}; 2x H100 PCIe Llama-3-70B "
    "TTFT {e_l70ttft} (was +1,111%), the R1-Distill-70B run's throughput {e_l70thr} (was +91%). The engine was the "
    "one the simulation models: vLLM 0.8.5 runs V1 for every io.net configuration: V1 is its default (the 0.8.5 "
    "wheel's vllm/envs.py:530-531, `\"VLLM_USE_V1\": lambda: bool(int(os.getenv(\"VLLM_USE_V1\", \"1\")))`, and "
    "engine/arg_utils.py:1101-1109: with VLLM_USE_V1 unset, V1 'for supported features' whenever "
    "_is_v1_supported_oracle passes), and the oracle (arg_utils.py:1292) falls back to V0 only for compute capability "
    "below 8.0 (:1354), an FP8 KV cache without FlashAttention's FP8 (:1371), a dtype other than float16/bfloat16 "
    "(:1381-1382, 'Only Fp16 and Bf16 dtypes since we only support FA') and non-default scheduler options, none of "
    "which the runs set: `vllm serve --dtype float16 --tensor-parallel-size N`, the repository's README; so V0's prefill-first scheduler and preemption are not "
    "the cause; and the pool above is what vLLM's profile leaves (capacity range -8% .. +1% on 51 start-up logs).\n"
    "- **What TPOT still misses** (leave-one-GPU-out mean {tpot_logo_mean}): the io.net RTX 4090 rigs (vLLM 0.8.5). "
    "Their decode step has a floor proportional to the layer count whatever the model's width or the TP size: "
    "Qwen2.5-1.5B at TP 1 takes 11.3 ms a step (28 layers, 0.40 ms a layer; its weights take 3.7 ms to read), "
    "Qwen2.5-7B at TP 4 11.1 ms (28 layers), Llama-3.1-8B at TP 4 14.2 ms (32), Qwen2.5-14B at TP 8 17.5 ms (48): "
    "0.36-0.46 ms a layer, where the 7B and 8B at TP 1 are bandwidth-bound (17.9 and 19.3 ms, kvcalc within 2%), "
    "so the floor overlaps the GPU's work rather than adding to it: a CPU launching each layer while the GPU runs "
    "behind, as in eager mode (kvcalc's eager launch on the H200 host is 0.43 ms a layer). vLLM 0.8.5's V1 engine "
    "replays piecewise CUDA graphs, which leave each layer's attention to be launched from Python (full decode "
    "graphs became the default in v0.11.0, vllm#25444), and kvcalc floors those releases' steps at the layers x "
    "{pw_us} us that the same source's H100 PCIe host takes (section 'Piecewise CUDA graphs' above: Tenstorrent's "
    "A100 Qwen3-0.6B, held out of that fit, {e_tt06}; vllm#20059's Qwen2.5-1.5B, 5.42 ms piecewise vs 5.09 ms full, "
    "agrees: a floor, not an added cost, below its full-graph step); but the RTX 4090 host needs 0.4 ms a layer, "
    "those machines' CPU, and fitted on one host it does not transfer to the other (fitted on the RTX 4090 rows it "
    "would put the H100 PCIe's 1.5B at +170%). The breakdown by TP and load (table above) says the same: on the RTX 4090 the error follows the TP size "
    "(TP 1 about 0 but for the 1.5B, TP 2 -23 .. -32%, TP 4 -44 .. -49%) and not the load (1, 4 and 16 requests/s "
    "alike), so it is not a per-sequence cost; 72 of the 79 TPOT rows are one source and one release (io.net, 0.8.5) "
    "and all BF16 but three FP8 rows, so the release and the quantization cannot be told apart from the host here. "
    "It stays a miss; the tensor-parallel residual classes carry it in the ranges.\n"
    "- **Why TTFT misses**: lone prompts are close (range {ttft_lone}); under load (range {ttft_load}) the misses "
    "left are the KV-saturated io.net runs at 16 requests/s (Qwen2.5-32B on one H100 PCIe {e_q32ttft} / "
    "{e_q32bttft}, Llama-3-70B on two {e_l70ttft}: the simulation still queues where vLLM 0.8.5 served first tokens "
    "in 0.2-0.6 s on average while its running requests slowed) and the closed loops of gpustack's H100 SXM page (a "
    "59 ms first token on that host, 'Rows added' below). The first depends on which answers are long (the "
    "exponential draw, an assumption) and on the prompts' spread; the simulation's admission and preemption rules "
    "are 0.8.5's (kvcalc/serve_sim.py, issue 25's).\n"
    "- **H100 SXM: which board** (item 2). Two sources do not name it. The Tenstorrent reference (2x H100, Qwen2.5-72B "
    "BF16, TPOT 30.9 ms) decides itself: each GPU reads 72.7 GB of weights a step, which at the PCIe board's 2.0 TB/s "
    "alone takes 36 ms, more than the measured step; only a 3.35 TB/s board (SXM, or NVL) fits, so SXM stays (kvcalc "
    "{e_tt}). gpustack's quantization page ('H100 80GB', 6 rows, ShareGPT, 1,000 prompts at once) does not decide it: "
    "its BF16 run serves 13.3k tokens/s, 1.29x the same page's A100 80GB on the identical workload (kvcalc {e_a100} on "
    "that A100 row), and FP8 weights gain only +24%; an SXM board has 1.64x the A100's bandwidth and 3.2x its tensor "
    "rate, a PCIe board 0.98x and 2.4x; at vLLM's 1,024-sequence default (vllm#17073; the A100 gets 256) kvcalc is "
    "{h100_sxm_as_sxm} on the BF16 row read as SXM and {h100_sxm_as_pcie} read as PCIe. The speed leans to the PCIe "
    "board but does not exclude SXM: at ~800 sequences a step (the page's own TPOT x output rate) the run is bound by "
    "neither bytes nor FLOPs (FP8's +24%), a per-sequence host cost kvcalc models only for V0 releases (the MI300X's V0 rows grew with "
    "the batch the same way). The same lab's latency page names 'H100 SXM'; with no statement of the board on this "
    "page the reading stays and the bias is reported, not fitted away. The same lab's Qwen3-14B page "
    "(docs/performance-lab/qwen3-14b/h100.md: 'A single NVIDIA H100 SXM GPU', vLLM v0.11.0, the same chat-endpoint "
    "ShareGPT run of 1,000 prompts, 217,393 input tokens as this page's) serves 6,596 tokens/s: this page's Qwen3-8B "
    "BF16 is 2.0x that with 0.55x the weights, as an SXM board would be; and the page's 'H100 80GB' excludes the NVL "
    "(94 GB). The board is read as SXM; the {sxm_burst} on these rows is kvcalc at a 1,000-prompt burst on an engine "
    "that admits 1,024 sequences (the A100's 256-sequence default on the same page is {e_a100} on BF16), not the "
    "board.\n"
    "- **gpustack's H100 SXM latency rows** (an earlier addition): gpustack's H100 SXM latency page (the board named; vLLM v0.11.0, `vllm "
    "serve Qwen/Qwen3-8B`, the chat endpoint, ShareGPT 100 prompts) prints its vLLM baseline at concurrency 1, 2 and "
    "8 besides the 4 already in the corpus: 9 rows. Held out their TPOT is {lat_tpot}, their throughput {lat_thr}, "
    "their TTFT {lat_ttft}: a lone request's first token takes 59 ms on that host where kvcalc's engine gives ~13 ms "
    "and the public hosts' front end {frontend} (the chat endpoint on that host; SGLang on the same page answers in "
    "28 ms). Those TTFTs pull the H100 SXM's mean bias down by as much as the 1,000-prompt bursts push it up: without "
    "this page's rows it is {sxm_without}, so its reading within 20% is no better model, only more rows of both "
    "signs. The one lone prompt among them (a 51 ms gap) moves the public front end, the median gap of measured over "
    "engine TTFT across the 24 lone served prompts (spread from -42 to +125 ms, half of them 2-11 ms apart: one more "
    "row above the median moves it by a neighbour), from 5.0 to 7.4 ms (the shipped public_hosts_s), and the H100 PCIe's tensor class with it (0.86 -> 1.21, shipped: prefill and front end trade on the "
    "~200-token lone prompts): that, not the GPUs, is most of the TTFT change in the before / after table (leave-one-"
    "source-out 12.5% -> {ttft_loso}). A front end per host cannot be held out (a user's host is not in the corpus); "
    "the fit's fragility is reported instead.\n"
    "- **MI300X** (this change; 'Before / after per GPU' above): one source (8x MI300X, Llama 3.1 405B FP8, "
    "benchmark_latency, 128 in / 128 out, batch 1-256, the Oracle OCI post of 2024-10-10). Its rows' latency over "
    "their 128 output tokens (prefill included) is 27.8, 40.1, 54.1, 80.8 and 138.7 ms a step at batch 1, 32, 64, "
    "128 and 256: 47-75 ms more per added sequence over the run (0.4-0.6 ms a step), linear over the whole range, where "
    "the step's bytes barely grow (1 KV head per GPU, 256 x 256 tokens of context) and the GPU's GEMMs stay "
    "bandwidth-bound to batch ~32: a per-sequence cost, not a kernel's roofline. The post names no release; its "
    "date is before vLLM v0.6.3 (2024-10-14), so the engine is V0 (V1 is the default from 0.8.0; the rows now "
    "carry vllm_version 0.6.2 and say why, `vllm_version_basis`). V0 runs the scheduler, the next step's input "
    "preparation, the sampler's bookkeeping and the output processing per sequence between two forwards while the "
    "GPU waits; vllm#6801 (2024-08-08) puts all of it at ~20 ms a step at batch 200: 0.1 ms a sequence "
    "(throughput.yaml `v0_host_per_seq_s`, not fitted here: these are the corpus's only V0 rows and they are held "
    "out with their GPU). kvcalc now adds it to every step of a V0 release (serve_sim.EngineConfig.host_per_seq_s, "
    "workload.closed_form_bench), and it takes the release's other V0 rules (256 sequences, chunked prefill at 2,048 "
    "tokens for a 128k model). Held out the MI300X bias falls from +26% to {mi_bias} (batch 1 {e_mi1}, 32 {e_mi32}, "
    "256 {e_mi256}; the release's other rules alone: +24%), no other GPU moves (they are V1 rows), and the "
    "ROCm step class fitted in-sample on these rows drops from x1.89 to x{rocm_step} of CUDA's: the extra ROCm step "
    "overhead was this host time. What is left grows with the batch: the cited 0.1 ms is a CUDA host's of August "
    "2024 (0.6.0's async output processing, if the run had it, would hide part of it, and a slower host or TP 8's "
    "per-step broadcast to 7 workers would add); the GEMM path of ROCm vLLM in 2024 (hipBLASLt FP8 before "
    "AITER) is the other suspect for the batch-256 rows, where kvcalc prices the GEMMs at the H200-derived tensor "
    "rate. Achieved HBM3 bandwidth: the batch-1 row (27.8 ms a step, kvcalc {e_mi1}) is the bound: with RCCL's "
    "252 all-reduce latencies (52.7 us each) and the 50.6 GB of weights per GPU, the pooled 0.831 of 5.3 TB/s "
    "(4.4 TB/s) reproduces it; no stored public microbenchmark with a stated MI300X figure was found to cite beyond "
    "it (the profile's 0.8 stays an assumption). A check outside the corpus, on a V1 stack: AMD's performance-results "
    "page (https://www.amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html, the stored version "
    "for rocm/vllm rocm6.4.1_vllm_0.9.1_20250715) prints benchmark_latency of Llama 3.1 70B FP8 at TP 8, 128 in / "
    "2,048 out: 17.236 s at batch 1, 18.057 s at batch 2 (8.4 ms a step). kvcalc gives -29% / -25% there (-34% / -31% "
    "with the old x1.89 ROCm step): its RCCL ring latency over xGMI (52.7 us a call, 160 calls a step) is 8.4 ms "
    "alone, the whole measured step, so the 2025 stack's all-reduce is not RCCL's ring (vLLM's own all-reduce on ROCm "
    "is the suspect); the Oracle rows' batch-1 match rests on that latency. Not added to the corpus (the stored "
    "excerpt stops after these two rows, and the figure is an end-to-end latency, a metric the corpus has not "
    "modelled); not fitted.\n"
    "- **A100 80GB** (gpustack, 1,000 prompts at once; SXM or PCIe is not stated and moves kvcalc by 1%: 2.04 vs 1.94 "
    "TB/s): BF16 is {e_a100}, the quantized rows {e_awq} (AWQ) .. {e_int8} (GPTQ-Marlin int8) and bitsandbytes "
    "{e_bnb}: at a "
    "compute-bound batch the measured W4A16/W8A16 kernels run at 0.69-0.93x cuBLAS BF16 where kvcalc prices their "
    "GEMMs at the BF16 tensor rate plus a dequantization per 64 rows. A kernel-efficiency class per quantized path "
    "would be fitted on this one page; it is left as the measured bias.\n"
    "- **H100 PCIe** (io.net, vLLM 0.8.5): its +33% mean bias was its loaded runs at 16 requests/s (TTFTs of "
    "+1,074 .. +1,225% on the two Qwen2.5-32B runs and +1,111% on Llama-3-70B, throughput +29 .. +91%): the "
    "mean-length runs ended too early and queued too long. With ShareGPT's answers spread (above): TTFT median "
    "{pcie_ttft_median}, mean {pcie_ttft_mean}; TPOT mean {pcie_tpot_mean}.\n"
    "- **Known misses kept out of the fit** (outlier in the corpus): RTX 4090 TP 2-8 TTFTs of 0.4-8 s at 1-16 "
    "requests/s (a front-end or NCCL stall, not a prefill), the B200 report whose author calls it anomalous "
    "(vllm#20710), and the H100 NVL run of vllm#17788, a performance report whose BF16 and FP8 runs came out 'almost "
    "the same' (so not bound by the GPU's bytes or FLOPs; kvcalc is +99% on it).\n"
    "- **Corpus metadata fixed from the sources' own numbers**: mushfiqrahman.dev's RTX 4090 table (256 in -> 128 out "
    "stated) prints Output Tok/s over Req/s of 100.0-100.5 tokens per request at every concurrency: output_len 100.\n"
    "- **Not in the corpus**: no public vLLM result with stated conditions was found for L40S, MI325X, the 96 GB H20 "
    "(the 141 GB H20's are the vllm-recipes DeepSeek-V3.2 rows), L20, "
    "RTX 6000 Ada and RTX PRO 6000, nor for B200 beyond the anomalous report; A10G and RTX A6000 runs were found without "
    "their prompts' token counts (docs/validation/data/speed-corpus/README.md): those profiles say 'extrapolated from "
    "datasheet'. DGX Spark, RTX 5090 and a public H200 host are in since issue 18 item 1's rows ('GPU types added').\n"
    "- **FP8 KV** (issue 24): the emulated-FP8 constant (75 operations per element, set on one T4 point) applies only "
    "below sm_80, where vLLM has no fused FP8 attention kernel; sm_80-sm_89 kernels upcast in registers (bounded by an "
    "A100 report, vllm#42058). The seed's story still falls out: at 32k, Llama-3.2-3B with FP8 KV decodes slower than "
    "BF16 on a T4 (label: assumption) and faster on an L4 (tests/test_speed_gpus.py).\n"
    "- **FP8 weights on Ampere** (throughput.fp8_weight_path): an FP8 checkpoint on sm_80/86 (and sm_75 since "
    "vllm#29901) runs weight-only through Marlin (vLLM marlin_utils_fp8.py apply_fp8_marlin_linear; fused_marlin_moe for MoE): 1 byte a weight, "
    "dequantized in registers by a mask/shift/or per pair (csrc/quantization/gptq_marlin/dequant.h), the GEMM on the "
    "BF16 tensor cores. It used to take the T4's software-upcast count (75 + 19.65 operations a weight per 64 rows), "
    "which put batch-1 FP8 decode on an A100 at 0.31x BF16 and the loaded gpustack FP8 rows 3-4x too slow; it now "
    "takes Marlin's 4-bit count (1.61x BF16 at batch 1). Those rows were right for that wrong reason (the 1,000-prompt "
    "runs' TTFT is queueing behind slow decode steps): they are now {e_fp8_32b} (Qwen3-32B FP8 output throughput) and "
    "{e_fp8_235b} (Qwen3-235B FP8, TP 4), next to the same page's AWQ row {e_awq_32b} through the same kernel: "
    "measured FP8 / AWQ 0.88, kvcalc 0.34 before (the shipped classes) and {fp8_awq} now (held out). What is left on them is the quantized-kernel bias of the "
    "A100 bullet above.\n"
    "- **T4 GEMM rate**: the T4 computes in FP16 (no BF16 tensor cores), so the public torch.mm benchmark's FP16 "
    "column (42.3 of 65 TFLOPS, Colab and Kaggle) is its measured GEMM rate (profile measured_fp16_matmul_flops, "
    "throughput.gemm_ratio x0.815). The T4's held-out output throughput stays {t4_thr} (mean): its one source (Kaggle, vLLM "
    "0.31.0) decodes Qwen2.5-3B at ~124 GB/s in FP16 and ~134 GB/s with AWQ (0.39-0.42 of 320 GB/s through two "
    "different kernels) and prefills at ~15 TFLOPS (a third of its own torch.mm rate), both what a card running at "
    "about 40% of its clocks does (the page flags clock throttling in one cell); one source cannot tell that host's "
    "state from the T4's, so no constant is fitted on it.\n"
    "- **Prefix-cached TTFTs** (known misses): Tenstorrent's sweeps run fixed-seed random prompts of growing length one "
    "after another with the prefix cache on, and three of their TTFTs imply more than the GPU's dense BF16 peak (A100 "
    "Qwen3-30B-A3B 4,096 and 8,192 tokens: 1.45x and 1.15x; 2x H100 Qwen2.5-72B 2,048 tokens: 1.03x): no cold "
    "prefill can be that fast, so they are known misses. The A100 sweep's other TTFTs stay near one 1,024-token "
    "prefill (70, 81, 90 ms from 1,024 to 3,072 tokens) and are likely cached too; they are kept (nothing bounds "
    "them), and they are what pulls the Ampere-module tensor class to the grid's ceiling in the refits.\n"
    "- **bitsandbytes NF4**: one input row runs the gemv kernel (ALU-bound on an H200: 0.83x BF16), more rows "
    "dequantize the weight (0.41x at batch 16 on the H200); on bandwidth-poor cards the gemv is a 2-3x speed-up.\n"
    "- **transformers** (item 4): the host's launches (per step, per layer counting the architecture's RMSNorms: "
    "Gemma 3 has 6 per layer, Llama 2, each 8 kernels, not fitted; gemma-3-1b and gemma-3-270m held out at -3%) "
    "overlapped with the GPU's work, fitted on the v5 interleaved runs with a host probe (docs/validation/README.md). "
    "The default cache at batch > 1 is a known miss on the v1 runs only (75 ms per step for the 3B and the 8B at "
    "batch 8; the v2, v4 and v5 leases measured batch 8 at 0.97-1.4x batch 1). The v4 runs are below.")

HF_NOTES = (
    "The step is the host's kernel launches, not the GPU: the profiler counts 45-48 kernels per decoder layer with the "
    "default cache and 61-64 with a quantized cache (HQQ and quanto alike: +16 for dequantizing the window and the "
    "cats), and the GPU is busy 2-20 ms of a 19-85 ms step. These cases ran in sessions of fresh H200 VMs whose hosts "
    "differ (the same 8B default-cache decode took 48.3 ms a step at 2026-12-01 20:40 and 22.7-23.1 ms on 2026-12-02 "
    "18-19h), so kvcalc's transformers constants are no longer fitted here: they come from the v5 interleaved runs, "
    "each row with its own host probe (docs/validation/README.md, 'transformers decode (issue 18 item 4)', where "
    "these rows are the cross-session check). The 'kvcalc' column is kvcalc as shipped (its reference host, the "
    "median of eight leases): the **target (within 15% at batch 1 and 8) is met by {within} of {n}** held-out rows "
    "here.\n\n"
    "**The host, measured per session** (the 'host scale' columns): each session's host CPU against kvcalc's reference "
    "host, from that session's OTHER default-cache decodes (the launch part scaled; leave-one-out, so no row is in "
    "its own scale; the two 2026-12-02 evening sessions have one default row each and test nothing): {sr_tested} rows "
    "testable, median |error| {sr_before} -> {sr_after} ({sr_w0} -> {sr_w1} within 15%); the quantized caches alone "
    "{sq_before} -> {sq_after} ({sq_w0} -> {sq_w1}). A row's own two timings differ by {rep_med} (median) and up to "
    "{rep_max}, and the host moved 1.6x within one lease (the 2026-12-03 repeat): on these data the 15% target is "
    "within the measurement's own scatter. The interleaved, probe-bracketed v5 rounds "
    "(scripts/gpu_v5/hf_decode_interleaved.py) are the measurement the constants rest on.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the full report (every row's prediction) here")
    p.add_argument("--markdown", help="write the tables here")
    p.add_argument("--write-classes", action="store_true", help="write the in-sample fit into kvcalc/data/speed.yaml")
    p.add_argument("--write-intervals", action="store_true",
                   help="write only the ranges (speed.yaml `intervals`, per class and per GPU), keeping `classes`")
    p.add_argument("--quick", action="store_true", help="in-sample only (no held-out refits)")
    p.add_argument("--no-simulation", action="store_true", help="skip the in-sample run through the serve simulation")
    p.add_argument("--from-json", help="recompute the ranges and the page from a saved --json report (no refits)")
    p.add_argument("--recompute", action="store_true", help="with --from-json: recompute the ranges even if present")
    p.add_argument("--hf-section", action="store_true", help="rewrite only the page's transformers section (no refits)")
    args = p.parse_args(argv)
    if args.hf_section:
        page = ROOT / "docs" / "validation" / "speed-gpus.md"
        text = page.read_text()
        page.write_text(text.split("\n" + HF_HEADING, 1)[0] + "\n".join(hf_section()) + "\n")
        return 0
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())
        if "gpu_coverage" in report and not args.recompute:
            return _finish(report, args)  # ranges already computed by this version: re-render only
        rows = load_rows()
        logo, loso = report["predictions_logo"], report["predictions_loso"]
        baseline = report.get("predictions_baseline") or evaluate(rows, BASELINE, simulate=True)
        report["predictions_baseline"] = baseline
        set_ranges(report, rows, logo, loso, baseline)
        return _finish(report, args)
    t0 = time.time()
    rows = load_rows()
    skipped = {r["id"]: why_not(r) for r in rows if why_not(r)}
    baseline = evaluate(rows, BASELINE, simulate=True)  # the H200-derived defaults and the H200 host's front end
    classes = fit_classes(rows)
    report = {"rows": len(rows), "predictable": len(rows) - len(skipped), "skipped": skipped, "classes": classes,
              "baseline": summarize(baseline), "in_sample": summarize(evaluate(rows, classes, simulate=True))}
    if not args.no_simulation:  # the fit's surrogate, for comparison
        report["in_sample_closed_form"] = summarize(evaluate(rows, classes, simulate=False))
    if not args.quick:
        logo, loso = held_out(rows, "gpu"), held_out(rows, "source")
        report["logo"], report["loso"] = summarize(logo), summarize(loso)
        set_ranges(report, rows, logo, loso, baseline)
        report["predictions_logo"] = logo
        report["predictions_loso"] = loso
        report["predictions_baseline"] = baseline
    report["piecewise"] = fit_piecewise_layer_cpu()
    report["seconds"] = round(time.time() - t0, 1)
    return _finish(report, args)


def set_ranges(report: dict, rows: list[dict], logo: list[dict], loso: list[dict], baseline: list[dict]) -> None:
    """The ranges kvcalc/trust.py ships (speed.yaml `intervals`) and their coverage: per evidence class, and per GPU
    from its own leave-one-GPU-out results (gpu_bands, gpu_coverage)."""
    held = interval_table(logo + loso)
    stats = gpu_stats(logo, rows)
    for g, bands in gpu_bands(logo, held).items():
        if g in stats:
            stats[g]["bands"] = bands
    report["intervals"] = {"held_out": held, "datasheet": interval_table(baseline), "measured": measured_bands(),
                           "capacity": capacity_bands(), "by_gpu": stats}
    report["interval_coverage"] = {"logo": coverage(logo, held), "loso": coverage(loso, held)}
    report["gpu_coverage"] = gpu_coverage(logo, held)
    for g, cov in report["gpu_coverage"].items():
        if g in stats:  # what `kvcalc gpus` says of the GPU's range (kvcalc/trust.py speed_range_summary)
            stats[g]["coverage"] = {k: cov[k] for k in ("n", "class", "loo_row", "loo_source")}


def _finish(report: dict, args) -> int:
    print(json.dumps({k: v for k, v in report.items()
                      if k not in ("predictions_logo", "predictions_loso", "predictions_baseline", "skipped")},
                     indent=1, default=float))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=float) + "\n")
    if args.markdown and not args.quick:
        Path(args.markdown).write_text(markdown(report) + "\n")
    if args.write_classes:
        from kvcalc import throughput

        classes = {k: v for k, v in report["classes"].items() if k != "frontend"}
        throughput.write_classes(classes, report.get("intervals"), report.get("logo"))
        public = (report["classes"].get("frontend") or {}).get("public")
        if public is not None:
            write_public_frontend(public)
    elif args.write_intervals and report.get("intervals"):
        # the ranges only (per class and per GPU), the shipped class constants and their source line kept
        from kvcalc import throughput
        from kvcalc.constants import load

        shipped = dict(load("speed").get("classes") or {})
        source = shipped.pop("source", None)
        throughput.write_classes(shipped, report["intervals"], report.get("logo"), classes_source=source)
    return 0


SERVE_YAML = ROOT / "kvcalc" / "data" / "serve.yaml"


def write_public_frontend(seconds: float) -> None:
    """kvcalc/data/serve.yaml `frontend.public_hosts_s` (and its source line), the rest of the file kept."""
    lines = [ln for ln in SERVE_YAML.read_text().splitlines()
             if not ln.startswith(("  public_hosts_s:", "  public_hosts_source:"))]
    # the frontend block ends where the next top-level key starts
    start = lines.index("frontend:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "#"))),
               len(lines))
    lines[end:end] = [f"  public_hosts_s: {seconds:g}",
              "  public_hosts_source: \"fitted by scripts/speed_corpus_report.py --write-classes: the median of measured "
              "minus engine TTFT over the speed corpus's lone served prompts (concurrency 1 or at most 1 request/s) "
              "on GPUs other than the project's host; held out per GPU and per source in "
              "docs/validation/speed-gpus.md\""]
    SERVE_YAML.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
