#!/usr/bin/env python3
"""Observe vLLM (offline engine, random weights) on the GPU host: start-up memory figures, KV-cache layout, decode
step time (TPOT) over a batch x context grid, and time to first token. Records OBSERVATIONS only (no kvcalc
prediction), one JSONL row per case, flushed as each case ends, so a timeout loses nothing already measured.

    python3 vllm_obs.py --cases CASES.json --configs DIR --out ROWS.jsonl --log-dir LOGS --deadline EPOCH
    python3 vllm_obs.py --cases CASES.json --configs DIR --dry-run        # list what would run (no vLLM needed)

The parent (this script without --worker) never imports vLLM or torch: it runs the cases in child processes
(one per case unless a case says "share_process": true, then consecutive sharing cases run in one child) and
records a failure row for a case whose child died, with the tail of the child's console.

A case (JSON object):
  id            unique name
  config        file name of a config.json in --configs (the exact config used is copied into the row)
  config_overrides  dict merged on top (recorded)
  llm           keyword arguments for vllm.LLM besides model/load_format/skip_tokenizer_init/seed
  ttft          {"inputs": [512, ...], "repeats": 3}: batch-1 time to first token (max_tokens=1)
  speed         {"batches": [...], "contexts": [...], "decode_tokens": 64, "max_prompt_tokens": N,
                 "kv_fill_limit": 0.9}: decode step time per (batch, context) point
  mem_trace     true: record the allocator during each profile_run (../gpu_v3/profile_trace.py)
  draft_config  file name of a drafter's config.json in --configs (EAGLE / EAGLE-3 heads): written to a folder of
                its own, and llm.speculative_config.model is set to that folder (recorded as draft_config_used)
  expected_s    rough wall time (the parent does not start a case that would end after the deadline)

TPOT method (recorded in each row): all `batch` requests (random token ids, prefix caching off) are added at once
with max_tokens = decode_tokens + ceil(batch*context/max_num_batched_tokens) + 2 and ignore_eos; the engine is
stepped by hand (LLMEngine.step, DELTA outputs) and the time of each step is taken. The window starts at the first
step after which every request has its first token (prefill over) and ends at the step in which the first request
emits its last token. In that window all `batch` requests decode in every step, so
TPOT = window seconds / (tokens produced in the window / batch). Early requests decode while later ones prefill, so
the contexts in the window are context + 1 .. context + prefill steps (+ the window): the row records their mean.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

EXIT_RESTART = 75
LOG_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
KEY_LINE = re.compile(
    r"Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|Graph capturing finished"
    r"|init engine|Free memory on device|CUDA graph|cudagraph|Using .*backend|attention backend|KV cache|"
    r"memory profiling|torch.compile|Compil|non-default args|max_num_batched_tokens|Chunked prefill|"
    r"prefix caching|Mamba|mamba|block_size|page size|Setting attention block size|padding|Padding|"
    r"worker requested memory|WARNING|ERROR|Error|quantiz|Marlin|marlin|fp8|FP8|MoE|moe|LoRA|lora|specul|ngram",
    re.I)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_row(path: str | os.PathLike, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def load_cases(path: str) -> list[dict[str, Any]]:
    cases = json.loads(Path(path).read_text())
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"duplicate case ids in {path}")
    return cases


def case_config(case: dict[str, Any], config_dir: str, key: str = "config") -> dict[str, Any]:
    cfg = json.loads(Path(config_dir, case[key]).read_text())
    if key != "config":
        cfg.pop("_source", None)
        return cfg
    cfg.pop("_source", None)  # provenance note kept beside the config, not given to vLLM
    for k, v in (case.get("config_overrides") or {}).items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


# ---------------------------------------------------------------------------------------------------------------
# Speed plan (pure: testable without vLLM)
# ---------------------------------------------------------------------------------------------------------------


def plan_points(speed: dict[str, Any], kv_tokens: int | None, block_size: int, mnbt: int,
                max_model_len: int | None = None) -> list[dict[str, Any]]:
    """The (batch, context) points to run, cheapest prompt volume first, each with max_tokens and a reason when
    skipped (does not fit the KV cache with margin, or over the prompt-token cap)."""
    n = int(speed.get("decode_tokens", 64))
    cap = int(speed.get("max_prompt_tokens", 10**6))
    fill = float(speed.get("kv_fill_limit", 0.9))
    only = {tuple(p) for p in speed.get("only_points", [])}
    pts = []
    for ctx in speed["contexts"]:
        for b in speed["batches"]:
            if only and (b, ctx) not in only:
                continue
            prefill_steps = math.ceil(b * ctx / mnbt)
            max_tokens = n + prefill_steps + 2
            per_req_blocks = math.ceil((ctx + max_tokens) / block_size)
            need = b * per_req_blocks * block_size
            p = {"batch": b, "context": ctx, "max_tokens": max_tokens, "prompt_tokens": b * ctx,
                 "kv_tokens_needed": need}
            if max_model_len and ctx + max_tokens > max_model_len:
                p["skip"] = f"context {ctx} + {max_tokens} tokens > max_model_len {max_model_len}"
            elif b * ctx > cap:
                p["skip"] = f"prompt tokens {b * ctx} > cap {cap}"
            elif kv_tokens is not None and need > fill * kv_tokens:
                p["skip"] = f"needs {need} KV tokens > {fill} x {kv_tokens}"
            pts.append(p)
    pts.sort(key=lambda p: (p["prompt_tokens"], p["batch"]))
    return pts


def tpot_window(steps: list[tuple[float, int, int, int]], batch: int, final: int) -> dict[str, Any] | None:
    """steps: (time after step, total tokens so far, requests with >= 1 token, max tokens of one request).
    Returns the decode window (see module doc) or None when it is empty."""
    s = next((i for i, st in enumerate(steps) if st[2] >= batch), None)
    if s is None:
        return None
    e = next((i for i, st in enumerate(steps) if i > s and st[3] >= final), None)
    if e is None:
        e = len(steps) - 1
    if e <= s:
        return None
    dt = steps[e][0] - steps[s][0]
    tokens = steps[e][1] - steps[s][1]
    if tokens <= 0:
        return None
    decode_steps = tokens / batch
    return {"window_s": dt, "window_tokens": tokens, "window_steps_equiv": decode_steps,
            "window_engine_steps": e - s, "tpot_s": dt / decode_steps, "start_index": s, "end_index": e}


# ---------------------------------------------------------------------------------------------------------------
# Child: engine work (imports vLLM)
# ---------------------------------------------------------------------------------------------------------------


def environment_facts() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0], "hostname_cpus": os.cpu_count()}
    try:
        import torch

        out.update(torch=torch.__version__, cuda_runtime=torch.version.cuda,
                   gpu=torch.cuda.get_device_name(0),
                   compute_capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                   gpu_total_bytes=int(torch.cuda.mem_get_info()[1]),
                   cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception as exc:  # noqa: BLE001
        out["torch_error"] = repr(exc)
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name,memory.total,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        out["nvidia_smi"] = q.splitlines()
    except Exception as exc:  # noqa: BLE001
        out["nvidia_smi_error"] = repr(exc)
    for mod in ("vllm", "transformers", "triton", "numpy", "xgrammar", "compressed_tensors"):
        try:
            m = __import__(mod)
            out[f"{mod}_version"] = getattr(m, "__version__", "?")
        except Exception as exc:  # noqa: BLE001
            out[f"{mod}_version"] = f"not importable: {exc!r}"[:200]
    env_keys = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_ATTENTION_BACKEND",
                "VLLM_USE_V2_MODEL_RUNNER", "PYTORCH_CUDA_ALLOC_CONF")
    out["env"] = {k: os.environ.get(k) for k in env_keys if os.environ.get(k) is not None}
    return out


def _get(obj: Any, *path: str) -> Any:
    for name in path:
        if obj is None:
            return None
        obj = getattr(obj, name, None)
    return obj


def _jsonable(x: Any, depth: int = 0) -> Any:
    if depth > 4:
        return str(x)[:500]
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    if isinstance(x, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in x[:64]]
    if isinstance(x, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in list(x.items())[:64]}
    if dataclasses.is_dataclass(x):
        d = {f.name: _jsonable(getattr(x, f.name, None), depth + 1) for f in dataclasses.fields(x)}
        d["__class__"] = type(x).__name__
        return d
    return str(x)[:500]


def read_internals(llm) -> dict[str, Any]:
    cfg = llm.llm_engine.vllm_config
    cache, sched, mcfg, comp = cfg.cache_config, cfg.scheduler_config, cfg.model_config, cfg.compilation_config
    out: dict[str, Any] = {
        "num_gpu_blocks": _get(cache, "num_gpu_blocks"),
        "block_size": _get(cache, "block_size"),
        "kv_cache_size_tokens": _get(cache, "kv_cache_size_tokens"),
        "kv_cache_max_concurrency": _get(cache, "kv_cache_max_concurrency"),
        "cache_dtype": str(_get(cache, "cache_dtype")),
        "mamba_block_size": _get(cache, "mamba_block_size"),
        "mamba_cache_dtype": str(_get(cache, "mamba_cache_dtype")),
        "mamba_page_size_padded": _get(cache, "mamba_page_size_padded"),
        "enable_prefix_caching": _get(cache, "enable_prefix_caching"),
        "gpu_memory_utilization": _get(cache, "gpu_memory_utilization"),
        "kv_cache_memory_bytes": _get(cache, "kv_cache_memory_bytes"),
        "max_model_len": _get(mcfg, "max_model_len"),
        "model_dtype": str(_get(mcfg, "dtype")),
        "quantization": str(_get(mcfg, "quantization")),
        "hf_architectures": _get(mcfg, "architectures"),
        "max_num_batched_tokens": _get(sched, "max_num_batched_tokens"),
        "max_num_seqs": _get(sched, "max_num_seqs"),
        "chunked_prefill": _get(sched, "enable_chunked_prefill"),
        "async_scheduling": _get(sched, "async_scheduling"),
        "cudagraph_mode": str(_get(comp, "cudagraph_mode")),
        "cudagraph_capture_sizes": _jsonable(_get(comp, "cudagraph_capture_sizes")),
        "compilation_mode": str(_get(comp, "mode")),
    }
    try:
        out["vocab_size"] = int(mcfg.get_vocab_size())
    except Exception:  # noqa: BLE001
        pass
    core = _get(llm, "llm_engine", "engine_core")
    core = getattr(core, "engine_core", core)
    try:
        w = core.model_executor.driver_worker
        w = getattr(w, "worker", w)
        out.update(
            requested_memory=_get(w, "requested_memory"),
            available_kv_cache_memory_bytes=_get(w, "available_kv_cache_memory_bytes"),
            peak_activation_memory=_get(w, "peak_activation_memory"),
            non_torch_memory=_get(w, "non_torch_memory"),
            cudagraph_memory_estimate=_get(w, "cudagraph_memory_estimate"),
            model_memory_usage=_get(w, "model_runner", "model_memory_usage"),
            model_runner_class=type(_get(w, "model_runner")).__module__ + "." + type(_get(w, "model_runner")).__name__,
            init_total_memory=_get(w, "init_snapshot", "total_memory"),
            init_free_memory=_get(w, "init_snapshot", "free_memory"),
        )
        attn_backends = set()
        mr = _get(w, "model_runner")
        for g in (_get(mr, "attn_groups") or []):
            for ag in (g if isinstance(g, list) else [g]):
                b = _get(ag, "backend")
                if b is not None:
                    attn_backends.add(getattr(b, "__name__", str(b)))
        if attn_backends:
            out["attention_backends"] = sorted(attn_backends)
    except Exception as exc:  # noqa: BLE001
        out["worker_error"] = repr(exc)[:500]
    try:
        kcc = core.scheduler.kv_cache_config
        groups = []
        for g in kcc.kv_cache_groups:
            spec = g.kv_cache_spec
            d = _jsonable(spec)
            try:
                d["page_size_bytes"] = int(spec.page_size_bytes)
            except Exception:  # noqa: BLE001
                pass
            groups.append({"spec_class": type(spec).__name__, "num_layers": len(g.layer_names),
                           "layer_names_head": list(g.layer_names[:4]), "spec": d})
        out["kv_cache_config"] = {
            "num_blocks": kcc.num_blocks,
            "num_tensors": len(kcc.kv_cache_tensors),
            "tensor_sizes": sorted({int(t.size) for t in kcc.kv_cache_tensors}),
            "tensors_total_bytes": int(sum(int(t.size) for t in kcc.kv_cache_tensors)),
            "groups": groups,
        }
    except Exception as exc:  # noqa: BLE001
        out["kv_cache_config_error"] = repr(exc)[:500]
    return out


def key_lines(text: str, limit: int = 400) -> list[str]:
    lines = [ln for ln in text.splitlines() if KEY_LINE.search(ln)]
    return lines[:limit]


def _prompts(rng, n: int, length: int, vocab: int) -> list[dict[str, Any]]:
    arr = rng.integers(10, max(vocab - 10, 20), size=(n, length))
    return [{"prompt_token_ids": row.tolist()} for row in arr]


def run_requests(llm, prompts, max_tokens: int, tag: str) -> tuple[list[tuple[float, int, int, int]], float]:
    """Add every prompt, step the engine by hand until done. Returns per-step (t, total tokens, requests started,
    max tokens of one request) with t relative to the moment the requests were added, and the add time."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    eng = llm.llm_engine
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0, detokenize=False,
                        output_kind=RequestOutputKind.DELTA)
    rendered = []
    for p in prompts:  # as LLM.generate renders a prompt (vllm/entrypoints/offline_utils.py), before the clock
        try:
            rendered.append(llm._preprocess_cmpl_one(p))
        except Exception:  # noqa: BLE001 - an engine-ready token input, as the renderer makes for token ids
            rendered.append({"type": "token", "prompt_token_ids": p["prompt_token_ids"]})
    t0 = time.perf_counter()
    for i, p in enumerate(rendered):
        eng.add_request(f"{tag}-{i}", p, sp)
    t_add = time.perf_counter() - t0
    counts: dict[str, int] = {}
    total = 0
    top = 0
    steps: list[tuple[float, int, int, int]] = []
    while eng.has_unfinished_requests():
        outs = eng.step()
        t = time.perf_counter() - t0
        for o in outs:
            n = len(o.outputs[0].token_ids) if o.outputs else 0
            if n:
                c = counts.get(o.request_id, 0) + n
                counts[o.request_id] = c
                total += n
                top = max(top, c)
        steps.append((t, total, len(counts), top))
    return steps, t_add


def measure_ttft(llm, ttft: dict[str, Any], vocab: int, rng, deadline: float) -> dict[str, Any]:
    res: dict[str, Any] = {"method": "batch 1, max_tokens=1, engine stepped by hand; time from add_request to the "
                                     "step that returns the first token; fresh random prompt each repeat"}
    for n in ttft.get("inputs", []):
        vals = []
        for r in range(int(ttft.get("repeats", 3))):
            if time.time() > deadline:
                res[str(n)] = {"skipped": "deadline", "values_s": vals}
                break
            steps, _ = run_requests(llm, _prompts(rng, 1, n, vocab), 1, f"ttft{n}-{r}")
            first = next((st[0] for st in steps if st[1] > 0), None)
            vals.append(round(first, 5) if first is not None else None)
        good = sorted(v for v in vals if v is not None)
        res[str(n)] = {"values_s": vals, "median_s": good[len(good) // 2] if good else None,
                       "min_s": good[0] if good else None}
        print(f"  ttft {n}: {vals}", flush=True)
    return res


def measure_speed(llm, speed: dict[str, Any], internals: dict[str, Any], vocab: int, rng, deadline: float,
                  emit) -> dict[str, Any]:
    mnbt = int(internals.get("max_num_batched_tokens") or 2048)
    bs = int(internals.get("block_size") or 16)
    pts = plan_points(speed, internals.get("kv_cache_size_tokens"), bs, mnbt, internals.get("max_model_len"))
    prefill_rate = float(speed.get("prefill_tokens_per_s_guess", 20000))
    step_guess = 0.02
    done = []
    for p in pts:
        if "skip" in p:
            done.append(p)
            continue
        est = p["prompt_tokens"] / prefill_rate * 1.3 + p["max_tokens"] * step_guess * 1.3 + 2
        if time.time() + est > deadline:
            p["skip"] = f"time budget (estimated {est:.0f} s)"
            done.append(p)
            continue
        try:
            steps, t_add = run_requests(llm, _prompts(rng, p["batch"], p["context"], vocab), p["max_tokens"],
                                        f"d{p['batch']}x{p['context']}")
        except Exception as exc:  # noqa: BLE001
            p["error"] = repr(exc)[:1000]
            done.append(p)
            continue
        win = tpot_window(steps, p["batch"], p["max_tokens"])
        s_idx = next((i for i, st in enumerate(steps) if st[2] >= p["batch"]), None)
        p["add_requests_s"] = round(t_add, 4)
        p["total_s"] = round(steps[-1][0], 4) if steps else None
        p["engine_steps"] = len(steps)
        p["tokens_out"] = steps[-1][1] if steps else 0
        if s_idx is not None:
            t_pref = steps[s_idx][0]
            p["all_first_tokens_s"] = round(t_pref, 4)
            p["prefill_tokens_per_s"] = round(p["prompt_tokens"] / t_pref, 1) if t_pref > 0 else None
            if p["prompt_tokens"] >= 8192 and t_pref > 0:
                prefill_rate = min(prefill_rate, p["prompt_tokens"] / t_pref)
            tok_at_start = steps[s_idx][1]
            p["mean_tokens_per_request_at_window_start"] = round(tok_at_start / p["batch"], 2)
        if win:
            p["tpot_ms"] = round(win["tpot_s"] * 1000, 4)
            p["decode_tokens_per_s"] = round(p["batch"] / win["tpot_s"], 2)
            p["window"] = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in win.items()}
            mid = p["context"] + p["mean_tokens_per_request_at_window_start"] + win["window_steps_equiv"] / 2
            p["context_mean_mid_window"] = round(mid, 1)
            dts = [steps[i][0] - steps[i - 1][0] for i in range(win["start_index"] + 1, win["end_index"] + 1)]
            if dts:
                sd = sorted(dts)
                p["step_ms_median"] = round(sd[len(sd) // 2] * 1000, 4)
                p["step_ms_min"] = round(sd[0] * 1000, 4)
                p["step_ms_max"] = round(sd[-1] * 1000, 4)
                p["step_ms_all"] = [round(x * 1000, 3) for x in dts[:400]]
            step_guess = max(win["tpot_s"], 0.001)
        else:
            p["error"] = "empty decode window"
        done.append(p)
        emit(p)
    return {"method": "TPOT from hand-stepped engine: window from 'every request has its first token' to 'first "
                      "request emits its last token'; TPOT = window time / (window tokens / batch); prefix caching "
                      "off, random prompts, ignore_eos, greedy", "points": done,
            "max_num_batched_tokens": mnbt, "block_size": bs}


def shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001
        pass


def release_gpu() -> None:
    import torch

    gc.collect()
    try:
        from vllm.distributed import parallel_state as ps

        for name in ("destroy_model_parallel", "destroy_distributed_environment"):
            fn = getattr(ps, name, None)
            if fn is not None:
                try:
                    fn()
                except Exception:  # noqa: BLE001
                    pass
    except ImportError:
        pass
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def run_case(case: dict[str, Any], args, env_facts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    import numpy as np
    import torch

    row: dict[str, Any] = {"case_id": case["id"], "time_start": now_iso(), "tag": args.tag, "case": case,
                           "environment": env_facts}
    health: dict[str, Any] = {}
    log_path = Path(args.log_dir, f"{case['id']}.log")
    handler = logging.FileHandler(log_path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT, "%m-%d %H:%M:%S"))
    handler.setLevel(logging.DEBUG)
    vlog = logging.getLogger("vllm")
    vlog.addHandler(handler)
    try:
        import vllm.logger as vlogger

        for name in ("_print_info_once", "_print_debug_once", "_print_warning_once"):
            fn = getattr(vlogger, name, None)
            if fn is not None and hasattr(fn, "cache_clear"):
                fn.cache_clear()
    except Exception:  # noqa: BLE001
        pass
    folder = tempfile.mkdtemp(prefix=f"kvobs-{case['id']}-")
    draft_folder = None
    llm = None
    deadline = args.deadline or (time.time() + 10**6)
    try:
        from vllm import LLM

        cfg = case_config(case, args.configs)
        cfg.setdefault("torch_dtype", "bfloat16")
        Path(folder, "config.json").write_text(json.dumps(cfg, indent=1))
        row["config_used"] = cfg
        kwargs = dict(model=folder, load_format="dummy", skip_tokenizer_init=True, seed=0)
        kwargs.update(case.get("llm") or {})
        if case.get("draft_config"):  # an EAGLE head: its own config folder, named by speculative_config.model
            draft_folder = tempfile.mkdtemp(prefix=f"kvobs-{case['id']}-draft-")
            dcfg = case_config(case, args.configs, "draft_config")
            Path(draft_folder, "config.json").write_text(json.dumps(dcfg, indent=1))
            row["draft_config_used"] = dcfg
            kwargs["speculative_config"] = dict(kwargs.get("speculative_config") or {}, model=draft_folder)
        kwargs.setdefault("dtype", "bfloat16")
        row["llm_kwargs"] = {k: v for k, v in kwargs.items() if k != "model"}
        vlog.info("kvobs case %s: %s", case["id"], json.dumps(row["llm_kwargs"], default=str))
        trace_store: list[dict[str, Any]] = []
        if case.get("mem_trace"):  # gpu_v3: where the profile run's peak comes from (profile_trace.py)
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gpu_v3"))
            import profile_trace

            row["profile_trace_hooked"] = profile_trace.install(trace_store)
        free0, total = torch.cuda.mem_get_info()
        t0 = time.perf_counter()
        llm = LLM(**kwargs)
        startup = time.perf_counter() - t0
        free1, _ = torch.cuda.mem_get_info()
        internals = read_internals(llm)
        obs: dict[str, Any] = {"startup_s": round(startup, 2), "free_before_bytes": int(free0),
                               "total_bytes": int(total), "used_after_start_bytes": int(total - free1),
                               "torch_allocated_after_start": int(torch.cuda.memory_allocated()),
                               "torch_reserved_after_start": int(torch.cuda.memory_reserved()),
                               "internals": internals}
        if case.get("mem_trace"):
            obs["profile_trace"] = trace_store
        row["observed"] = obs
        row["status"] = "started"
        print(f"[{case['id']}] started in {startup:.1f} s: blocks={internals.get('num_gpu_blocks')} "
              f"kv_tokens={internals.get('kv_cache_size_tokens')} avail={internals.get('available_kv_cache_memory_bytes')}",
              flush=True)
        vocab = int(internals.get("vocab_size") or 32000)
        rng = np.random.default_rng(zlib.crc32(case["id"].encode()))
        if case.get("ttft") or case.get("speed"):
            run_requests(llm, _prompts(rng, 4, 1024, vocab), 32, "warmup")  # first-use costs out of the timings
        if case.get("ttft"):
            obs["ttft"] = measure_ttft(llm, case["ttft"], vocab, rng, deadline - 5)
            m = [v.get("min_s") for v in obs["ttft"].values() if isinstance(v, dict) and v.get("min_s")]
            if m and case.get("speed"):
                big = max((int(k) for k, v in obs["ttft"].items() if isinstance(v, dict) and v.get("min_s")),
                          default=None)
                if big:
                    case["speed"].setdefault("prefill_tokens_per_s_guess", big / obs["ttft"][str(big)]["min_s"])
        if case.get("speed"):
            def emit(p):
                print(f"  b={p['batch']} ctx={p['context']}: tpot {p.get('tpot_ms')} ms, prefill "
                      f"{p.get('prefill_tokens_per_s')} tok/s, total {p.get('total_s')} s", flush=True)
            obs["speed"] = measure_speed(llm, case["speed"], internals, vocab, rng, deadline - 5, emit)
        if case.get("generate_check"):
            steps, _ = run_requests(llm, _prompts(rng, 2, 256, vocab), 16, "check")
            obs["generate_check_tokens"] = steps[-1][1] if steps else 0
        row["status"] = "ok"
    except BaseException as exc:  # noqa: BLE001
        row["status"] = "oom" if "out of memory" in repr(exc).lower() else "error"
        row["message"] = repr(exc)[:3000]
        row["traceback_tail"] = traceback.format_exc()[-6000:]
        print(f"[{case['id']}] FAILED: {repr(exc)[:500]}", flush=True)
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        try:
            if llm is not None:
                shutdown(llm)
            llm = None
            release_gpu()
            free, total = torch.cuda.mem_get_info()
            health = {"free_after_cleanup_bytes": int(free), "total_bytes": int(total)}
        except Exception as exc:  # noqa: BLE001
            health = {"cleanup_error": repr(exc)[:500]}
        handler.flush()
        vlog.removeHandler(handler)
        handler.close()
        shutil.rmtree(folder, ignore_errors=True)
        if draft_folder:
            shutil.rmtree(draft_folder, ignore_errors=True)
        try:
            row["log_key_lines"] = key_lines(log_path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
        row["log_file"] = log_path.name
        row["cleanup"] = health
        row["time_end"] = now_iso()
    return row, health


def worker_main(args) -> int:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    cases = load_cases(args.cases)
    if args.only:
        want = args.only.split(",")
        cases = [c for c in cases if c["id"] in want]
    env_facts = environment_facts()
    deadline = args.deadline or (time.time() + 10**6)
    for i, case in enumerate(cases):
        if time.time() + float(case.get("expected_s", 60)) * float(args.expect_factor) > deadline:
            write_row(args.out, {"case_id": case["id"], "tag": args.tag, "case": case, "status": "skipped",
                                 "message": "time budget: not started", "time_start": now_iso()})
            continue
        row, health = run_case(case, args, env_facts)
        row["process_case_index"] = i
        write_row(args.out, row)
        total, free = health.get("total_bytes"), health.get("free_after_cleanup_bytes")
        if i + 1 < len(cases) and (("cleanup_error" in health) or (total and free is not None and free < 0.97 * total)):
            print(f"[worker] only {free} of {total} bytes free after {case['id']}: asking for a fresh process",
                  flush=True)
            return EXIT_RESTART
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------------------------


def groups_of(cases: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for c in cases:
        if c.get("share_process") and out and out[-1][-1].get("share_process"):
            out[-1].append(c)
        else:
            out.append([c])
    return out


def done_ids(out: str) -> set[str]:
    ids = set()
    if Path(out).exists():
        for line in Path(out).read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("status") != "skipped":  # a case skipped for time runs in a later call
                ids.add(r.get("case_id"))
    return ids


def moe_kernels_present() -> bool:
    site = os.environ.get("KVCALC_SITE", "/tmp/kvcalc/site")
    return Path(site, "vllm", "_moe_C_stable_libtorch.abi3.so").exists()


def rows_since(out: str, offset: int) -> list[dict[str, Any]]:
    if not Path(out).exists():
        return []
    with open(out, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", errors="replace")
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return rows


def parent_main(args) -> int:
    cases = load_cases(args.cases)
    if args.only:
        want = args.only.split(",")
        cases = [c for c in cases if c["id"] in want]
    for c in cases:  # fail early on a missing config, before any GPU time is spent
        case_config(c, args.configs)
        if c.get("draft_config"):
            case_config(c, args.configs, "draft_config")
    if args.dry_run:
        for g in groups_of(cases):
            print("process:", [c["id"] for c in g], "expected_s", sum(c.get("expected_s", 60) for c in g))
            for c in g:
                cfg = case_config(c, args.configs)
                sp = c.get("speed")
                if sp:
                    pts = plan_points(sp, args.dry_kv_tokens, 16, int((c.get("llm") or {}).get(
                        "max_num_batched_tokens", 2048)), (c.get("llm") or {}).get("max_model_len"))
                    run = [p for p in pts if "skip" not in p]
                    print(f"   {c['id']}: {len(run)} points, prompt tokens {sum(p['prompt_tokens'] for p in run)}"
                          f"; skipped {[(p['batch'], p['context'], p['skip']) for p in pts if 'skip' in p]}")
                print(f"   {c['id']}: arch {cfg.get('architectures')} layers {cfg.get('num_hidden_layers')}"
                      f" llm {c.get('llm')}")
                if c.get("draft_config"):
                    d = case_config(c, args.configs, "draft_config")
                    print(f"   {c['id']}: drafter {c['draft_config']}: arch {d.get('architectures')} layers "
                          f"{d.get('num_hidden_layers')} -> speculative_config.model = its own folder")
        return 0
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    deadline = args.deadline or (time.time() + 10**6)
    have_moe = moe_kernels_present()
    deferred = [c["id"] for c in cases if c.get("needs") == "moe" and not have_moe]
    if deferred:
        print(f"[parent] MoE kernels absent: deferring {deferred} to a later call", flush=True)
    cases = [c for c in cases if not (c.get("needs") == "moe" and not have_moe)]
    pending = groups_of(cases)
    launch = 0
    while pending:
        group = pending.pop(0)
        group = [c for c in group if c["id"] not in done_ids(args.out)]
        if not group:
            continue
        first = group[0]
        if time.time() + float(first.get("expected_s", 60)) * float(args.expect_factor) > deadline:
            for c in group:
                write_row(args.out, {"case_id": c["id"], "tag": args.tag, "case": c, "status": "skipped",
                                     "message": "time budget: not started", "time_start": now_iso()})
                print(f"[parent] skip {c['id']} (time budget)", flush=True)
            continue
        launch += 1
        cf = Path(args.log_dir, f".cases-{args.tag}-{launch}.json")
        cf.write_text(json.dumps(group))
        console = Path(args.log_dir, f"console-{args.tag}-{launch:02d}-{first['id']}.txt")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--cases", str(cf), "--configs", args.configs,
               "--out", args.out, "--log-dir", args.log_dir, "--tag", args.tag, "--deadline", str(deadline)]
        print(f"[parent] {now_iso()} launch {launch}: {[c['id'] for c in group]}", flush=True)
        t0 = time.time()
        offset = Path(args.out).stat().st_size if Path(args.out).exists() else 0
        with open(console, "w", encoding="utf-8") as fh:
            try:
                rc: Any = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                         timeout=max(30.0, deadline - time.time() + args.grace_s)).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        have = {r.get("case_id") for r in rows_since(args.out, offset)}  # any row of this launch, skipped too
        left = [c for c in group if c["id"] not in have]
        print(f"[parent] launch {launch} exit {rc} after {time.time() - t0:.0f} s; without a row: "
              f"{[c['id'] for c in left]}", flush=True)
        if left:
            tail = console.read_text(errors="replace")[-3000:]
            if rc == EXIT_RESTART:
                pending.insert(0, left)
            else:
                write_row(args.out, {"case_id": left[0]["id"], "tag": args.tag, "case": left[0],
                                     "status": "error" if rc != "timeout" else "timeout",
                                     "message": f"worker exit {rc} during this case", "console_tail": tail,
                                     "console_file": console.name, "log_file": f"{left[0]['id']}.log",
                                     "time_start": now_iso()})
                if left[1:]:
                    pending.insert(0, left[1:])
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", required=True)
    p.add_argument("--configs", required=True)
    p.add_argument("--out", default="rows.jsonl")
    p.add_argument("--log-dir", default="logs")
    p.add_argument("--tag", default="run")
    p.add_argument("--deadline", type=float, default=None, help="epoch seconds: start nothing that ends later")
    p.add_argument("--budget-s", type=float, default=None, help="deadline = now + this")
    p.add_argument("--grace-s", type=float, default=20.0)
    p.add_argument("--expect-factor", type=float, default=1.0)
    p.add_argument("--only", default=None, help="comma-separated case ids")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--dry-kv-tokens", type=int, default=None)
    args = p.parse_args(argv)
    if args.budget_s and not args.deadline:
        args.deadline = time.time() + args.budget_s
    if args.worker:
        return worker_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
