#!/usr/bin/env python3
"""Tables of docs/validation/data/v3/README.md: per engine, vLLM's peak_activation_memory and the allocator's own
account of it (profile_trace.py), and the allocations live at the peak grouped by the vLLM source line.

    python3 scripts/gpu_v3/summarize.py [--top N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "docs" / "validation" / "data" / "v3"
FILES = ("vllm-gpu0_v3.jsonl", "vllm-gpu1_v3.jsonl", "vllm-gpu0_v3u.jsonl", "vllm-gpu1_v3u.jsonl")
MIB = 1 << 20


def rows() -> list[dict]:
    """The last non-skipped row of each case."""
    out: dict[str, dict] = {}
    for name in FILES:
        for line in (DATA / name).read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "skipped":
                out[r["case_id"]] = r
    return list(out.values())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    print("| case | status | runner | max_num_batched_tokens / seqs | peak_activation_memory MiB | trace peak MiB |"
          " non-torch MiB | process index | generated |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    traced = []
    for r in rows():
        i = r["observed"]["internals"]
        t = (r["observed"].get("profile_trace") or [None])[-1]
        if t:
            traced.append((r["case_id"], t))
        print(f"| {r['case_id']} | {r['status']} | {i['model_runner_class'].split('.')[-2]} | "
              f"{i['max_num_batched_tokens']} / {i['max_num_seqs']} | {i['peak_activation_memory'] / MIB:.1f} | "
              f"{(t['peak_over_entry_bytes'] / MIB) if t else float('nan'):.1f} | {i['non_torch_memory'] / MIB:.1f} | "
              f"{r.get('process_case_index')} | {r['observed'].get('generate_check_tokens') or ''} |")
    for case, t in traced:
        print(f"\n**{case}** - live at the peak, {t['live_at_peak_bytes'] / MIB:.1f} MiB (source line: MiB, sizes)\n")
        for g in t["live_at_peak_top"][:args.top]:
            if g["bytes"] < MIB:
                continue
            sizes = ", ".join(f"{s / MIB:g} x{n}" for s, n in g["sizes"])
            print(f"- `{g['site']}`: {g['bytes'] / MIB:.1f} ({sizes})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
