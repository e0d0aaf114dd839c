"""kvcalc's KV capacity against vLLM 0.26 for the new layouts observed on the H200 (issue 9.5).

Reads the `l-*` rows of docs/validation/data/v2/vllm-gpu{0,1}.jsonl (dummy-weight start-ups; each row carries the
exact config.json vLLM was given, `config_used`, and vLLM's own KV-cache internals) and, for each, predicts:

1. layout at the observed budget: kvcalc's layer specs and vLLM grouping (model.py + layer_kinds.py ->
   engines/vllm_groups.py) applied to the bytes vLLM itself had for the KV cache (`available_kv_cache_memory_bytes`):
   block size, blocks, KV tokens ("GPU KV cache size"), max concurrency. This isolates the per-layer cache specs,
   the subject of issue 9.2.
2. end to end: kvcalc's whole vLLM estimate (weights, activation peak, non-torch memory; engines/vllm.py) on a GPU of
   the observed total memory, with the checkpoint's own weights (bf16, or the mxfp4 gpt-oss checkpoint read from its
   quantization_config by kvcalc/checkpoint.py).

    python3 scripts/compare_layouts_v2.py            # markdown table (docs/validation/README.md, "New layouts")
    python3 scripts/compare_layouts_v2.py --json     # rows as JSON

tests/test_validation_layouts.py holds the layout errors to 0 and the end-to-end errors to the 1% target.
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
from kvcalc.engines.vllm_groups import vllm_kv_layout  # noqa: E402
from kvcalc.errors import UsageError  # noqa: E402
from kvcalc.formats import kv_format  # noqa: E402
from kvcalc.validate.predict import gpu_with_total  # noqa: E402
from h200_rows import clean_config, settings_of, spec_and_weights  # noqa: E402
from kvcalc.model import spec_from_config  # noqa: E402

DATA = ROOT / "docs" / "validation" / "data" / "v2"
FILES = ("vllm-gpu0.jsonl", "vllm-gpu1.jsonl")


def observations(data: Path = DATA) -> list[dict]:
    """The last non-skipped row of each l-* case that started (rows with observed internals)."""
    rows: dict[str, dict] = {}
    for name in FILES:
        path = data / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("case_id", "").startswith("l-") and row.get("status") != "skipped":
                rows[row["case_id"]] = row
    return list(rows.values())


def _pct(pred: float, obs: float) -> float:
    return 100.0 * (pred - obs) / obs if obs else float("nan")


def compare(row: dict) -> dict:
    out: dict = {"case": row["case_id"]}
    observed = row.get("observed") or {}
    internals = observed.get("internals")
    if not internals:
        out["status"] = f"did not run: {row.get('status')} ({row.get('message')})"
        return out
    spec = spec_from_config(clean_config(row["config_used"]), row["case_id"])
    mml, mnbt = int(internals["max_model_len"]), int(internals["max_num_batched_tokens"])
    kv = kv_format(str(internals.get("cache_dtype") or "auto"))
    layout = vllm_kv_layout(spec.layers, kv, spec.dtype_bytes, None, 1, mml, spec.model_type,
                            max_num_batched_tokens=mnbt, compute_capability=float(
                                row["environment"].get("compute_capability") or 9.0))
    blocks = layout.num_blocks(int(internals["available_kv_cache_memory_bytes"]))
    kinds: dict[str, int] = {}
    for layer in spec.layers:
        kind = getattr(layer, "mixer", layer.kind)  # Mamba-like states by their recurrence (gdn, mamba2, ...)
        kinds[kind] = kinds.get(kind, 0) + 1
    out.update(
        status="ran", model_type=spec.model_type, layers=" + ".join(f"{n} {k}" for k, n in kinds.items()),
        block_size=[layout.block_size, internals["block_size"]],
        groups=[len(layout.groups), len(internals["kv_cache_config"]["groups"])],
        blocks=[blocks, internals["num_gpu_blocks"]],
        tokens=[layout.logged_tokens(blocks), internals["kv_cache_size_tokens"]],
        concurrency=[round(layout.max_concurrency(blocks), 2), round(internals["kv_cache_max_concurrency"], 2)],
    )
    out["tokens_error_pct"] = _pct(*out["tokens"])
    spec, weights = spec_and_weights(row)
    if weights is None:
        out["end_to_end"] = f"not planned: kvcalc does not read the {internals.get('quantization')} checkpoint's weights"
        return out
    if weights.name != "bf16":
        out["weights_format"] = weights.label
    settings = settings_of(row, weights)
    try:
        est = vllm_engine.estimate(spec, gpu_with_total("h200", int(internals["init_total_memory"])), settings)
    except UsageError as exc:
        out["end_to_end"] = f"not planned: {exc}"
        return out
    out["e2e_weights"] = [est.weights_bytes, internals["model_memory_usage"]]
    out["e2e_activation"] = [est.activation_bytes, internals["peak_activation_memory"]]
    out["e2e_non_torch"] = [est.non_torch_bytes, internals["non_torch_memory"]]
    out["e2e_available_kv"] = [est.available_kv_bytes, internals["available_kv_cache_memory_bytes"]]
    out["e2e_tokens"] = [est.logged_kv_tokens, internals["kv_cache_size_tokens"]]
    out["e2e_tokens_error_pct"] = _pct(*out["e2e_tokens"])
    return out


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def markdown(rows: list[dict]) -> str:
    head = ("| case | model_type | layers (kvcalc kinds) | block size k/v | blocks kvcalc / vLLM | KV tokens kvcalc / "
            "vLLM | error | end to end: weights GiB k/v, KV tokens k/v, error |\n|---|---|---|---|---:|---:|---:|---|")
    lines = [head]
    for r in rows:
        if r["status"] != "ran":
            lines.append(f"| {r['case']} | | {r['status']} | | | | | |")
            continue
        if "e2e_tokens" in r:
            e2e = (f"{_gib(r['e2e_weights'][0])} / {_gib(r['e2e_weights'][1])}, {r['e2e_tokens'][0]:,} / "
                   f"{r['e2e_tokens'][1]:,}, {r['e2e_tokens_error_pct']:+.2f}%")
        else:
            e2e = r["end_to_end"]
        lines.append(f"| {r['case']} | {r['model_type']} | {r['layers']} | {r['block_size'][0]} / "
                     f"{r['block_size'][1]} | {r['blocks'][0]:,} / {r['blocks'][1]:,} | {r['tokens'][0]:,} / "
                     f"{r['tokens'][1]:,} | {r['tokens_error_pct']:+.3f}% | {e2e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    rows = [compare(r) for r in observations(args.data)]
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
