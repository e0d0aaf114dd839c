"""Parse a vLLM start-up log (any 0.2x version, V0 or V1 engine) into bytes, and compare it with kvcalc.

Every pattern is written against the format string in vLLM's own source; the cited lines are vLLM 0.26.0
(vllm/... under /root/ref/vllm026) unless an older version is named. format_gib() prints round(bytes / 2**30, 2)
(utils/mem_utils.py:30), so every GiB value read from a log is exact only to +-0.005 GiB (+-5.4 MB).

Lines may carry ANSI colours, a process prefix such as "(EngineCore_DP0 pid=123) " and the logger prefix
"INFO 11-29 12:00:00 [gpu_worker.py:123] " (older: "INFO 03-14 09:12:41 gpu_worker.py:123] "); multi-line messages
repeat the prefix on every line (logging_utils/formatter.py NewLineFormatter). All of that is stripped first.
"""

from __future__ import annotations

import ast
import re
from typing import Any

GiB = 2**30

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PROC_PREFIX = re.compile(r"^\s*(?:\((?:[A-Za-z_][\w.-]*)(?:[ _][\w=.-]+)*\)\s*)+")
_LEVEL_PREFIX = re.compile(
    r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?\s+"
    r"(?:\[?[\w./\-]+\.py:\d+\]\s?)?"
)
_NUM = r"(-?[0-9]+(?:\.[0-9]+)?)"


def clean_log(text: str) -> str:
    """The log's messages only: ANSI codes, process prefixes and logger prefixes removed, one message line per line."""
    out = []
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = _ANSI.sub("", raw)
        line = _PROC_PREFIX.sub("", line)
        line = _LEVEL_PREFIX.sub("", line)
        out.append(line.rstrip())
    return "\n".join(out)


def gib_to_bytes(value: float | str) -> int:
    return int(round(float(value) * GiB))


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start: end if end >= 0 else len(text)]


def _bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


# --------------------------------------------------------------------------------------------------------------------
# Patterns. Each: (regex, handler(match, out)). The first match of each wins (a TP log repeats lines per rank).
# --------------------------------------------------------------------------------------------------------------------

def _set(out: dict, key: str, value: Any, raw: str) -> None:
    if key in out["values"]:  # an earlier (more direct) line already gave it
        return
    out["values"][key] = value
    out["raw"][key] = raw.strip()


def _parse_version(text: str, out: dict) -> None:
    patterns = (
        # v1/engine/core.py:117 "Initializing a V1 LLM engine (v%s) with config: %s"; 0.6-0.10 V0: "a V0 LLM engine";
        # 0.4-0.5: "Initializing an LLM engine (v%s) with config: ..."
        r"Initializing an? (?:V[01] )?LLM engine \(v([0-9][\w.+\-]*)\)",
        # entrypoints/openai/api_server.py: "vLLM API server version %s"
        r"vLLM API server version v?([0-9][\w.+\-]*)",
        r"vLLM version:?\s*v?([0-9][\w.+\-]*)",
    )
    for pat in patterns:
        m = re.search(pat, text)
        if m:
            out["version"] = m.group(1)
            out["raw"]["version"] = _line_at(text, m.start()).strip()
            return


def _parse_config_dump(text: str, out: dict) -> None:
    """config/vllm.py:2090 VllmConfig.__str__ (the "with config:" line): max_seq_len, dtype, tensor_parallel_size,
    kv_cache_dtype, enforce_eager, quantization, load_format, prefix caching, chunked prefill, model."""
    m = re.search(r"LLM engine \(v[^)]*\) with config: ", text)
    if not m:
        return
    line = _line_at(text, m.start())
    settings = out["settings"]
    simple = {
        "max_seq_len": ("max_model_len", int),
        "tensor_parallel_size": ("tensor_parallel_size", int),
        "pipeline_parallel_size": ("pipeline_parallel_size", int),
        "data_parallel_size": ("data_parallel_size", int),
        "kv_cache_dtype": ("kv_cache_dtype", str),
        "enforce_eager": ("enforce_eager", _bool),
        "quantization": ("quantization", str),
        "load_format": ("load_format", str),
        "dtype": ("dtype", str),
        "enable_prefix_caching": ("enable_prefix_caching", _bool),
        "enable_chunked_prefill": ("enable_chunked_prefill", _bool),
        "seed": ("seed", str),
    }
    for key, (name, cast) in simple.items():
        mm = re.search(rf"(?:^|[ ,]){key}=([^,]+?)(?=,\s*\w+=|$)", line)
        if mm:
            value = mm.group(1).strip()
            try:
                settings.setdefault(name, cast(value))
            except ValueError:
                settings.setdefault(name, value)
    mm = re.search(r"with config: model='([^']*)'", line) or re.search(r"with config: model=([^,]+)", line)
    if mm:
        settings.setdefault("model", mm.group(1))
    out["raw"]["config"] = line.strip()


def _parse_non_default_args(text: str, out: dict) -> None:
    """entrypoints/serve/utils/api_utils.py:273 "non-default args: %s" (a dict repr; LLM class and `vllm serve`)."""
    m = re.search(r"non-default args: (\{.*\})\s*$", text, re.MULTILINE)
    if not m:
        return
    raw = m.group(1)
    args: dict[str, Any] = {}
    try:
        args = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        for mm in re.finditer(r"'(\w+)': ('[^']*'|[^,}]+)", raw):
            value = mm.group(2).strip()
            try:
                args[mm.group(1)] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                args[mm.group(1)] = value
    if not isinstance(args, dict):
        return
    out["non_default_args"] = {k: v for k, v in args.items() if isinstance(v, (str, int, float, bool)) or v is None}
    wanted = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens", "max_num_seqs", "block_size",
              "kv_cache_dtype", "enforce_eager", "tensor_parallel_size", "pipeline_parallel_size", "dtype",
              "quantization", "model", "enable_prefix_caching", "kv_cache_memory_bytes")
    for key in wanted:
        if key in args and args[key] is not None:
            out["settings"][key] = args[key]
    out["raw"]["non_default_args"] = _line_at(text, m.start()).strip()


def parse_vllm_log(text: str) -> dict[str, Any]:
    """Every memory figure of a vLLM start-up log, in bytes (GiB * 2**30, rounded), plus the raw line of each.

    Returns {"version", "settings": {...}, "values": {...}, "raw": {...}, "errors": [...], "repeats": {...}}
    (repeats: how many lines gave a per-rank figure when several ranks logged it; the first is kept).
    values keys (present when logged): weights_bytes, load_seconds, total_memory_bytes, requested_memory_bytes,
    initial_free_bytes, non_kv_bytes, activation_bytes, non_torch_bytes, available_kv_bytes, kv_cache_tokens,
    num_gpu_blocks (V0 only), max_concurrency, concurrency_max_model_len, graph_capture_bytes,
    graph_capture_seconds, cudagraph_estimate_bytes, cudagraph_pool_actual_bytes, cudagraph_pool_estimated_bytes,
    equivalent_util_without_cudagraph_profiling, kv_cache_memory_to_requested_bytes, kv_cache_memory_to_gpu_bytes,
    kv_cache_in_use_bytes, profile_seconds, init_engine_seconds, free_after_profiling_bytes.
    """
    text = clean_log(text)
    out: dict[str, Any] = {"version": None, "settings": {}, "values": {}, "raw": {}, "errors": [], "repeats": {}}
    _parse_version(text, out)
    _parse_config_dump(text, out)
    _parse_non_default_args(text, out)

    def first(pattern: str, flags: int = 0):
        return re.search(pattern, text, flags)

    # config/model.py:1788 "Using max model len %s"
    if m := first(r"Using max model len (\d+)"):
        out["settings"].setdefault("max_model_len", int(m.group(1)))
    # config/scheduler.py:253 "Chunked prefill is enabled with max_num_batched_tokens=%d." (the resolved value: an
    # observation, not a setting, unless the user set it, which non-default args shows)
    if m := first(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"):
        _set(out, "max_num_batched_tokens", int(m.group(1)), _line_at(text, m.start()))
    # platforms/cuda.py:483 "Using %s attention backend out of potential backends: %s."
    if m := first(r"Using (\w+) attention backend"):
        out["settings"].setdefault("attention_backend", m.group(1))
    # v1/attention/backends/flash_attn.py:777 "Using FlashAttention version %s"
    if m := first(r"Using FlashAttention version (\d+)"):
        out["settings"].setdefault("flash_attention_version", int(m.group(1)))

    # gpu_model_runner.py:5348 "Model loading took %s GiB memory and %.6f seconds" (0.26);
    # gpu/model_runner.py:306 and 0.7-0.11: "Model loading took %.4f GiB and %.6f seconds";
    # 0.4-0.5 V0: "Loading model weights took %.4f GB" (computed as bytes / 2**30).
    if m := first(rf"Model loading took {_NUM} ?GiB(?: memory)? and {_NUM} ?s(?:econds)?"):
        _set(out, "weights_bytes", gib_to_bytes(m.group(1)), _line_at(text, m.start()))
        _set(out, "load_seconds", float(m.group(2)), _line_at(text, m.start()))
    elif m := first(rf"Loading model weights took {_NUM} ?GB"):
        _set(out, "weights_bytes", gib_to_bytes(m.group(1)), _line_at(text, m.start()))

    # V0 worker.py (0.6-0.8) and early V1 gpu_worker.py, one message over three lines:
    # "Memory profiling takes %.2f seconds\nthe current vLLM instance can use total_gpu_memory (%.2fGiB) x
    #  gpu_memory_utilization (%.2f) = %.2fGiB\nmodel weights take %.2fGiB; non_torch_memory takes %.2fGiB;
    #  PyTorch activation peak memory takes %.2fGiB; the rest of the memory reserved for KV Cache is %.2fGiB."
    if m := first(rf"total_gpu_memory \({_NUM} ?GiB\) x gpu_memory_utilization \({_NUM}\) = {_NUM} ?GiB"):
        raw = _line_at(text, m.start())
        _set(out, "total_memory_bytes", gib_to_bytes(m.group(1)), raw)
        out["settings"].setdefault("gpu_memory_utilization", float(m.group(2)))
        _set(out, "requested_memory_bytes", gib_to_bytes(m.group(3)), raw)
    if m := first(rf"model weights take {_NUM} ?GiB; non_torch_memory takes {_NUM} ?GiB; PyTorch activation peak "
                  rf"memory takes {_NUM} ?GiB; the rest of the memory reserved for KV Cache is {_NUM} ?GiB"):
        raw = _line_at(text, m.start())
        _set(out, "weights_profiled_bytes", gib_to_bytes(m.group(1)), raw)
        _set(out, "non_torch_bytes", gib_to_bytes(m.group(2)), raw)
        _set(out, "activation_bytes", gib_to_bytes(m.group(3)), raw)
        _set(out, "available_kv_bytes", gib_to_bytes(m.group(4)), raw)
    # utils/mem_utils.py MemoryProfilingResult.__repr__ (0.9-0.26; logged at DEBUG by gpu_worker.py):
    # "Memory profiling takes %.2f seconds. Total non KV cache memory: %sGiB; torch peak memory increase: %sGiB;
    #  non-torch forward increase memory: %sGiB; weights memory: %sGiB."
    if m := first(r"Memory profiling takes ([0-9.]+) seconds"):
        _set(out, "profile_seconds", float(m.group(1)), _line_at(text, m.start()))
    if m := first(rf"Total non KV cache memory: {_NUM} ?GiB; torch peak memory increase: {_NUM} ?GiB; "
                  rf"non-torch forward increase memory: {_NUM} ?GiB; weights memory: {_NUM} ?GiB"):
        raw = _line_at(text, m.start())
        _set(out, "non_kv_bytes", gib_to_bytes(m.group(1)), raw)
        _set(out, "activation_bytes", gib_to_bytes(m.group(2)), raw)
        _set(out, "non_torch_bytes", gib_to_bytes(m.group(3)), raw)
        _set(out, "weights_profiled_bytes", gib_to_bytes(m.group(4)), raw)
    # gpu_worker.py:551 (DEBUG) "Initial free memory: %s GiB; Requested memory: %f (util), %s GiB"
    if m := first(rf"Initial free memory:? {_NUM} ?GiB; Requested memory: {_NUM} \(util\), {_NUM} ?GiB"):
        raw = _line_at(text, m.start())
        _set(out, "initial_free_bytes", gib_to_bytes(m.group(1)), raw)
        out["settings"].setdefault("gpu_memory_utilization", float(m.group(2)))
        _set(out, "requested_memory_bytes", gib_to_bytes(m.group(3)), raw)
    # gpu_worker.py:556 (DEBUG) "Free memory after profiling: %s GiB (total), %s GiB (within requested)"
    if m := first(rf"Free memory after profiling: {_NUM} ?GiB \(total\), {_NUM} ?GiB \(within requested\)"):
        _set(out, "free_after_profiling_bytes", gib_to_bytes(m.group(1)), _line_at(text, m.start()))
    # gpu_worker.py:561 "Available KV cache memory: %s GiB" (0.7+: "%.2f GiB")
    if m := first(rf"Available KV cache memory: {_NUM} ?GiB"):
        _set(out, "available_kv_bytes", gib_to_bytes(m.group(1)), _line_at(text, m.start()))
    # kv_cache_utils.py:2177 "GPU KV cache size: %s tokens" (thousands separators)
    if m := first(r"GPU KV cache size: ([0-9,]+) tokens"):
        _set(out, "kv_cache_tokens", _int(m.group(1)), _line_at(text, m.start()))
    # V0 (0.4-0.10) executor: "# GPU blocks: %d, # CPU blocks: %d" (0.6+: "# %s blocks: %d, # CPU blocks: %d")
    if m := first(r"# (?:GPU|cuda|CUDA|gpu) blocks: ([0-9,]+)"):
        _set(out, "num_gpu_blocks", _int(m.group(1)), _line_at(text, m.start()))
    # kv_cache_utils.py:2179 "Maximum concurrency for %s tokens per request: %.2fx"
    if m := first(r"Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x"):
        raw = _line_at(text, m.start())
        _set(out, "concurrency_max_model_len", _int(m.group(1)), raw)
        _set(out, "max_concurrency", float(m.group(2)), raw)
    # gpu_model_runner.py:6845 "Graph capturing finished in %.0f secs, took %.2f GiB"
    if m := first(rf"Graph capturing finished in {_NUM} secs?, took {_NUM} ?GiB"):
        raw = _line_at(text, m.start())
        _set(out, "graph_capture_seconds", float(m.group(1)), raw)
        _set(out, "graph_capture_bytes", gib_to_bytes(m.group(2)), raw)
    # gpu_model_runner.py:6738 "Estimated CUDA graph memory: %.2f GiB total"
    if m := first(rf"Estimated CUDA graph memory: {_NUM} ?GiB total"):
        _set(out, "cudagraph_estimate_bytes", gib_to_bytes(m.group(1)), _line_at(text, m.start()))
    # gpu_model_runner.py:6612 "Profiling CUDA graph memory: %s" (the graph groups, e.g. "PIECEWISE=51 (largest=512)")
    if m := first(r"Profiling CUDA graph memory: (.+)$", re.MULTILINE):
        out["settings"].setdefault("cudagraph_groups", m.group(1).strip())
    # gpu_worker.py:795 "CUDA graph pool memory: %s GiB (actual), %s GiB (estimated), difference: %s GiB (%.1f%%)."
    if m := first(rf"CUDA graph pool memory: {_NUM} ?GiB \(actual\), {_NUM} ?GiB \(estimated\)"):
        raw = _line_at(text, m.start())
        _set(out, "cudagraph_pool_actual_bytes", gib_to_bytes(m.group(1)), raw)
        _set(out, "cudagraph_pool_estimated_bytes", gib_to_bytes(m.group(2)), raw)
    # gpu_worker.py:575 "CUDA graph memory profiling is enabled (default since v0.21.0). The current
    # --gpu-memory-utilization=%.4f is equivalent to --gpu-memory-utilization=%.4f without CUDA graph memory ..."
    if m := first(rf"--gpu-memory-utilization={_NUM} is equivalent to --gpu-memory-utilization={_NUM}"):
        raw = _line_at(text, m.start())
        out["settings"].setdefault("gpu_memory_utilization", float(m.group(1)))
        _set(out, "equivalent_util_without_cudagraph_profiling", float(m.group(2)), raw)
    if first(r"CUDA graph memory profiling is disabled"):
        out["settings"].setdefault("cudagraph_memory_profiling", False)
    # gpu_worker.py:835-855 the summary (0.10+):
    # "Free memory on device (%s/%s GiB) on startup. Desired GPU memory utilization is (%s, %s GiB). Actual usage is
    #  %s GiB for weight, %s GiB for peak activation, %s GiB for non-torch memory, and %s GiB for CUDAGraph memory.
    #  Replace gpu_memory_utilization config with `--kv-cache-memory=%d` (%s GiB) to fit into requested memory, or
    #  `--kv-cache-memory=%d` (%s GiB) to fully utilize gpu memory. Current kv cache memory in use is %s GiB."
    # (0.10-0.11 end with "... in use is %d bytes.")
    if m := first(rf"Free memory on device \({_NUM}/{_NUM} ?GiB\) on startup\. Desired GPU memory utilization is "
                  rf"\({_NUM}, {_NUM} ?GiB\)"):
        raw = _line_at(text, m.start())
        _set(out, "initial_free_bytes", gib_to_bytes(m.group(1)), raw)
        _set(out, "total_memory_bytes", gib_to_bytes(m.group(2)), raw)
        out["settings"].setdefault("gpu_memory_utilization", float(m.group(3)))
        _set(out, "requested_memory_bytes", gib_to_bytes(m.group(4)), raw)
        tail = raw
        if mm := re.search(rf"Actual usage is {_NUM} ?GiB for weight, {_NUM} ?GiB for peak activation, {_NUM} ?GiB "
                           rf"for non-torch memory, and {_NUM} ?GiB for CUDAGraph memory", tail):
            _set(out, "weights_bytes", gib_to_bytes(mm.group(1)), raw)
            _set(out, "activation_bytes", gib_to_bytes(mm.group(2)), raw)
            _set(out, "non_torch_bytes", gib_to_bytes(mm.group(3)), raw)
            _set(out, "graph_capture_bytes", gib_to_bytes(mm.group(4)), raw)
        if mm := re.search(r"--kv-cache-memory=(\d+)`?(?: \([0-9.]+ ?GiB\))? to fit into requested memory", tail):
            _set(out, "kv_cache_memory_to_requested_bytes", int(mm.group(1)), raw)
        if mm := re.search(r"--kv-cache-memory=(\d+)`?(?: \([0-9.]+ ?GiB\))? to fully utilize gpu memory", tail):
            _set(out, "kv_cache_memory_to_gpu_bytes", int(mm.group(1)), raw)
        if mm := re.search(rf"Current kv cache memory in use is {_NUM} ?(GiB|bytes)", tail):
            value = float(mm.group(1))
            _set(out, "kv_cache_in_use_bytes", int(value) if mm.group(2) == "bytes" else gib_to_bytes(value), raw)
    # core.py (0.7+) "init engine (profile, create kv cache, warmup model) took %.2f seconds"
    if m := first(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) seconds"):
        _set(out, "init_engine_seconds", float(m.group(1)), _line_at(text, m.start()))

    # Start-up failures worth recording.
    failures = (
        # v1/worker/utils.py:436 "Free memory on device %s (%s/%s GiB) on startup is less than desired GPU memory
        # utilization (%s, %s GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
        r"Free memory on device .*? on startup is less than desired GPU memory utilization[^\n]*",
        # kv_cache_utils.py check_enough_kv_cache_memory
        r"No available memory for the cache blocks[^\n]*",
        r"To serve at least one request with the models?'s max seq len[^\n]*",
        r"[^\n]*KV cache is needed, which is larger than the available KV cache memory[^\n]*",
        r"[^\n]*CUDA out of memory[^\n]*",
        r"[^\n]*OutOfMemoryError[^\n]*",
    )
    for pat in failures:
        for m in re.finditer(pat, text):
            line = m.group(0).strip()
            if line and not any(line in e or e in line for e in out["errors"]):
                out["errors"].append(line)
    # Lines printed once per rank (TP/PP logs): how many ranks reported each, the first one's value is kept.
    for key, pat in (("weights_bytes", r"Model loading took "), ("available_kv_bytes", r"Available KV cache memory: "),
                     ("graph_capture_bytes", r"Graph capturing finished in ")):
        n = len(re.findall(pat, text))
        if n > 1:
            out["repeats"][key] = n
    if m := first(r"the estimated maximum model length is (\d+)"):
        _set(out, "estimated_max_model_len", int(m.group(1)), _line_at(text, m.start()))
    return out


# --------------------------------------------------------------------------------------------------------------------
# Comparison with kvcalc
# --------------------------------------------------------------------------------------------------------------------


def compare_log(parsed: dict[str, Any], model: Any, gpu: Any, **overrides: Any) -> list[dict[str, Any]]:
    """Rows of quantity | predicted | observed | signed error for every quantity the log states.

    model: a catalog name, config path or ModelSpec; gpu: a GPU id/alias/profile. The GPU's total memory is replaced by
    the log's (from the "Free memory on device" summary or the old profiling line) when the log states it, so the
    comparison tests the accounting, not the profile's memory size. overrides (weights, kv, gpu_memory_utilization,
    max_model_len, max_num_batched_tokens, max_num_seqs, enforce_eager, block_size, version, entrypoint,
    memory_total_bytes) win over what the log says.
    """
    from ..catalog import load_model
    from ..engines import vllm as vllm_engine
    from ..model import ModelSpec
    from .compare import row
    from .predict import gpu_with_total, log_settings

    spec = model if isinstance(model, ModelSpec) else load_model(str(model))
    values = parsed.get("values", {})
    total = overrides.pop("memory_total_bytes", None) or values.get("total_memory_bytes")
    profile = gpu_with_total(gpu, total)
    settings = log_settings(parsed, overrides)
    est = vllm_engine.estimate(spec, profile, settings)
    note_gib = "log rounds to 0.01 GiB"
    rows = []

    def add(quantity: str, predicted: Any, key: str, unit: str = "bytes", note: str = "") -> None:
        if key in values:
            rows.append(row(quantity, predicted, values[key], unit, note))

    add("requested memory (total x util)", est.requested_memory, "requested_memory_bytes", note=note_gib)
    add("weights", est.weights_bytes, "weights_bytes", note=note_gib)
    add("activation peak", est.activation_bytes, "activation_bytes", note=note_gib)
    add("non-torch memory", est.non_torch_bytes, "non_torch_bytes", note=note_gib)
    if "non_kv_bytes" in values:
        rows.append(row("non-KV (weights+activation+non-torch)",
                        est.weights_bytes + est.activation_bytes + est.non_torch_bytes, values["non_kv_bytes"],
                        note=note_gib))
    add("CUDA-graph estimate", est.cudagraph_bytes, "cudagraph_estimate_bytes", note=note_gib)
    add("available KV memory", est.available_kv_bytes, "available_kv_bytes", note=note_gib)
    add("GPU blocks", est.num_gpu_blocks, "num_gpu_blocks", unit="blocks")
    add("logged KV cache tokens", est.logged_kv_tokens, "kv_cache_tokens", unit="tokens")
    add("max concurrency", est.logged_concurrency, "max_concurrency", unit="x")
    add("max_num_batched_tokens", est.max_num_batched_tokens, "max_num_batched_tokens", unit="tokens")
    return rows
