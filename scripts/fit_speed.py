"""Fit the speed model v2's H200 constants (kvcalc/data/speed.yaml) on the committed H200 runs, and publish the
errors of every case, held out or not (docs/validation/README.md, between the speed-table markers, and
docs/validation/speed-errors.json).

    python3 scripts/fit_speed.py                 # fit and print; nothing written
    python3 scripts/fit_speed.py --write         # also write speed.yaml and the tables
    python3 scripts/fit_speed.py --report        # tables from the committed constants (no fit; what the test runs)
    python3 scripts/fit_speed.py --data DIR      # the v2 runs from another folder (default docs/validation/data/v2)

What is fitted: only constants with no closed form (achievable bandwidth of decode kernels, the step overhead, the
achieved shares of the tensor rate for GEMMs, attention and the MoE grouped GEMM, the MoE routing cost per layer,
how far a kernel's memory, tensor and ALU times overlap, the conversion operations per element of FP8 and 4-bit
formats, the eager launch time per layer). Everything else is datasheet or config arithmetic.

Which points are held out (never seen by the fit): whole cases in HOLDOUT_CASES (the FP8-KV 8B grid, Mixtral,
every 2026-11-29 run), every TTFT but the bf16 3B/8B ones, and within the fitted grids every point whose index in
the (batch, context) order is 1 mod 3 (a third of them).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcalc.catalog import load_model  # noqa: E402
from kvcalc.constants import load  # noqa: E402
from kvcalc.formats import kv_format, weight_format  # noqa: E402
from kvcalc.hardware import get_gpu  # noqa: E402
from kvcalc.model import ModelSpec, spec_from_config  # noqa: E402
from kvcalc.throughput import decode_speed, prefill_s  # noqa: E402
from kvcalc.validate.results import iter_jsonl  # noqa: E402
from kvcalc.workload import Workload, hf_bench  # noqa: E402

V2 = ROOT / "docs" / "validation" / "data" / "v2"
V1 = ROOT / "docs" / "validation" / "data"
README = ROOT / "docs" / "validation" / "README.md"
ERRORS = ROOT / "docs" / "validation" / "speed-errors.json"
SPEED_YAML = ROOT / "kvcalc" / "data" / "speed.yaml"
THROUGHPUT_YAML = ROOT / "kvcalc" / "data" / "throughput.yaml"
START, END = "<!-- speed-table:start (scripts/fit_speed.py --write) -->", "<!-- speed-table:end -->"

HOLDOUT_CASES = {"s-8b-fp8": "FP8 KV fitted on the 3B only", "s-mixtral-8x7b": "MoE fitted on Qwen3-30B-A3B only"}
TTFT_FIT_CASES = {"s-3b-auto", "s-8b-auto", "s-qwen3-30b-a3b"}
# (name, where it lives in speed.yaml, start value, lower, upper)
PARAMS = [
    ("step_overhead_s", "measured", 1.16e-3, 1e-4, 5e-3),
    ("tensor_fraction", "measured", 0.7, 0.2, 0.9),
    ("attention_tensor_fraction", "measured", 0.6, 0.1, 0.75),  # FA3 reaches ~75% of H100 peak (Shah et al.)
    ("gemm_half_rows", "measured", 64.0, 1.0, 4096.0),
    ("moe_layer_overhead_s", "measured", 2.5e-5, 0.0, 2e-4),
    ("overlap", "measured", 2.0, 1.0, 16.0),
    ("fp8_kv", "ops", 22.0, 0.0, 80.0),
    ("fp8_weights", "ops", 20.0, 0.0, 80.0),
    ("int4_weights", "ops", 26.0, 0.0, 80.0),
    ("eager_per_layer_s", "eager", 3.5e-4, 1e-5, 2e-3),
]


@dataclass
class Point:
    case: str
    kind: str  # decode | ttft
    spec: ModelSpec
    weights: str
    kv: str
    eager: bool
    batch: int
    context: float  # decode: mean context over the window; ttft: prompt tokens
    chunk: int
    tp: int
    measured_s: float
    held_out: bool
    source: str

    def predict(self) -> float:
        gpu = get_gpu("h200")
        w, k = weight_format(self.weights), kv_format(self.kv)
        if self.kind.startswith("hf-"):  # transformers generate(): batch prompts of `context` tokens + `chunk` new
            b = hf_bench(self.spec, gpu, w, k, Workload(int(self.context), self.chunk, concurrency=self.batch))
            return b.ttft_s if self.kind == "hf-ttft" else b.tpot_s
        if self.kind == "ttft":
            return prefill_s(self.spec, gpu, w, k, int(self.context), self.chunk, self.tp, enforce_eager=self.eager)
        return decode_speed(self.spec, gpu, "vllm", w, k, self.batch, self.context, self.eager, self.tp).step_s


def _weights_of(llm: dict, cfg: dict) -> str:
    if llm.get("quantization") == "fp8":
        return "fp8"
    q = (cfg.get("quantization_config") or {}).get("quant_method")
    return {"awq": "awq", "gptq": "gptq", "fp8": "fp8"}.get(q, "bf16")


def v2_points(data: Path) -> list[Point]:
    out = []
    for name in ("vllm-gpu0.jsonl", "vllm-gpu1.jsonl", "vllm-c4-gpu0.jsonl", "vllm-c4-gpu1.jsonl"):
        path = data / name
        if not path.exists():
            continue
        for r in iter_jsonl(path):
            o = r.get("observed") or {}
            if "speed" not in o:
                continue
            cid, llm, cfg = r["case_id"], r["case"]["llm"], r["config_used"]
            spec = spec_from_config(cfg, r["case"]["config"].removesuffix(".json"))
            common = dict(spec=spec, weights=_weights_of(llm, cfg), kv=llm.get("kv_cache_dtype") or "auto",
                          eager=bool(llm.get("enforce_eager")), chunk=int(llm["max_num_batched_tokens"]),
                          tp=int(llm.get("tensor_parallel_size", 1)), source=f"{data.name}/{name}")
            pts = sorted((p for p in o["speed"]["points"] if p.get("tpot_ms")),
                         key=lambda p: (p["batch"], p["context"]))
            for i, p in enumerate(pts):
                held = cid in HOLDOUT_CASES or i % 3 == 1 or (common["eager"] and p["batch"] > 1)
                out.append(Point(cid, "decode", batch=p["batch"], context=p["context_mean_mid_window"],
                                 measured_s=p["tpot_ms"] / 1e3, held_out=held, **common))
            inputs = sorted(int(n) for n in o.get("ttft", {}) if n != "method")
            for i, n in enumerate(inputs):
                held = cid not in TTFT_FIT_CASES or i % 3 == 1
                out.append(Point(cid, "ttft", batch=1, context=n, measured_s=o["ttft"][str(n)]["median_s"],
                                 held_out=held, **common))
    return out


def v1_points() -> list[Point]:
    """The 2026-11-29 runs (batch 1 and 32 at prompt 512 + 256 generated): every one held out, except the 3B eager
    run, the only eager point at batch 1 besides the 8B's."""
    out = []
    for name in ("vllm-gpu0.jsonl", "vllm-gpu1.jsonl", "vllm-holdout.jsonl", "vllm-tp2.jsonl"):
        for r in iter_jsonl(V1 / name):
            sp = (r.get("observed") or {}).get("speed")
            if r.get("status") != "ok" or not sp:
                continue
            s = r["settings"]
            spec = load_model(s["model"])
            for key, p in sp.items():
                if not isinstance(p, dict) or "decode_ms_per_step" not in p:
                    continue
                out.append(Point(r["case_id"], "decode", spec, s.get("weights") or "bf16", s.get("kv") or "auto",
                                 bool(s.get("enforce_eager")), int(key[1:]), p["prompt_len"] + p["max_tokens"] / 2,
                                 2048, int(s.get("tp") or s.get("tensor_parallel_size") or 1),
                                 p["decode_ms_per_step"] / 1e3, held_out=r["case_id"] != "v-3b-auto-eager-u90",
                                 source=f"data/{name}"))
    return out


# the transformers constants (throughput.yaml `hf`) were fitted by scripts/fit_constants.py on these runs
# the transformers decode constants are fitted on the v5 interleaved runs (scripts/hf_decode_report.py --fit, issue
# 18 item 4): of the older runs only the NF4 one (nf4_per_layer_s) is in a fit; every other row is held out
HF_FITTED = {"hf-llama-3.2-3b-nf4-auto-b1"}


HF_TTFT_FITTED = {"hf-llama-3.2-3b-bf16-hqq-4-b1", "hf-llama-3.2-3b-bf16-quanto-4-b1"}


def hf_prefill_quantize_s() -> dict[str, float]:
    """Quantizing the prompt's cache at prefill, per layer: (TTFT with the quantized cache - TTFT default) / layers,
    on the 3B at batch 1 (HF_TTFT_FITTED)."""
    rows = {r["case_id"]: r for r in iter_jsonl(V1 / "hf.jsonl") if r.get("status") == "ok"}
    base = rows["hf-llama-3.2-3b-bf16-auto-b1"]["observed"]["prefill_seconds"]
    layers = load_model("llama-3.2-3b").num_layers
    return {rows[c]["settings"]["kv"].split("-")[0]: round((rows[c]["observed"]["prefill_seconds"] - base) / layers, 5)
            for c in sorted(HF_TTFT_FITTED)}


def hf_points(data: Path) -> list[Point]:
    """transformers generate() at batch 1 and 8: the decode step (TPOT) and the time to the first token (TTFT).
    Not refitted here: every point is held out except the runs the `hf` constants came from."""
    out = []
    for name in ("hf.jsonl", "hf-holdout.jsonl"):
        for r in iter_jsonl(V1 / name):
            o, s = r.get("observed") or {}, r.get("settings") or {}
            if r.get("status") != "ok" or not o.get("decode_ms_per_step"):
                continue
            common = dict(spec=load_model(s["model"]), weights=s["weights"], kv=s["kv"], eager=True,
                          batch=int(s["batch"]), context=int(s["prompt_len"]), chunk=int(s["new_tokens"]), tp=1,
                          held_out=r["case_id"] not in HF_FITTED, source=f"data/{name}")
            out.append(Point(r["case_id"], "hf-decode", measured_s=o["decode_ms_per_step"] / 1e3, **common))
            if o.get("prefill_seconds"):
                fitted = r["case_id"] in HF_TTFT_FITTED
                out.append(Point(r["case_id"], "hf-ttft", measured_s=o["prefill_seconds"], **{**common,
                                                                                            "held_out": not fitted}))
    path = data / "hf.jsonl"
    for r in iter_jsonl(path) if path.exists() else []:
        s = r.get("settings") or {}
        if r.get("status") != "ok":
            continue
        cache = s["cache"].removeprefix("quantized-")
        common = dict(spec=load_model(s["config"].removesuffix(".json")), weights="bf16",
                      kv="auto" if cache == "default" else cache, eager=True, batch=int(s["batch"]),
                      context=int(s["prompt_len"]), chunk=int(s["new_tokens"]), tp=1, held_out=True,
                      source=f"{data.name}/hf.jsonl")
        out.append(Point(r["case_id"], "hf-decode", measured_s=r["decode_ms_per_step"] / 1e3, **common))
        out.append(Point(r["case_id"], "hf-ttft", measured_s=r["t1_s"], **common))
    # v4 (2026-12-01..03, five leases: held out) and v5 (one lease, the fit: each case's median over its 5 rounds)
    for name, fitted in (("v4/hf_decode.jsonl", False), ("v4/hf_decode-repeat-2026-12-03.jsonl", False),
                         ("v5/hf_interleaved.jsonl", True)):
        by_case: dict[str, list] = {}
        for r in iter_jsonl(V1 / name):
            if r.get("status") == "ok":
                by_case.setdefault(r["case_id"] if fitted else f"{r['case_id']}@{r['time']}", []).append(r)
        for case, rs in by_case.items():
            s = rs[0]["settings"]
            common = dict(spec=load_model(s["model"]), weights=s["weights"], kv=s["kv"], eager=True,
                          batch=int(s["batch"]), context=int(s["prompt_len"]), chunk=int(s["new_tokens"]), tp=1,
                          held_out=not fitted, source=f"data/{name}")
            out.append(Point(case, "hf-decode", measured_s=statistics.median(r["decode_ms_per_step"] for r in rs) / 1e3,
                             **common))
    return out


def _set(values: dict[str, float]) -> None:
    """Put candidate constants where kvcalc reads them (the loaded YAML is cached and shared)."""
    from kvcalc import memo

    memo._TABLE.clear()  # gpu_rates and weight_split are memoized per object: candidates must not read stale rates
    speed, thr = load("speed"), load("throughput")
    for name, where, *_ in PARAMS:
        if name not in values:
            continue
        if where == "measured":
            speed["measured"]["h200"][name] = values[name]
        elif where == "ops":
            speed["conversion_ops_per_element"][name] = values[name]
        else:
            thr["engines"]["vllm"][name] = values[name]


def _current() -> dict[str, float]:
    speed, thr = load("speed"), load("throughput")
    out = {}
    for name, where, *_ in PARAMS:
        src = speed["measured"]["h200"] if where == "measured" else \
            speed["conversion_ops_per_element"] if where == "ops" else thr["engines"]["vllm"]
        out[name] = float(src[name])
    return out


def copy_bandwidth() -> float:
    """The H200's bandwidth is measured, not fitted: a large device-to-device copy (scripts/gpu_probe.py)."""
    return float(json.loads((V1 / "probe.json").read_text())["copy_bandwidth_bytes_per_s"])


def fit(points: list[Point]) -> dict[str, float]:
    from scipy.optimize import minimize

    train = [p for p in points if not p.held_out]
    lo = [math.log(b[3] if b[3] > 0 else 1e-9) for b in PARAMS]
    hi = [math.log(b[4]) for b in PARAMS]

    def unpack(x):
        return {p[0]: math.exp(min(max(v, a), b)) for p, v, a, b in zip(PARAMS, x, lo, hi)}

    def loss(x):
        _set(unpack(x))
        return statistics.fmean(math.log(p.predict() / p.measured_s) ** 2 for p in train)

    x0 = [math.log(p[2]) for p in PARAMS]
    best = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-4, "fatol": 1e-8})
    values = unpack(best.x)
    _set(values)
    return values


def errors(points: list[Point]) -> list[dict]:
    return [{"case": p.case, "kind": p.kind, "weights": p.weights, "kv": p.kv, "eager": p.eager, "tp": p.tp,
             "batch": p.batch, "context": round(p.context, 1), "measured_ms": round(p.measured_s * 1e3, 4),
             "predicted_ms": round(p.predict() * 1e3, 4), "error": round(p.predict() / p.measured_s - 1, 4),
             "held_out": p.held_out, "source": p.source} for p in points]


def _group(e: dict) -> str:
    if e["kind"].startswith("hf-"):
        return "transformers TTFT" if e["kind"] == "hf-ttft" else "transformers decode"
    if e["kind"] == "ttft":
        return "TTFT"
    if e["eager"]:
        return "decode, eager"
    return "decode, batch 1" if e["batch"] == 1 else "decode, batched"


TARGETS = {"decode, batch 1": 0.10, "decode, batched": 0.15, "TTFT": 0.20, "decode, eager": 0.15,
           "transformers decode": 0.15, "transformers TTFT": 0.20}


def tables(rows: list[dict]) -> str:
    lines = ["Speed model v2 on the H200 (vLLM 0.26.0, CUDA graphs unless eager), generated by "
             "`python3 scripts/fit_speed.py --write`; every point in docs/validation/speed-errors.json.", "",
             "| points | held out | n | mean abs error | worst | within target | target |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for group, target in TARGETS.items():
        for held in (True, False):
            sel = [abs(e["error"]) for e in rows if _group(e) == group and e["held_out"] == held]
            if not sel:
                continue
            ok = sum(x <= target for x in sel)
            lines.append(f"| {group} | {'yes' if held else 'no (fitted)'} | {len(sel)} | "
                         f"{100 * statistics.fmean(sel):.1f}% | {100 * max(sel):.1f}% | {ok}/{len(sel)} | "
                         f"{100 * target:.0f}% |")
    lines += ["", "Held-out points by case (signed error: + = kvcalc predicts slower than measured):", "",
              "| case | kind | weights | KV | n | mean abs | worst (batch, context) |", "|---|---|---|---|---:|---:|---|"]
    cases: dict[tuple, list[dict]] = {}
    for e in rows:
        if e["held_out"]:
            cases.setdefault((e["case"], e["kind"]), []).append(e)
    for (case, kind), sel in cases.items():
        worst = max(sel, key=lambda e: abs(e["error"]))
        lines.append(f"| {case} | {kind} | {sel[0]['weights']} | {sel[0]['kv']} | {len(sel)} | "
                     f"{100 * statistics.fmean(abs(e['error']) for e in sel):.1f}% | {100 * worst['error']:+.1f}% "
                     f"({worst['batch']}, {int(worst['context'])}) |")
    misses = [e for e in rows if e["held_out"] and abs(e["error"]) > TARGETS[_group(e)]]
    lines += ["", f"Held-out misses (outside the target): {len(misses)} of "
                  f"{sum(e['held_out'] for e in rows)}."]
    for e in misses:
        lines.append(f"- {e['case']} {e['kind']} batch {e['batch']} context {int(e['context'])}: "
                     f"{100 * e['error']:+.1f}% ({e['measured_ms']} ms measured)")
    return "\n".join(lines) + "\n"


EMULATED_SOURCE = (
    "fp8_kv applies to the sm_90 FP8 attention path (throughput.fp8_kv_path); fp8_kv_fused (sm_80-sm_89, upcast "
    "in registers, bounded by vllm#42058 on an A100: FP8-KV decode no slower) is kept as it is. "
    "fp8_emulated_extra (below sm_80 only): assumption (no GPU below sm_80 measured): below sm_89 there is no FP8 convert instruction "
    "(PTX ISA: cvt.*.e4m3x2 needs sm_89), so kernels upcast in software (shifts, masks, exponent re-bias, denormal "
    "select) on top of the native path; 75 operations per element is set so that a T4 (8.1 TFLOPS FP32, 256 GB/s) "
    "reproduces the ~20% FP8-KV slowdown reported for Llama-3.2-3B at 32k (issue 11), and is the same count for FP8 "
    "weights below sm_75. On sm_75-sm_86 vLLM runs FP8 weights weight-only through Marlin (marlin_utils_fp8.py "
    "apply_fp8_marlin_linear; its FP8 dequant is a few integer ops per element, csrc/quantization/gptq_marlin/"
    "dequant.h), which costs the Marlin count int4_weights, not this software upcast (throughput.fp8_weight_path; sm_75 since vllm#29901)")


def write_constants(values: dict[str, float], data: Path) -> None:
    source = (f"fitted by scripts/fit_speed.py on the H200 runs of 2026-11-30 (docs/validation/data/v2/, vLLM "
              "0.26.0, torch 2.11.0+cu130, driver 580.159.04), held-out points excluded; errors in "
              "docs/validation/README.md")
    speed = yaml.safe_load(SPEED_YAML.read_text())
    header = SPEED_YAML.read_text().split("\nmeasured:")[0] + "\n"
    h200 = speed["measured"]["h200"]
    h200["bandwidth_bytes_per_s"] = int(copy_bandwidth())
    for name, where, *_ in PARAMS:
        v = values[name]
        v = int(v) if name == "bandwidth_bytes_per_s" else float(f"{v:.4g}")
        if where == "measured":
            h200[name] = v
        elif where == "ops":
            speed["conversion_ops_per_element"][name] = v
    h200["source"] = source + "; bandwidth_bytes_per_s: measured copy bandwidth (docs/validation/data/probe.json)"
    for name in ("tensor_fraction", "attention_tensor_fraction", "gemm_half_rows", "moe_layer_overhead_s",
                 "overlap", "step_overhead_s"):
        speed["derived"][name] = h200[name]
    speed["conversion_ops_per_element"]["source"] = (
        "fp8_kv, fp8_weights, int4_weights: " + source + ". " + EMULATED_SOURCE)
    SPEED_YAML.write_text(header + yaml.safe_dump(speed, sort_keys=False))
    text = THROUGHPUT_YAML.read_text()
    old_hf = yaml.safe_load(text)["engines"]["hf"]["kv_prefill_per_layer_s"]
    for backend, value in hf_prefill_quantize_s().items():
        text = text.replace(f"      {backend}: {old_hf[backend]}\n", f"      {backend}: {value}\n", 1)
    old = yaml.safe_load(text)["engines"]["vllm"]["eager_per_layer_s"]
    new = float(f"{values['eager_per_layer_s']:.4g}")
    THROUGHPUT_YAML.write_text(text.replace(f"eager_per_layer_s: {old}", f"eager_per_layer_s: {new}"))


def write_report(rows: list[dict]) -> None:
    ERRORS.write_text(json.dumps(rows, indent=0) + "\n")
    text = README.read_text()
    block = f"{START}\n{tables(rows)}{END}"
    if START in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Speed model v2 (issue 11)\n\n" + block + "\n"
    README.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(V2))
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    data = Path(args.data).resolve()
    points = v2_points(data) + v1_points() + hf_points(data)
    if not args.report:
        load("speed")["measured"]["h200"]["bandwidth_bytes_per_s"] = copy_bandwidth()
        values = fit(points)
        print(json.dumps({k: float(f"{v:.4g}") for k, v in values.items()}, indent=1))
    rows = errors(points)
    print(tables(rows))
    if args.write:
        if not args.report:
            write_constants(_current(), data)
        write_report(rows)
        print("written")


if __name__ == "__main__":
    main()
