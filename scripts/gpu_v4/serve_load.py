#!/usr/bin/env python3
"""Measure `vllm serve` under load with `vllm bench serve` on the GPU host (issue 25).

For each shape of a case file: write its config.json (from kvcalc's catalog) and a word-level tokenizer
(make_tokenizer.py), start the real OpenAI server with random weights and vLLM's serve defaults (CUDA graphs,
prefix caching, chunked prefill), run every workload of the shape through vLLM's own benchmark client
(vllm.benchmarks.serve.main, the code behind `vllm bench serve`, in-process so the client's import is paid once),
save each result JSON (--save-result --save-detailed), the server's start-up log and one /metrics capture, then kill
the server. A workload that fails is recorded and the next one runs. Each workload gets its own --seed so that no
two runs on one server send the same random prompts (prefix caching would serve them from cache).

Usage on the host (after `source .gpu-bundle/device_setup.sh`):
    python3 scripts/gpu_v4/serve_load.py CASES.json RESULT_DIR TARBALL [--shapes NAME,NAME]
The result folder is packed into TARBALL after every workload, so a command cut off by its time limit still returns
what it measured (the device returns at most 8 files).
"""
import atexit, json, os, tarfile, zlib, shlex, signal, subprocess, sys, time, traceback, urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_model_dir(shape, d):
    os.makedirs(d, exist_ok=True)
    cfg = json.load(open(os.path.join(REPO, "kvcalc", "catalog", shape["catalog"] + ".json")))["config"]
    cfg = dict(cfg, **shape.get("config_overrides", {}))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    # the tokenizer in its own folder (no config.json: see make_tokenizer.py), named by --tokenizer to server and client
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gpu_v4", "make_tokenizer.py"), d, f"{d}/tokenizer"],
                   check=True)


def wait_health(port, proc, timeout=400):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return True
        except Exception:
            time.sleep(1)
    return False


def bench_args(port, model_dir, wl, seed):
    a = ["--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--model", "m", "--tokenizer", f"{model_dir}/tokenizer",
         "--dataset-name", "random", "--random-input-len", str(wl["input_len"]),
         "--random-output-len", str(wl["output_len"]), "--ignore-eos", "--num-prompts", str(wl["num_prompts"]),
         "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--seed", str(seed),
         "--disable-tqdm", "--save-result", "--save-detailed"]
    if wl.get("max_concurrency"):
        a += ["--max-concurrency", str(wl["max_concurrency"])]
    a += ["--request-rate", str(wl.get("request_rate", "inf"))]
    if wl.get("burstiness"):
        a += ["--burstiness", str(wl["burstiness"])]
    if wl.get("prefix_len"):
        a += ["--random-prefix-len", str(wl["prefix_len"])]
    if wl.get("range_ratio"):
        a += ["--random-range-ratio", str(wl["range_ratio"])]
    return a


def save_metrics(port, path):
    """The server's /metrics text before and after a workload: the histograms' differences split its TTFT into
    the API server's part (render -> first token processed), the engine's queue and its prefill."""
    try:
        open(path, "wb").write(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read())
    except Exception as e:
        open(path + ".error", "w").write(repr(e))


class client_lag_monitor:
    """Times the benchmark client's own asyncio loop: a task asks for 1 ms sleeps and records how late each wakes.
    The client parses every SSE chunk on that one loop, so a late wake-up is time a chunk (a first token) waits in
    the client before vllm bench stamps it. Wraps vllm.benchmarks.serve.benchmark, which main_async awaits."""

    def __init__(self, lags, on):
        self.lags, self.on = lags, on

    def __enter__(self):
        if not self.on:
            return self
        import asyncio
        import vllm.benchmarks.serve as vbs
        self.vbs, self.orig, lags = vbs, vbs.benchmark, self.lags

        async def timed(*a, **k):
            stop = []

            async def monitor():
                while not stop:
                    t = time.perf_counter()
                    await asyncio.sleep(0.001)
                    lags.append(time.perf_counter() - t - 0.001)
            task = asyncio.create_task(monitor())
            try:
                return await self.orig(*a, **k)
            finally:
                stop.append(1)
                await task
        vbs.benchmark = timed
        return self

    def __exit__(self, *exc):
        if self.on:
            self.vbs.benchmark = self.orig
        return False


def lag_summary(lags):
    s = sorted(lags)
    q = lambda f: round(1e3 * s[min(len(s) - 1, int(f * len(s)))], 3)
    return {"wakeups": len(s), "mean_ms": round(1e3 * sum(s) / len(s), 3), "p50_ms": q(0.5), "p90_ms": q(0.9),
            "p99_ms": q(0.99), "max_ms": round(1e3 * s[-1], 3), "late_s_total": round(sum(s), 3)}


def server_thread_cpu(pgid):
    """CPU seconds of every thread of every process in the server's process group (it was started with setsid), read
    from /proc by this process, so the server is not disturbed: {pid: {"cmdline", "threads": {tid: (comm, s)}}}."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = open(f"/proc/{p}/stat").read()
            if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                continue
            cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:200]
            threads = {}
            for tid in os.listdir(f"/proc/{p}/task"):
                f = open(f"/proc/{p}/task/{tid}/stat").read()
                rest = f[f.rindex(")") + 2:].split()
                threads[tid] = (f[f.index("(") + 1:f.rindex(")")], (int(rest[11]) + int(rest[12])) / tick)
            out[p] = {"cmdline": cmd, "threads": threads, "t": time.time()}
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_delta(a, b):
    """Per process and thread: CPU seconds between two server_thread_cpu snapshots, and the wall time between them."""
    rows = []
    for p, rb in b.items():
        ra = a.get(p, {"threads": {}, "t": rb["t"]})
        threads = [{"tid": t, "comm": c, "cpu_s": round(s - ra["threads"].get(t, (c, 0.0))[1], 3)}
                   for t, (c, s) in rb["threads"].items()]
        threads = [t for t in threads if t["cpu_s"] > 0]
        rows.append({"pid": p, "cmdline": rb["cmdline"], "wall_s": round(rb["t"] - ra["t"], 3),
                     "cpu_s": round(sum(t["cpu_s"] for t in threads), 3),
                     "threads": sorted(threads, key=lambda t: -t["cpu_s"])})
    return rows


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def pack(out, tarball):
    tmp = tarball + ".tmp"
    with tarfile.open(tmp, "w:gz") as t:
        t.add(out, arcname=os.path.basename(out.rstrip("/")))
    os.replace(tmp, tarball)


def main():
    cases, out, tarball = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so atexit kills the server when `timeout` stops us
    import argparse
    from vllm.benchmarks.serve import add_cli_args, main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    status = []
    port = 8011
    only = sys.argv[sys.argv.index("--shapes") + 1].split(",") if "--shapes" in sys.argv else None
    for si, shape in enumerate(cases["shapes"]):
        if only and shape["name"] not in only:  # a case file split over commands: the port stays the shape's
            continue
        name, d = shape["name"], f"/tmp/serve_models/{shape['name']}"
        write_model_dir(shape, d)
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", d, "--tokenizer", f"{d}/tokenizer",
               "--load-format", "dummy",
               "--port", str(port + si), "--served-model-name", "m"] + shape["serve_args"]
        log = open(os.path.join(out, f"{name}.server.log"), "w")
        t0 = time.time()
        # A server left over from a command cut off by its time limit would hold the GPU and answer on its port.
        subprocess.run(["pkill", "-f", "vllm[.]entrypoints[.]cli[.]main serve"], check=False)  # [.]: never matches this pattern itself
        time.sleep(3)
        # a shape's "env" (e.g. VLLM_LOGGING_CONFIG_PATH for millisecond timestamps) goes to its server only
        # expandvars after $REPO: a value may extend the host's own (PYTHONPATH=$REPO/...:$PYTHONPATH)
        env = dict(os.environ, **{k: os.path.expandvars(v.replace("$REPO", REPO)) for k, v in shape.get("env", {}).items()})
        phase_file = None
        if cases.get("profile") or cases.get("instr"):  # per workload: the server's samplers (pyprof) or counters (pyinstr)
            phase_file = os.path.join(out, f"{name}.phase")
            open(phase_file, "w").write("idle")
            kind = "pyprof" if cases.get("profile") else "pyinstr"
            env.update(KVCALC_PROFILE_DIR=os.path.join(out, f"{name}.prof"), KVCALC_PHASE_FILE=phase_file,
                       KVCALC_INSTR_DIR=os.path.join(out, f"{name}.instr"),
                       PYTHONPATH=os.path.join(REPO, "scripts", "gpu_v4", kind) + ":" + env.get("PYTHONPATH", ""))
            if kind == "pyinstr":
                env.pop("KVCALC_PROFILE_DIR")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=os.setsid, env=env)
        atexit.register(lambda pid=proc.pid: _kill_group(pid))
        ok = wait_health(port + si, proc)
        row = {"shape": name, "serve_command": "vllm serve " + shlex.join(cmd[4:]), "server_env": shape.get("env", {}),
               "start_s": round(time.time() - t0, 1),
               "started": ok, "workloads": []}
        status.append(row)
        if ok:
            for wi, wl in enumerate(shape["workloads"]):
                seed = zlib.crc32(f"{cases.get('run', '')}/{name}/{wl['id']}".encode()) % 2**31
                args_list = bench_args(port + si, d, wl, seed) + ["--result-dir", out,
                                                               "--result-filename", f"{name}.{wl['id']}.json"]
                p = FlexibleArgumentParser()
                add_cli_args(p)
                w0 = time.time()
                if cases.get("metrics_each"):
                    save_metrics(port + si, os.path.join(out, f"{name}.{wl['id']}.metrics0.txt"))
                lags = []
                cpu0 = server_thread_cpu(proc.pid) if cases.get("proc_cpu") else None
                if phase_file:
                    open(phase_file, "w").write(f"{name}.{wl['id']}")
                try:
                    with client_lag_monitor(lags, cases.get("client_lag")):
                        bench_main(p.parse_args(args_list))
                    row["workloads"].append({"id": wl["id"], "ok": True, "wall_s": round(time.time() - w0, 1),
                                             "bench_command": "vllm bench serve " + shlex.join(args_list)})
                    if lags:
                        row["workloads"][-1]["client_loop_lag"] = lag_summary(lags)
                except BaseException as e:  # one failed workload must not stop the others
                    row["workloads"].append({"id": wl["id"], "ok": False, "error": repr(e)[:500],
                                             "trace": traceback.format_exc()[-1500:]})
                if cpu0 is not None:
                    json.dump(cpu_delta(cpu0, server_thread_cpu(proc.pid)),
                              open(os.path.join(out, f"{name}.{wl['id']}.cpu.json"), "w"), indent=1)
                if phase_file:
                    open(phase_file, "w").write("idle")
                    time.sleep(0.2)  # the samplers look every 50 ms: the phase's record is written before the next
                if cases.get("metrics_each"):
                    save_metrics(port + si, os.path.join(out, f"{name}.{wl['id']}.metrics1.txt"))
                if wi == 0:
                    try:
                        txt = urllib.request.urlopen(f"http://127.0.0.1:{port + si}/metrics", timeout=5).read()
                        open(os.path.join(out, f"{name}.metrics.txt"), "wb").write(txt)
                    except Exception as e:
                        row["metrics_error"] = repr(e)
                json.dump(status, open(os.path.join(out, "status.json"), "w"), indent=1)
                pack(out, tarball)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        json.dump(status, open(os.path.join(out, "status.json"), "w"), indent=1)
        pack(out, tarball)


if __name__ == "__main__":
    main()
