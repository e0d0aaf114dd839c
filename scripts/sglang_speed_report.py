"""kvcalc's SGLang speed against the public SGLang benchmark rows of the speed corpus
(docs/validation/data/speed-corpus/corpus.jsonl, rows with "engine": "sglang"), through `kvcalc plan --engine sglang`'s
own path (plan.plan: the shared speed and scheduler models with SGLang's chunked_prefill_size and
max_running_requests, vLLM's per-step overhead). Every row is held out: scripts/speed_corpus_report.py fits its class
constants on vLLM rows only and skips these, and nothing is fitted on them here. A second block scores the SGLang
0.5.14 runs on the project's H200 (docs/validation/data/v5/sglang): every row held out but the one graph_kernel_s
is fitted on (fit_graph_kernel), 16-client first-use waves and sub-floor MoE decode flagged from their own data.

    python3 scripts/sglang_speed_report.py            # the table on stdout
    python3 scripts/sglang_speed_report.py --write    # also docs/validation/sglang.md (between the AUTO markers)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doc_blocks import print_or_write  # noqa: E402 (scripts/, beside this file)

CORPUS = ROOT / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"
DOC = ROOT / "docs" / "validation" / "sglang.md"
START, END = "<!-- AUTO: scripts/sglang_speed_report.py -->", "<!-- /AUTO: scripts/sglang_speed_report.py -->"
CLASS = {"tpot_ms": "TPOT", "ttft_ms": "TTFT", "itl_ms": "ITL", "output_throughput": "throughput"}


def sglang_rows() -> list[dict]:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("engine") == "sglang"]


def predict(row: dict) -> float:
    """The row's metric as `kvcalc plan --engine sglang` with the row's workload prints it (the checkpoint's own
    weights, as the benchmark served them)."""
    from kvcalc.catalog import load_model
    from kvcalc.hardware import get_gpu
    from kvcalc.plan import PlanRequest, plan
    from kvcalc.workload import Workload

    n = row.get("num_prompts")
    burst = bool(n) and n <= row["concurrency"]
    wl = Workload(int(row["input_len"]), int(row["output_len"]), concurrency=int(row["concurrency"]), burst=burst,
                  num_prompts=None if burst else n)
    args = row.get("sglang_args") or {}  # the server flags the benchmark launched SGLang with (settings_source)
    req = PlanRequest(spec=load_model(row["kvcalc_model"]), gpu=get_gpu(row["gpu"]), engines=("sglang",),
                      context=wl.input_len + wl.output_len, tp=int(row.get("tp") or 1), workload=wl,
                      sglang_version=row.get("sglang_version"), mem_fraction_static=args.get("mem_fraction_static"),
                      max_num_seqs=args.get("max_running_requests"),
                      max_num_batched_tokens=args.get("chunked_prefill_size"),
                      max_prefill_tokens=args.get("max_prefill_tokens"), cuda_graph_max_bs=args.get("cuda_graph_max_bs"),
                      stream_interval=int(args.get("stream_interval") or 1),
                      disable_radix_cache=bool(args.get("disable_radix_cache")),
                      disable_overlap_schedule=bool(args.get("disable_overlap_schedule")))
    bench = plan(req)[0].bench
    metric = row["metric"]
    if metric == "tpot_ms":
        return bench.tpot_s * 1000
    if metric == "ttft_ms":
        return bench.ttft_s * 1000
    if metric == "itl_ms":  # the gap between streamed chunks (--stream-interval tokens each)
        return bench.itl_s * 1000
    if metric == "output_throughput":  # per_gpu: the source divides by the deployment's GPUs
        return bench.output_tokens_per_s / (int(row.get("tp") or 1) if row.get("per_gpu") else 1)
    raise ValueError(metric)


def results() -> list[dict]:
    out = []
    for r in sglang_rows():
        p = predict(r)
        out.append({"id": r["id"], "source": r["source_url"], "gpu": f"{r['tp']}x {r['gpu']}",
                    "model": r["kvcalc_model"],
                    "workload": f"{r['input_len']}/{r['output_len']} at {r['concurrency']}", "metric": r["metric"],
                    "class": CLASS[r["metric"]], "measured": r["value"], "predicted": p, "error": p / r["value"] - 1})
    return out


def table(rs: list[dict]) -> str:
    lines = ["| row | GPU | model | in/out at concurrency | metric | measured | kvcalc | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        lines.append(f"| [{r['id']}]({r['source']}) | {r['gpu']} | {r['model']} | {r['workload']} | {r['metric']} | "
                     f"{r['measured']:,.1f} | {r['predicted']:,.1f} | {r['error'] * 100:+.1f}% |")
    lines.append("")
    for cls in ("TPOT", "TTFT", "ITL", "throughput"):
        errs = [r["error"] for r in rs if r["class"] == cls]
        if errs:
            lines.append(f"- {cls}: {len(errs)} rows, median error {statistics.median(errs) * 100:+.1f}%, median "
                         f"|error| {statistics.median(abs(e) for e in errs) * 100:.1f}% (all held out)")
    return "\n".join(lines)


# ---- SGLang 0.5.14 on the project's H200 (docs/validation/data/v5/sglang) -------------------------------------------
V5 = ROOT / "docs" / "validation" / "data" / "v5" / "sglang"
CASE_FILES = [ROOT / "scripts" / "gpu_v5" / f"sglang_cases_{x}.json" for x in ("a", "b", "warm", "probe")]
# the warm rerun's first pass (sglang_cases_warm.json): it takes the server's first-use work, so it is reported, not
# scored; the scored pass follows it on the same server
WARMUP_PASS = "c16_warm"
RUN_LABEL = {"sglang-v5-warm": " (warm rerun)", "sglang-v5-probe": ""}
H200_START, H200_END = ("<!-- AUTO: scripts/sglang_speed_report.py h200 -->",
                        "<!-- /AUTO: scripts/sglang_speed_report.py h200 -->")
# the one row graph_kernel_s is fitted on (its mean TPOT: fit_graph_kernel); every other H200 row is held out
GRAPH_KERNEL_FIT = ("sglang-v5-a", "gemma3-1b-default", "c1_1k_128")  # (run, case, workload)
# A 16-client run's first request is a 1-token prefill (the warm-up cached its prompt), as in the lone-request run of
# the same server; where it takes FIRST_USE_S longer than there, the first wave waited for first-use work (DeepSeek-V2-
# Lite 603 ms against 19 ms alone, Qwen3 172 against 24, Gemma 3 227 against 18, two of the four 8B servers ~150
# against 17: the first use of batch shapes bench_serving's one warm-up request does not cover; the vLLM MoE runs
# needed a warm-up pass for the same reason). Such a row's mean TTFT is reported, not scored; every 16-client row is
# also scored on its later waves (its requests after the first max_concurrency), where no first use is left.
FIRST_USE_S = 0.1


def h200_runs() -> list[dict]:
    return [json.loads(line) for line in (V5 / "runs.jsonl").read_text().splitlines() if line.strip()]


def _case_args() -> dict:
    out = {}
    for f in CASE_FILES:
        d = json.loads(f.read_text())
        for c in d["cases"]:
            out[(d["run"], c["name"])] = (c["catalog"], d.get("common_args", []) + c["serve_args"], d["sglang_version"])
    return out


def _flag(args: list, name: str, cast=str):
    return cast(args[args.index(name) + 1]) if name in args else None


def h200_setup(row: dict):
    """(spec, gpu, weights, kv, SglangEstimate) of a run's server, from its case's flags (the ones the cases use)."""
    from kvcalc.catalog import load_model
    from kvcalc.checkpoint import baseline_weights
    from kvcalc.engines import sglang as S
    from kvcalc.formats import kv_format, weight_format
    from kvcalc.hardware import get_gpu

    catalog, args, version = _case_args()[(row["run"], row["case"])]
    spec, gpu = load_model(catalog), get_gpu("h200")
    weights = baseline_weights(spec) or weight_format("bf16")
    kv = kv_format("fp8" if (_flag(args, "--kv-cache-dtype") or "auto").startswith("fp8") else "auto")
    est = S.estimate(spec, gpu, S.SglangSettings(
        weights=weights, kv=kv, version=version, mem_fraction_static=_flag(args, "--mem-fraction-static", float),
        context_length=_flag(args, "--context-length", int), page_size=_flag(args, "--page-size", int),
        chunked_prefill_size=_flag(args, "--chunked-prefill-size", int),
        cuda_graph_max_bs=_flag(args, "--cuda-graph-max-bs", int),
        disable_overlap_schedule="--disable-overlap-schedule" in args))  # none of the v5 runs: all overlap
    return spec, gpu, weights, kv, est


def h200_predict(row: dict, cost=None, sim_out: list | None = None):
    """kvcalc's BenchEstimate of one H200 run (the simulation `kvcalc plan --engine sglang` runs for its row)."""
    from kvcalc.workload import Workload, vllm_bench

    spec, gpu, weights, kv, est = h200_setup(row)
    wl = Workload(int(row["random_input_len"]), int(row["random_output_len"]),
                  concurrency=int(row["max_concurrency"]), num_prompts=int(row["completed"]))
    return vllm_bench(spec, gpu, weights, kv, wl, chunk_tokens=max(est.chunked_prefill_size, 1),
                      slots=est.max_running_requests, kv_bytes_per_token=est.deployment_kv_bytes_per_token,
                      sglang=est, cost=cost, sim_out=sim_out)


def fit_graph_kernel() -> float:
    """throughput.yaml engines.sglang graph_kernel_s: (measured mean TPOT - kvcalc's without the eager kernels) /
    the kernels, on GRAPH_KERNEL_FIT only (a lone request's decode: every step is one decode of batch 1)."""
    from kvcalc.engines.sglang import eager_norm_kernels
    from kvcalc.step_cost import sglang_step_extra, step_cost

    row = next(r for r in h200_runs() if (r["run"], r["case"], r["workload"]) == GRAPH_KERNEL_FIT)
    spec, gpu, weights, kv, est = h200_setup(row)
    per_token = sglang_step_extra(spec, gpu)[1]
    bare = step_cost(spec, gpu, weights, kv, 1, est.deployment_kv_bytes_per_token, extra=(0.0, per_token),
                     logits_at_samples=True, sglang_moe=True)
    tpot = h200_predict(row, cost=bare).tpot_s
    return (row["mean_tpot_ms"] / 1e3 - tpot) / eager_norm_kernels(spec)[0]


# the one row piecewise_layer_cpu_s is fitted on (the mean TTFT of its uncached requests: fit_piecewise_layer_cpu)
PIECEWISE_FIT = ("sglang-v5-probe", "probe-llama8b", "c1_16_64")


def fit_piecewise_layer_cpu() -> float:
    """throughput.yaml engines.sglang piecewise_layer_cpu_s: the per-layer CPU time of a piecewise prefill step
    (step_cost.sglang_prefill_floor_s) at which kvcalc's mean TTFT of PIECEWISE_FIT's uncached requests (all but the
    first, which the warm-up cached) equals the measured one; bisection, on that row only."""
    from kvcalc.step_cost import sglang_step_extra, step_cost

    row = next(r for r in h200_runs() if (r["run"], r["case"], r["workload"]) == PIECEWISE_FIT)
    spec, gpu, weights, kv, est = h200_setup(row)
    target = statistics.fmean(measured_ttfts(row)[1:])

    def later(per_layer: float) -> float:
        cost = step_cost(spec, gpu, weights, kv, 1, est.deployment_kv_bytes_per_token,
                         extra=sglang_step_extra(spec, gpu), logits_at_samples=True, sglang_moe=True,
                         prefill_floor_s=per_layer * spec.num_layers)
        sims: list = []
        h200_predict(row, cost=cost, sim_out=sims)
        return float(sims[0].ttft_s[1:].mean())

    lo, hi = 0.0, 2e-3
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if later(mid) < target else (lo, mid)
    return (lo + hi) / 2


_RAW: dict = {}


def weight_read_floor_s(row: dict) -> float:
    """Seconds a decode step of the run's batch must take at least: the weights it reads (dense part + the experts
    max_concurrency requests touch when each routes on its own, throughput.expected_experts) at the GPU's datasheet
    bandwidth. A measured TPOT below it means the batch did not route independently (random weights can send every
    token to the same experts), so that TPOT says nothing about served MoE decode and is not scored."""
    from kvcalc.throughput import forward_kernels

    spec, gpu, weights, kv, _ = h200_setup(row)
    n = int(row["max_concurrency"])
    read = sum(k.bytes for k in forward_kernels(spec, gpu, weights, kv, n, 0.0, 0.0) if k.name in ("linear", "experts"))
    return read / gpu.memory_bandwidth_bytes_per_s


def measured_ttfts(row: dict) -> list[float]:
    """Each request's TTFT in seconds, in request order (bench_serving's --output-details file in raw-RUN.tar.xz)."""
    import tarfile

    name = f"raw/{row['case']}.{row['workload']}.jsonl"
    if row["run"] not in _RAW:
        with tarfile.open(V5 / f"raw-{row['run']}.tar.xz") as tar:
            _RAW[row["run"]] = {m.name: tar.extractfile(m).read() for m in tar.getmembers()
                                if m.isfile() and m.name.endswith(".jsonl")}
    return json.loads(_RAW[row["run"]][name].decode().splitlines()[0])["ttfts"]


def h200_results() -> list[dict]:
    runs = h200_runs()
    lone_first = {r["case"]: measured_ttfts(r)[0] for r in runs if r["max_concurrency"] == 1}
    out = []
    for r in runs:
        sims: list = []
        b = h200_predict(r, sim_out=sims)
        sim_ttft = sims[0].ttft_s
        meas = measured_ttfts(r)
        n = int(r["max_concurrency"])
        later = slice(1, None) if n == 1 else slice(n, None)  # c1: the uncached requests; c16: the later waves
        key = (r["case"], r["workload"])
        first_use = n > 1 and meas[0] - lone_first[r["case"]] > FIRST_USE_S
        # 16 clients: the second wave's 8-request and 7-request groups reach the engine together (their predecessors
        # finish together), so the gap between their median TTFTs is one prefill batch of 7 x the prompt
        gap = None

        def tight(v) -> bool:  # each group within 5 ms: the 8 + 7 split held (ctx8k's second wave split 6 + 9)
            return max(v[17:25]) - min(v[17:25]) < 5e-3 and max(v[25:32]) - min(v[25:32]) < 5e-3

        if n == 16 and len(meas) == 32 and tight(meas) and tight(list(sim_ttft)):
            def groups(v):
                return statistics.median(v[25:32]) - statistics.median(v[17:25])
            gap = (1e3 * groups(meas), 1e3 * groups(list(sim_ttft)))
        warmup = r["workload"] == WARMUP_PASS
        out.append({"case": r["case"] + RUN_LABEL.get(r["run"], ""), "workload": r["workload"], "concurrency": n,
                    "batch7_gap": gap, "warmup_pass": warmup,
                    "split": "warm-up pass (not scored)" if warmup else
                    "first-use wave (mean TTFT not scored)" if first_use else
                    "TTFT fitted here (piecewise_layer_cpu_s)" if (r["run"], *key) == PIECEWISE_FIT else "held out",
                    "ttft": (r["mean_ttft_ms"], b.ttft_s * 1e3),
                    "ttft_later": (1e3 * statistics.fmean(meas[later]), 1e3 * float(sim_ttft[later].mean()))
                    if meas[later] else None,
                    "first_ms": (1e3 * meas[0], 1e3 * float(sim_ttft[0])),
                    "tpot": (r["mean_tpot_ms"], b.tpot_s * 1e3),
                    "tpot_split": "fit" if (r["run"], *key) == GRAPH_KERNEL_FIT else
                    "warm-up pass" if warmup else (
                        "below the weight-read floor" if r["mean_tpot_ms"] / 1e3 < weight_read_floor_s(r)
                        else "held out"),
                    "p99_ttft": (r["p99_ttft_ms"], b.percentiles["p99_ttft_ms"]),
                    "out": (r["output_throughput"], b.output_tokens_per_s)})
    return out


def _err(pair) -> float:
    return pair[1] / pair[0] - 1


def h200_table(rs: list[dict]) -> str:
    lines = ["| case | clients | mean TTFT ms (meas / kvcalc / err) | first request's TTFT ms | TTFT ms of the uncached "
             "(c1) or later-wave (c16) requests | mean TPOT ms | output tok/s | row |", "|---|---|---|---|---|---|---|---|"]

    def cell(pair, fmt):
        return f"{pair[0]:{fmt}} / {pair[1]:{fmt}} / {100 * _err(pair):+.1f}%"

    for r in rs:
        tag = r["split"] + {"fit": "; TPOT fitted here", "held out": ""}.get(
            r["tpot_split"], f"; TPOT {r['tpot_split']} (not scored)")
        lines.append(f"| {r['case']} | {r['concurrency']} | {cell(r['ttft'], '.1f')} | {r['first_ms'][0]:.1f} / "
                     f"{r['first_ms'][1]:.1f} | {cell(r['ttft_later'], '.1f') if r['ttft_later'] else '-'} | {cell(r['tpot'], '.2f')} | "
                     f"{cell(r['out'], ',.0f')} | {tag} |")
    lines.append("")

    def summary(label, errs, target):
        if errs:
            within = sum(abs(e) <= target for e in errs)
            lines.append(f"- {label}: {len(errs)} rows, {min(errs) * 100:+.1f}% .. {max(errs) * 100:+.1f}%, median "
                         f"|error| {statistics.median(abs(e) for e in errs) * 100:.1f}%, {within} of {len(errs)} within "
                         f"{target * 100:.0f}%")

    gaps = [r for r in rs if r.get("batch7_gap")]
    if gaps:
        lines.append("Prefill of a 7 x 1k batch (16 clients, second wave: the gap between the median TTFTs of its "
                     "7-request and 8-request groups), measured / kvcalc / error: " + "; ".join(
                         f"{r['case']} {r['batch7_gap'][0]:.1f} / {r['batch7_gap'][1]:.1f} ms / "
                         f"{100 * _err(r['batch7_gap']):+.0f}%" for r in gaps) + ".")
        lines.append("")
    one = [r for r in rs if r["concurrency"] == 1]
    many = [r for r in rs if r["concurrency"] > 1 and not r["warmup_pass"]]
    summary("1 client, mean TTFT (held out; the 8B's 16-token row is the piecewise fit)",
            [_err(r["ttft"]) for r in one if r["split"] == "held out"], 0.20)
    summary("1 client, mean TPOT (held out; Gemma's row is the fit)",
            [_err(r["tpot"]) for r in one if r["tpot_split"] == "held out"], 0.10)
    summary("16 clients, mean TTFT (held out, rows without a first-use wave)",
            [_err(r["ttft"]) for r in many if r["split"] == "held out"], 0.20)
    summary("16 clients, mean TTFT of the later waves (held out, every row)", [_err(r["ttft_later"]) for r in many], 0.20)
    summary("16 clients, mean TPOT (held out, rows above the weight-read floor)",
            [_err(r["tpot"]) for r in many if r["tpot_split"] == "held out"], 0.10)
    warm = [r for r in many if r["case"].endswith(RUN_LABEL["sglang-v5-warm"])]
    summary("16 clients after a warm-up pass (the warm rerun, predictions-warm.json written before it), mean TTFT",
            [_err(r["ttft"]) for r in warm], 0.20)
    summary("16 clients after a warm-up pass, p99 TTFT", [_err(r["p99_ttft"]) for r in warm], 0.30)
    summary("16 clients after a warm-up pass, mean TPOT (rows above the weight-read floor)",
            [_err(r["tpot"]) for r in warm if r["tpot_split"] == "held out"], 0.10)
    summary("16 clients after a warm-up pass, output tokens/s (rows above the weight-read floor)",
            [_err(r["out"]) for r in warm if r["tpot_split"] == "held out"], 0.10)
    return "\n".join(lines)


# ---- SGLang's ranges (issue 18 item 3): kvcalc/trust.py sglang_speed_trust reads speed.yaml `sglang_intervals` -----
SPEED_YAML = ROOT / "kvcalc" / "data" / "speed.yaml"
BANDS_START = "# <!-- AUTO: scripts/sglang_speed_report.py bands (do not edit by hand) -->"
BANDS_END = "# <!-- /AUTO: scripts/sglang_speed_report.py bands -->"
MEASURED_GPU, MEASURED_VERSION = "h200", "0.5.14"  # the release docs/validation/data/v5/sglang ran
MIN_ROWS = 10  # kvcalc/trust.py MIN_SGLANG_ROWS: fewer held-out results of a metric make no range


def band(errors: list[float]) -> dict | None:
    """low/high of measured / kvcalc - 1 at the 10th and 90th percentile of log(measured / kvcalc), from errors
    kvcalc / measured - 1; the range always holds the figure itself (as speed_corpus_report.interval_table)."""
    logs = sorted(-math.log(1 + e) for e in errors if e > -1)
    if len(logs) < MIN_ROWS:
        return None
    q = statistics.quantiles(logs, n=10)
    return {"low": round(min(0.0, math.exp(q[0]) - 1), 3), "high": round(max(0.0, math.exp(q[-1]) - 1), 3),
            "n": len(logs)}


def sglang_bands(public: list[dict], h200: list[dict]) -> dict:
    """speed.yaml `sglang_intervals`: `measured`, the ranges of SGLang's figures on the project's H200 from its held-out
    runs (TPOT: the 1- and 16-client mean TPOTs held out, rows above the weight-read floor; TTFT: the lone requests'
    mean TTFT held out; TTFT-load: the 16-client later waves' mean TTFT, every row; throughput: the TPOT range
    inverted, a decode step over the output); `public`, the public SGLang results of the corpus counted per GPU and per
    metric, with a range per metric class where at least MIN_ROWS exist (none yet)."""
    one = [r for r in h200 if r["concurrency"] == 1]
    many = [r for r in h200 if r["concurrency"] > 1 and not r["warmup_pass"]]
    tpot = [_err(r["tpot"]) for r in one + many if r["tpot_split"] == "held out"]
    ttft = [_err(r["ttft"]) for r in one if r["split"] == "held out"]
    ttft_load = [_err(r["ttft_later"]) for r in many if r["ttft_later"]]
    measured: dict = {"gpu": MEASURED_GPU, "version": MEASURED_VERSION}
    for name, errs, what, rows in (
            ("TPOT", tpot, "TPOT", "1 and 16 clients, rows above the weight-read floor"),
            ("TTFT", ttft, "TTFT", "lone requests"),
            ("TTFT-load", ttft_load, "TTFT", "16 clients, the later waves' mean")):
        b = band(errs)
        if b:
            measured[name] = {**b, "metric": what, "rows": rows}
    if "TPOT" in measured:
        t = measured["TPOT"]
        measured["throughput"] = {"low": round(1 / (1 + t["high"]) - 1, 3), "high": round(1 / (1 + t["low"]) - 1, 3),
                                  "n": t["n"], "metric": "TPOT", "rows": "the TPOT rows, inverted (a decode step over "
                                  "the output)"}
    raw = {r["id"]: r for r in sglang_rows()}
    by_gpu: dict = {}
    by_metric: dict = {}
    for r in public:
        g = raw[r["id"]]["gpu"]
        by_gpu[g] = by_gpu.get(g, 0) + 1
        c = "TPOT" if r["class"] == "ITL" else r["class"]  # an ITL is a decode step, as the vLLM corpus counts it
        by_metric[c] = by_metric.get(c, 0) + 1
    bands = {}
    for c in sorted(by_metric):
        for tp_class in (False, True):
            errs = [r["error"] for r in public if ("TPOT" if r["class"] == "ITL" else r["class"]) == c
                    and (int(raw[r["id"]].get("tp") or 1) > 1) == tp_class]
            b = band(errs)
            if b:
                bands[f"{c}-tp" if tp_class else c] = b
    out = {"measured": measured, "public": {"n": len(public), "by_gpu": dict(sorted(by_gpu.items())),
                                            "by_metric": dict(sorted(by_metric.items())), "bands": bands}}
    # the KV pool (max_total_num_tokens) against the public start-up logs (scripts/sglang_logs_report.py)
    sys.path.insert(0, str(ROOT / "scripts"))
    import sglang_logs_report

    cap = band([r["error"] for r in sglang_logs_report.rows() if r["quantity"] == "logged KV cache tokens"])
    if cap:
        out["capacity"] = cap
    return out


def bands_block(public: list[dict], h200: list[dict]) -> str:
    import yaml

    return yaml.safe_dump({"sglang_intervals": sglang_bands(public, h200)}, sort_keys=False, width=120,
                          default_flow_style=None)


def generated_blocks() -> list[tuple]:
    """(doc, start, end, text) of the blocks this script writes (tests/test_doc_blocks_current.py holds them): the two
    tables of docs/validation/sglang.md and SGLang's ranges in kvcalc/data/speed.yaml (before its public-corpus block,
    which speed_corpus_report.py --write-classes rewrites)."""
    public, h200 = results(), h200_results()
    return [(DOC, START, END, table(public) + "\n"), (DOC, H200_START, H200_END, h200_table(h200) + "\n"),
            (SPEED_YAML, BANDS_START, BANDS_END, bands_block(public, h200))]


def main(argv: list[str]) -> None:
    print_or_write(generated_blocks(), argv)


if __name__ == "__main__":
    main(sys.argv[1:])
