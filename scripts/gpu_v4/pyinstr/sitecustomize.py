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
- **the output path** (run o, KVCALC_INSTR_PATHS=1): each OutputProcessor.process_outputs call books how old the
  engine core's step output is when the API loop starts on it (time.monotonic, one clock for every process of the
  host, less EngineCoreOutputs.timestamp, stamped as the engine core made it), and in the engine core process (the
  same file, gated on its command line) the input thread books, per added request, its age when decoded (time.time
  less the API server's arrival_time), preprocess_add_request's wall and thread CPU, and the wait in the input queue
  until the busy loop takes it; the output thread books each step output's age when it encodes it and the encode's
  wall and thread CPU (wall less CPU: waiting for the engine core's GIL while its scheduler loop runs);
- with KVCALC_GC_DISABLE=1, the collector is switched off once the loop runs (the test of whether collections are
  what slows the loop under many open streams).
Per workload (the runner writes its name to KVCALC_PHASE_FILE before it and "idle" after), written as it ends to
KVCALC_INSTR_DIR/instr-<pid>-<n>.json. Per-thread CPU seconds are read by the runner from /proc (serve_load.py
`proc_cpu`), outside the server.
"""
import json
import os
import sys

_DIR = os.environ.get("KVCALC_INSTR_DIR")


# the fields each path books, in order: seconds are summarized in ms, counts as counts
PATH_FIELDS = {"api_output_age": ("age", "outputs"), "core_input": ("age", "wall", "thread_cpu"),
               "core_input_queue": ("wait",), "core_output": ("age", "wall", "thread_cpu", "outputs")}


def _dist(xs, scale=1e3, unit="_ms"):
    """Mean, median, p90 and max of values (seconds, summarized in ms; counts with scale 1 and no unit)."""
    xs = sorted(xs)
    return {f"mean{unit}": round(scale * sum(xs) / len(xs), 3), f"p50{unit}": round(scale * xs[len(xs) // 2], 3),
            f"p90{unit}": round(scale * xs[int(0.9 * len(xs))], 3), f"max{unit}": round(scale * xs[-1], 3)}


def _write_record(rec, n):
    """One phase's record, written as it ends (KVCALC_INSTR_DIR/instr-<pid>-<n>.json, atomically)."""
    try:
        os.makedirs(_DIR, exist_ok=True)
        path = os.path.join(_DIR, f"instr-{rec['pid']}-{n:03d}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(rec, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _read_phase(phase_file):
    """The workload the runner says is running (KVCALC_PHASE_FILE), "idle" between workloads."""
    try:
        return open(phase_file).read().strip() or "idle"
    except OSError:
        return "idle"


def _summarize_paths(paths):
    out = {}
    for key, rows in paths.items():
        if not rows:
            continue
        rec = {"n": len(rows)}
        for i, field in enumerate(PATH_FIELDS.get(key, [f"v{j}" for j in range(len(rows[0]))])):
            xs = [r[i] for r in rows]
            rec[field] = _dist(xs, 1, "") if field == "outputs" else _dist(xs)
        out[key] = rec
    return out


def _cmdline():
    try:
        return open("/proc/self/cmdline", "rb").read().split(b"\0")
    except OSError:
        return []


def _is_api_server():
    cmd = _cmdline()
    return b"vllm.entrypoints.cli.main" in cmd and b"serve" in cmd


def _is_engine_core():
    """vLLM spawns the engine core with `python -c 'from multiprocessing.spawn import spawn_main; ...'`; the instruments
    need the paths' timings only there (the tokenizer pool and the loop probe are the API server's)."""
    return any(b"multiprocessing.spawn" in part for part in _cmdline()) and os.environ.get("KVCALC_INSTR_PATHS") == "1"


def _after_import(name, patch):
    """Run patch(module) right after `name` is first imported (the module is not loaded when site runs)."""
    import importlib.abc

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    run = spec.loader.exec_module

                    def exec_module(module, run=run):
                        run(module)
                        try:
                            patch(module)
                        except Exception as e:  # never break the server
                            print(f"kvcalc instruments: {name} not patched: {e!r}", file=sys.stderr)
                    spec.loader.exec_module = exec_module
                    return spec
            return None

    sys.meta_path.insert(0, Finder())


def _install():
    import asyncio.runners
    import gc
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
    st["paths"] = {}

    def book(key, *values):
        st["paths"].setdefault(key, []).append(values)

    if os.environ.get("KVCALC_INSTR_PATHS") == "1":
        def patch_output_processor(module):
            cls = module.OutputProcessor
            orig = cls.process_outputs

            def process_outputs(self, engine_core_outputs, engine_core_timestamp=None, iteration_stats=None):
                if engine_core_timestamp:
                    book("api_output_age", time.monotonic() - engine_core_timestamp, len(engine_core_outputs))
                return orig(self, engine_core_outputs, engine_core_timestamp, iteration_stats)
            cls.process_outputs = process_outputs
        _after_import("vllm.v1.engine.output_processor", patch_output_processor)

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
        job_stats = {name: {"jobs": len(v), "queue_wait": _dist([x[0] for x in v]), "wall": _dist([x[1] for x in v]),
                            "thread_cpu": _dist([x[2] for x in v])} for name, v in jobs.items()}
        paths = _summarize_paths(st["paths"])
        rec = {"pid": pid, "pool_jobs": job_stats, "paths": paths, "phase": st["phase"], "wall_s": round(now - st["t0"], 3), "lag_interval_s": interval,
               "probes": len(lags), "lag_mean_ms": round(1e3 * sum(lags) / len(lags), 3) if lags else None,
               "lag_p50_ms": q(0.5), "lag_p90_ms": q(0.9), "lag_p99_ms": q(0.99),
               "lag_max_ms": round(1e3 * lags[-1], 3) if lags else None,
               "gc": {k: {"collections": v[0], "seconds": round(v[1], 4), "collected": v[2]} for k, v in st["gc"].items()},
               "gc_enabled": gc.isenabled(), "switch_interval_s": sys.getswitchinterval()}
        st["n"] += 1
        _write_record(rec, st["n"])
        st.update(t0=now, lags=[], gc={}, jobs=[], paths={})

    def probe_loop(loop):
        next_check = 0.0
        while not loop.is_closed():
            time.sleep(interval)
            now = time.perf_counter()
            if now >= next_check:
                next_check = now + 0.05
                ph = _read_phase(phase_file)
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


def _install_engine_core():
    """The engine core's input and output threads (run o): see the module doc."""
    import threading
    import time

    phase_file = os.environ.get("KVCALC_PHASE_FILE", "")
    pid = os.getpid()
    st = {"phase": "start", "t0": time.perf_counter(), "paths": {}, "n": 0}

    def book(key, *values):
        st["paths"].setdefault(key, []).append(values)

    def patch_core(module):
        cls = module.EngineCoreProc
        pre, handle = cls.preprocess_add_request, cls._handle_client_request

        def preprocess_add_request(self, request):
            t0, c0 = time.perf_counter(), time.thread_time()
            age = time.time() - request.arrival_time
            out = pre(self, request)
            book("core_input", age, time.perf_counter() - t0, time.thread_time() - c0)
            try:
                out[0]._kvcalc_put = time.perf_counter()
            except (AttributeError, TypeError, IndexError):
                pass
            return out

        def _handle_client_request(self, request_type, request):
            put = getattr(request[0], "_kvcalc_put", None) if isinstance(request, tuple) and request else None
            if put is not None:
                book("core_input_queue", time.perf_counter() - put)
            return handle(self, request_type, request)
        cls.preprocess_add_request = preprocess_add_request
        cls._handle_client_request = _handle_client_request

    def patch_serial(module):
        cls = module.MsgpackEncoder
        enc = cls.encode_into

        def encode_into(self, obj, buf):
            ts = getattr(obj, "timestamp", None)
            t0, c0 = time.perf_counter(), time.thread_time()
            out = enc(self, obj, buf)
            if ts and hasattr(obj, "outputs"):  # an EngineCoreOutputs of a step
                book("core_output", time.monotonic() - ts, time.perf_counter() - t0, time.thread_time() - c0,
                     len(obj.outputs or ()))
            return out
        cls.encode_into = encode_into

    _after_import("vllm.v1.engine.core", patch_core)
    _after_import("vllm.v1.serial_utils", patch_serial)

    def flush(now):
        paths = _summarize_paths(st["paths"])
        rec = {"pid": pid, "process": "engine core", "phase": st["phase"], "wall_s": round(now - st["t0"], 3),
               "paths": paths}
        st["n"] += 1
        _write_record(rec, st["n"])
        st.update(t0=now, paths={})

    def watch():
        while True:
            time.sleep(0.05)
            ph = _read_phase(phase_file)
            if ph != st["phase"]:
                flush(time.perf_counter())
                st["phase"] = ph

    threading.Thread(target=watch, name="kvcalc-phase", daemon=True).start()


if _DIR and _is_api_server():
    try:
        _install()
    except Exception as e:  # never break the server
        print(f"kvcalc instruments not installed: {e!r}", file=sys.stderr)
elif _DIR and _is_engine_core():
    try:
        _install_engine_core()
    except Exception as e:  # never break the engine
        print(f"kvcalc engine-core instruments not installed: {e!r}", file=sys.stderr)
