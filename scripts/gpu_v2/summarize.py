#!/usr/bin/env python3
"""Markdown tables of the v2 observations (docs/validation/data/v2/*.jsonl): one row per case (the last row a case
got that is not 'skipped'), start-up memory figures, and the TPOT/TTFT grids. Observations only, no predictions.

    python3 scripts/gpu_v2/summarize.py [DATA_DIR]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

GIB = 2**30


def rows(data: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in sorted(data.glob("vllm-*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("status") == "skipped" and r.get("case_id") in out:
                continue
            if r.get("status") == "error" and "worker exit 0" in str(r.get("message")):
                continue  # a runner bookkeeping row (fixed after call 3): the case had only been skipped for time
            out[r["case_id"]] = r
    return out


def g(x):
    return "" if x is None else f"{x / GIB:.2f}"


def graph_gib(r: dict) -> str:
    for ln in r.get("log_key_lines", []):
        m = re.search(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB", ln)
        if m:
            return m.group(1)
    return ""


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs/validation/data/v2")
    rs = rows(data)
    print("| case | status | model runner | KV groups (spec: layers) | block size | GPU blocks | KV tokens | "
          "available KV GiB | weights GiB | activation peak GiB | non-torch GiB | graphs GiB (log) | start s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cid, r in rs.items():
        o = r.get("observed") or {}
        i = o.get("internals") or {}
        kc = i.get("kv_cache_config") or {}
        groups = ", ".join(f"{gr['spec_class']}: {gr['num_layers']}" for gr in kc.get("groups", []))
        runner = (i.get("model_runner_class") or "").replace("vllm.v1.worker.", "")
        msg = r.get("status", "")
        if r.get("status") not in ("ok",):
            msg += ": " + str(r.get("message", ""))[:90].replace("|", "/")
        print(f"| {cid} | {msg} | {runner} | {groups} | {i.get('block_size', '')} | {i.get('num_gpu_blocks', '')} | "
              f"{i.get('kv_cache_size_tokens', '')} | {g(i.get('available_kv_cache_memory_bytes'))} | "
              f"{g(i.get('model_memory_usage'))} | {g(i.get('peak_activation_memory'))} | "
              f"{g(i.get('non_torch_memory'))} | {graph_gib(r)} | {o.get('startup_s', '')} |")
    print()
    print("| case | batch | context | TPOT ms | context mean in window | prefill tok/s (all requests) |")
    print("|---|---:|---:|---:|---:|---:|")
    for cid, r in rs.items():
        sp = ((r.get("observed") or {}).get("speed") or {}).get("points", [])
        for p in sp:
            if "tpot_ms" in p:
                print(f"| {cid} | {p['batch']} | {p['context']} | {p['tpot_ms']} | {p.get('context_mean_mid_window')} |"
                      f" {p.get('prefill_tokens_per_s')} |")
    print()
    print("| case | TTFT median s at 512 / 2048 / 8192 / 16384 |")
    print("|---|---|")
    for cid, r in rs.items():
        t = (r.get("observed") or {}).get("ttft")
        if t:
            vals = [str((t.get(k) or {}).get("median_s", "")) for k in ("512", "2048", "8192", "16384")]
            print(f"| {cid} | {' / '.join(vals)} |")
    hf = data / "hf.jsonl"
    if hf.exists():
        print()
        print("| transformers case | decode ms/step | peak increment GiB | status |")
        print("|---|---:|---:|---|")
        for line in hf.read_text().splitlines():
            r = json.loads(line)
            print(f"| {r['case_id']} | {r.get('decode_ms_per_step', '')} | {g(r.get('peak_increment_bytes'))} | "
                  f"{r.get('status')} |")


if __name__ == "__main__":
    main()
