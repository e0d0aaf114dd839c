"""Speed of `kvcalc search` (targets: >= 1,000,000 configurations/s in the vectorized core on one core; a full search
over every built-in GPU, start-up included, under 2 s).

Run: python benchmarks/search_bench.py [--runs 5]
1. Core throughput: the structures (one scalar engine call per GPU x weight format x KV format x TP) are built once;
   then search.evaluate (vLLM block arithmetic, latency, constraints, ranking, Pareto front) runs over a dense grid of
   gpu_memory_utilization x max_num_seqs x replicas. Configurations/s = structures x utils x seqs x replicas / time.
   numpy is pinned to one thread (OMP/OPENBLAS/MKL_NUM_THREADS=1) and the process to one core where the OS allows.
2. End to end: `python -m kvcalc.cli search ... --json` over every built-in GPU in a fresh interpreter per run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

ARGS = ["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "512", "--concurrency", "32",
        "--max-tpot-ms", "50", "--json"]


def core(runs: int) -> None:
    import numpy as np

    from kvcalc.catalog import load_model
    from kvcalc.hardware import list_gpus
    from kvcalc.prices import load_prices
    from kvcalc import search as S

    utils = tuple(round(x, 3) for x in np.arange(0.50, 0.99, 0.001))
    seqs = S.DEFAULT_SEQS
    space = S.Space(list_gpus(), utils=utils, seqs=seqs)
    req = S.SearchRequest(load_model("llama-3.1-8b"), S.Workload(2048, 512, concurrency=32), S.Targets(max_tpot_ms=50),
                          space, load_prices(use_user_file=False))
    mml = req.workload.context
    t0 = time.perf_counter()
    warnings: list[str] = []
    cands, unsupported = S._structures(req, mml, warnings)
    t_struct = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = S.evaluate(req, cands, unsupported, mml, warnings)
        times.append(time.perf_counter() - t0)
    best = min(times)
    print(f"structures: {len(cands)} built in {t_struct:.3f} s (scalar engine calls, once per search)")
    print(f"core: {res.evaluated:,} configurations ({len(cands)} structures x {len(utils)} utils x {len(seqs)} "
          f"max_num_seqs x {space.max_replicas} replicas) in {best:.3f} s (best of {runs}; median "
          f"{statistics.median(times):.3f} s) = {res.evaluated / best:,.0f} configurations/s; "
          f"{res.feasible:,} deployments feasible")


def end_to_end(runs: int) -> None:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvcalc.cli", *ARGS], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    print(f"full search, every built-in GPU, fresh interpreter: min {min(times):.3f} s, median "
          f"{statistics.median(times):.3f} s ({runs} runs): kvcalc {' '.join(ARGS)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    core(runs)
    end_to_end(runs)


if __name__ == "__main__":
    main()
