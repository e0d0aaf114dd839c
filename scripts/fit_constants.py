"""Fit the constants with no closed form from the committed H200 runs (docs/validation/data/), and write them to
kvcalc/data/constants.yaml and kvcalc/data/throughput.yaml with their provenance.

    python3 scripts/fit_constants.py            # prints the fit; --write updates the data files

Which cases fit which constant is listed in FIT_CASES; every other case is held out and reported by
scripts/validation_report.py.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "validation" / "data"
sys.path.insert(0, str(ROOT))

from kvcalc.catalog import load_model  # noqa: E402
from kvcalc.engines.weights import weight_bytes_read_per_token  # noqa: E402
from kvcalc.formats import weight_format  # noqa: E402
from kvcalc.validate.results import iter_jsonl  # noqa: E402

FIT_CASES = {
    "vllm_forward": ["v-3b-auto-eager-u90", "v-8b-auto-eager-u90"],  # mnbt 16384: the forward is the peak
    "vllm_sampler": ["v-3b-auto-eager-u85-mnbt4096"],  # mnbt 4096, 1024 rows: the sampler is the peak
    "vllm_non_torch": ["v-3b-auto-eager-u90", "v-8b-auto-eager-u90"],
    "vllm_decode": ["v-3b-auto-graphs-u90", "v-8b-auto-graphs-u90"],  # batch 1
    "vllm_tp_comm": ["v-8b-tp2-auto-graphs-u90"],  # batch 1
    "hf_prefill": ["hf-llama-3.2-3b-bf16-auto-b1", "hf-llama-3.1-8b-bf16-auto-b1"],
    "hf_decode": ["hf-llama-3.2-3b-bf16-auto-b1", "hf-llama-3.1-8b-bf16-auto-b1"],
    "hf_quantized_kv": ["hf-llama-3.2-3b-bf16-hqq-4-b1", "hf-llama-3.2-3b-bf16-quanto-4-b1"],
    "hf_nf4": ["hf-llama-3.2-3b-nf4-auto-b1"],
}


def rows(name: str) -> dict[str, dict]:
    return {r["case_id"]: r for r in iter_jsonl(DATA / name) if r.get("status") == "ok"}


def fit() -> dict:
    vllm = {**rows("vllm-gpu0.jsonl"), **rows("vllm-gpu1.jsonl")}
    tp2 = rows("vllm-tp2.jsonl")
    hf = rows("hf.jsonl")
    result: dict = {}

    # vLLM forward: peak = f * mnbt * 2 bytes * (2h + 3I + qkv)
    ratios = []
    for cid in FIT_CASES["vllm_forward"]:
        r = vllm[cid]
        spec = load_model(r["settings"]["model"])
        qkv = (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim
        term = r["observed"]["internals"]["max_num_batched_tokens"] * 2 * (
            2 * spec.hidden_size + 3 * spec.intermediate_size + qkv)
        ratios.append(r["observed"]["internals"]["peak_activation_memory"] / term)
    result["fwd_factor"] = round(statistics.mean(ratios), 4)

    # vLLM sampler (V2 runner): peak = g * rows * vocab
    r = vllm[FIT_CASES["vllm_sampler"][0]]
    spec = load_model(r["settings"]["model"])
    i = r["observed"]["internals"]
    rows_ = min(i["max_num_seqs"], i["max_num_batched_tokens"])
    result["sampler_bytes_per_logit"] = round(i["peak_activation_memory"] / (rows_ * spec.vocab_size), 3)

    result["non_torch_bytes"] = int(statistics.median(
        vllm[c]["observed"]["internals"]["non_torch_memory"] for c in FIT_CASES["vllm_non_torch"]))

    # vLLM decode with CUDA graphs, batch 1: step = t_fixed + bytes / bandwidth
    points = []
    for cid in FIT_CASES["vllm_decode"]:
        r = vllm[cid]
        spec = load_model(r["settings"]["model"])
        sp = r["observed"]["speed"]["b1"]
        context = sp["prompt_len"] + sp["max_tokens"] / 2
        kv = 2 * spec.num_kv_heads * spec.head_dim * 2 * spec.num_layers * context
        points.append((weight_bytes_read_per_token(spec, weight_format("bf16")) + kv, sp["decode_ms_per_step"] / 1e3))
    (b1, t1), (b2, t2) = points
    bandwidth = (b2 - b1) / (t2 - t1)
    result["vllm_bandwidth_bytes_per_s"] = int(bandwidth)
    # the line's intercept (the batch-1 step time no byte explains): only the TP fit below uses it; the vLLM step
    # overhead kvcalc applies is speed model v2's step_overhead_s (kvcalc/data/speed.yaml, scripts/fit_speed.py)
    intercept = t1 - b1 / bandwidth

    # TP: the extra per-layer time of a TP-2 step over what bytes/bandwidth and the intercept explain
    r = tp2[FIT_CASES["vllm_tp_comm"][0]]
    spec = load_model(r["settings"]["model"])
    sp = r["observed"]["speed"]["b1"]
    context = sp["prompt_len"] + sp["max_tokens"] / 2
    per_gpu = (weight_bytes_read_per_token(spec, weight_format("bf16"))
               + 2 * spec.num_kv_heads * spec.head_dim * 2 * spec.num_layers * context) / 2
    explained = intercept + per_gpu / bandwidth
    result["tp_comm_per_layer_s"] = round((sp["decode_ms_per_step"] / 1e3 - explained) / spec.num_layers, 7)

    # HF prefill activation: tokens * 2 bytes * (a*h + b*I) (+ the fp32 last-position logits), solved on two models
    eqs = []
    for cid in FIT_CASES["hf_prefill"]:
        r = hf[cid]
        spec = load_model(r["settings"]["model"])
        s = r["settings"]
        tokens = s["batch"] * s["prompt_len"]
        prompt_cache = tokens * 2 * spec.num_kv_heads * spec.head_dim * 2 * spec.num_layers
        logits = s["batch"] * spec.vocab_size * 6
        act = r["observed"]["peak_increment_bytes"] - prompt_cache - logits
        eqs.append((spec.hidden_size, spec.intermediate_size, act / (tokens * 2)))
    (h1, i1, y1), (h2, i2, y2) = eqs
    det = h1 * i2 - h2 * i1
    result["prefill_hidden_factor"] = round((y1 * i2 - y2 * i1) / det, 4)
    result["prefill_intermediate_factor"] = round((h1 * y2 - h2 * y1) / det, 4)

    # HF decode: eager PyTorch, time per layer (bytes are a small share at batch 1 on an H200)
    per_layer = []
    for cid in FIT_CASES["hf_decode"]:
        r = hf[cid]
        spec = load_model(r["settings"]["model"])
        step = r["observed"]["decode_ms_per_step"] / 1e3
        per_layer.append((step - weight_bytes_read_per_token(spec, weight_format("bf16")) / bandwidth)
                         / spec.num_layers)
    result["hf_per_layer_s"] = round(statistics.mean(per_layer), 6)
    base = hf["hf-llama-3.2-3b-bf16-auto-b1"]["observed"]["decode_ms_per_step"] / 1e3
    layers = load_model("llama-3.2-3b").num_layers
    for cid in FIT_CASES["hf_quantized_kv"]:
        backend = hf[cid]["settings"]["kv"].split("-")[0]
        result[f"hf_{backend}_kv_per_layer_s"] = round(
            (hf[cid]["observed"]["decode_ms_per_step"] / 1e3 - base) / layers, 6)
    nf4 = hf[FIT_CASES["hf_nf4"][0]]["observed"]["decode_ms_per_step"] / 1e3
    result["hf_nf4_per_layer_s"] = round((nf4 - base) / layers, 6)
    return result


def write(values: dict) -> None:
    source = ("fitted on H200 runs of 2026-11-29 (docs/validation/data/, cases in scripts/fit_constants.py "
              "FIT_CASES); vLLM 0.26.0, transformers 5.17.0, torch 2.11.0+cu130, driver 580.159.04")
    path = ROOT / "kvcalc" / "data" / "constants.yaml"
    c = yaml.safe_load(path.read_text())
    c["vllm"].update(fwd_factor=values["fwd_factor"], sampler_bytes_per_logit=values["sampler_bytes_per_logit"],
                     non_torch_bytes=values["non_torch_bytes"], source=source)
    c["hf"].update(prefill_hidden_factor=values["prefill_hidden_factor"],
                   prefill_intermediate_factor=values["prefill_intermediate_factor"], source=source)
    path.write_text(HEADER_CONSTANTS + yaml.safe_dump(c, sort_keys=False))
    path = ROOT / "kvcalc" / "data" / "throughput.yaml"
    t = yaml.safe_load(path.read_text())
    t["engines"]["vllm"].update(tp_comm_per_layer_s=values["tp_comm_per_layer_s"], source=source)
    # the hf decode constants (per_layer_s, kv_per_layer_s) are scripts/hf_decode_report.py --fit's now (issue 18
    # item 4: the v5 interleaved runs with a host probe); this v1 fit keeps only the NF4 one
    t["engines"]["hf"].update(nf4_per_layer_s=values["hf_nf4_per_layer_s"])
    t["fitted_bandwidth"] = {"h200": {"decode_bytes_per_s": values["vllm_bandwidth_bytes_per_s"], "source": source}}
    path.write_text(HEADER_THROUGHPUT + yaml.safe_dump(t, sort_keys=False))


HEADER_CONSTANTS = """\
# Constants with no closed form, each with where it came from. Fitted values are written by
# scripts/fit_constants.py from the runs under docs/validation/data/; the others say "assumption".
"""
HEADER_THROUGHPUT = """\
# Step-time constants outside speed model v2's per-GPU rates (kvcalc/data/speed.yaml): vLLM's TP all-reduce and
# eager-mode launch costs, and transformers' eager step (t_step = per-layer launch time + bytes_read / bandwidth,
# with conversion costs and a compute roof). Fitted values are written by scripts/fit_constants.py; the others are
# assumptions until measured.
# conversion_cost_per_byte: extra time per byte read, relative to a plain read, for formats a kernel converts on every
# read. Assumptions (the H200 has FP8 units; no Turing/Ampere GPU was measured): emulated_fp8 2.0 makes an FP8 KV cache
# of Llama-3.2-3B at 32k about 15% slower than fp16 on a T4 (the ~20% reported for that case), and free on an L4.
"""

if __name__ == "__main__":
    values = fit()
    print(json.dumps(values, indent=1))
    if "--write" in sys.argv:
        write(values)
        print("written")
