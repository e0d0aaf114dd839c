"""kvcalc's prediction for a validation case or a vLLM log: settings in, engine settings and an estimate out.

The one place where the validation wing turns its inputs into engine settings:
- a vLLM runner case (a dict: model, kv, util, max_model_len, enforce_eager, ...) -> VllmSettings -> estimate;
- a transformers runner case (model, weights, kv, batch, prompt_len, new_tokens, dtype) -> HfSettings -> estimate;
- a parsed vLLM start-up log (settings read from it, plus the user's overrides) -> VllmSettings.
The GPU runners, the log comparison and scripts/validation_report.py import these, so a script never imports a GPU
runner. Imports only the core (catalog, engines, formats, hardware, model): no torch, no vLLM.
"""

from __future__ import annotations

import dataclasses
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_DTYPE_WEIGHTS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------------------------------
# GPU and model
# --------------------------------------------------------------------------------------------------------------------


def gpu_with_total(gpu: Any, total_bytes: int | None):
    """The GPU profile with its driver-reported total replaced by an observed one (isolates the accounting)."""
    from ..hardware import get_gpu

    profile = get_gpu(gpu)
    if total_bytes:
        profile = dataclasses.replace(profile, memory_total_bytes=int(total_bytes))
    return profile


def model_config(model: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The catalog config, with a case's overrides (e.g. an MLA shape with every MLP dense)."""
    from ..catalog import catalog_entry, catalog_names, load_model

    if model.lower() in catalog_names():
        cfg = dict(catalog_entry(model.lower())["config"])
    else:
        cfg = dict(load_model(model).config)
    cfg.update(overrides or {})
    return cfg


# --------------------------------------------------------------------------------------------------------------------
# vLLM runner cases
# --------------------------------------------------------------------------------------------------------------------


def normalize_vllm_case(case: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """A vLLM case with the runner's defaults filled in (what the engine was started with)."""
    c = dict(case)
    c.setdefault("id", f"v{index:02d}")
    c.setdefault("kv", "auto")
    c.setdefault("util", 0.9)
    c.setdefault("max_model_len", 8192)
    c.setdefault("enforce_eager", False)
    c.setdefault("speed_batches", [1, 32])
    c.setdefault("prompt_len", 512)
    c.setdefault("max_tokens", 256)
    c.setdefault("warmup_tokens", 32)
    return c


def vllm_case_settings(c: dict[str, Any], block_size: int | None, version: str):
    """VllmSettings of a runner case (offline LLM() entry point, as the runner starts it)."""
    from ..engines import vllm as vllm_engine
    from ..formats import kv_format, weight_format

    return vllm_engine.VllmSettings(
        weights=weight_format(c.get("weights", "bf16")), kv=kv_format(c["kv"]),
        gpu_memory_utilization=float(c["util"]), max_model_len=int(c["max_model_len"]),
        max_num_batched_tokens=c.get("max_num_batched_tokens"), max_num_seqs=c.get("max_num_seqs"),
        enforce_eager=bool(c["enforce_eager"]), block_size=block_size,
        version=version, entrypoint="llm", tensor_parallel=int(c.get("tensor_parallel_size") or 1),
        nccl_nvls=False,  # the project's H200 host runs with NCCL_NVLS_ENABLE=0 (device KINDS.md)
        # limit_mm_per_prompt 0 for every modality given: vLLM 0.10.1+ builds no encoder (engines/vllm_encoders.py)
        language_model_only=bool(c.get("limit_mm_per_prompt"))
        and all(v == 0 for v in dict(c["limit_mm_per_prompt"]).values()),
    )


def predict_vllm_case(c: dict[str, Any], internals: dict[str, Any], total_bytes: int, version: str):
    """kvcalc's VllmEstimate for a runner case, on a GPU whose total memory is the one the engine saw."""
    from ..engines import vllm as vllm_engine
    from ..model import spec_from_config

    spec = spec_from_config(model_config(c["model"], c.get("config_overrides")), name=c["model"])
    settings = vllm_case_settings(c, _int_or_none(internals.get("block_size") or c.get("block_size")), version)
    gpu = gpu_with_total(c.get("gpu", "h200"), total_bytes)
    return vllm_engine.estimate(spec, gpu, settings)


# --------------------------------------------------------------------------------------------------------------------
# transformers runner cases
# --------------------------------------------------------------------------------------------------------------------


def hf_case_settings(case: dict[str, Any], kv):
    """HfSettings of a runner case: plain weights follow the case's compute dtype."""
    from ..engines import hf
    from ..formats import weight_format

    weights = case["weights"]
    if weights in ("bf16", "fp16", "fp32", "auto", "bfloat16", "float16", "float32"):
        weights = _DTYPE_WEIGHTS[case["dtype"]]
    return hf.HfSettings(weight_format(weights), kv, int(case["batch"]), int(case["prompt_len"]),
                         int(case["new_tokens"]), DTYPE_BYTES[case["dtype"]])


def predict_hf_case(spec, case: dict[str, Any], kv):
    """kvcalc's HfEstimate for a transformers runner case (a normalized case: dtype filled in)."""
    from ..engines import hf

    return hf.estimate(spec, hf_case_settings(case, kv))


# --------------------------------------------------------------------------------------------------------------------
# vLLM logs
# --------------------------------------------------------------------------------------------------------------------


def log_settings(parsed: dict[str, Any], overrides: dict[str, Any]):
    """VllmSettings for a parsed start-up log: what the log states, overridden by what the user passed.
    The parser has already type-checked every setting it kept (see vllm_log.SETTING_TYPES)."""
    return settings_with_sources(parsed, overrides)[0]


# vLLM's names (the log's `quantization` / `kv_cache_dtype`, its --quantization / --kv-cache-dtype flags) -> kvcalc's
# formats. One table: vllm/model_executor/layers/quantization/__init__.py QUANTIZATION_METHODS and
# vllm/config/cache.py CacheDType. None: vLLM's name does not fix the bytes (compressed-tensors, modelopt hold several
# schemes; mxfp4/nvfp4 have no kvcalc format yet): --weights must say which.
VLLM_QUANTIZATION: dict[str, str | None] = {
    "awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "gptq_marlin_24": "gptq",
    "fp8": "fp8", "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8", "bitsandbytes": "nf4",
    "compressed-tensors": None, "compressed_tensors": None, "modelopt": None, "modelopt_fp4": None, "mxfp4": None,
    "gguf": None, "auto-round": None, "auto_round": None, "hqq": "hqq4",
}
VLLM_KV_CACHE_DTYPE: dict[str, str] = {
    "auto": "auto", "bfloat16": "auto", "float16": "auto", "half": "auto",  # the model dtype's 2 bytes
    "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_inc": "fp8", "fp8_e5m2": "fp8-e5m2",
}
# vLLM casts unquantized weights to the model dtype: a float32 run is kvcalc's 16-bit format at 4 bytes per element
# (VllmSettings.dtype_bytes, _VLLM_DTYPE_BYTES), which sizes the weights, activations and the auto KV cache alike
_VLLM_DTYPE_WEIGHTS = {"bfloat16": "bf16", "torch.bfloat16": "bf16", "float16": "fp16", "torch.float16": "fp16",
                       "half": "fp16", "float32": "bf16", "torch.float32": "bf16", "float": "bf16"}
_VLLM_DTYPE_BYTES = {"float32": 4, "torch.float32": 4, "float": 4}


def weights_from_vllm(quantization: Any, dtype: Any = None) -> str | None:
    """kvcalc's weight format for the log's quantization (and dtype when unquantized); UsageError for a vLLM scheme
    kvcalc cannot size from its name alone."""
    from ..errors import UsageError

    q = None if quantization in (None, "None", "none", "") else str(quantization)
    if q is None:
        return _VLLM_DTYPE_WEIGHTS.get(str(dtype)) if dtype not in (None, "auto", "None") else None
    key = q.lower()
    if key in VLLM_QUANTIZATION:
        fmt = VLLM_QUANTIZATION[key]
        if fmt is None:
            raise UsageError(f"the log's quantization {q!r} does not say how many bytes a weight takes (several "
                             "schemes share the name): give --weights (e.g. fp8, awq, gptq, nf4)")
        return fmt
    return q  # kvcalc's own name, or a one-line 'unknown weight format' from formats


# llm-compressor's checkpoints name their scheme in the model id (RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8,
# ...-quantized.w4a16, ...-FP8-dynamic): where the log says only `quantization=compressed-tensors`, the name fixes the
# bytes. First match wins; the name is compared in lower case.
COMPRESSED_TENSORS_NAMES: tuple[tuple[str, str], ...] = (
    ("w4a16", "w4a16"), ("w8a8", "w8a8"), ("fp8-dynamic", "fp8"), ("fp8_dynamic", "fp8"), ("fp8dyn", "fp8"),
)


def weights_from_model_name(model: Any) -> str | None:
    """kvcalc's weight format named by a compressed-tensors checkpoint's id (COMPRESSED_TENSORS_NAMES), or None."""
    name = str(model or "").lower().rsplit("/", 1)[-1]
    return next((fmt for key, fmt in COMPRESSED_TENSORS_NAMES if key in name), None)


def kv_from_vllm(name: Any) -> str:
    key = str(name).strip().lower()
    return VLLM_KV_CACHE_DTYPE.get(key, key)


def settings_with_sources(parsed: dict[str, Any], overrides: dict[str, Any], checkpoint: Any = None,
                          modalities: tuple[str, ...] = ("image",)):
    """(VllmSettings, {setting: where it came from}) for a parsed log; sources are 'override', 'log', 'log (...)' or
    'default' (kvcalc's engine default for that setting: the version's gpu_memory_utilization, the entry point...).
    Settings the user passes win over the log; vLLM's names for formats are mapped (VLLM_QUANTIZATION,
    VLLM_KV_CACHE_DTYPE). `checkpoint`: the quantized checkpoint's own weight format (checkpoint.baseline_weights of a
    model whose config.json has a quantization_config): vLLM loaded that checkpoint, so it wins over the log's method
    name unless the user passes --weights."""
    from ..engines.vllm import DEFAULT_VERSION, VllmSettings
    from ..errors import UsageError
    from ..formats import kv_format, weight_format

    logged = dict(parsed.get("settings", {}))
    given = {k: v for k, v in overrides.items() if v is not None}
    sources: dict[str, str] = {}

    def pick(*keys: str, default: Any = None, label: str | None = None) -> Any:
        name = label or keys[0]
        for key in keys:
            if key in given:
                sources[name] = "override"
                return given[key]
        for key in keys:
            if logged.get(key) is not None:
                sources[name] = "log"
                return logged[key]
        sources[name] = "default"
        return default

    kv_name = kv_from_vllm(pick("kv", "kv_cache_dtype", default="auto", label="kv_cache_dtype"))
    weights = given.get("weights")
    if weights is not None:
        sources["weights"] = "override"
        method = str(weights).lower()
        if method in VLLM_QUANTIZATION and VLLM_QUANTIZATION[method] is None and checkpoint is not None:
            # a method name that does not fix the bytes (mxfp4, modelopt, compressed-tensors): the checkpoint's own
            weights, sources["weights"] = checkpoint, f"override ({method}: the checkpoint's {checkpoint.scheme_label})"
        elif method in VLLM_QUANTIZATION:
            weights = weights_from_vllm(weights)
    elif checkpoint is not None:
        weights, sources["weights"] = checkpoint, f"checkpoint ({checkpoint.scheme_label})"
    else:
        q = logged.get("quantization")
        named = weights_from_model_name(logged.get("model")) if str(q).lower() in (
            "compressed-tensors", "compressed_tensors") else None
        weights = named or weights_from_vllm(q, logged.get("dtype"))
        if named is not None:
            sources["weights"] = f"log (quantization {q}; the model id names {named})"
        elif weights is not None:
            sources["weights"] = (f"log (quantization {q})" if q not in (None, "None", "none")
                                  else f"log (dtype {logged.get('dtype')})")
        else:
            weights, sources["weights"] = "bf16", "default"
    kwargs: dict[str, Any] = {}
    dtype = str(given.get("dtype") or logged.get("dtype") or "")
    if dtype in _VLLM_DTYPE_BYTES:
        kwargs["dtype_bytes"] = _VLLM_DTYPE_BYTES[dtype]
        sources["dtype"] = "override" if given.get("dtype") else "log"
    util = pick("gpu_memory_utilization", "util", default=None)
    if util is not None:
        kwargs["gpu_memory_utilization"] = float(util)
    # vllm serve unless the log or the user says otherwise: how people deploy (issue 10), and what posted logs show
    entrypoint = pick("entrypoint", default="serve")
    kwargs["entrypoint"] = {"offline": "llm"}.get(str(entrypoint), str(entrypoint))
    max_model_len = pick("max_model_len")
    stated = parsed.get("values", {}).get("concurrency_max_model_len")
    if max_model_len is None and stated:
        # kv_cache_utils.py prints "Maximum concurrency for {max_model_len:,} tokens per request": the length the
        # server ran with, where no args line or config dump survives in the post
        max_model_len = stated
        sources["max_model_len"] = "log (Maximum concurrency for N tokens per request)"
    mnbt = pick("max_num_batched_tokens")
    max_num_seqs = pick("max_num_seqs")
    block_size = pick("block_size")  # None: the backend's choice
    version = pick("version", default=None)
    if version is None and parsed.get("version"):
        how = parsed.get("version_from_wording")  # "wording" / "source lines": read off a log that names none
        version, sources["version"] = parsed["version"], (f"log ({how if isinstance(how, str) else 'wording'})"
                                                          if how else "log")
    # The engine the log ran (V0 or V1, read from its wording) when that release had both: a post that set
    # VLLM_USE_V1=0 on 0.8 ran V0's accounting, not the version's default V1 (vllm#16199 in the public corpus).
    engine = pick("vllm_engine", "engine", default=None, label="engine")
    if engine not in (None, "auto"):
        from ..engines.vllm_versions import rules_with_engine

        try:
            rules_with_engine(str(version or DEFAULT_VERSION), str(engine))
            kwargs["engine"] = str(engine)
        except UsageError:  # the release had only one engine: its rules already are that engine's
            sources["engine"] = "default"
    # the log's limit_mm_per_prompt with every modality of the model's encoders at 0, or language_model_only
    limits = logged.get("limit_mm_per_prompt")
    if logged.get("language_model_only") or (isinstance(limits, dict) and limits
                                             and all(limits.get(m, 1) == 0 for m in modalities)):
        kwargs["language_model_only"] = True
        sources["language_model_only"] = "log"
    # torch.compile's cache as the log shows it (vllm_log.py: an AOT load is "warm"); said only when the log or the
    # user states it (no such line: VllmSettings' default, a first start's cold compile)
    for where, found in (("override", given), ("log", logged)):
        if found.get("compile_cache") in ("cold", "warm"):
            kwargs["compile_cache"], sources["compile_cache"] = found["compile_cache"], where
            break
    settings = VllmSettings(
        weights=weights if checkpoint is not None and weights is checkpoint else weight_format(str(weights)),
        kv=kv_format(kv_name),
        max_model_len=int(max_model_len) if max_model_len else None,
        max_num_batched_tokens=int(mnbt) if mnbt else None,
        max_num_seqs=int(max_num_seqs) if max_num_seqs else None,
        enforce_eager=bool(pick("enforce_eager", default=False)),
        block_size=int(block_size) if block_size else None,
        version=str(version or DEFAULT_VERSION),
        tensor_parallel=int(pick("tensor_parallel_size", "tp", default=1, label="tensor_parallel_size") or 1),
        pipeline_parallel=int(pick("pipeline_parallel_size", "pp", default=1, label="pipeline_parallel_size") or 1),
        **kwargs,
    )
    return settings, sources
