#!/usr/bin/env python3
"""transformers decode on the H200 (issue 18 item 4): tokens/s at batch 1 and 8 with the default cache and the
quantized caches, for three model shapes, plus what a step is made of (kernels launched, GPU busy time), so the
step model can be built from mechanisms (eager launches per layer, cache quantize/dequantize work) instead of fitted
per case.

Observations only: one JSONL row per (model, weights, kv, batch). Random weights with the catalog's real shapes
(kvcalc.validate.hf_runner.load_case_model); optimum-quanto runs its pure-torch unpack (no nvcc on the host).

Per case, after one full-size warm-up generate:
  t1 = generate(max_new_tokens=1), tN = generate(max_new_tokens=N, min_new_tokens=N), each cuda-synchronized,
  twice each, medians; decode step = (tN - t1) / (N - 1).
  Then under torch.profiler: generate(P) and generate(1); the difference / (P - 1) gives per decode step the CUDA
  kernels launched, their summed device time (GPU busy), the CPU-side wall per step under the profiler, and the
  ten kernels with the most device time.

    python3 scripts/gpu_v4/hf_decode.py --out $OUT/hf_decode.jsonl --deadline EPOCH
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MODELS = ("llama-3.2-1b", "llama-3.1-8b", "qwen2.5-14b")
KVS = ("auto", "hqq-4", "quanto-4")
EXTRA_KVS = ("hqq-2",)  # run last, on every shape, if time is left
BATCHES = (1, 8)


def cases(models, kvs, batches, prompt_len, new_tokens, extra_kvs=EXTRA_KVS):
    out = []
    for m in models:
        for kv in kvs:
            for b in batches:
                out.append({"id": f"v4hf-{m}-bf16-{kv}-b{b}", "model": m, "weights": "bf16", "kv": kv, "batch": b,
                            "prompt_len": prompt_len, "new_tokens": new_tokens, "device": "cuda"})
    # bitsandbytes NF4 weights with the default cache on the middle shape (the dequantize-per-Linear path)
    for b in batches if extra_kvs else ():
        out.append({"id": f"v4hf-llama-3.1-8b-nf4-auto-b{b}", "model": "llama-3.1-8b", "weights": "nf4", "kv": "auto",
                    "batch": b, "prompt_len": prompt_len, "new_tokens": new_tokens, "device": "cuda"})
    for m in models:
        for kv in extra_kvs:
            for b in batches:
                out.append({"id": f"v4hf-{m}-bf16-{kv}-b{b}", "model": m, "weights": "bf16", "kv": kv, "batch": b,
                            "prompt_len": prompt_len, "new_tokens": new_tokens, "device": "cuda"})
    return out


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn):
    _sync()
    t0 = time.perf_counter()
    out = fn()
    _sync()
    return time.perf_counter() - t0, out


def profile_steps(gen, steps: int) -> dict:
    """Kernels per decode step from two profiled generates (steps+1 tokens and 1 token)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def one(n):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            wall, _ = _timed(lambda: gen(n))
        kernels, busy_us, launches, per_name, aten = 0, 0.0, 0, {}, 0
        for ev in prof.key_averages():
            dev = str(getattr(ev, "device_type", ""))
            self_dev = float(getattr(ev, "self_device_time_total", getattr(ev, "self_cuda_time_total", 0.0)) or 0.0)
            if dev.endswith("CUDA") and self_dev > 0:
                kernels += int(ev.count)
                busy_us += self_dev
                per_name[ev.key] = (per_name.get(ev.key, (0, 0.0))[0] + int(ev.count),
                                    per_name.get(ev.key, (0, 0.0))[1] + self_dev)
            if ev.key.startswith("aten::"):
                aten += int(ev.count)
            if ev.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
                launches += int(ev.count)
        return wall, kernels, busy_us, launches, per_name, aten

    w_n, k_n, b_n, l_n, names_n, a_n = one(steps + 1)
    w_1, k_1, b_1, l_1, names_1, a_1 = one(1)
    top = []
    for name, (cnt, us) in names_n.items():
        c1, u1 = names_1.get(name, (0, 0.0))
        top.append((us - u1, cnt - c1, name))
    top.sort(reverse=True)
    return {
        "profiled_steps": steps,
        "kernels_per_step": round((k_n - k_1) / steps, 2),
        "launch_calls_per_step": round((l_n - l_1) / steps, 2),
        "aten_ops_per_step": round((a_n - a_1) / steps, 2),
        "gpu_busy_ms_per_step": round((b_n - b_1) / 1000 / steps, 4),
        "wall_ms_per_step_profiled": round((w_n - w_1) * 1000 / steps, 4),
        "top_kernels": [{"name": n[:120], "per_step_ms": round(us / 1000 / steps, 4), "per_step_count":
                         round(cnt / steps, 2)} for us, cnt, n in top[:10]],
        "torch": torch.__version__,
    }


def run_case(case, loaded, prof_steps: int) -> dict:
    import torch

    from kvcalc.formats import kv_format
    from kvcalc.validate import hf_runner as hr
    from kvcalc.validate.results import package_versions, torch_device_facts

    c = hr.normalize_case(case)
    kv = hr.effective_kv(kv_format(c["kv"]), c)
    row = {"engine": "hf", "case_id": c["id"], "settings": {k: c[k] for k in ("model", "weights", "kv", "batch",
           "prompt_len", "new_tokens", "dtype")}, "versions": package_versions(),
           "environment": torch_device_facts(c["device"]), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "load_seconds": round(loaded.load_seconds, 2), "weights_method": loaded.weights_method or None,
           "static_bytes": loaded.static_bytes}
    if kv.backend == "quanto":
        row["quanto_path"] = hr.force_quanto_pure_torch()
    model = loaded.model
    ids, mask = hr._inputs(model, int(c["batch"]), int(c["prompt_len"]), 0, c["device"])

    def gen(n):
        return hr._generate(model, ids, mask, n, hr.cache_kwargs(kv, c))

    n = int(c["new_tokens"])
    t_warm, out = _timed(lambda: gen(n))
    info = hr.inspect_cache(hr._output_cache(out))
    row["cache"] = {k: info.get(k) for k in ("cache_class", "layer_classes", "cache_bytes", "seq_length")}
    reason = hr.fallback_reason(kv, info)
    del out
    gc.collect()
    row["warmup_seconds"] = round(t_warm, 3)
    t1s, tns = [], []
    for _ in range(2):
        t1s.append(_timed(lambda: gen(1))[0])
        tns.append(_timed(lambda: gen(n))[0])
        gc.collect()
    t1, tn = statistics.median(t1s), statistics.median(tns)
    step = (tn - t1) / (n - 1)
    row["t1_s"] = [round(x, 4) for x in t1s]
    row["tN_s"] = [round(x, 4) for x in tns]
    row["decode_ms_per_step"] = round(step * 1000, 3)
    row["decode_tokens_per_s"] = round(int(c["batch"]) / step, 2)
    row["prefill_seconds"] = round(t1, 4)
    row["method"] = ("decode step = (median t(generate N) - median t(generate 1)) / (N - 1), two of each, "
                     "cuda-synchronized, after one full-size warm-up; greedy, min_new_tokens=N")
    try:
        row["profile"] = profile_steps(gen, prof_steps)
    except Exception as exc:  # noqa: BLE001 - the timing stands without the breakdown
        row["profile_error"] = f"{type(exc).__name__}: {exc}"[:500]
    row["status"] = "error" if reason else "ok"
    if reason:
        row["message"] = f"refused: {reason}"
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--deadline", type=float, default=None, help="epoch seconds: start no case after deadline - 40 s")
    p.add_argument("--prompt", type=int, default=1024)
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--profile-steps", type=int, default=16)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--kvs", default=",".join(KVS))
    p.add_argument("--device", default="cuda", help="cuda; cpu only for a smoke test of the script")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--no-extra", action="store_true", help="skip the hqq-2 and nf4 cases")
    p.add_argument("--done", default=None, help="a jsonl of earlier results: skip the cases measured there (status ok)")
    args = p.parse_args()
    deadline = args.deadline or time.time() + 10**6

    from kvcalc.validate import hf_runner as hr
    from kvcalc.validate.results import JsonlWriter, error_message, release_gpu

    writer = JsonlWriter(args.out)
    batches = tuple(int(b) for b in args.batches.split(","))
    todo = cases(args.models.split(","), args.kvs.split(","), batches, args.prompt, args.new_tokens,
                 () if args.no_extra else EXTRA_KVS)
    if args.no_extra:
        todo = [c for c in todo if c["weights"] == "bf16"]
    if args.done:
        measured = {json.loads(l).get("case_id") for l in open(args.done) if '"status": "ok"' in l}
        todo = [c for c in todo if c["id"] not in measured]
    for c in todo:
        c["device"] = args.device
    loaded, key = None, None
    for case in todo:
        if time.time() > deadline - 40:
            writer.write({"engine": "hf", "case_id": case["id"], "status": "skipped", "message": "deadline"})
            continue
        try:
            k = (case["model"], case["weights"])
            if k != key:
                if loaded is not None:
                    del loaded
                    loaded = None
                    release_gpu()
                loaded, key = hr.load_case_model(case), k
            row = run_case(case, loaded, args.profile_steps)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a row
            import torch

            row = {"engine": "hf", "case_id": case["id"], "status": "error", "message": error_message(exc)}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        writer.write(row)
        print(case["id"], row.get("status"), row.get("decode_tokens_per_s"),
              (row.get("profile") or {}).get("kernels_per_step"), (row.get("profile") or {}).get(
                  "gpu_busy_ms_per_step"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
