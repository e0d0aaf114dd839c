"""Run vLLM offline-engine cases (random weights, load_format="dummy") and compare them with kvcalc.

vLLM and torch are imported only inside the worker functions. The parent (run_vllm_cases) never imports them: it
starts child processes (`python -m kvcalc.validate.vllm_runner --worker ...`) and reads back the JSONL rows they
append, so a crash, hang or OOM in one case is recorded as that case's row and the remaining cases still run. A
watchdog thread in the child (results.CaseWatchdog) ends a case that runs past case_timeout_s: it writes that case's
'timeout' row and exits, and the parent continues in a fresh child. --resume skips cases that already have a row.

Isolation modes (per_process):
  1   one child process per case: the safest (nothing leaks between engines), but every case pays `import vllm`
      (12-22 s on the H200 host).
  N   (or 0 = unlimited) up to N cases in one child, engines built one after another in-process. The child frees
      each engine (shutdown, destroy_model_parallel / destroy_distributed_environment, gc, empty_cache) and checks
      that the GPU's free memory came back; when it did not, or when a case fails in a child that already ran one,
      the child exits and the parent re-runs the remaining cases (the failed one included) in a fresh process. So
      a figure is never measured in a process a previous engine may have disturbed without that being checked.

A case (dict): model (catalog name), kv ('auto' | 'fp8'), util, max_model_len, enforce_eager; optional:
max_num_batched_tokens, max_num_seqs, block_size, speed_batches (default [1, 32]), prompt_len (512), max_tokens (256),
id. In-process internals read (VLLM_ENABLE_V1_MULTIPROCESSING=0, so the engine core runs in this process):
llm.llm_engine.vllm_config.cache_config.{num_gpu_blocks, block_size, kv_cache_size_tokens, kv_cache_max_concurrency};
llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.{requested_memory,
available_kv_cache_memory_bytes, peak_activation_memory, non_torch_memory, cudagraph_memory_estimate,
init_snapshot, model_runner.model_memory_usage}.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .compare import row as cmp_row
from .predict import model_config, normalize_vllm_case, predict_vllm_case
from .results import (EXIT_CASE_TIMEOUT, CaseWatchdog, JsonlWriter, classify_failure, done_case_ids,
                      end_process_group, error_message, load_case_runner, now_iso, package_versions, pct, release_gpu,
                      torch_device_facts)

EXIT_RESTART = 75  # the child wants a fresh process for the remaining cases (memory did not come back)
EXIT_RETRY = 76  # a case failed in a reused process: run it again in a fresh one before believing the failure
LOG_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"  # as vLLM's own (logger.py:22)


normalize_case = normalize_vllm_case  # the runner's defaults live beside the prediction


def _base_row(c: dict[str, Any]) -> dict[str, Any]:
    keys = ("model", "kv", "util", "max_model_len", "enforce_eager", "max_num_batched_tokens", "max_num_seqs",
            "block_size", "prompt_len", "max_tokens", "speed_batches", "tensor_parallel_size", "weights",
            "config_overrides")
    return {"engine": "vllm", "time": now_iso(), "case_id": c.get("id"),
            "settings": {k: c[k] for k in keys if k in c}}


def expected_seconds(c: dict[str, Any]) -> float:
    """Rough wall time of one case on the H200 (README: eager start 6-7 s, CUDA graphs 46-66 s, + speed runs)."""
    return float(c.get("expected_s") or (35 if c.get("enforce_eager") else 90))


# --------------------------------------------------------------------------------------------------------------------
# Inside the child: one engine
# --------------------------------------------------------------------------------------------------------------------


def _write_model_folder(model: str, overrides: dict[str, Any] | None = None) -> str:
    cfg = model_config(model, overrides)
    cfg.setdefault("torch_dtype", "bfloat16")
    folder = tempfile.mkdtemp(prefix="kvcalc-vllm-")
    Path(folder, "config.json").write_text(json.dumps(cfg, indent=1))
    return folder


def _clear_vllm_once_caches() -> None:
    """vLLM logs some lines once per process (logger.py: lru_cache'd _print_info_once): clear so each engine of an
    in-process series logs its own start-up lines."""
    try:
        import vllm.logger as vlogger

        for name in ("_print_info_once", "_print_debug_once", "_print_warning_once"):
            fn = getattr(vlogger, name, None)
            if fn is not None and hasattr(fn, "cache_clear"):
                fn.cache_clear()
    except Exception:  # noqa: BLE001
        pass


def _attach_log(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT, "%m-%d %H:%M:%S"))
    handler.setLevel(logging.DEBUG)
    logging.getLogger("vllm").addHandler(handler)
    return handler


def _worker(llm) -> Any:
    core = llm.llm_engine.engine_core
    core = getattr(core, "engine_core", core)
    executor = core.model_executor
    worker = executor.driver_worker
    return getattr(worker, "worker", worker)


def _get(obj: Any, *path: str) -> Any:
    for name in path:
        if obj is None:
            return None
        obj = getattr(obj, name, None)
    return obj


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def read_internals(llm) -> dict[str, Any]:
    cfg = llm.llm_engine.vllm_config
    cache, sched, model_cfg = cfg.cache_config, cfg.scheduler_config, cfg.model_config
    out: dict[str, Any] = {
        "num_gpu_blocks": _int_or_none(getattr(cache, "num_gpu_blocks", None)),
        "block_size": _int_or_none(getattr(cache, "block_size", None)),
        "kv_cache_size_tokens": _int_or_none(getattr(cache, "kv_cache_size_tokens", None)),
        "kv_cache_max_concurrency": getattr(cache, "kv_cache_max_concurrency", None),
        "cache_dtype": str(getattr(cache, "cache_dtype", None)),
        "max_model_len": _int_or_none(getattr(model_cfg, "max_model_len", None)),
        "max_num_batched_tokens": _int_or_none(getattr(sched, "max_num_batched_tokens", None)),
        "max_num_seqs": _int_or_none(getattr(sched, "max_num_seqs", None)),
        "cudagraph_mode": str(_get(cfg, "compilation_config", "cudagraph_mode")),
    }
    try:
        w = _worker(llm)
    except AttributeError as exc:
        out["worker_error"] = f"cannot reach the worker in-process ({exc}); is VLLM_ENABLE_V1_MULTIPROCESSING=0?"
        return out
    out.update(
        requested_memory=_int_or_none(getattr(w, "requested_memory", None)),
        available_kv_cache_memory_bytes=_int_or_none(getattr(w, "available_kv_cache_memory_bytes", None)),
        peak_activation_memory=_int_or_none(getattr(w, "peak_activation_memory", None)),
        non_torch_memory=_int_or_none(getattr(w, "non_torch_memory", None)),
        cudagraph_memory_estimate=_int_or_none(getattr(w, "cudagraph_memory_estimate", None)),
        model_memory_usage=_int_or_none(_get(w, "model_runner", "model_memory_usage")),
        init_total_memory=_int_or_none(_get(w, "init_snapshot", "total_memory")),
        init_free_memory=_int_or_none(_get(w, "init_snapshot", "free_memory")),
    )
    return out


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[dict[str, Any]]:
    import random

    rng = random.Random(seed)
    hi = max(vocab - 1, 2)
    return [{"prompt_token_ids": [rng.randrange(1, hi) for _ in range(length)]} for _ in range(n)]


def measure_speed(llm, c: dict[str, Any], vocab: int) -> dict[str, Any]:
    """Decode speed per batch size: one warm-up, then t(max_tokens=1) and t(max_tokens=N) on fresh random prompts
    (no prefix-cache hits); decode step time = (t_N - t_1) / (N - 1)."""
    from vllm import SamplingParams

    def params(n: int):
        return SamplingParams(max_tokens=n, ignore_eos=True, temperature=0, detokenize=False)

    results: dict[str, Any] = {}
    seed = 1000
    n_tokens = int(c["max_tokens"])
    for batch in c["speed_batches"]:
        seed += 10
        llm.generate(_prompts(batch, int(c["prompt_len"]), vocab, seed), params(int(c["warmup_tokens"])),
                     use_tqdm=False)
        t0 = time.perf_counter()
        llm.generate(_prompts(batch, int(c["prompt_len"]), vocab, seed + 1), params(1), use_tqdm=False)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        outs = llm.generate(_prompts(batch, int(c["prompt_len"]), vocab, seed + 2), params(n_tokens), use_tqdm=False)
        t_full = time.perf_counter() - t0
        produced = sum(len(o.outputs[0].token_ids) for o in outs)
        decode = t_full - t_first
        entry = {"batch": batch, "prompt_len": int(c["prompt_len"]), "max_tokens": n_tokens,
                 "output_tokens": produced, "t_full_s": round(t_full, 4), "t_first_token_s": round(t_first, 4),
                 "e2e_output_tokens_per_s": round(produced / t_full, 2) if t_full > 0 else None}
        if decode > 0 and n_tokens > 1:
            entry["decode_ms_per_step"] = round(decode * 1000 / (n_tokens - 1), 3)
            entry["decode_tokens_per_s"] = round(batch * (n_tokens - 1) / decode, 2)
        results[f"b{batch}"] = entry
    results["method"] = "decode = t(max_tokens=N) - t(max_tokens=1), same batch, fresh prompts, after one warm-up"
    return results


def comparison_rows(est, internals: dict[str, Any], parsed: dict[str, Any]) -> list[dict[str, Any]]:
    values = parsed.get("values", {})
    rows = [
        cmp_row("requested memory (total x util)", est.requested_memory, internals.get("requested_memory")),
        cmp_row("weights", est.weights_bytes, internals.get("model_memory_usage")),
        cmp_row("activation peak (profile run)", est.activation_bytes, internals.get("peak_activation_memory")),
        cmp_row("non-torch memory", est.non_torch_bytes, internals.get("non_torch_memory")),
        cmp_row("CUDA-graph estimate", est.cudagraph_bytes, internals.get("cudagraph_memory_estimate")),
        cmp_row("available KV memory", est.available_kv_bytes, internals.get("available_kv_cache_memory_bytes")),
        cmp_row("GPU blocks", est.num_gpu_blocks, internals.get("num_gpu_blocks"), unit="blocks"),
        cmp_row("logged KV cache tokens", est.logged_kv_tokens,
                internals.get("kv_cache_size_tokens") or values.get("kv_cache_tokens"), unit="tokens"),
        cmp_row("max concurrency", est.logged_concurrency,
                internals.get("kv_cache_max_concurrency") or values.get("max_concurrency"), unit="x"),
        cmp_row("max_num_batched_tokens", est.max_num_batched_tokens, internals.get("max_num_batched_tokens"),
                unit="tokens"),
        cmp_row("max_num_seqs", est.max_num_seqs, internals.get("max_num_seqs"), unit="count"),
    ]
    if "graph_capture_bytes" in values and values.get("graph_capture_seconds") is not None:
        rows.append(cmp_row("CUDA graphs captured (log)", est.cudagraph_bytes, values["graph_capture_bytes"],
                            note="the estimate is subtracted before capture; this is what capture took"))
    return rows


def _shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001
        pass


def _vllm_teardown() -> list:
    """vLLM's (single-rank) distributed state and torch.compile artifacts (they hold the model and graph pools)."""
    fns = []
    try:
        from vllm.distributed import parallel_state as ps

        fns += [fn for fn in (getattr(ps, n, None) for n in ("destroy_model_parallel",
                                                              "destroy_distributed_environment")) if fn is not None]
    except ImportError:
        pass
    try:
        import torch

        fns.append(torch._dynamo.reset)
    except (ImportError, AttributeError):
        pass
    return fns


def _release_gpu() -> None:
    """After the last reference to the engine is dropped: collect it, tear down vLLM's state, return cached blocks."""
    release_gpu(_vllm_teardown())


def run_vllm_case(case: dict[str, Any], log_path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build one engine in this process, measure, predict, free it. Returns (row, health) where health says whether
    the GPU's memory came back (free_after_cleanup / total)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    c = normalize_case(case)
    result = _base_row(c)
    health: dict[str, Any] = {}
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    handler = None
    llm = None
    folder = None
    try:
        import torch
        import vllm
        from vllm import LLM

        from .vllm_log import LogError, parse_vllm_log

        result["versions"] = package_versions()
        result["environment"] = torch_device_facts("cuda")
        version = getattr(vllm, "__version__", "unknown")
        handler = _attach_log(log_path)
        _clear_vllm_once_caches()
        logging.getLogger("vllm").info("kvcalc case %s: %s", c["id"], json.dumps(result["settings"]))
        folder = _write_model_folder(c["model"], c.get("config_overrides"))
        free0, total = torch.cuda.mem_get_info()
        kwargs: dict[str, Any] = dict(model=folder, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
                                      kv_cache_dtype=c["kv"], gpu_memory_utilization=float(c["util"]),
                                      max_model_len=int(c["max_model_len"]), enforce_eager=bool(c["enforce_eager"]),
                                      seed=0)
        for key in ("max_num_batched_tokens", "max_num_seqs", "block_size", "tensor_parallel_size"):
            if c.get(key):
                kwargs[key] = int(c[key])
        if c.get("weights") == "fp8":
            kwargs["quantization"] = "fp8"  # online fp8 weights: the dummy bf16 weights are quantized at load
        t0 = time.perf_counter()
        llm = LLM(**kwargs)
        startup = time.perf_counter() - t0
        internals = read_internals(llm)
        free1, _ = torch.cuda.mem_get_info()
        observed: dict[str, Any] = {"startup_seconds": round(startup, 2), "free_before_bytes": int(free0),
                                    "total_bytes": int(total), "used_after_start_bytes": int(total - free1),
                                    "internals": internals}
        vocab = int(llm.llm_engine.vllm_config.model_config.get_vocab_size())
        if c["speed_batches"]:
            try:
                observed["speed"] = measure_speed(llm, c, vocab)
            except Exception as exc:  # noqa: BLE001 - the memory figures stand without the speed
                observed["speed_error"] = error_message(exc)
        handler.flush()
        with open(log_path, "rb") as fh:  # this attempt's lines only (a retried case appends to the same file)
            fh.seek(log_offset)
            try:
                parsed = parse_vllm_log(fh.read().decode("utf-8", errors="replace"))
            except LogError as exc:  # the engine's own figures (internals) still stand
                parsed = {"values": {}, "settings": {}, "version": None}
                observed["log_error"] = str(exc)
        observed["log"] = {"values": parsed["values"], "settings": parsed["settings"], "version": parsed["version"]}
        result["observed"] = observed
        result["status"] = "ok"  # the measurement stands even if kvcalc cannot predict it
        total_for_prediction = internals.get("init_total_memory") or int(total)
        try:
            est = predict_vllm_case(c, internals, total_for_prediction, version)
        except Exception as exc:  # noqa: BLE001
            result["prediction_error"] = error_message(exc)
        else:
            result["prediction"] = {k: getattr(est, k) for k in (
                "total_memory", "requested_memory", "weights_bytes", "activation_bytes", "non_torch_bytes",
                "cudagraph_bytes", "available_kv_bytes", "num_gpu_blocks", "logged_kv_tokens", "logged_concurrency",
                "max_num_batched_tokens", "max_num_seqs", "block_size")}
            result["prediction_gpu_total_bytes"] = int(total_for_prediction)
            result["comparison"] = comparison_rows(est, internals, parsed)
            result["errors"] = {r["quantity"]: r["error"] for r in result["comparison"]}
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt too: record, then re-raise below
        result.update(status=classify_failure(exc), message=error_message(exc))
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        try:
            if llm is not None:
                _shutdown(llm)
            llm = None  # the only reference: _release_gpu can now collect the engine
            _release_gpu()
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
                free, total = torch.cuda.mem_get_info()
                health = {"free_after_cleanup_bytes": int(free), "total_bytes": int(total)}
        except Exception as exc:  # noqa: BLE001
            health = {"cleanup_error": error_message(exc)}
        if handler is not None:
            logging.getLogger("vllm").removeHandler(handler)
            handler.close()
        result["log_file"] = str(log_path.name)
    return result, health


def _worker_main(cases: list[dict[str, Any]], out: str, log_dir: str, deadline: float | None,
                 min_free_fraction: float, case_timeout_s: float | None = None,
                 case_runner: str | None = None) -> int:
    """Child: run cases in order in this process; exit early (EXIT_RESTART / EXIT_RETRY) when the parent should
    continue in a fresh process, or (EXIT_CASE_TIMEOUT, from the watchdog) when a case ran past case_timeout_s.
    case_runner: 'module:function' standing in for run_vllm_case (tests)."""
    writer = JsonlWriter(out)
    watchdog = CaseWatchdog(writer, case_timeout_s)
    run_case = load_case_runner(case_runner) if case_runner else run_vllm_case
    ran = 0
    for case in cases:
        c = normalize_case(case)
        if deadline is not None and time.time() + expected_seconds(c) > deadline:
            row = _base_row(c)
            row.update(status="skipped", message="time budget: not started")
            writer.write(row)
            continue
        watchdog.arm(dict(_base_row(c), log_file=f"{c['id']}.log"))
        row, health = run_case(c, Path(log_dir) / f"{c['id']}.log")
        row["process_case_index"] = ran
        if row.get("status") != "ok" and ran > 0:
            watchdog.disarm()
            print(f"[vllm] {c['id']} failed in a reused process ({row.get('message', '')[:200]}); "
                  "asking for a fresh one", flush=True)
            return EXIT_RETRY
        row["cleanup"] = health
        watchdog.finish(row)
        _echo(row)
        ran += 1
        total = health.get("total_bytes")
        free = health.get("free_after_cleanup_bytes")
        if total and free is not None and free < min_free_fraction * total:
            print(f"[vllm] only {free / 2**30:.2f} of {total / 2**30:.2f} GiB free after {c['id']}: fresh process",
                  flush=True)
            return EXIT_RESTART
        if "cleanup_error" in health:
            return EXIT_RESTART
    return 0


def _echo(row: dict[str, Any]) -> None:
    s = row.get("settings", {})
    e = row.get("errors", {}) or {}

    speed = (row.get("observed") or {}).get("speed") or {}
    sp = " ".join(f"{k}:{v.get('decode_tokens_per_s')}tok/s" for k, v in speed.items() if isinstance(v, dict))
    print(f"[vllm] {row.get('case_id')} {s.get('model')} kv={s.get('kv')} util={s.get('util')} "
          f"eager={s.get('enforce_eager')} L={s.get('max_model_len')}: {row.get('status')} "
          f"KV {pct(e.get('available KV memory'))} blocks {pct(e.get('GPU blocks'))} "
          f"act {pct(e.get('activation peak (profile run)'))} weights {pct(e.get('weights'))} {sp}"
          + (f" | {row.get('message', '')[:200]}" if row.get("message") else ""), flush=True)


# --------------------------------------------------------------------------------------------------------------------
# Parent: child processes, bookkeeping, budget
# --------------------------------------------------------------------------------------------------------------------


def _rows_since(out_path: Path, offset: int) -> list[dict[str, Any]]:
    """Rows appended to out_path after byte offset (a truncated last line is skipped)."""
    if not out_path.exists():
        return []
    with open(out_path, "rb") as fh:
        fh.seek(offset)
        data = fh.read().decode("utf-8", errors="replace")
    rows = []
    for line in data.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def run_vllm_cases(cases: list[dict[str, Any]], out_path: str | os.PathLike, log_dir: str | os.PathLike | None = None,
                   per_process: int = 1, deadline: float | None = None, python: str | None = None,
                   min_free_fraction: float = 0.97, case_timeout_s: float = 420.0, resume: bool = False,
                   case_runner: str | None = None) -> list[dict[str, Any]]:
    """Run every case in child processes (per_process cases per child; 0 = no limit) and return their rows.
    Each case gets exactly one row in out_path: ok, oom, error (with the message), timeout (the child's watchdog
    ended a case that ran past case_timeout_s), or skipped (time budget). resume: cases that already have a row in
    out_path (any status but skipped) are not run again. case_runner: see _worker_main (tests).

    After a child exits: rc 0 -> its cases are done; EXIT_RESTART -> continue in a fresh child; EXIT_RETRY (a case
    failed in a reused process, no row written) -> that case runs again first in a fresh child; anything else (crash,
    kill, timeout) -> the first case without a row was in flight: recorded as failed if it was the child's first case
    or already retried, else retried once in a fresh child."""
    out_path = Path(out_path)
    log_dir = Path(log_dir or out_path.with_suffix("").as_posix() + "-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    writer = JsonlWriter(out_path)
    pending = [normalize_case(c, i) for i, c in enumerate(cases)]
    ids = [c["id"] for c in pending]
    if len(set(ids)) != len(ids):
        raise ValueError("case ids must be unique")
    start_offset = _size(out_path)
    if resume:
        done_before = done_case_ids(out_path, ids)
        if done_before:
            print(f"[vllm] resume: {len(done_before)} case(s) already have rows", flush=True)
        pending = [c for c in pending if c["id"] not in done_before]
    retried: set[str] = set()
    launch = 0
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", PYTHONUNBUFFERED="1")
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

    def record(c: dict[str, Any], status: str, message: str, **extra: Any) -> None:
        row = _base_row(c)
        row.update(status=status, message=message, **extra)
        writer.write(row)
        _echo(row)

    while pending:
        now = time.time()
        if deadline is not None and now + expected_seconds(pending[0]) > deadline:
            for c in pending:
                record(c, "skipped", "time budget: not started")
            break
        batch = pending if per_process <= 0 else pending[:per_process]
        launch += 1
        cases_file = log_dir / f".cases-{launch}.json"
        cases_file.write_text(json.dumps(batch))
        console = log_dir / f"worker-{launch:02d}.out"
        cmd = [python or sys.executable, "-m", "kvcalc.validate.vllm_runner", "--worker", "--cases-file",
               str(cases_file), "--out", str(out_path), "--log-dir", str(log_dir),
               "--min-free-fraction", str(min_free_fraction)]
        if deadline is not None:
            cmd += ["--deadline", str(deadline)]
        if case_timeout_s:
            cmd += ["--case-timeout-s", str(case_timeout_s)]
        if case_runner:
            cmd += ["--case-runner", case_runner]
        # the parent's backstop, past the child's own per-case watchdog
        timeout = (case_timeout_s or 420.0) * len(batch) + 60.0
        if deadline is not None:
            timeout = max(30.0 + (case_timeout_s or 0), min(timeout, deadline - now + 30.0))
        print(f"[vllm] worker {launch}: {len(batch)} case(s) {', '.join(c['id'] for c in batch)}", flush=True)
        writer.repair()  # a torn line from a killed child must not sit inside the new child's rows
        offset = _size(out_path)
        rc: int | str
        with open(console, "w", encoding="utf-8") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            finally:
                end_process_group(proc)  # the child after a timeout, and any worker it left behind
        cases_file.unlink(missing_ok=True)
        done = {r.get("case_id") for r in _rows_since(out_path, offset)}
        batch_left = [c for c in batch if c["id"] not in done]
        rest = [c for c in pending if c["id"] not in done and c not in batch_left]
        progressed = len(batch_left) < len(batch)
        if rc == 0:
            for c in batch_left:  # never loop forever on a child that skips cases silently
                record(c, "error", "worker finished without a row for this case", console_file=console.name)
            batch_left = []
        elif rc == EXIT_RESTART or (rc == EXIT_CASE_TIMEOUT and progressed):
            pass  # the timed-out case has its row (written by the child's watchdog); the rest go to a fresh child
        elif batch_left:
            failed = batch_left[0]
            first_in_child = len(batch) - len(batch_left) == 0
            if rc == EXIT_RETRY and failed["id"] not in retried:
                retried.add(failed["id"])
            elif (first_in_child or failed["id"] in retried) and rc != EXIT_RETRY:
                tail = _tail(console)
                what = f"timed out after {timeout:.0f} s" if rc == "timeout" else f"worker exit {rc}"
                record(failed, "error" if rc == "timeout" else classify_failure(tail), f"{what}; {tail[-1500:]}",
                       log_file=f"{failed['id']}.log", console_file=console.name)
                batch_left = batch_left[1:]
            elif failed["id"] in retried:
                record(failed, "error", f"failed in a fresh process too (exit {rc})", console_file=console.name)
                batch_left = batch_left[1:]
            else:
                retried.add(failed["id"])
        pending = batch_left + rest
    return [r for r in _rows_since(out_path, 0 if resume else start_offset) if r.get("case_id") in set(ids)]


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-chars:]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Run vLLM validation cases; rows are appended to --out (JSONL).")
    p.add_argument("--worker", action="store_true", help="(internal) run the cases in this process")
    p.add_argument("--case", action="append", default=[], help="one case as JSON (repeatable)")
    p.add_argument("--cases-file", help="a JSON list of cases")
    p.add_argument("--out", required=True)
    p.add_argument("--log-dir", default=None)
    p.add_argument("--per-process", type=int, default=1, help="cases per child process (1 = isolate each; 0 = all)")
    p.add_argument("--deadline", type=float, default=None, help="(internal) epoch seconds")
    p.add_argument("--budget-s", type=float, default=None, help="do not start cases after this many seconds")
    p.add_argument("--min-free-fraction", type=float, default=0.97)
    p.add_argument("--case-timeout-s", type=float, default=420.0, help="end a case that runs longer (0: no limit)")
    p.add_argument("--case-runner", default=None, help="(tests) MODULE:FUNCTION standing in for the engine")
    p.add_argument("--resume", action="store_true", help="skip cases that already have a row in --out")
    args = p.parse_args(argv)
    cases = [json.loads(c) for c in args.case]
    if args.cases_file:
        cases += json.loads(Path(args.cases_file).read_text())
    if args.worker:
        log_dir = args.log_dir or str(Path(args.out).with_suffix("")) + "-logs"
        return _worker_main(cases, args.out, log_dir, args.deadline, args.min_free_fraction,
                            args.case_timeout_s or None, args.case_runner)
    deadline = args.deadline or (time.time() + args.budget_s if args.budget_s else None)
    run_vllm_cases(cases, args.out, args.log_dir, per_process=args.per_process, deadline=deadline,
                   case_timeout_s=args.case_timeout_s, resume=args.resume, case_runner=args.case_runner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
