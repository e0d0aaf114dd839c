#!/usr/bin/env python3
"""kvcalc's profile peak (engines/vllm_profile.py) and end-to-end KV tokens against the H200 v3 rows.

For every engine of docs/validation/data/v3 (and the held-out rows of later calls in the same folder): the activation
peak kvcalc predicts against vLLM's `peak_activation_memory`, the phase kvcalc says sets it against the phase the
allocator trace shows, and the KV tokens of kvcalc's whole estimate (weights, activation, non-torch) against vLLM's.

An engine built second in a process finds torch's cuBLAS workspace and the CUDA context already there (its trace and
`non_torch_memory` say so): for those rows the comparison removes the cuBLAS workspace from kvcalc's peak (and the
Triton top-k/top-p buffer when an earlier engine had the same vocabulary: it is cached per vocabulary size) and uses
the observed non-torch 0, which is what that engine actually faced; first-in-process rows are compared as they are,
as a fresh `vllm serve` would be.

    python3 scripts/compare_profile_v3.py          # markdown (docs/validation/README.md, "Activation peak, by mechanism")
    python3 scripts/compare_profile_v3.py --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from kvcalc.engines import vllm as vllm_engine  # noqa: E402
from kvcalc.engines.vllm_profile import cublas_workspace_bytes  # noqa: E402
from kvcalc.validate.predict import gpu_with_total  # noqa: E402
from h200_rows import settings_of, spec_and_weights  # noqa: E402

DATA = ROOT / "docs" / "validation" / "data" / "v3"
MIB = 1 << 20


def observations(data: Path = DATA) -> list[dict]:
    """The last non-skipped row of each case in every vllm-*.jsonl of the folder. Each row gets `_vocab_seen`: whether
    an engine built earlier in the same process had the same vocabulary (then the Triton top-k/top-p buffer, cached
    per vocabulary size in topk_topp_triton.py, is already allocated)."""
    rows: dict[str, dict] = {}
    for path in sorted(data.glob("vllm-*.jsonl")):
        seen: set[int] = set()
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("status") == "skipped" or not (row.get("observed") or {}).get("internals"):
                continue
            if (row.get("llm_kwargs") or {}).get("speculative_config"):
                continue  # speculative decoding: kvcalc's drafter accounting, compared on its own
            if not row.get("process_case_index"):
                seen = set()
            vocab = int(row["observed"]["internals"].get("vocab_size") or 0)
            row["_vocab_seen"] = vocab in seen
            seen.add(vocab)
            rows[row["case_id"]] = row
    return list(rows.values())


def traced_phase(row: dict) -> str:
    """The phase the allocator trace shows at the peak, named as vllm_profile.py names them."""
    trace = ((row.get("observed") or {}).get("profile_trace") or [None])[-1]
    if not trace:
        return ""
    sites = " ".join(g["site"] for g in trace["live_at_peak_top"][:6])
    for key, phase in (("v1/sample/", "sampler"), ("compiler_interface", "compile"), ("mla_attention", "MLA"),
                       ("mamba_mixer2", "Mamba2"), ("layers/attention/attention.py", "attention")):
        if key in sites:
            return phase
    return "MoE" if "fused_moe" in sites else "MLP"


def compare(row: dict) -> dict:
    internals = row["observed"]["internals"]
    spec, weights = spec_and_weights(row)
    fresh = not row.get("process_case_index")
    settings = settings_of(row, weights)
    gpu = gpu_with_total("h200", int(internals["init_total_memory"]))
    est = vllm_engine.estimate(spec, gpu, settings)
    mnbt, seqs = est.max_num_batched_tokens, est.max_num_seqs
    peak = vllm_engine.profile_peak_of(spec, settings, mnbt, seqs, True, True, gpu, est.max_model_len,
                                       est.block_size)
    reused = 0 if fresh else cublas_workspace_bytes(gpu)
    if row.get("_vocab_seen"):
        reused += dict(peak.parts).get("top-k/top-p Triton buffer", 0)
    act = peak.bytes - reused
    obs_act = int(internals["peak_activation_memory"])
    # the KV budget this engine had with kvcalc's activation in place of vLLM's (and, second in a process, the
    # observed non-torch 0): the end-to-end error of capacity
    kv_pred = est.available_kv_bytes + (est.activation_bytes - act) + (0 if fresh else est.non_torch_bytes)
    blocks = est.layout.num_blocks(max(kv_pred, 0))
    tokens = est.layout.logged_tokens(blocks)
    obs_tokens = int(internals["kv_cache_size_tokens"])
    return {"case": row["case_id"], "model_type": spec.model_type, "fresh": fresh,
            "mnbt_seqs": [mnbt, seqs], "phase": [peak.phase, traced_phase(row)],
            "activation": [act, obs_act], "activation_error_pct": 100.0 * (act - obs_act) / obs_act,
            "weights": [est.weights_bytes, internals["model_memory_usage"]],
            "tokens": [tokens, obs_tokens], "tokens_error_pct": 100.0 * (tokens - obs_tokens) / obs_tokens}


def markdown(rows: list[dict]) -> str:
    out = ["| case | model_type | first in process | tokens / seqs | phase kvcalc / trace | activation MiB kvcalc / vLLM "
           "| error | KV tokens kvcalc / vLLM | error |", "|---|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['model_type']} | {'yes' if r['fresh'] else 'no'} | {r['mnbt_seqs'][0]} / "
                   f"{r['mnbt_seqs'][1]} | {r['phase'][0]} / {r['phase'][1] or '-'} | {r['activation'][0] / MIB:,.1f} / "
                   f"{r['activation'][1] / MIB:,.1f} | {r['activation_error_pct']:+.1f}% | {r['tokens'][0]:,} / "
                   f"{r['tokens'][1]:,} | {r['tokens_error_pct']:+.2f}% |")
    errs = [abs(r["tokens_error_pct"]) for r in rows]
    act = [abs(r["activation_error_pct"]) for r in rows]
    out.append(f"\n{len(rows)} engines: KV tokens mean |error| {sum(errs) / len(errs):.2f}%, worst {max(errs):.2f}%; "
               f"activation mean |error| {sum(act) / len(act):.1f}%, worst {max(act):.1f}%.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--data", type=Path, default=DATA)
    args = p.parse_args(argv)
    rows = [compare(r) for r in observations(args.data)]
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
