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


def settings_with_sources(parsed: dict[str, Any], overrides: dict[str, Any]):
    """(VllmSettings, {setting: where it came from}) for a parsed log; sources are 'override', 'log' or 'default'."""
    from ..engines.vllm import DEFAULT_VERSION, VllmSettings
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

    kv_name = str(pick("kv", "kv_cache_dtype", default="auto", label="kv_cache_dtype"))
    weights = pick("weights", default=None)
    if weights is None:
        quant = logged.get("quantization")
        if quant not in (None, "None", "none"):
            weights, sources["weights"] = str(quant), "log (quantization)"
        else:
            weights = "bf16"
    util = pick("gpu_memory_utilization", "util", default=0.9)  # vLLM's default is 0.9
    max_model_len = pick("max_model_len")
    mnbt = pick("max_num_batched_tokens")
    max_num_seqs = pick("max_num_seqs")
    block_size = pick("block_size")  # None: the backend's choice
    version = pick("version", default=None)
    if version is None and parsed.get("version"):
        version, sources["version"] = parsed["version"], "log"
    settings = VllmSettings(
        weights=weight_format(str(weights)),
        kv=kv_format(kv_name),
        gpu_memory_utilization=float(util),
        max_model_len=int(max_model_len) if max_model_len else None,
        max_num_batched_tokens=int(mnbt) if mnbt else None,
        max_num_seqs=int(max_num_seqs) if max_num_seqs else None,
        enforce_eager=bool(pick("enforce_eager", default=False)),
        block_size=int(block_size) if block_size else None,
        version=str(version or DEFAULT_VERSION),
        entrypoint=str(pick("entrypoint", default="llm")),
        tensor_parallel=int(pick("tensor_parallel_size", default=1) or 1),
        pipeline_parallel=int(pick("pipeline_parallel_size", default=1) or 1),
    )
    return settings, sources
