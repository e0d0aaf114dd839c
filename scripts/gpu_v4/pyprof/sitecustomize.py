"""A sampling profiler in every `vllm serve` process (issue 25, run l): where the API server's time goes under load.

Started by site in each process of a server whose environment has KVCALC_PROFILE_DIR (serve_cases_l.json puts it in
the server's env only, so the bench client is not profiled). Two kinds of evidence, per workload ("phase": the
runner writes the workload's name to KVCALC_PHASE_FILE before it starts and "idle" after it ends):
- **CPU seconds per thread** from /proc/self/task/<tid>/stat (utime + stime, kernel ticks): unbiased, no sampling;
  a thread whose CPU time is close to the phase's wall time is saturated.
- **Stacks**: every KVCALC_PROFILE_INTERVAL_S (default 2 ms) a daemon thread reads sys._current_frames() and books
  the time since its last sample to each thread's current stack. The sampler needs the GIL to look, so while another
  thread runs Python it looks at the next GIL hand-over: the time booked stays proportional to where each thread was,
  but a thread shown in Python code may be waiting for the GIL rather than running. The per-thread CPU times settle
  which.
Each finished phase is written at once to KVCALC_PROFILE_DIR/prof-<pid>-<n>.json (results as they arrive).
"""
import os

_DIR = os.environ.get("KVCALC_PROFILE_DIR")


def _start():
    import json
    import sys
    import threading
    import time

    interval = float(os.environ.get("KVCALC_PROFILE_INTERVAL_S", "0.002"))
    phase_file = os.environ.get("KVCALC_PHASE_FILE", "")
    pid = os.getpid()
    try:
        cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        cmdline = " ".join(sys.argv)[:300]
    tick = os.sysconf("SC_CLK_TCK")

    def thread_cpu():
        out = {}
        base = "/proc/self/task"
        for tid in os.listdir(base):
            try:
                f = open(f"{base}/{tid}/stat").read()
                comm = f[f.index("(") + 1:f.rindex(")")]
                rest = f[f.rindex(")") + 2:].split()
                out[int(tid)] = (comm, (int(rest[11]) + int(rest[12])) / tick)
            except (OSError, ValueError, IndexError):
                pass
        return out

    def names():
        by_native = {}
        for t in threading.enumerate():
            by_native[t.ident] = (t.name, getattr(t, "native_id", None))
        return by_native

    def stack_of(frame, depth=48):
        parts = []
        while frame is not None and len(parts) < depth:
            co = frame.f_code
            fn = co.co_filename
            i = fn.find("site-packages/")
            fn = fn[i + 14:] if i >= 0 else fn[-60:]
            parts.append(f"{fn}:{co.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        return ";".join(reversed(parts))

    state = {"phase": "start", "t0": time.perf_counter(), "cpu0": thread_cpu(), "stacks": {}, "n": 0, "samples": 0}

    def flush(now):
        cpu1 = thread_cpu()
        wall = now - state["t0"]
        threads = {}
        for tid, (comm, c1) in cpu1.items():
            c0 = state["cpu0"].get(tid, (comm, 0.0))[1]
            threads[str(tid)] = {"comm": comm, "cpu_s": round(c1 - c0, 3)}
        tn = names()
        for ident, (name, native) in tn.items():
            if native is not None and str(native) in threads:
                threads[str(native)]["name"] = name
        per_thread = {}
        for (tname, st), w in state["stacks"].items():
            per_thread.setdefault(tname, []).append((w, st))
        top = {t: [[round(w, 4), st] for w, st in sorted(v, reverse=True)[:400]] for t, v in per_thread.items()}
        rec = {"pid": pid, "cmdline": cmdline, "phase": state["phase"], "wall_s": round(wall, 3),
               "samples": state["samples"], "interval_s": interval, "threads": threads, "stacks": top}
        state["n"] += 1
        try:
            os.makedirs(_DIR, exist_ok=True)
            path = os.path.join(_DIR, f"prof-{pid}-{state['n']:03d}.json")
            json.dump(rec, open(path + ".tmp", "w"))
            os.replace(path + ".tmp", path)
        except OSError:
            pass
        state.update(t0=now, cpu0=cpu1, stacks={}, samples=0)

    def read_phase():
        try:
            return open(phase_file).read().strip() or "idle"
        except OSError:
            return "idle"

    def run():
        me = threading.get_ident()
        last = time.perf_counter()
        next_phase_check = 0.0
        while True:
            time.sleep(interval)
            now = time.perf_counter()
            if now >= next_phase_check:
                next_phase_check = now + 0.05
                ph = read_phase()
                if ph != state["phase"]:
                    flush(now)
                    state["phase"] = ph
                    last = now
                    continue
            dt, last = now - last, now
            tn = {ident: name for ident, (name, _) in names().items()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                key = (tn.get(ident, str(ident)), stack_of(frame))
                state["stacks"][key] = state["stacks"].get(key, 0.0) + dt
            state["samples"] += 1

    threading.Thread(target=run, name="kvcalc-profiler", daemon=True).start()


def _start_safely():
    try:
        _start()
    except Exception as e:  # never break the server
        import sys
        print(f"kvcalc profiler not started: {e!r}", file=sys.stderr)


if _DIR:
    _start_safely()
    # a forked child (vLLM's worker processes when fork is the method) keeps no threads: start its own sampler
    os.register_at_fork(after_in_child=_start_safely)
