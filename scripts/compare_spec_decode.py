"""kvcalc's speculative-decoding accounting (engines/vllm_draft.py) against vLLM 0.26 start-ups on the H200.

Reads every row with a speculative_config in docs/validation/data/v2/ and v3/ (dummy-weight starts; each row carries
the config.json vLLM was given, `config_used`, the drafter's, `draft_config_used`, and vLLM's internals) and puts
beside each observation:

1. the KV layout at the observed budget: kvcalc's layers with the drafter's attention layers and the Mamba
   speculative blocks (engines/vllm_groups.py), given the bytes vLLM itself had (`available_kv_cache_memory_bytes`):
   blocks, logged KV tokens, max concurrency. This isolates "KV layers per token".
2. the drafter's weights: kvcalc's drafter bytes (load_format=dummy: an EAGLE head shares the target's lm_head)
   against vLLM's `model_memory_usage` less that of the same config started without a drafter (the first engine of
   its process where there is one).
3. the profile peak: kvcalc's activation (engines/vllm.py activation_bytes, then the drafter's term
   draft_profile_bytes) against `peak_activation_memory`.
4. end to end: kvcalc's whole estimate on a GPU of the observed total.

An engine built second in a process (`non_torch_memory` 0) finds torch's cuBLAS workspace already allocated: as in
scripts/compare_profile_v3.py, its comparison takes the cuBLAS workspace out of kvcalc's peak and uses the observed
non-torch 0 for the end-to-end budget; first-in-process rows are compared as they are.

    python3 scripts/compare_spec_decode.py           # markdown (docs/validation/README.md, "Speculative decoding")
    python3 scripts/compare_spec_decode.py --json
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
from kvcalc.engines import vllm_draft  # noqa: E402
from kvcalc.engines.vllm_groups import vllm_kv_layout  # noqa: E402
from kvcalc.engines.vllm_profile import cublas_workspace_bytes  # noqa: E402
from kvcalc.formats import weight_format  # noqa: E402
from kvcalc.model import spec_from_config  # noqa: E402
from kvcalc.validate.predict import gpu_with_total  # noqa: E402
from h200_rows import clean_config, settings_of  # noqa: E402

DATA = ROOT / "docs" / "validation" / "data"
GIB = 2**30


def all_rows(data: Path = DATA) -> list[dict]:
    """Every started row of v2 and v3 (the last one of each case id in each file)."""
    out: dict[tuple[str, str], dict] = {}
    for path in sorted(data.glob("v[23]/vllm-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if (row.get("observed") or {}).get("internals"):
                out[(path.name, row["case_id"])] = row
    return list(out.values())


def _speculative(row: dict) -> dict | None:
    return (row.get("llm_kwargs") or {}).get("speculative_config")


def baseline(row: dict, rows: list[dict]) -> dict | None:
    """A start of the same config.json and dtype without a drafter (the first engine of its process preferred)."""
    cfg = clean_config(row["config_used"])
    same = [r for r in rows if not _speculative(r) and clean_config(r.get("config_used") or {}) == cfg
            and not (r.get("llm_kwargs") or {}).get("enable_lora")
            and r["observed"]["internals"].get("quantization") == row["observed"]["internals"].get("quantization")]
    same.sort(key=lambda r: (r.get("process_case_index") or 0) != 0)
    return same[0] if same else None


def _pct(pred: float, obs: float) -> float:
    return 100.0 * (pred - obs) / obs if obs else float("nan")


def draft_settings(row: dict) -> vllm_engine.VllmSettings:
    sc = _speculative(row)
    return settings_of(
        row, weight_format("bf16"),
        speculative_method=sc["method"], num_speculative_tokens=int(sc.get("num_speculative_tokens") or 0),
        draft_config=clean_config(row["draft_config_used"]) if row.get("draft_config_used") else None,
        draft_weights_loaded=False)  # load_format=dummy


def compare(row: dict, rows: list[dict]) -> dict:
    internals = row["observed"]["internals"]
    sc = _speculative(row)
    spec = spec_from_config(clean_config(row["config_used"]), row["case_id"])
    s = draft_settings(row)
    out: dict = {"case": row["case_id"], "method": f"{sc['method']} k={sc.get('num_speculative_tokens')}",
                 "batch": f"{internals['max_num_batched_tokens']} / {internals['max_num_seqs']}",
                 "runner": internals["model_runner_class"].split(".")[-2],
                 "runner_kvcalc": "model_runner" if vllm_engine.uses_v2_runner(spec, s) else "gpu_model_runner",
                 "process_index": row.get("process_case_index")}
    d = vllm_engine.drafter_of(spec, s)
    layers = spec.layers + (d.kv_layers if d else ())
    mml, mnbt = int(internals["max_model_len"]), int(internals["max_num_batched_tokens"])
    layout = vllm_kv_layout(layers, s.kv, spec.dtype_bytes, None, 1, mml, spec.model_type,
                            max_num_batched_tokens=mnbt,
                            mamba_speculative_blocks=vllm_draft.mamba_speculative_blocks(
                                spec, s.speculative_method, s.num_speculative_tokens))
    blocks = layout.num_blocks(int(internals["available_kv_cache_memory_bytes"]))
    kvc = internals.get("kv_cache_config") or {}
    out.update(kv_layers=[len([x for x in layers if x.kind != "none"]), kvc.get("num_tensors")],
               block_size=[layout.block_size, internals["block_size"]],
               groups=[len(layout.groups), len(kvc.get("groups") or [])],
               blocks=[blocks, internals["num_gpu_blocks"]],
               tokens=[layout.logged_tokens(blocks), internals["kv_cache_size_tokens"]],
               concurrency=[round(layout.max_concurrency(blocks), 3), round(internals["kv_cache_max_concurrency"], 3)])
    base = baseline(row, rows)
    if base is not None:
        grew = internals["model_memory_usage"] - base["observed"]["internals"]["model_memory_usage"]
        out["drafter_weights"] = [d.weight_bytes if d else 0, grew]
        out["baseline"] = base["case_id"]
    gpu = gpu_with_total("h200", int(internals["init_total_memory"]))
    est = vllm_engine.estimate(spec, gpu, s)
    v2 = vllm_engine.uses_v2_runner(spec, s)
    fresh = not row.get("process_case_index") or int(internals.get("non_torch_memory") or 0) > 0
    act = est.activation_bytes - (0 if fresh else cublas_workspace_bytes(gpu))
    out["fresh"] = fresh
    out["weights"] = [est.weights_bytes, internals["model_memory_usage"]]
    out["activation"] = [act, internals["peak_activation_memory"]]
    out["draft_profile"] = vllm_engine.drafter_profile_bytes(spec, s, est.max_num_batched_tokens, est.max_num_seqs,
                                                             v2, gpu, est.max_model_len, est.block_size)
    out["non_torch"] = [est.non_torch_bytes, internals["non_torch_memory"]]
    budget = est.available_kv_bytes + (est.activation_bytes - act) + (0 if fresh else est.non_torch_bytes)
    out["e2e_tokens"] = [est.layout.logged_tokens(est.layout.num_blocks(max(budget, 0))),
                         internals["kv_cache_size_tokens"]]
    out["generated"] = row["observed"].get("generate_check_tokens")
    return out


def _gib(n: float) -> str:
    return f"{n / GIB:.3f}"


def markdown(rows: list[dict]) -> str:
    lines = ["| case | method | mnbt / seqs | runner vLLM (kvcalc) | KV layers k/v | blocks at vLLM's budget k/v | "
             "KV tokens k/v | drafter weights GiB k/v (error) | activation GiB k/v (drafter term) | "
             "end to end KV tokens k/v (error) |",
             "|---|---|---|---|---|---:|---:|---|---|---|"]
    for r in rows:
        dw = (f"{_gib(r['drafter_weights'][0])} / {_gib(r['drafter_weights'][1])} "
              f"({_pct(*r['drafter_weights']):+.2f}%)" if r.get("drafter_weights") and r["drafter_weights"][1]
              else ("0 / " + _gib(r["drafter_weights"][1]) if r.get("drafter_weights") else "no baseline"))
        lines.append(
            f"| {r['case']} | {r['method']} | {r['batch']} | {r['runner']} ({r['runner_kvcalc']}) | "
            f"{r['kv_layers'][0]} / {r['kv_layers'][1]} | {r['blocks'][0]:,} / {r['blocks'][1]:,} | "
            f"{r['tokens'][0]:,} / {r['tokens'][1]:,} | {dw} | {_gib(r['activation'][0])} / "
            f"{_gib(r['activation'][1])} ({_gib(r['draft_profile'])}) | {r['e2e_tokens'][0]:,} / "
            f"{r['e2e_tokens'][1]:,} ({_pct(*r['e2e_tokens']):+.2f}%) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    rows = all_rows(args.data)
    out = [compare(r, rows) for r in rows if _speculative(r)]
    print(json.dumps(out, indent=1) if args.json else markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
