#!/usr/bin/env python3
"""Where the API server's time goes under load (issue 25, runs l-n): the table of docs/validation/README.md's
"Runs l-n" section, made from the committed raw data (docs/validation/data/v4/serve/raw-{l,m,n}.tar.xz).

    PYTHONPATH=. python3 scripts/api_cpu_report.py [--write]

Per workload of the 3B with fp8 KV (vLLM 0.26 `vllm serve`, one H200): what vllm bench measured, the engine steps
the server logged (--enable-logging-iteration-details), the SSE chunks the client received (vllm bench's ITLs, one
per chunk, plus the first), the CPU seconds of the API server's event-loop thread and of its tokenizer thread
(/proc, read by the runner outside the server: serve_load.py proc_cpu), the loop's backlog (a callback handed to
the running loop every 5 ms, its wait; scripts/gpu_v4/pyinstr), the collector's time, and the renderer pool's
tokenization jobs (queue wait, wall, thread CPU). Then the fit of the loop thread's CPU to per-step and per-chunk
costs over the unprofiled runs (m, n), least squares, and each run's residual.
"""
from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from doc_blocks import print_or_write  # noqa: E402

from kvcalc.validate.vllm_iterations import parse_steps, workloads  # noqa: E402

DATA = ROOT / "docs" / "validation" / "data" / "v4" / "serve"
DOC = ROOT / "docs" / "validation" / "README.md"
START, END = "<!-- api-cpu:start (scripts/api_cpu_report.py --write) -->", "<!-- api-cpu:end -->"
RUNS = ("l", "m", "n")


def raw(run: str) -> dict[str, bytes]:
    with tarfile.open(DATA / f"raw-{run}.tar.xz") as tar:
        return {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def step_groups(log: str) -> list[int]:
    """Engine steps per workload: the server's iteration lines, split where a second passes without one (the
    workloads of a server run one after another with a pause for /metrics between them)."""
    return [len(run) for run in workloads(parse_steps(log))]


def rows() -> list[dict]:
    out = []
    for run in RUNS:
        files = raw(run)
        status = json.loads(files[f"status-{run}.json"])
        for shape in status:
            name = shape["shape"]
            ok = [w["id"] for w in shape["workloads"] if w.get("ok")]
            steps = step_groups(files.get(f"{name}.{run}.server.log", b"").decode())
            for wi, wl in enumerate(ok):
                bench = json.loads(files[f"{name}.{wl}.{run}.json"])
                row = {"run": run, "shape": name, "workload": wl, "mean_ttft_ms": bench["mean_ttft_ms"],
                       "mean_tpot_ms": bench["mean_tpot_ms"], "output_throughput": bench["output_throughput"],
                       "tokens": sum(bench["output_lens"]),
                       "chunks": sum(len(x) + 1 for x in bench["itls"]),
                       "steps": steps[wi] if wi < len(steps) else None}
                cpu = files.get(f"{name}.{wl}.{run}.cpu.json")
                if cpu:
                    api = next(p for p in json.loads(cpu) if "serve" in p["cmdline"])
                    row.update(wall_s=api["wall_s"], loop_cpu_s=api["threads"][0]["cpu_s"],
                               tokenizer_cpu_s=api["threads"][1]["cpu_s"])
                for key, b in files.items():
                    if key.startswith(f"{name}.{wl}.{run}.instr-"):
                        rec = json.loads(b)
                        row.update(lag_mean_ms=rec["lag_mean_ms"], lag_p90_ms=rec["lag_p90_ms"],
                                   gc_s=round(sum(g["seconds"] for g in rec["gc"].values()), 3),
                                   gc_enabled=rec["gc_enabled"])
                        jobs = rec.get("pool_jobs", {}).get("partial")
                        if jobs:
                            row.update(tok_jobs=jobs["jobs"], tok_queue_ms=jobs["queue_wait"]["mean_ms"],
                                       tok_wall_ms=jobs["wall"]["mean_ms"], tok_cpu_ms=jobs["thread_cpu"]["mean_ms"])
                    if key.startswith(f"{name}.{wl}.{run}.prof-"):
                        rec = json.loads(b)
                        if "serve" in rec["cmdline"]:
                            threads = sorted(rec["threads"].values(), key=lambda t: -t["cpu_s"])
                            row.update(wall_s=rec["wall_s"], loop_cpu_s=threads[0]["cpu_s"],
                                       tokenizer_cpu_s=next((t["cpu_s"] for t in threads
                                                             if t.get("name", "").startswith("ThreadPool")), None))
                out.append(row)
    return out


def fit(rs: list[dict]) -> tuple[float, float]:
    """The loop thread's CPU seconds as per-step + per-chunk costs, least squares over the unprofiled runs."""
    use = [r for r in rs if r["run"] != "l" and r.get("loop_cpu_s") is not None]
    a = np.array([[r["steps"], r["chunks"]] for r in use], float)
    x, *_ = np.linalg.lstsq(a, np.array([r["loop_cpu_s"] for r in use]), rcond=None)
    return float(x[0]), float(x[1])


def table(rs: list[dict]) -> str:
    step_s, chunk_s = fit(rs)
    f = lambda v, d=1: "" if v is None else f"{v:,.{d}f}"
    lines = ["| run | server | workload | TTFT ms | TPOT ms | out tok/s | steps | tokens / chunks | loop CPU s / wall s | "
             "fit (step + chunk) | tokenizer CPU s | loop backlog ms (mean / p90) | GC s | tokenize: queue / wall / CPU ms |",
             "|---|---|---|---:|---:|---:|---:|---|---|---:|---:|---|---:|---|"]
    for r in rs:
        pred = step_s * r["steps"] + chunk_s * r["chunks"] if r["run"] != "l" and r.get("steps") else None
        fitcell = f"{pred:.2f} ({pred / r['loop_cpu_s'] - 1:+.0%})" if pred and r.get("loop_cpu_s") else ""
        tok = (f"{r['tok_queue_ms']:.1f} / {r['tok_wall_ms']:.1f} / {r['tok_cpu_ms']:.1f}"
               if "tok_jobs" in r else "")
        lag = f"{r['lag_mean_ms']:.1f} / {r['lag_p90_ms']:.1f}" if "lag_mean_ms" in r else ""
        gc = ("off" if not r["gc_enabled"] else f"{r['gc_s']:.2f}") if "gc_s" in r else ""
        server = r["shape"].replace("llama-3.2-3b-fp8kv-", "")
        lines.append(f"| {r['run']} | {server} | {r['workload']} | {f(r['mean_ttft_ms'])} | {f(r['mean_tpot_ms'], 2)} | "
                     f"{f(r['output_throughput'], 0)} | {f(r['steps'], 0)} | {r['tokens']:,} / {r['chunks']:,} | "
                     f"{f(r.get('loop_cpu_s'), 2)} / {f(r.get('wall_s'), 1)} | {fitcell} | {f(r.get('tokenizer_cpu_s'), 2)} | "
                     f"{lag} | {gc} | {tok} |")
    lines.append("")
    lines.append(f"Fit over runs m and n (9 workloads): the API server's loop thread spends {step_s * 1e3:.2f} ms of CPU "
                 f"per engine step and {chunk_s * 1e6:.0f} us per SSE chunk (its tokens' output processing included). "
                 "Run l (sampling profiler in every server process) is not in the fit: the profiler slowed the servers.")
    return "\n".join(lines) + "\n"


def generated_blocks() -> list[tuple]:
    return [(DOC, START, END, table(rows()))]


if __name__ == "__main__":
    print_or_write(generated_blocks(), sys.argv[1:])
