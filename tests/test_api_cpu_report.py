"""Runs l-o's instruments (issue 25): the runner's /proc reading, the step count per workload, the loop-CPU fit."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent


def _serve_load():
    spec = importlib.util.spec_from_file_location("serve_load", ROOT / "scripts" / "gpu_v4" / "serve_load.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_step_groups_split_workloads_at_a_second_without_a_step():
    report = load_script("api_cpu_report")
    tail = (" context requests, 1024 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed "
            "time: 0.05 ms, GPU KV cache usage: 0.1%\n")
    line = "(APIServer pid=1) INFO 12-04 18:39:{s} [loggers.py:182] Engine 000: Iteration({i}): 1" + tail
    stamps = ["57.100", "57.150", "57.900", "59.500", "59.510", "01.000"]  # 57.9 -> 59.5 is a pause
    log = "".join(line.format(s=s, i=i) for i, s in enumerate(stamps[:5]))
    log += "(APIServer pid=1) INFO 12-04 18:40:01.000 [loggers.py:182] Engine 000: Iteration(5): 2" + tail
    assert report.step_groups(log) == [3, 2, 1]  # 59.51 -> 18:40:01.0 is 1.49 s: a third workload
    assert report.step_groups("no steps here") == []


def test_the_loop_fit_recovers_hand_made_costs_and_each_machines_speed():
    report = load_script("api_cpu_report")
    costs = {"steps": 0.4e-3, "tokens": 6e-6, "chunks": 50e-6}
    shapes = ((1000, 80_000, 50_000), (500, 130_000, 120_000), (5000, 40_000, 40_000), (900, 98_000, 60_000))
    rows = [{"run": run, "steps": st, "tokens": tk, "chunks": ch,
             "loop_cpu_s": speed * (costs["steps"] * st + costs["tokens"] * tk + costs["chunks"] * ch)}
            for run, speed in (("o", 1.0), ("m", 1.6)) for st, tk, ch in shapes]
    rows.append({"run": "l", "steps": 10, "tokens": 10, "chunks": 10, "loop_cpu_s": 99.0})  # profiled: not in the fit
    got, scale = report.fit(rows)
    assert set(scale) == {"o", "m"} and scale["o"] == 1.0 and abs(scale["m"] - 1.6) < 1e-6
    assert all(abs(got[k] / v - 1) < 1e-6 for k, v in costs.items())


def test_cpu_delta_counts_a_busy_child_and_the_wall_between_snapshots():
    serve_load = _serve_load()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 0.6: pass"],
                             preexec_fn=os.setsid)
    try:
        before = serve_load.server_thread_cpu(child.pid)
        time.sleep(0.8)
        after = serve_load.server_thread_cpu(child.pid)
    finally:
        child.wait()
    rows = serve_load.cpu_delta(before, after)
    assert [r["pid"] for r in rows] == [str(child.pid)]
    assert 0.7 <= rows[0]["wall_s"] <= 2.0
    # the child spun ~0.6 s of CPU, some of it before the first snapshot (a shared 2-core host may give it less)
    assert 0.0 < rows[0]["cpu_s"] <= 0.7


def test_the_table_is_made_from_the_committed_runs():
    report = load_script("api_cpu_report")
    rows = report.rows()
    assert {r["run"] for r in rows} == {"l", "m", "n", "o", "p", "q"}
    m = {r["workload"]: r for r in rows if r["shape"] == "llama-3.2-3b-fp8kv-m"}
    assert set(m) == {"rate32_1k_256", "rate64_1k_256", "c128_1k_256", "rate8_1k_256"}
    assert all(r["tokens"] == 256 * n for r, n in ((m["rate64_1k_256"], 512), (m["c128_1k_256"], 384)))
    assert m["c128_1k_256"]["chunks"] < m["c128_1k_256"]["tokens"]  # merged while the loop lagged
    assert not next(r for r in rows if r["shape"].endswith("-nogc"))["gc_enabled"]


def test_run_o_reads_the_engine_cores_paths_and_its_steps():
    report = load_script("api_cpu_report")
    o = {r["workload"]: r for r in report.rows() if r["run"] == "o"}
    rate64 = o["rate64_1k_256"]
    # the engine core's step outputs and the iteration log count the same steps (a default server has no log)
    assert abs(rate64["core_paths"]["core_output"]["n"] - rate64["steps"]) <= 5
    # the request's age at the engine core includes its tokenization (arrival_time is set before it)
    c128 = o["c128_1k_256"]
    assert c128["core_paths"]["core_input"]["age"]["mean_ms"] > c128["tok_queue_ms"] + c128["tok_wall_ms"]
    # at Poisson 64/s the step outputs wait in the API server far longer than in the engine core
    assert rate64["api_paths"]["api_output_age"]["age"]["mean_ms"] > 20 * rate64["core_paths"]["core_output"]["age"]["mean_ms"]
