#!/usr/bin/env python3
"""kvcalc's profile-peak predictions for the held-out cases (scripts/gpu_v2/cases_gpu{0,1}_v3h.json), written to
docs/validation/data/v3/predictions-v3h.json BEFORE the cases run, so the comparison cannot be tuned to them.

    python3 scripts/gpu_v3/predict_held_out.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcalc.catalog import load_model  # noqa: E402
from kvcalc.checkpoint import baseline_weights  # noqa: E402
from kvcalc.engines import vllm as vllm_engine  # noqa: E402
from kvcalc.formats import kv_format, weight_format  # noqa: E402
from kvcalc.hardware import get_gpu  # noqa: E402
from kvcalc.model import spec_from_config  # noqa: E402

CASES = [ROOT / "scripts" / "gpu_v2" / f"cases_gpu{i}_v3h.json" for i in (0, 1)]
OUT = ROOT / "docs" / "validation" / "data" / "v3" / "predictions-v3h.json"


def predict(case: dict) -> dict:
    cfg = json.loads((ROOT / "scripts" / "gpu_v2" / "configs" / case["config"]).read_text())
    cfg = {k: v for k, v in cfg.items() if k != "_source"}
    llm = case["llm"]
    spec = spec_from_config(cfg, case["id"])
    weights = weight_format("fp8") if llm.get("quantization") == "fp8" else weight_format("bf16")
    if cfg.get("quantization_config"):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "config.json").write_text(json.dumps(cfg))
            spec = load_model(folder)
        weights = baseline_weights(spec)
    s = vllm_engine.VllmSettings(
        weights=weights, kv=kv_format("auto"), gpu_memory_utilization=llm["gpu_memory_utilization"],
        max_model_len=llm["max_model_len"], max_num_batched_tokens=llm.get("max_num_batched_tokens"),
        max_num_seqs=llm.get("max_num_seqs"), enforce_eager=bool(llm.get("enforce_eager")), version="0.26.0",
        entrypoint="llm", flashinfer_sampler=False)  # the host runs VLLM_USE_FLASHINFER_SAMPLER=0
    gpu = get_gpu("h200")
    est = vllm_engine.estimate(spec, gpu, s)
    peak = vllm_engine.profile_peak_of(spec, s, est.max_num_batched_tokens, est.max_num_seqs, True, True, gpu,
                                       est.max_model_len, est.block_size)
    return {"case": case["id"], "phase": peak.phase, "activation_bytes": peak.bytes,
            "parts": dict(peak.parts), "kv_tokens": est.logged_kv_tokens, "weights_bytes": est.weights_bytes}


def main() -> int:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = [predict(c) for path in CASES for c in json.loads(path.read_text())]
    OUT.write_text(json.dumps({"kvcalc_commit": commit, "note": "written before the cases ran", "rows": rows},
                              indent=1) + "\n")
    for r in rows:
        print(f"{r['case']}: {r['phase']} {r['activation_bytes'] / 2**20:,.1f} MiB, KV tokens {r['kv_tokens']:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
