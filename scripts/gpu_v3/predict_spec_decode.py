#!/usr/bin/env python3
"""kvcalc's predictions for the speculative-decoding cases (scripts/gpu_v2/cases_gpu1_v3s.json), written to
docs/validation/data/v3/predictions-v3s.json BEFORE the cases run, so the comparison cannot be tuned to them.

    python3 scripts/gpu_v3/predict_spec_decode.py
    python3 scripts/gpu_v3/predict_spec_decode.py --only ID,ID --out docs/validation/data/v3/predictions-v3s2.json

Settings as the H200 runs them: dummy weights (an EAGLE head then shares the target's lm_head), the FlashInfer
sampler off (run_call.sh), the GPU's total as the v3 rows report it (150,109,880,320 B).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcalc.engines import vllm  # noqa: E402
from kvcalc.formats import kv_format, weight_format  # noqa: E402
from kvcalc.model import spec_from_config  # noqa: E402
from kvcalc.validate.predict import gpu_with_total  # noqa: E402

CASES = ROOT / "scripts" / "gpu_v2" / "cases_gpu1_v3s.json"
CONFIGS = ROOT / "scripts" / "gpu_v2" / "configs"
OUT = ROOT / "docs" / "validation" / "data" / "v3" / "predictions-v3s.json"
H200_TOTAL = 150_109_880_320


def _config(name: str) -> dict:
    cfg = json.loads((CONFIGS / name).read_text())
    cfg.pop("_source", None)
    return cfg


def predict(case: dict) -> dict:
    spec = spec_from_config(_config(case["config"]), case["id"])
    llm = case["llm"]
    sc = llm["speculative_config"]
    common = dict(weights=weight_format("bf16"), kv=kv_format("auto"),
                  gpu_memory_utilization=llm["gpu_memory_utilization"], max_model_len=llm["max_model_len"],
                  max_num_batched_tokens=llm.get("max_num_batched_tokens"), max_num_seqs=llm.get("max_num_seqs"),
                  enforce_eager=bool(llm.get("enforce_eager")), entrypoint="llm", flashinfer_sampler=False)
    s = vllm.VllmSettings(**common, speculative_method=sc["method"],
                          num_speculative_tokens=sc["num_speculative_tokens"],
                          draft_config=_config(case["draft_config"]) if case.get("draft_config") else None,
                          draft_weights_loaded=False)
    gpu = gpu_with_total("h200", H200_TOTAL)
    est = vllm.estimate(spec, gpu, s)
    plain = vllm.estimate(spec, gpu, vllm.VllmSettings(**common))
    v2 = vllm.uses_v2_runner(spec, s)
    d = vllm.drafter_of(spec, s)
    return {
        "case": case["id"], "runner": "V2" if v2 else "V1",
        "drafter": d.described if d else "none",
        "drafter_weights_bytes": d.weight_bytes if d else 0,
        "drafter_kv_layers": len(d.kv_layers) if d else 0,
        "weights_bytes": est.weights_bytes,
        "activation_bytes": est.activation_bytes,
        "drafter_profile_bytes": vllm.drafter_profile_bytes(spec, s, est.max_num_batched_tokens, est.max_num_seqs, v2,
                                                            gpu, est.max_model_len, est.block_size),
        "activation_without_drafter": plain.activation_bytes,
        "num_gpu_blocks": est.num_gpu_blocks,
        "kv_tokens": est.logged_kv_tokens,
        "max_blocks_per_request": est.layout.max_blocks_per_request,
        "group_size": est.layout.group_size,
        "kv_tokens_without_drafter": plain.logged_kv_tokens,
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None, help="comma-separated case ids (the cases not yet run)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    cases = json.loads(CASES.read_text())
    if args.only:
        cases = [c for c in cases if c["id"] in args.only.split(",")]
    rows = [predict(c) for c in cases]
    args.out.write_text(json.dumps({"kvcalc_commit": commit.strip(), "note": "written before the cases ran",
                                    "rows": rows}, indent=1) + "\n")
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
