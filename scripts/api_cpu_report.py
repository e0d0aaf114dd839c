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
import statistics
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
RUNS = ("l", "m", "n", "o", "p", "q")


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
                        if rec.get("process") == "engine core":  # run o: the engine core's input/output paths
                            row["core_paths"] = rec["paths"]
                            continue
                        if rec.get("paths"):
                            row["api_paths"] = rec["paths"]
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
                if row["steps"] is None and "core_output" in row.get("core_paths", {}):
                    # a server without the iteration log (run p's default one): its engine core's step outputs
                    row["steps"] = row["core_paths"]["core_output"]["n"]
                out.append(row)
    return out


REFERENCE_RUN = "o"  # the machine the costs are stated at (each other run's machine: a fitted multiple of it)
COSTS = ("steps", "tokens", "chunks")  # per engine step, per output token processed, per SSE chunk written


def _used(rs: list[dict]) -> list[dict]:
    return [r for r in rs if r["run"] != "l" and r.get("loop_cpu_s") is not None and r.get("steps")]


def fit(rs: list[dict]) -> tuple[dict, dict]:
    """The loop thread's CPU seconds as machine x (per-step + per-token + per-chunk costs): the costs at
    REFERENCE_RUN's machine and each run's machine as a multiple of it, alternating least squares (costs given the
    machines, then each machine's multiple given the costs) over the unprofiled runs. Each lease is a fresh machine
    whose Python runs at its own speed (1.4-1.6x apart here), so costs shared across machines need that factor."""
    use = _used(rs)
    runs_in = sorted({r["run"] for r in use})
    ref = REFERENCE_RUN if REFERENCE_RUN in runs_in else runs_in[0]
    x = np.array([[r[k] for k in COSTS] for r in use], float)
    y = np.array([r["loop_cpu_s"] for r in use])
    scale = {run: 1.0 for run in runs_in}
    for _ in range(50):
        m = np.array([scale[r["run"]] for r in use])
        costs, *_ = np.linalg.lstsq(x * m[:, None], y, rcond=None)
        costs = np.maximum(costs, 0.0)
        p = x @ costs
        for run in runs_in:
            mine = np.array([r["run"] == run for r in use])
            scale[run] = float(p[mine] @ y[mine] / (p[mine] @ p[mine]))
        base = scale[ref]
        scale = {run: v / base for run, v in scale.items()}
    m = np.array([scale[r["run"]] for r in use])
    costs, *_ = np.linalg.lstsq(x * m[:, None], y, rcond=None)
    return dict(zip(COSTS, np.maximum(costs, 0.0).tolist())), scale


def predicted_cpu(r: dict, costs: dict, scale: dict) -> float:
    return scale[r["run"]] * sum(costs[k] * r[k] for k in COSTS)


def server_name(r: dict) -> str:
    """The server's tag in the tables (its shape name less the model's)."""
    return r["shape"].replace("llama-3.2-3b-fp8kv-", "")


def table(rs: list[dict]) -> str:
    costs, scale = fit(rs)
    f = lambda v, d=1: "" if v is None else f"{v:,.{d}f}"
    lines = ["| run | server | workload | TTFT ms | TPOT ms | out tok/s | steps | tokens / chunks | loop CPU s / wall s | "
             "fit | tokenizer CPU s | loop backlog ms (mean / p90) | GC s | tokenize: queue / wall / CPU ms |",
             "|---|---|---|---:|---:|---:|---:|---|---|---:|---:|---|---:|---|"]
    for r in rs:
        pred = predicted_cpu(r, costs, scale) if r["run"] in scale and r.get("steps") else None
        fitcell = f"{pred:.2f} ({pred / r['loop_cpu_s'] - 1:+.0%})" if pred and r.get("loop_cpu_s") else ""
        tok = (f"{r['tok_queue_ms']:.1f} / {r['tok_wall_ms']:.1f} / {r['tok_cpu_ms']:.1f}"
               if "tok_jobs" in r else "")
        lag = f"{r['lag_mean_ms']:.1f} / {r['lag_p90_ms']:.1f}" if "lag_mean_ms" in r else ""
        gc = ("off" if not r["gc_enabled"] else f"{r['gc_s']:.2f}") if "gc_s" in r else ""
        lines.append(f"| {r['run']} | {server_name(r)} | {r['workload']} | {f(r['mean_ttft_ms'])} | {f(r['mean_tpot_ms'], 2)} | "
                     f"{f(r['output_throughput'], 0)} | {f(r['steps'], 0)} | {r['tokens']:,} / {r['chunks']:,} | "
                     f"{f(r.get('loop_cpu_s'), 2)} / {f(r.get('wall_s'), 1)} | {fitcell} | {f(r.get('tokenizer_cpu_s'), 2)} | "
                     f"{lag} | {gc} | {tok} |")
    lines.append("")
    use = _used(rs)
    others = ", ".join(f"{run} {v:.2f}x" for run, v in sorted(scale.items()) if run != REFERENCE_RUN)
    mean_err = statistics.fmean(abs(predicted_cpu(r, costs, scale) / r["loop_cpu_s"] - 1) for r in use)
    lines.append(f"Fit over runs {', '.join(sorted(scale))} ({len(use)} workloads, one machine per run): at run "
                 f"{REFERENCE_RUN}'s machine the API server's loop thread spends {costs['steps'] * 1e3:.2f} ms of CPU "
                 f"per engine step, {costs['tokens'] * 1e6:.1f} us per output token it processes and "
                 f"{costs['chunks'] * 1e6:.1f} us per SSE chunk it writes; the other machines' loops ran at {others} "
                 f"its CPU time (mean |error| {mean_err:.0%}). "
                 "Run l (sampling profiler in every server process) is not in the fit: the profiler slowed the servers.")
    paths = [r for r in rs if "core_paths" in r]
    if paths:
        lines += ["", "Runs o-q's paths outside the engine (scripts/gpu_v4/pyinstr KVCALC_INSTR_PATHS; ms, mean / p90): "
                  "tokenization in the API server's pool (queue wait + wall); a request's age when the engine core's "
                  "input thread decodes it (from the API server's arrival_time, set as rendering starts: "
                  "renderers/base.py render_cmpl_async, so tokenization included); its wait in the engine core's "
                  "input queue until the busy loop takes it; a step output's age when the engine core's output "
                  "thread sends it and when the API server's process_outputs starts on it (from the engine core's "
                  "EngineCoreOutputs.timestamp); outputs per step (mean / max).", "",
                  "| run | server | workload | TTFT ms | tokenize queue + wall | core input age | core input queue | "
                  "core output age | API output age | outputs per step |",
                  "|---|---|---|---:|---|---|---|---|---|---|"]
        d = lambda p, k="age": f"{p[k]['mean_ms']:.1f} / {p[k]['p90_ms']:.1f}" if p else ""
        for r in paths:
            c, a = r["core_paths"], r.get("api_paths", {})
            out = c.get("core_output", {}).get("outputs")
            per_step = f"{out['mean']:.0f} / {out['max']}" if out else ""
            lines.append(f"| {r['run']} | {server_name(r)} | {r['workload']} | "
                         f"{f(r['mean_ttft_ms'])} | {r['tok_queue_ms'] + r['tok_wall_ms']:.1f} | "
                         f"{d(c.get('core_input'))} | {d(c.get('core_input_queue'), 'wait')} | "
                         f"{d(c.get('core_output'))} | {d(a.get('api_output_age'))} | "
                         f"{per_step} |")
    return "\n".join(lines) + "\n"


def generated_blocks() -> list[tuple]:
    return [(DOC, START, END, table(rows()))]


if __name__ == "__main__":
    print_or_write(generated_blocks(), sys.argv[1:])
