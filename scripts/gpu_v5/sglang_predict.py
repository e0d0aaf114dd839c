#!/usr/bin/env python3
"""kvcalc's predictions for the SGLang case files (sglang_cases_*.json), written BEFORE the cases run on the H200.

For each case: the server command the runner starts (sglang_serve.py), with the catalog name as --model-path, given to
`kvcalc plan --gpu h200 --engine sglang --sglang-command ... --json`, once per workload (--input-len/--output-len/
--concurrency = bench's --max-concurrency/--num-prompts). Recorded: the start-up figures SGLang logs (mem_fraction_static,
max_total_num_tokens, context_len, max_running_requests, chunked_prefill_size, weights) and the bench figures
(mean/p99 TTFT, mean TPOT, output tokens/s), with the exact kvcalc command and the commit it ran at.

`kvcalc plan` takes --context (input + output) as SGLang's --context-length when the command has none; the server
uses the model's own context then, so --max-model-len is passed as that (kvcalc's estimate with no context given).
Usage: python3 scripts/gpu_v5/sglang_predict.py OUT.json CASES.json [CASES.json ...]
"""
import json
import os
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def model_context(catalog: str) -> int:
    """SGLang's context_len when no --context-length is given: kvcalc's estimate with context_length None."""
    from kvcalc.catalog import load_model
    from kvcalc.engines import sglang as S
    from kvcalc.formats import kv_format
    from kvcalc.checkpoint import baseline_weights
    from kvcalc.formats import weight_format
    from kvcalc.hardware import get_gpu

    spec = load_model(catalog)
    est = S.estimate(spec, get_gpu("h200"), S.SglangSettings(weights=baseline_weights(spec) or weight_format("bf16"),
                                                             kv=kv_format("auto")))
    return est.context_len


def plan(cmd_text: str, wl: dict, max_model_len: int | None) -> tuple[list[str], dict]:
    argv = [sys.executable, "-m", "kvcalc", "plan", "--gpu", "h200", "--engine", "sglang", "--sglang-command", cmd_text,
            "--input-len", str(wl["input_len"]), "--output-len", str(wl["output_len"]),
            # --concurrency is bench's --max-concurrency (--batch alone would put every prompt in flight at once)
            "--concurrency", str(wl.get("max_concurrency") or wl["num_prompts"]), "--num-prompts", str(wl["num_prompts"]),
            "--json"]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    if out.returncode:
        raise SystemExit(f"kvcalc plan failed: {shlex.join(argv[2:])}\n{out.stderr[-2000:]}")
    return argv[2:], json.loads(out.stdout)


def main():
    dest, files = sys.argv[1], sys.argv[2:]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "kvcalc"], capture_output=True, text=True,
                                cwd=REPO).stdout.strip())
    result = {"schema": "kvcalc.sglang_predictions/1", "gpu": "h200", "kvcalc_commit": commit,
              "kvcalc_tree_dirty": dirty, "cases_files": files, "cases": []}
    for f in files:
        cases = json.load(open(os.path.join(REPO, f) if not os.path.isabs(f) else f))
        for case in cases["cases"]:
            serve = cases.get("common_args", []) + case["serve_args"]
            kv = "auto"
            if "--kv-cache-dtype" in serve:
                kv = serve[serve.index("--kv-cache-dtype") + 1]
            else:  # name it, so plan gives the one row the server runs (not its FP8-KV alternatives too)
                serve = serve + ["--kv-cache-dtype", "auto"]
            cmd_text = shlex.join(["python", "-m", "sglang.launch_server", "--model-path", case["catalog"]] + serve)
            ctx = None if "--context-length" in serve else model_context(case["catalog"])
            row = {"case": case["name"], "run": cases.get("run"), "catalog": case["catalog"], "sglang_command": cmd_text,
                   "kv_cache_dtype": kv, "workloads": []}
            for wl in case["workloads"]:
                argv, d = plan(cmd_text, wl, ctx)
                # the row the server runs: bf16 weights (dummy load of a bf16 checkpoint) and the case's KV dtype
                # (plan adds the baseline row beside an FP8-KV ask)
                rows = [r for r in d["rows"] if r["engine"] == "sglang" and r["weights_format"] == "bf16"
                        and r["kv_format"] == ("fp8" if kv.startswith("fp8") else "auto")]
                if len(rows) != 1:
                    raise SystemExit(f"{case['name']}: {len(rows)} SGLang rows from {shlex.join(argv)}")
                r = rows[0]
                b = r["sglang_breakdown"]
                if "memory" not in row:
                    row["kvcalc_command"] = "kvcalc " + shlex.join(argv)
                    row["memory"] = {k: b.get(k) for k in (
                        "mem_fraction_static", "mem_fraction_source", "free_at_start", "weights_bytes",
                        "kv_budget_bytes", "cell_bytes", "max_total_num_tokens", "swa_tokens", "page_size",
                        "context_len", "chunked_prefill_size", "cuda_graph_max_bs", "max_running_requests", "layout")}
                    row["warnings"] = d.get("warnings", [])
                bench = r.get("bench") or {}
                pct = bench.get("percentiles", {})
                row["workloads"].append({
                    "id": wl["id"], "mean_ttft_ms": bench.get("ttft_s", 0) * 1e3, "p99_ttft_ms": pct.get("p99_ttft_ms"),
                    "mean_tpot_ms": bench.get("tpot_s", 0) * 1e3, "output_throughput": bench.get("output_tokens_per_s"),
                    "concurrency": bench.get("concurrency"), "preemptions": bench.get("preemptions")})
                if wl.get("max_concurrency") and (bench.get("concurrency") or 0) > wl["max_concurrency"] + 0.5:
                    raise SystemExit(f"{case['name']} {wl['id']}: kvcalc ran {bench.get('concurrency')} in flight, "
                                     f"the bench at most {wl['max_concurrency']}")
            result["cases"].append(row)
            print(f"{case['name']:22s} mfs {row['memory']['mem_fraction_static']} tokens "
                  f"{row['memory']['max_total_num_tokens']:,} ctx {row['memory']['context_len']} "
                  + " ".join(f"{w['id']}: ttft {w['mean_ttft_ms']:.0f} ms tpot {w['mean_tpot_ms']:.2f} ms"
                             for w in row["workloads"]))
    json.dump(result, open(dest, "w"), indent=1)


if __name__ == "__main__":
    main()
