#!/usr/bin/env python3
"""transformers decode on the H200 (docs/validation/data/v4/hf_decode.jsonl, scripts/gpu_v4/hf_decode.py) against
kvcalc's step model (throughput.hf_decode_speed via workload.hf_bench), with what each measured step is made of: kernels
launched, GPU busy time (torch.profiler), so the launch-bound share is visible (issue 18 item 4).

    python3 scripts/hf_decode_report.py [--markdown]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "docs" / "validation" / "data" / "v4" / "hf_decode.jsonl"


def rows() -> list[dict]:
    from kvcalc.catalog import load_model
    from kvcalc.formats import kv_format, weight_format
    from kvcalc.hardware import get_gpu
    from kvcalc.workload import Workload, hf_bench

    out = []
    for line in DATA.read_text().splitlines():
        r = json.loads(line)
        if r.get("status") != "ok":
            continue
        s = r["settings"]
        spec = load_model(s["model"])
        est = hf_bench(spec, get_gpu("h200"), weight_format(s["weights"]), kv_format(s["kv"]),
                       Workload(s["prompt_len"], s["new_tokens"], concurrency=s["batch"]))
        p = r.get("profile") or {}
        out.append({"case": r["case_id"], "layers": spec.num_layers, "measured_ms": r["decode_ms_per_step"],
                    "predicted_ms": round(est.tpot_s * 1e3, 3), "error": est.tpot_s * 1e3 / r["decode_ms_per_step"] - 1,
                    "kernels_per_step": p.get("kernels_per_step"), "gpu_busy_ms": p.get("gpu_busy_ms_per_step"),
                    "kernels_per_layer": round(p["kernels_per_step"] / spec.num_layers, 1) if p else None,
                    "host_us_per_kernel": round((r["decode_ms_per_step"] - (p.get("gpu_busy_ms_per_step") or 0))
                                                * 1e3 / p["kernels_per_step"], 1) if p else None})
    return out


def markdown(rs: list[dict]) -> str:
    lines = ["| case | measured ms/step | kvcalc | error | kernels/step (per layer) | GPU busy ms | host us/kernel |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        lines.append(f"| {r['case']} | {r['measured_ms']:.2f} | {r['predicted_ms']:.2f} | {r['error']:+.0%} | "
                     f"{r['kernels_per_step']:.0f} ({r['kernels_per_layer']}) | {r['gpu_busy_ms']:.2f} | "
                     f"{r['host_us_per_kernel']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    rs = rows()
    print(markdown(rs) if "--markdown" in sys.argv else json.dumps(rs, indent=1))
