#!/usr/bin/env python3
"""kvcalc's predictions for the multi-GPU H200 cases of issue 23 (scripts/gpu_v4/multi_gpu_cases_*.json), written
to docs/validation/data/v4/predictions-multi-gpu.json BEFORE any of them runs, so the comparison cannot be tuned to
them. For each shape: the KV tokens vLLM 0.26 logs, the per-stage weights and activation peak; for each workload:
mean/p99 TTFT, mean TPOT and output throughput from the same simulation `kvcalc plan` shows under load.

    python3 scripts/gpu_v4/predict_multi_gpu.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import kvcalc  # noqa: E402

OUT = ROOT / "docs" / "validation" / "data" / "v4" / "predictions-multi-gpu.json"


def _flag(args: list[str], *names: str, default=None):
    for n in names:
        if n in args:
            return args[args.index(n) + 1]
    return default


def _asked_row(result) -> dict:
    """The JSON of the row for the asked configuration (baseline, or --weights fp8), as `plan --json` prints it."""
    chosen = result.chosen("vllm")
    return next(r for r in result.to_json()["rows"] if r["engine"] == "vllm" and r["config"] == chosen.config)


def predict(shape: dict) -> dict:
    a = shape["serve_args"]
    opts = dict(model=shape["catalog"], gpu="h200", engine="vllm", vllm_version="0.26.0",
                util=float(_flag(a, "--gpu-memory-utilization")), max_model_len=int(_flag(a, "--max-model-len")),
                tp=int(_flag(a, "-tp", "--tensor-parallel-size", default=1)),
                pp=int(_flag(a, "-pp", "--pipeline-parallel-size", default=1)))
    if _flag(a, "--quantization") == "fp8":
        opts["weights"] = "fp8"
    out = {"shape": shape["name"], "options": opts, "workloads": []}
    row = _asked_row(kvcalc.plan(**opts))
    out["kv_capacity_tokens"] = row.get("kv_capacity_tokens")
    out["row"] = {k: row.get(k) for k in ("config", "fits", "weights_bytes", "kv_bytes_per_token", "max_concurrency",
                                          "decode_tokens_per_s", "vllm_breakdown")}
    for wl in shape["workloads"]:
        w = dict(input_len=wl["input_len"], output_len=wl["output_len"], num_prompts=wl["num_prompts"])
        if wl.get("max_concurrency"):
            w["concurrency"] = wl["max_concurrency"]
        if wl.get("request_rate"):
            w["request_rate"] = wl["request_rate"]
        try:
            out["workloads"].append({"id": wl["id"], "bench": _asked_row(kvcalc.plan(**opts, **w)).get("bench")})
        except Exception as e:  # a case kvcalc cannot time is recorded, not skipped silently
            out["workloads"].append({"id": wl["id"], "error": f"{type(e).__name__}: {e}"})
    return out


def main() -> int:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    runs = []
    for path in sorted((ROOT / "scripts" / "gpu_v4").glob("multi_gpu_cases_*.json")):
        case = json.loads(path.read_text())
        runs.append({"run": case["run"], "kind": case["kind"], "shapes": [predict(s) for s in case["shapes"]]})
    OUT.write_text(json.dumps({"kvcalc_commit": commit, "note": "written before the cases ran (issue 23)",
                               "runs": runs}, indent=1) + "\n")
    for r in runs:
        for s in r["shapes"]:
            print(r["run"], s["shape"], "KV tokens", s["kv_capacity_tokens"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
