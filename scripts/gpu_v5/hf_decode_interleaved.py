#!/usr/bin/env python3
"""transformers decode on the H200, interleaved with a host probe (issue 18 item 4): the measurement that settles
whether kvcalc's transformers step is within 15% once the host's speed is known at the time of each case.

The v4 runs (docs/validation/data/v4/hf_decode.jsonl) measured each case twice in a row, cases one after another, and
the host's speed moved under them: the same Llama-3.1-8B default-cache decode took 48.3 ms a step at 2026-12-01 20:40
and 22.7 ms on 2026-12-02 19:26, and one case's two timings differ by up to 24% (scripts/hf_decode_report.py). So
here, per model (loaded once, random weights with the catalog's shapes, as v4):

  - every case of the model (kv x batch) is warmed up once (one full-size generate);
  - then `rounds` rounds; each round visits all of the model's cases in a shuffled order (random.Random(seed +
    round)), and around each measurement runs the host probe twice (before, after);
  - a measurement is t1 = generate(1) and tN = generate(N, min_new_tokens=N), cuda-synchronized: decode step
    (tN - t1) / (N - 1), as v4.

Host probe (host_probe): `launches` launches of a one-element in-place add, synchronized once at the end (the host's
cost of one eager PyTorch kernel launch: dispatcher + cudaLaunchKernel, what each of the ~48 kernels of a decode layer
costs), and a pure-Python loop (the interpreter's speed, no CUDA). A default-cache case and its quantized-cache
neighbours in the same round share the host's state, so their ratio cancels the host; the probe gives each row its
host speed for an absolute comparison (scripts/hf_decode_report.py interleaved_summary).

One JSONL row per (case, round). Case file: scripts/gpu_v5/hf_decode_interleaved_cases.json (parts, each one
command of at most ~530 s).

    python3 scripts/gpu_v5/hf_decode_interleaved.py --part a --out $OUT/hf_interleaved.jsonl --deadline EPOCH
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CASES = Path(__file__).with_name("hf_decode_interleaved_cases.json")


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def host_probe(device: str, launches: int = 2000, python_iters: int = 200_000) -> dict:
    """The host's speed now: microseconds per tiny eager kernel launch, nanoseconds per pure-Python loop step."""
    import torch

    x = torch.zeros(1, device=device)
    for _ in range(50):  # warm the dispatcher path
        x.add_(1.0)
    t = _timed(lambda: [x.add_(1.0) for _ in range(launches)], device)
    t0 = time.perf_counter()
    s = 0
    for i in range(python_iters):
        s += i
    py = time.perf_counter() - t0
    return {"launch_us": round(t / launches * 1e6, 3), "python_ns_per_iter": round(py / python_iters * 1e9, 3)}


def part_cases(spec: dict, part: str) -> list[dict]:
    """The cases of one part of the case file, in the file's order (one model's cases together)."""
    p = spec["parts"][part]
    out = []
    for m in p["models"]:
        for kv in p.get("kvs", spec["kvs"]):
            for b in p.get("batches", spec["batches"]):
                out.append({"id": f"v5hfi-{m}-bf16-{kv}-b{b}", "model": m, "weights": "bf16", "kv": kv, "batch": b,
                            "prompt_len": p.get("prompt_len", spec["prompt_len"]),
                            "new_tokens": p.get("new_tokens", spec["new_tokens"])})
    return out


def run_model(cases: list[dict], loaded, rounds: int, seed: int, device: str, writer, deadline: float,
              launches: int) -> int:
    """Warm every case of one loaded model, then `rounds` shuffled rounds; returns the rows written."""
    from kvcalc.formats import kv_format
    from kvcalc.validate import hf_runner as hr
    from kvcalc.validate.results import package_versions, torch_device_facts

    gens = {}
    for case in cases:
        c = hr.normalize_case(dict(case, device=device))
        kv = hr.effective_kv(kv_format(c["kv"]), c)
        if kv.backend == "quanto":
            hr.force_quanto_pure_torch()
        ids, mask = hr._inputs(loaded.model, int(c["batch"]), int(c["prompt_len"]), 0, device)
        extra = hr.cache_kwargs(kv, c)
        gens[case["id"]] = (c, (lambda n, ids=ids, mask=mask, extra=extra:
                                hr._generate(loaded.model, ids, mask, n, extra)))
        gens[case["id"]][1](int(c["new_tokens"]))  # warm-up
        gc.collect()
    versions, env = package_versions(), torch_device_facts(device)
    written = 0
    for r in range(rounds):
        order = list(cases)
        random.Random(seed + r).shuffle(order)
        for i, case in enumerate(order):
            if time.time() > deadline - 30:
                return written
            c, gen = gens[case["id"]]
            n = int(c["new_tokens"])
            before = host_probe(device, launches)
            t1 = _timed(lambda: gen(1), device)
            tn = _timed(lambda: gen(n), device)
            after = host_probe(device, launches)
            writer.write({"engine": "hf", "case_id": case["id"], "round": r, "order": i, "status": "ok",
                          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "settings": {k: c[k] for k in ("model", "weights", "kv", "batch", "prompt_len",
                                                         "new_tokens", "dtype")},
                          "t1_s": round(t1, 5), "tN_s": round(tn, 5),
                          "decode_ms_per_step": round((tn - t1) / (n - 1) * 1000, 4),
                          "probe_before": before, "probe_after": after, "versions": versions,
                          "environment": env,
                          "method": "interleaved: per round every case of the model once, shuffled; decode step = "
                                    "(t(generate N) - t(generate 1)) / (N - 1); host probe before and after"})
            written += 1
            gc.collect()
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--part", required=True, help="a key of the case file's parts")
    p.add_argument("--cases", default=str(CASES))
    p.add_argument("--deadline", type=float, default=None, help="epoch seconds: start no measurement after - 30 s")
    p.add_argument("--device", default="cuda", help="cuda; cpu only for a smoke test of the script")
    p.add_argument("--rounds", type=int, default=None, help="override the case file's rounds")
    args = p.parse_args(argv)
    spec = json.loads(Path(args.cases).read_text())
    deadline = args.deadline or time.time() + 10**6
    rounds = args.rounds or int(spec["rounds"])

    from kvcalc.validate import hf_runner as hr
    from kvcalc.validate.results import JsonlWriter, error_message, release_gpu

    writer = JsonlWriter(args.out)
    todo = part_cases(spec, args.part)
    by_model: dict[str, list[dict]] = {}
    for c in todo:
        by_model.setdefault(c["model"], []).append(c)
    for model, cases in by_model.items():
        if time.time() > deadline - 60:
            for c in cases:
                writer.write({"engine": "hf", "case_id": c["id"], "status": "skipped", "message": "deadline"})
            continue
        loaded = None
        try:
            loaded = hr.load_case_model(dict(cases[0], device=args.device))
            n = run_model(cases, loaded, rounds, int(spec["seed"]), args.device, writer, deadline,
                          int(spec.get("probe_launches", 2000)))
            print(model, "rows", n, flush=True)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a row
            writer.write({"engine": "hf", "case_id": cases[0]["id"], "status": "error", "message": error_message(exc)})
        finally:
            del loaded
            release_gpu()
    return 0


if __name__ == "__main__":
    sys.exit(main())
