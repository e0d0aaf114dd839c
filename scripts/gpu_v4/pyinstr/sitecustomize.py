"""Light instruments in the API server process of `vllm serve` (issue 25, run m): no stack sampling.

Run l's sampling profiler (scripts/gpu_v4/pyprof) held the GIL often enough to slow the server it watched (the 3B's
TPOT at 128 clients 9.0 -> 13.2 ms), so this one only counts, in the API server process alone (the process whose
command line is `... vllm.entrypoints.cli.main serve ...`; the engine core is spawned with `-c` and is left alone):
- **the event loop's backlog**: every KVCALC_LAG_INTERVAL_S (5 ms) a thread hands the running loop a callback with
  call_soon_threadsafe and books how long it waited to run (the loop's ready queue, the time any chunk or request
  job waits for its turn);
- **garbage collection**: gc.callbacks book the seconds each generation's collections take;
- **thread-pool jobs** (run n): every job submitted to a concurrent.futures.ThreadPoolExecutor in the process (the
  renderer's one-thread pool that tokenizes prompts, vllm/renderers/base.py:86-100) books its wait in the pool's
  queue, its wall time and the CPU time of its thread while it ran (time.thread_time): wall less CPU is the time
  the job's thread waited, for the GIL above all, while the event loop ran;
- with KVCALC_GC_DISABLE=1, the collector is switched off once the loop runs (the test of whether collections are
  what slows the loop under many open streams).
Per workload (the runner writes its name to KVCALC_PHASE_FILE before it and "idle" after), written as it ends to
KVCALC_INSTR_DIR/instr-<pid>-<n>.json. Per-thread CPU seconds are read by the runner from /proc (serve_load.py
`proc_cpu`), outside the server.
"""
import os

_DIR = os.environ.get("KVCALC_INSTR_DIR")


def _is_api_server():
    try:
        cmd = open("/proc/self/cmdline", "rb").read().split(b"\0")
    except OSError:
        return False
    return b"vllm.entrypoints.cli.main" in cmd and b"serve" in cmd


def _install():
    import asyncio.runners
    import gc
    import json
    import threading
    import time

    interval = float(os.environ.get("KVCALC_LAG_INTERVAL_S", "0.005"))
    phase_file = os.environ.get("KVCALC_PHASE_FILE", "")
    pid = os.getpid()
    st = {"phase": "start", "t0": time.perf_counter(), "lags": [], "gc": {}, "gc_t": None, "n": 0, "jobs": []}

    import concurrent.futures.thread as cft
    orig_submit = cft.ThreadPoolExecutor.submit

    def submit(self, fn, /, *args, **kwargs):
        t_sub = time.perf_counter()
        name = getattr(fn, "__qualname__", None) or type(fn).__name__

        def timed(*a, **k):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                st["jobs"].append((name, t0 - t_sub, time.perf_counter() - t0, time.thread_time() - c0))
        return orig_submit(self, timed, *args, **kwargs)

    cft.ThreadPoolExecutor.submit = submit

    def on_gc(phase, info):
        if phase == "start":
            st["gc_t"] = time.perf_counter()
        elif st["gc_t"] is not None:
            g = st["gc"].setdefault(str(info.get("generation")), [0, 0.0, 0])
            g[0] += 1
            g[1] += time.perf_counter() - st["gc_t"]
            g[2] += info.get("collected", 0)
            st["gc_t"] = None

    gc.callbacks.append(on_gc)

    def flush(now):
        lags = sorted(st["lags"])
        q = lambda f: round(1e3 * lags[min(len(lags) - 1, int(f * len(lags)))], 3) if lags else None
        jobs = {}
        for name, wait, wall, cpu in st["jobs"]:
            jobs.setdefault(name, []).append((wait, wall, cpu))

        def dist(xs):
            xs = sorted(xs)
            return {"mean_ms": round(1e3 * sum(xs) / len(xs), 3), "p50_ms": round(1e3 * xs[len(xs) // 2], 3),
                    "p90_ms": round(1e3 * xs[int(0.9 * len(xs))], 3), "max_ms": round(1e3 * xs[-1], 3)}
        job_stats = {name: {"jobs": len(v), "queue_wait": dist([x[0] for x in v]), "wall": dist([x[1] for x in v]),
                            "thread_cpu": dist([x[2] for x in v])} for name, v in jobs.items()}
        rec = {"pid": pid, "pool_jobs": job_stats, "phase": st["phase"], "wall_s": round(now - st["t0"], 3), "lag_interval_s": interval,
               "probes": len(lags), "lag_mean_ms": round(1e3 * sum(lags) / len(lags), 3) if lags else None,
               "lag_p50_ms": q(0.5), "lag_p90_ms": q(0.9), "lag_p99_ms": q(0.99),
               "lag_max_ms": round(1e3 * lags[-1], 3) if lags else None,
               "gc": {k: {"collections": v[0], "seconds": round(v[1], 4), "collected": v[2]} for k, v in st["gc"].items()},
               "gc_enabled": gc.isenabled(), "switch_interval_s": __import__("sys").getswitchinterval()}
        st["n"] += 1
        try:
            os.makedirs(_DIR, exist_ok=True)
            path = os.path.join(_DIR, f"instr-{pid}-{st['n']:03d}.json")
            json.dump(rec, open(path + ".tmp", "w"))
            os.replace(path + ".tmp", path)
        except OSError:
            pass
        st.update(t0=now, lags=[], gc={}, jobs=[])

    def phase_now():
        try:
            return open(phase_file).read().strip() or "idle"
        except OSError:
            return "idle"

    def probe_loop(loop):
        next_check = 0.0
        while not loop.is_closed():
            time.sleep(interval)
            now = time.perf_counter()
            if now >= next_check:
                next_check = now + 0.05
                ph = phase_now()
                if ph != st["phase"]:
                    flush(now)
                    st["phase"] = ph
            t = time.perf_counter()
            try:
                loop.call_soon_threadsafe(lambda t=t: st["lags"].append(time.perf_counter() - t))
            except RuntimeError:  # the loop closed
                return

    orig = asyncio.runners.Runner._lazy_init

    def lazy_init(self):
        orig(self)
        if getattr(self, "_kvcalc_started", False):
            return
        self._kvcalc_started = True
        if os.environ.get("KVCALC_GC_DISABLE") == "1":
            gc.disable()
        threading.Thread(target=probe_loop, args=(self._loop,), name="kvcalc-lag", daemon=True).start()

    asyncio.runners.Runner._lazy_init = lazy_init


if _DIR and _is_api_server():
    try:
        _install()
    except Exception as e:  # never break the server
        import sys
        print(f"kvcalc instruments not installed: {e!r}", file=sys.stderr)
