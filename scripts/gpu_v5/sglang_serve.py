#!/usr/bin/env python3
"""Measure `python -m sglang.launch_server` (SGLang 0.5.14, random weights) under a short load with SGLang's own
`python -m sglang.bench_serving` on the GPU host (issue 20): the SGLang twin of scripts/gpu_v4/serve_load.py.

For each case of a case file: write its config.json from kvcalc's catalog and a word-level tokenizer
(scripts/gpu_v4/make_tokenizer.py), start the real server (--load-format dummy) with the case's flags, keep its whole
start-up log (the lines `kvcalc validate --from-log` reads: Load weight end, KV Cache is allocated. #tokens,
max_total_num_tokens=...), save /server_info (max_total_num_tokens and the resolved server args as SGLang holds them),
run each workload through bench_serving (--dataset-name random-ids: token ids, never a download; fixed lengths with
--random-range-ratio 1; --tokenize-prompt so the server gets exactly those ids), then kill the server. A case whose
server fails to start, or a workload that fails, is recorded and the next one runs. The result folder is packed into
TARBALL after every step, so a command cut off by its time limit still returns what it measured.

bench_serving builds its argument parser under `if __name__ == "__main__"`, so it is run through runpy, all of a
case's workloads in one child process (this file with --bench-worker): its imports are paid once per case, and the
child has exited before the next server starts. This process itself imports neither torch nor sglang: a CUDA context
held here would lower the free memory the next server sizes its KV pool from.

Usage on the host (after `source .gpu-sglang-X/sglang_device_setup.sh .gpu-sglang-X`):
    python3 scripts/gpu_v5/sglang_serve.py CASES.json RESULT_DIR TARBALL [--deadline-s S]
--deadline-s: seconds from start after which no new case is started (a case needs ~60-120 s); default 520.
"""
import argparse, atexit, json, os, platform, runpy, shlex, signal, subprocess, sys, tarfile, time, traceback, zlib
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T0 = time.time()


def write_model_dir(case, d):
    os.makedirs(d, exist_ok=True)
    cfg = json.load(open(os.path.join(REPO, "kvcalc", "catalog", case["catalog"] + ".json")))["config"]
    cfg = dict(cfg, **case.get("config_overrides", {}))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    # its own folder, no config.json in it: see make_tokenizer.py (AutoTokenizer would rebuild a byte-level BPE)
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gpu_v4", "make_tokenizer.py"), d, f"{d}/tokenizer"],
                   check=True, stdout=subprocess.DEVNULL)


def get_json(port, path, timeout=10):
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout).read())


def wait_health(port, proc, timeout):
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


def wait_gpu_free(limit_mib=2048, timeout=30):
    """Poll nvidia-smi until the killed server's memory is back: SGLang sizes its pool from the free memory at start
    ("Load weight begin. avail mem"), so a next case started early would get a smaller pool. Returns MiB in use."""
    used = None
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            used = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=10).stdout.split()[0])
        except Exception:
            return None
        if used < limit_mib:
            break
        time.sleep(1)
    return used


def bench_argv(port, d, wl, seed, out_file):
    a = ["--backend", "sglang", "--host", "127.0.0.1", "--port", str(port), "--model", "m",
         "--tokenizer", f"{d}/tokenizer", "--dataset-name", "random-ids", "--tokenize-prompt",
         "--random-input-len", str(wl["input_len"]), "--random-output-len", str(wl["output_len"]),
         "--random-range-ratio", str(wl.get("range_ratio", 1.0)), "--num-prompts", str(wl["num_prompts"]),
         "--request-rate", str(wl.get("request_rate", "inf")), "--seed", str(seed), "--disable-tqdm",
         "--output-file", out_file, "--output-details", "--warmup-requests", str(wl.get("warmup_requests", 1))]
    if wl.get("max_concurrency"):
        a += ["--max-concurrency", str(wl["max_concurrency"])]
    return a


def bench_worker(spec_path):
    """Child process: run each workload of one case through bench_serving's own __main__ (its parser lives there),
    recording each outcome as it ends (a crash leaves the finished ones)."""
    spec = json.load(open(spec_path))
    done = []
    for wl in spec["workloads"]:
        w0 = time.time()
        sys.argv = ["sglang.bench_serving"] + wl["argv"]
        try:
            runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=False)
            done.append({"id": wl["id"], "ok": os.path.exists(wl["out_file"]), "wall_s": round(time.time() - w0, 1),
                         "bench_command": "python -m sglang.bench_serving " + shlex.join(wl["argv"])})
        except BaseException as e:  # one failed workload (SystemExit included) must not stop the others
            done.append({"id": wl["id"], "ok": False, "error": repr(e)[:500], "trace": traceback.format_exc()[-1500:],
                         "bench_command": "python -m sglang.bench_serving " + shlex.join(wl["argv"])})
        json.dump(done, open(spec["result"], "w"), indent=1)


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


PIDS = "/tmp/sglang_serve.pgids"


def kill_leftovers():
    """Kill the process groups of servers this script started in an earlier command (listed by id in PIDS; SIGKILL
    from a time limit skips atexit), then wait for their GPU memory."""
    try:
        pgids = [int(x) for x in open(PIDS).read().split()]
    except (OSError, ValueError):
        return
    for pgid in pgids:
        _kill_group(pgid)
    os.remove(PIDS)
    wait_gpu_free()


def pack(out, tarball):
    tmp = tarball + ".tmp"
    with tarfile.open(tmp, "w:gz") as t:
        t.add(out, arcname=os.path.basename(out.rstrip("/")))
    os.replace(tmp, tarball)


def environment():
    """What ran: versions (package metadata, no import: see the module doc), GPU and driver, glibc."""
    from importlib import metadata

    env = {"python": sys.version.split()[0], "glibc": " ".join(platform.libc_ver()), "host": platform.node()}
    for dist in ("torch", "sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers", "triton",
                 "apache-tvm-ffi", "xgrammar"):
        try:
            env[dist] = metadata.version(dist)
        except Exception as e:  # recorded, not fatal
            env[dist] = f"not found: {e!r}"[:200]
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,memory.used,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        env["nvidia_smi"] = repr(e)
    env["env"] = {k: os.environ.get(k) for k in ("TVM_FFI_CACHE_DIR", "CUDA_MODULE_LOADING", "PYTHONPATH")}
    return env


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--bench-worker":
        return bench_worker(sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("out")
    ap.add_argument("tarball")
    ap.add_argument("--deadline-s", type=float, default=520)
    ap.add_argument("--only", help="comma-separated case names to run (default: all)")
    ap.add_argument("--max-start-failures", type=int, default=2,
                    help="stop after this many servers in a row failed to start (the bundle, not a case, is broken)")
    a = ap.parse_args()
    cases = json.load(open(a.cases))
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so atexit kills the server when `timeout` stops us
    status = {"run": cases.get("run"), "cases_file": os.path.relpath(os.path.abspath(a.cases), REPO),
              "environment": environment(), "cases": []}

    def save():
        json.dump(status, open(os.path.join(a.out, "status.json"), "w"), indent=1)
        pack(a.out, a.tarball)

    save()
    only = set(a.only.split(",")) if a.only else None
    port = 30011
    failed_starts = 0
    for ci, case in enumerate(cases["cases"]):
        name = case["name"]
        if only and name not in only:
            continue
        if time.time() - T0 > a.deadline_s:
            status["cases"].append({"case": name, "skipped": f"deadline {a.deadline_s:.0f} s reached"})
            continue
        if failed_starts >= a.max_start_failures:
            status["cases"].append({"case": name, "skipped": f"{failed_starts} servers in a row failed to start"})
            continue
        d = f"/tmp/sglang_models/{name}"
        row = {"case": name, "catalog": case["catalog"], "workloads": []}
        status["cases"].append(row)
        try:
            write_model_dir(case, d)
        except Exception as e:
            row["error"] = f"model folder: {e!r}"[:500]
            save()
            continue
        p = port + ci
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", d, "--tokenizer-path", f"{d}/tokenizer",
               "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(p), "--served-model-name", "m",
               "--log-level", "info"] + cases.get("common_args", []) + case["serve_args"]
        row["serve_command"] = "python -m sglang.launch_server " + shlex.join(cmd[3:])
        kill_leftovers()  # a server of an earlier command cut off by its time limit would hold the GPU
        log_path = os.path.join(a.out, f"{name}.server.log")
        log = open(log_path, "w")
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=os.setsid,
                                env=dict(os.environ, **case.get("env", {})))
        atexit.register(lambda pid=proc.pid: _kill_group(pid))
        with open(PIDS, "a") as f:  # by id, for kill_leftovers in a later command on the same warm host
            f.write(f"{proc.pid}\n")
        ok = wait_health(p, proc, case.get("start_timeout_s", 300))
        row.update(start_s=round(time.time() - t0, 1), started=ok)
        failed_starts = 0 if ok else failed_starts + 1
        if not ok:
            row["exit_code"] = proc.poll()
        else:
            try:
                json.dump(get_json(p, "/server_info"), open(os.path.join(a.out, f"{name}.server_info.json"), "w"),
                          indent=1)
            except Exception as e:
                row["server_info_error"] = repr(e)[:300]
            save()
            spec = {"workloads": [], "result": f"/tmp/sglang_bench_{name}.json"}
            for wl in case["workloads"]:
                seed = zlib.crc32(f"{cases.get('run', '')}/{name}/{wl['id']}".encode()) % 2**31
                out_file = os.path.join(a.out, f"{name}.{wl['id']}.jsonl")
                spec["workloads"].append({"id": wl["id"], "out_file": out_file,
                                          "argv": bench_argv(p, d, wl, seed, out_file)})
            json.dump(spec, open(f"/tmp/sglang_bench_{name}.spec.json", "w"))
            blog = open(os.path.join(a.out, f"{name}.bench.log"), "w")
            try:
                subprocess.run([sys.executable, os.path.abspath(__file__), "--bench-worker",
                                f"/tmp/sglang_bench_{name}.spec.json"], stdout=blog, stderr=subprocess.STDOUT,
                               timeout=case.get("bench_timeout_s", 240))
            except subprocess.TimeoutExpired:
                row["bench_error"] = "bench timed out"
            blog.close()
            try:
                row["workloads"] = json.load(open(spec["result"]))
            except Exception as e:
                row["bench_error"] = row.get("bench_error", "") + f" no result: {e!r}"[:300]
            save()
        _kill_group(proc.pid)
        try:
            proc.wait(20)
        except Exception:
            pass
        log.close()
        row["gpu_used_after_kill_mib"] = wait_gpu_free()
        row["case_s"] = round(time.time() - t0, 1)
        save()
    status["total_s"] = round(time.time() - T0, 1)
    save()


if __name__ == "__main__":
    main()
