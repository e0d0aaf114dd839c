"""Read an SGLang start-up log (what `python -m sglang.launch_server` prints) and compare it with kvcalc.

Lines read (sglang 0.4-0.5 wordings; "GB" in these lines is GiB: mem_cache/memory_pool.py GB = 1024 ** 3,
utils/common.py get_available_gpu_memory divides by 1 << 30):
  server_args=ServerArgs(model_path='...', ..., mem_fraction_static=0.88, ..., tp_size=1, ...)
  Init torch distributed ends. mem usage=X GB
  Load weight begin. avail mem=X GB
  Load weight end. [elapsed=S s, ]type=T, dtype=D, avail mem=X GB[, mem usage=Y GB.]
  KV Cache is allocated. [dtype: D, ]#tokens: N, K size: a GB, V size: b GB   (MLA: KV size: c GB)
  Use Sliding window memory pool. full_layer_tokens=F, swa_layer_tokens=S
  max_total_num_tokens=N, chunked_prefill_size=C, max_prefill_tokens=P, max_running_requests=R, context_len=L, ...
  Capture cuda graph end. Time elapsed: T s. mem usage=X GB. avail mem=Y GB.
Several ranks print the same lines ([... TP0], [... TP1]); the first rank's first line of each kind is kept.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import UsageError
from ..units import GiB
from .compare import Tolerance

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
_LINES = {
    "init_distributed_bytes": re.compile(r"Init torch distributed ends\. mem usage=" + _NUM + r" GB"),
    "free_before_weights_bytes": re.compile(r"Load weight begin\. avail mem=" + _NUM + r" GB"),
    "free_after_weights_bytes": re.compile(r"Load weight end\..*?avail mem=" + _NUM + r" GB"),
    "weights_bytes": re.compile(r"Load weight end\..*?mem usage=" + _NUM + r" GB"),
    "kv_k_bytes": re.compile(r"KV Cache is allocated\..*?K size: " + _NUM + r" GB"),
    "kv_v_bytes": re.compile(r"KV Cache is allocated\..*?(?<!K)V size: " + _NUM + r" GB"),
    "kv_latent_bytes": re.compile(r"KV Cache is allocated\..*?\bKV size: " + _NUM + r" GB"),
    "memory_pool_end_free_bytes": re.compile(r"Memory pool end\. avail mem=" + _NUM + r" GB"),
    "cuda_graph_bytes": re.compile(r"Capture cuda graph end\..*?mem usage=" + _NUM + r" GB"),
}
_COUNTS = {
    "kv_cache_tokens": re.compile(r"KV Cache is allocated\..*?#tokens: " + _NUM),
    "max_total_num_tokens": re.compile(r"max_total_num_tokens=" + _NUM),
    "max_running_requests": re.compile(r"max_total_num_tokens=.*?max_running_requests=" + _NUM),
    "context_len": re.compile(r"max_total_num_tokens=.*?context_len=" + _NUM),
    "chunked_prefill_size": re.compile(r"max_total_num_tokens=.*?chunked_prefill_size=(-?[0-9]+)"),
    "full_layer_tokens": re.compile(r"full_layer_tokens=" + _NUM),
    "swa_layer_tokens": re.compile(r"swa_layer_tokens=" + _NUM),
}
_ARGS = {  # ServerArgs field -> kind
    "model_path": "text", "mem_fraction_static": "float", "tp_size": "int", "pp_size": "int", "dp_size": "int",
    "context_length": "int", "kv_cache_dtype": "text", "chunked_prefill_size": "int", "max_running_requests": "int",
    "max_total_tokens": "int", "page_size": "int", "quantization": "text", "dtype": "text",
    "enable_dp_attention": "bool", "disable_cuda_graph": "bool", "cuda_graph_max_bs": "int",
    "speculative_algorithm": "text", "disable_hybrid_swa_memory": "bool", "swa_full_tokens_ratio": "float",
    "enable_piecewise_cuda_graph": "bool", "piecewise_cuda_graph_max_tokens": "int",
    # the configurations that switch the default piecewise prefill graphs off (engines/sglang.py piecewise_off)
    "enable_torch_compile": "bool", "enable_lora": "bool", "lora_paths": "text", "moe_a2a_backend": "text",
    # the drafter (engines/sglang_draft.py): ServerArgs prints the steps, topk and draft tokens it resolved
    "speculative_draft_model_path": "text", "speculative_num_steps": "int", "speculative_eagle_topk": "int",
    "speculative_num_draft_tokens": "int",
}


def _draft_config(path) -> dict | None:
    """The draft model of a log's server_args, from the catalog only (sglang_draft.draft_config_of reading no file)."""
    if not path:
        return None
    from ..engines.sglang_draft import draft_config_of

    return draft_config_of(str(path), read_files=False)


def _draft_params(stated: dict) -> dict:
    """The steps, topk and draft tokens a log's server_args resolved (all three, or none: SGLang's choice)."""
    names = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    if not stated.get("speculative_algorithm") or any(stated.get(n) is None for n in names):
        return {}
    return {n: int(stated[n]) for n in names}


_ERRORS = (re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static[^\n]*"),
           re.compile(r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError[^\n]*|CUDA out of memory[^\n]*"))
_RANK = re.compile(r"\b(?:DP\d+ )?TP(\d+)(?: EP\d+)?\]")


def is_sglang_log(text: str) -> bool:
    """True for SGLang's own start-up wording (vLLM never prints these lines)."""
    return bool(re.search(r"KV Cache is allocated\.|max_total_num_tokens=|Load weight (?:begin|end)\. |"
                          r"Init torch distributed ends\.|server_args=ServerArgs\(|sglang\.launch_server", text))


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _rank_texts(text: str) -> list[str]:
    """The log's lines grouped by TP rank, lowest rank first (lines without a rank tag first of all): a figure is
    read from the lowest rank that prints it (a post may quote some ranks' lines only)."""
    untagged, ranks = [], {}
    for line in text.splitlines():
        m = _RANK.search(line)
        if m is None:
            untagged.append(line)
        else:
            ranks.setdefault(int(m.group(1)), []).append(line)
    return ["\n".join(untagged)] + ["\n".join(ranks[r]) for r in sorted(ranks)]


def _first(rx: re.Pattern, texts: list[str]) -> re.Match | None:
    for t in texts:
        m = rx.search(t)
        if m:
            return m
    return None


def _server_args(text: str) -> dict[str, Any]:
    m = re.search(r"server_args=ServerArgs\((.*)$", text, re.M)
    if not m:
        return {}
    body, out = m.group(1), {}
    for key, kind in _ARGS.items():
        v = re.search(r"(?:^|[ ,(])" + key + r"=('(?:[^']*)'|[^,)]+)", body)
        if not v:
            continue
        raw = v.group(1).strip().strip("'")
        if raw in ("None", ""):
            continue
        try:
            out[key] = {"int": lambda r: int(float(r)), "float": float, "bool": lambda r: r == "True",
                        "text": str}[kind](raw)
        except ValueError:
            continue
    return out


def parse_sglang_log(text: str) -> dict[str, Any]:
    """{"engine": "sglang", "settings": ServerArgs fields it states, "values": figures (bytes exact from the GiB
    printed, counts), "errors": start-up failures, "warnings": []}."""
    if not isinstance(text, str):
        raise UsageError("an SGLang log must be text")
    texts = _rank_texts(text)
    values: dict[str, Any] = {}
    for key, rx in _LINES.items():
        m = _first(rx, texts)
        if m:
            values[key] = round(_number(m.group(1)) * GiB)
    for key, rx in _COUNTS.items():
        m = _first(rx, texts)
        if m:
            values[key] = int(_number(m.group(1)))
    # SGLang budgets with the minimum free memory over ranks (get_available_gpu_memory(distributed=True))
    free = [_number(m.group(1)) for m in _LINES["free_before_weights_bytes"].finditer(text)]
    if free:
        values["free_before_weights_bytes"] = round(min(free) * GiB)
    if "kv_k_bytes" in values and "kv_v_bytes" in values:
        values["kv_pool_bytes"] = values.pop("kv_k_bytes") + values.pop("kv_v_bytes")
    elif "kv_latent_bytes" in values:
        values["kv_pool_bytes"] = values.pop("kv_latent_bytes")
    if "weights_bytes" not in values and {"free_before_weights_bytes", "free_after_weights_bytes"} <= set(values):
        values["weights_bytes"] = values["free_before_weights_bytes"] - values["free_after_weights_bytes"]
    elif "free_before_weights_bytes" not in values and {"weights_bytes", "free_after_weights_bytes"} <= set(values):
        # "mem usage" is the free memory the weights took (model_runner.py load_model: before - after), so an
        # excerpt without the "Load weight begin" line still states the free memory before them
        values["free_before_weights_bytes"] = values["free_after_weights_bytes"] + values["weights_bytes"]
    settings = _server_args(text)
    errors = [m.group(0).strip() for rx in _ERRORS for m in [rx.search(text)] if m]
    return {"engine": "sglang", "settings": settings, "values": values, "errors": errors, "warnings": [],
            "version": None}


def tokens_from_own_lines(values: dict[str, Any], mem_fraction_static: float, cell_bytes: int) -> int | None:
    """The pool the log's own memory lines imply (model_runner.py profile_max_num_token): (free after weights -
    free before x (1 - mfs)) x 2**30 // cell. Each GiB figure is printed to 0.01, so this is good to about
    +-0.01 GiB / cell tokens."""
    before, after = values.get("free_before_weights_bytes"), values.get("free_after_weights_bytes")
    if before is None or after is None or not cell_bytes:
        return None
    return max(int(after - before * (1 - mem_fraction_static)), 0) // cell_bytes


_ROUNDING = 0.01 * GiB
TOLERANCES = {
    "free memory at start (per rank)": Tolerance(0.0, 0.25 * GiB, "CUDA context and NCCL: a fitted constant"),
    "weights": Tolerance(0.02, _ROUNDING, "weights within 2%"),
    "KV pool bytes": Tolerance(0.01, _ROUNDING, "KV capacity within 1%"),
    "logged KV cache tokens": Tolerance(0.01, 0.0, "KV capacity within 1%"),
    "KV tokens from the log's own memory lines": Tolerance(0.005, 0.0, "the rule on the log's own figures"),
    "max_running_requests": Tolerance(0.01, 0.0),
    "context_len": Tolerance(0.0, 0.0, "exact"),
    "chunked_prefill_size": Tolerance(0.0, 0.0, "a default SGLang picks: exact"),
    "sliding-window pool tokens": Tolerance(0.01, 0.0),
}


def _judged(r: dict[str, Any]) -> dict[str, Any]:
    from .compare import with_verdict

    return with_verdict(r, TOLERANCES)


def check_sglang_log(parsed: dict[str, Any], model: Any, gpu: Any, **overrides: Any) -> dict[str, Any]:
    """Rows comparing kvcalc's SGLang estimate with the log: {"rows", "mismatches", "notes", "assumed"}."""
    from ..catalog import load_model
    from ..engines import sglang as sglang_engine
    from ..formats import kv_format, weight_format
    from ..hardware import get_gpu
    from ..model import ModelSpec
    from .compare import row

    spec = model if isinstance(model, ModelSpec) else load_model(str(model))
    profile = gpu if not isinstance(gpu, str) else get_gpu(gpu)
    stated, values = parsed.get("settings", {}), parsed.get("values", {})
    assumed: dict[str, dict[str, Any]] = {}

    def pick(name: str, default: Any) -> Any:
        if overrides.get(name) is not None:
            assumed[name] = {"value": overrides[name], "from": "override"}
            return overrides[name]
        if stated.get(name) is not None:
            assumed[name] = {"value": stated[name], "from": "log"}
            return stated[name]
        assumed[name] = {"value": default, "from": "default"}
        return default

    kv_name = str(pick("kv_cache_dtype", "auto")).lower()
    kv = kv_format({"fp8_e4m3": "fp8", "fp8_e5m2": "fp8-e5m2", "bf16": "auto", "bfloat16": "auto"}.get(kv_name,
                                                                                                        kv_name))
    quant = pick("quantization", None)
    from ..checkpoint import baseline_weights

    if quant and str(quant).lower() not in sglang_engine.QUANTIZATION:
        raise UsageError(f"the log's --quantization {quant!r}: kvcalc models {', '.join(sglang_engine.QUANTIZATION)}")
    weights = (weight_format(sglang_engine.QUANTIZATION[str(quant).lower()]) if quant else
               (baseline_weights(spec) or weight_format(overrides.get("weights") or "bf16")))
    context_len = values.get("context_len") or pick("context_length", None)
    s = sglang_engine.SglangSettings(
        weights=weights, kv=kv, mem_fraction_static=pick("mem_fraction_static", None),
        context_length=context_len, max_running_requests=pick("max_running_requests", None),
        chunked_prefill_size=pick("chunked_prefill_size", None), page_size=pick("page_size", None),
        tensor_parallel=int(pick("tp_size", 1)), dp_size=int(pick("dp_size", 1)),
        enable_dp_attention=bool(pick("enable_dp_attention", False)),
        max_total_tokens=pick("max_total_tokens", None),
        enable_piecewise_cuda_graph=bool(pick("enable_piecewise_cuda_graph", False)),
        piecewise_cuda_graph_max_tokens=pick("piecewise_cuda_graph_max_tokens", None),
        # stated in the log's server_args only (not recorded as assumed: they change no figure but the prefill graphs,
        # and the drafter's, whose head is read from the catalog only: a log's draft path is the poster's)
        speculative_algorithm=stated.get("speculative_algorithm"),
        speculative_draft_model_path=stated.get("speculative_draft_model_path"),
        speculative_draft_config=_draft_config(stated.get("speculative_draft_model_path")),
        **_draft_params(stated),
        enable_torch_compile=bool(stated.get("enable_torch_compile")),
        enable_lora=bool(stated.get("enable_lora") or stated.get("lora_paths")),
        moe_a2a_backend=str(stated.get("moe_a2a_backend") or "none"),
        version=overrides.get("version") or sglang_engine.DEFAULT_VERSION)
    # an SGLang log does not print its release: --sglang-version, else the newest rules kvcalc has
    assumed["sglang_version"] = {"value": s.version, "from": "override" if overrides.get("version") else "default"}
    est = sglang_engine.estimate(spec, profile, s)
    rows, notes = [], []

    def add(quantity: str, predicted: Any, key: str, unit: str = "bytes", note: str = "") -> None:
        if values.get(key) is not None:
            rows.append(_judged(row(quantity, predicted, values[key], unit, note)))

    add("free memory at start (per rank)", est.free_at_start, "free_before_weights_bytes",
        note="log rounds to 0.01 GiB")
    add("weights", est.weights_bytes, "weights_bytes", note="log rounds to 0.01 GiB")
    if est.layout != "hybrid-swa":  # memory_pool.py: buffers of size + page_size slots
        add("KV pool bytes", (est.max_total_num_tokens + est.page_size) * (est.pool_cell_bytes or est.cell_bytes),
            "kv_pool_bytes",
            note="log rounds to 0.01 GiB")
    logged = values.get("max_total_num_tokens", values.get("kv_cache_tokens"))
    if logged is not None:
        rows.append(_judged(row("logged KV cache tokens", est.max_total_num_tokens, logged, "tokens")))
        own = tokens_from_own_lines(values, est.mem_fraction_static, est.cell_bytes)
        if own is not None:
            rows.append(_judged(row("KV tokens from the log's own memory lines", own, logged, "tokens",
                                         "kvcalc's rule on the log's free memory and weights")))
    add("max_running_requests", est.max_running_requests, "max_running_requests", unit="requests")
    add("context_len", est.context_len, "context_len", unit="tokens")
    add("chunked_prefill_size", est.chunked_prefill_size, "chunked_prefill_size", unit="tokens")
    if est.swa_tokens is not None:
        add("sliding-window pool tokens", est.swa_tokens, "swa_layer_tokens", unit="tokens")
    mismatches = []
    served = stated.get("model_path")
    if isinstance(served, str) and spec.name.split("/")[-1].lower() not in served.lower() \
            and served.split("/")[-1].lower() not in spec.name.lower():
        notes.append(f"the log served {served!r}; compared with {spec.name}")
    if parsed.get("errors"):
        notes.append("the log reports a start-up failure: " + parsed["errors"][0][:160])
    notes += est.notes
    return {"rows": rows, "mismatches": mismatches, "notes": notes, "assumed": assumed, "estimate": est}
