"""The validation matrices the GPU script runs, under a wall-clock budget, with only the standard library in this
process (the engines run in child processes: torch/vLLM never load here, so neither holds GPU memory while the other
measures).

    python3 -m kvcalc.validate.matrix --out DIR [--hf] [--vllm] [--quick] [--budget-s 510] [--hf-budget-s 200]

Writes DIR/hf.jsonl, DIR/vllm.jsonl, DIR/logs.tar.gz (per-case vLLM logs and worker consoles), DIR/summary.txt,
DIR/env.json. Cases are ordered by priority; those the budget does not reach get a 'skipped' row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .results import (EXIT_CASE_TIMEOUT, JsonlWriter, classify_failure, done_case_ids, end_process_group,
                      iter_jsonl, nvidia_smi, now_iso, package_versions)

HF_MODELS = ("llama-3.2-3b", "llama-3.1-8b")
VLLM_MODELS = ("llama-3.2-3b", "llama-3.1-8b")


def hf_matrix(quick: bool = False, device: str = "cuda", models: tuple[str, ...] | None = None,
              prompt_len: int = 1024, new_tokens: int | None = None) -> list[dict[str, Any]]:
    """Random-weight Llama shapes, bf16 weights with kv auto / hqq-4 / hqq-2 / quanto-4 at batch 1 and 8, then NF4
    weights with the default cache; prompt 1024 + 256 new tokens. Ordered so a model loads once per weight format;
    the first case after each load warms up with a full-size generate, the others with a short one."""
    cases: list[dict[str, Any]] = []
    models = models or (HF_MODELS[:1] if quick else HF_MODELS)
    kvs = ("auto", "hqq-4", "quanto-4") if quick else ("auto", "hqq-4", "hqq-2", "quanto-4")
    batches = (1,) if quick else (1, 8)
    new_tokens = new_tokens or (64 if quick else 256)
    for model in models:
        for weights, kv_list in (("bf16", kvs), ("nf4", ("auto",))):
            first = True
            for kv in kv_list:
                for batch in batches:
                    cases.append({"id": f"hf-{model}-{weights}-{kv}-b{batch}", "model": model, "weights": weights,
                                  "kv": kv, "batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
                                  "device": device, "dtype": "bfloat16", "warmup": "full" if first else "short",
                                  "speed": True})
                    first = False
    return cases


def vllm_matrix(quick: bool = False, models: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Llama-3.2-3B and 3.1-8B shapes; kv auto / fp8; enforce_eager on / off; util 0.9 / 0.85; max_model_len 8192.
    Priority: eager 0.9 (fast starts, the accounting), fp8, util 0.85, then CUDA graphs (slow starts, the speed)."""
    def case(model: str, kv: str, eager: bool, util: float) -> dict[str, Any]:
        tag = f"{model}-{kv}-{'eager' if eager else 'graphs'}-u{int(util * 100)}"
        return {"id": f"vllm-{tag}", "model": model, "kv": kv, "util": util, "max_model_len": 8192,
                "enforce_eager": eager}

    models = models or VLLM_MODELS
    if quick:
        m = models[0]
        return [case(m, "auto", True, 0.9), case(m, "fp8", True, 0.9), case(m, "auto", False, 0.9)]
    order: list[tuple[str, bool, float]] = [
        ("auto", True, 0.9), ("fp8", True, 0.9), ("auto", True, 0.85),
    ]
    cases = [case(m, kv, eager, util) for m in models for kv, eager, util in order]
    cases += [case(m, "auto", False, 0.9) for m in models]
    cases += [case(m, "fp8", False, 0.9) for m in models]
    cases += [case(m, "fp8", True, 0.85) for m in models]
    cases += [case(m, kv, False, 0.85) for m in models for kv in ("auto", "fp8")]
    return cases


def _rows_with_ids(path: Path, ids: set[str], offset: int = 0) -> dict[str, dict[str, Any]]:
    """Rows of these case ids in path, from byte offset on (a torn last line is skipped)."""
    if not path.exists():
        return {}
    out = {}
    with open(path, "rb") as fh:
        fh.seek(offset)
        for line in fh.read().decode("utf-8", errors="replace").splitlines():
            try:
                r = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(r, dict) and r.get("case_id") in ids:
                out[r["case_id"]] = r
    return out


def run_hf_matrix(cases: list[dict[str, Any]], out: Path, deadline: float, python: str = sys.executable,
                  case_timeout_s: float | None = 600.0, resume: bool = False,
                  case_runner: str | None = None) -> None:
    """Run HF cases in a child process, re-launched after a crash or a per-case timeout, until every case has a row.
    A case that crashes the child (OOM kill, segfault, abort) is recorded as failed with the console's tail; one
    that hangs is ended by the child's watchdog (case_timeout_s) and recorded as 'timeout'. resume: rows already in
    `out` count as done (every status but 'skipped'); otherwise only rows written by this call count."""
    writer = JsonlWriter(out)
    ids = {c["id"] for c in cases}
    start = out.stat().st_size if out.exists() and not resume else 0
    if resume:
        already = done_case_ids(out, ids)
        cases = [c for c in cases if c["id"] not in already]
        if already:
            print(f"[hf] resume: {len(already)} case(s) already have rows", flush=True)
        start = out.stat().st_size if out.exists() else 0
    console = out.with_name("hf-console.out")
    stalls = 0
    while True:
        done = _rows_with_ids(out, ids, start)
        pending = [c for c in cases if c["id"] not in done]
        if not pending or stalls >= 2:
            break
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(pending, fh)
            cases_file = fh.name
        budget = max(deadline - time.time(), 0)
        cmd = [python, "-m", "kvcalc.validate.hf_runner", "--cases-file", cases_file, "--out", str(out),
               "--budget-s", str(budget)]
        if case_timeout_s:
            cmd += ["--case-timeout-s", str(case_timeout_s)]
        if case_runner:
            cmd += ["--case-runner", case_runner]
        print(f"[hf] {len(pending)} case(s), budget {budget:.0f} s", flush=True)
        writer.repair()  # a torn line from a killed child must not glue onto the next row
        rc: int | str
        with open(console, "a", encoding="utf-8") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)

            def pump() -> None:  # echo progress lines, keep everything in the console file
                assert proc.stdout is not None
                for line in proc.stdout:
                    log.write(line)
                    if line.startswith(("[hf]", "[watchdog]")):
                        print(line, end="", flush=True)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            # one case may finish past the budget; a hang may not (the child's watchdog ends it first)
            backstop = budget + 120 + (case_timeout_s or 0)
            try:
                rc = proc.wait(timeout=backstop)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            finally:
                end_process_group(proc)  # the child after a timeout, and anything it spawned
            reader.join(timeout=10)
        os.unlink(cases_file)
        if rc == 0:
            break
        now_done = _rows_with_ids(out, ids, start)
        progressed = len(now_done) > len(done)
        stalls = 0 if progressed else stalls + 1
        if rc == EXIT_CASE_TIMEOUT and progressed:
            continue  # the watchdog wrote the hung case's row; the rest run in a fresh child
        left = [c for c in cases if c["id"] not in now_done]
        if left:
            tail = console.read_text(encoding="utf-8", errors="replace")[-1500:]
            what = "killed after the backstop timeout" if rc == "timeout" else f"runner process exit {rc}"
            row = {"engine": "hf", "time": now_iso(), "case_id": left[0]["id"], "settings": left[0],
                   "status": "error" if rc == "timeout" else classify_failure(tail), "message": f"{what}: {tail}"}
            writer.write(row)
            stalls = 0
            print(f"[hf] {left[0]['id']}: {row['status']} ({what})", flush=True)


def environment() -> dict[str, Any]:
    return {"time": now_iso(), "python": sys.version.split()[0], "versions": package_versions(),
            "nvidia_smi": nvidia_smi(), "env": {k: os.environ.get(k) for k in (
                "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_ENABLE_V1_MULTIPROCESSING", "HF_HUB_OFFLINE", "PYTHONPATH")}}


def write_summary(out_dir: Path) -> str:
    from .compare import render_report

    results = []
    for name in ("hf.jsonl", "vllm.jsonl"):
        path = out_dir / name
        if path.exists():
            results += list(iter_jsonl(path))
    text = render_report(results, plain=True)
    (out_dir / "summary.txt").write_text(text, encoding="utf-8")
    return text


def pack_logs(out_dir: Path, log_dir: Path, extra: list[Path]) -> None:
    """One archive for all per-case logs (the GPU host returns a few files, two folders deep)."""
    with tarfile.open(out_dir / "logs.tar.gz", "w:gz") as tar:
        if log_dir.exists():
            tar.add(str(log_dir), arcname="vllm-logs")
        for path in extra:
            if path.exists():
                tar.add(str(path), arcname=path.name)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Run the kvcalc validation matrices on a GPU host.")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--hf", action="store_true", help="run the transformers matrix")
    p.add_argument("--vllm", action="store_true", help="run the vLLM matrix")
    p.add_argument("--quick", action="store_true", help="a small matrix (< 5 min on one GPU)")
    p.add_argument("--budget-s", type=float, default=510.0, help="wall-clock budget for everything")
    p.add_argument("--hf-budget-s", type=float, default=200.0, help="of which the transformers part may use")
    p.add_argument("--per-process", type=int, default=0,
                   help="vLLM cases per child process (1 = isolate every case; 0 = reuse a process while the GPU's "
                        "memory comes back after each engine, with a fresh one after any doubt)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--hf-models", help="comma-separated catalog names (default: llama-3.2-3b,llama-3.1-8b)")
    p.add_argument("--vllm-models", help="comma-separated catalog names (default: llama-3.2-3b,llama-3.1-8b)")
    p.add_argument("--prompt-len", type=int, default=1024, help="transformers prompt length")
    p.add_argument("--new-tokens", type=int, default=None, help="transformers new tokens (default 256; quick 64)")
    p.add_argument("--resume", action="store_true",
                   help="skip cases that already have a row in DIR/hf.jsonl or DIR/vllm.jsonl (all but 'skipped')")
    p.add_argument("--case-timeout-s", type=float, default=None,
                   help="end one case that runs longer and record it as 'timeout' (default: 600 hf, 420 vLLM)")
    args = p.parse_args(argv)
    hf_models = tuple(m.strip() for m in args.hf_models.split(",")) if args.hf_models else None
    vllm_models = tuple(m.strip() for m in args.vllm_models.split(",")) if args.vllm_models else None
    if not (args.hf or args.vllm):
        args.hf = args.vllm = True
    start = time.time()
    deadline = start + args.budget_s
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "env.json").write_text(json.dumps(environment(), indent=1))
    tmp_logs = Path(tempfile.mkdtemp(prefix="kvcalc-logs-"))
    hf_console = out_dir / "hf-console.out"
    if args.hf:
        cases = hf_matrix(args.quick, args.device, hf_models, args.prompt_len, args.new_tokens)
        hf_deadline = min(deadline, start + (args.hf_budget_s if args.vllm else args.budget_s))
        hf_path = out_dir / "hf.jsonl"
        hf_start = 0 if args.resume or not hf_path.exists() else hf_path.stat().st_size
        run_hf_matrix(cases, hf_path, hf_deadline, case_timeout_s=args.case_timeout_s or 600.0, resume=args.resume)
        done = _rows_with_ids(hf_path, {c["id"] for c in cases}, hf_start)
        for c in cases:
            if c["id"] not in done:
                JsonlWriter(out_dir / "hf.jsonl").write({"engine": "hf", "time": now_iso(), "case_id": c["id"],
                                                         "settings": c, "status": "skipped",
                                                         "message": "time budget"})
    if args.vllm:
        from .vllm_runner import run_vllm_cases

        print(f"[vllm] starting at {time.time() - start:.0f} s of {args.budget_s:.0f} s", flush=True)
        run_vllm_cases(vllm_matrix(args.quick, vllm_models), out_dir / "vllm.jsonl", tmp_logs,
                       per_process=args.per_process, deadline=deadline, resume=args.resume,
                       case_timeout_s=args.case_timeout_s or 420.0)
    pack_logs(out_dir, tmp_logs, [hf_console])
    hf_console.unlink(missing_ok=True)
    shutil.rmtree(tmp_logs, ignore_errors=True)
    text = write_summary(out_dir)
    print(text, flush=True)
    print(f"[matrix] done in {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
