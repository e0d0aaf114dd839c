"""Load test of `kvcalc serve` on loopback: N requests to /api/plan from C concurrent clients, p50/p95 and errors.

Run: python benchmarks/web_load.py [--requests 2000] [--clients 20] [--mix page|distinct] [--url URL]

Without --url it starts `kvcalc serve` itself on a free 127.0.0.1 port and stops it at the end. Traffic goes only to
that loopback address; the run is bounded by --requests and by --max-seconds, whichever comes first.

Two mixes of inputs:
- page (default): what a page sends as its users type: 8 models x 6 GPUs x 5 contexts x 4 batches (960 distinct
  inputs), drawn at random, so some repeat and are answered from the server's response cache;
- distinct: every request a new input (context walks 1 token at a time), so every answer is computed: the cold cost.
Each client is a thread with its own keep-alive HTTP/1.1 connection (stdlib http.client), as a browser tab is.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["llama-3.2-3b", "llama-3.1-8b", "qwen3-8b", "qwen3-4b", "gemma-3-12b", "mistral-7b-v0.3", "phi-4",
          "qwen3-30b-a3b"]
GPUS = ["t4", "l4", "a10g", "a100-80gb", "h100-sxm", "h200"]
CONTEXTS = ["4k", "8k", "16k", "32k", "64k"]
BATCHES = ["1", "4", "16", "64"]


def queries(mix: str, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        params = {"model": rng.choice(MODELS), "gpu": rng.choice(GPUS), "batch": rng.choice(BATCHES)}
        params["context"] = str(4096 + i) if mix == "distinct" else rng.choice(CONTEXTS)
        out.append("/api/plan?" + urllib.parse.urlencode(params))
    return out


def start_server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "kvcalc.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/api/info", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("kvcalc serve did not start within 30 s")


def run(url: str, paths: list[str], clients: int, max_seconds: float) -> tuple[list[float], list[str], float]:
    parsed = urllib.parse.urlsplit(url)
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("this load test only targets a server on this machine's loopback address")
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    next_index = [0]
    stop_at = time.monotonic() + max_seconds

    def client() -> None:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        while time.monotonic() < stop_at:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(paths):
                break
            start = time.perf_counter()
            try:
                conn.request("GET", paths[i])
                resp = conn.getresponse()
                body = resp.read()
                elapsed = time.perf_counter() - start
                ok = resp.status == 200 and body.startswith(b"{")
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        errors.append(f"{resp.status} {paths[i]}: {body[:120]!r}")
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    errors.append(f"{type(exc).__name__} {paths[i]}")
                conn.close()
                conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors, time.perf_counter() - began


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--mix", choices=["page", "distinct"], default="page")
    parser.add_argument("--url", default=None, help="a running kvcalc serve on loopback (default: start one)")
    parser.add_argument("--max-seconds", type=float, default=600)
    args = parser.parse_args()
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server()
    try:
        paths = queries(args.mix, args.requests)
        # one request first, so start-up (imports, catalog, profiles) is not counted as load
        urllib.request.urlopen(url + "/api/plan?gpu=t4", timeout=30).read()
        lat, errors, wall = run(url, paths, args.clients, args.max_seconds)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    ms = [x * 1000 for x in lat]
    print(f"{len(lat)} requests ({args.mix} mix) from {args.clients} clients in {wall:.1f} s = "
          f"{len(lat) / wall:.0f} req/s")
    print(f"latency ms: p50 {statistics.median(ms):.1f}  p95 {pct(ms, 95):.1f}  p99 {pct(ms, 99):.1f}  "
          f"max {max(ms):.1f}")
    print(f"errors: {len(errors)}")
    for e in errors[:5]:
        print("  " + e)
    sys.exit(1 if errors or len(lat) < args.requests else 0)


if __name__ == "__main__":
    main()
