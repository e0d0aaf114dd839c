"""Reading the H200 observation rows (docs/validation/data/v2, v3: scripts/gpu_v2/vllm_obs.py) back into kvcalc's
terms: the config vLLM was given, the checkpoint's weight format, and the VllmSettings the engine ran with. Shared by
compare_layouts_v2.py, compare_profile_v3.py and compare_spec_decode.py, so each compares the same settings."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from kvcalc.catalog import load_model
from kvcalc.checkpoint import baseline_weights
from kvcalc.engines import vllm as vllm_engine
from kvcalc.formats import WeightFormat, kv_format, weight_format
from kvcalc.model import ModelSpec, spec_from_config


def clean_config(cfg: dict) -> dict:
    """A config.json as vLLM read it: without the `_source` note the scripts add."""
    return {k: v for k, v in cfg.items() if k != "_source"}


def spec_and_weights(row: dict) -> tuple[ModelSpec, WeightFormat | None]:
    """The model and the weights it loaded: fp8 when the engine quantized a bf16 checkpoint at load
    (`quantization="fp8"`), the checkpoint's own format when its config carries a quantization_config (read as
    `kvcalc plan --model <folder>` does; None when kvcalc does not read it), bf16 otherwise."""
    cfg = clean_config(row["config_used"])
    spec = spec_from_config(cfg, row["case_id"])
    if (row.get("llm_kwargs") or {}).get("quantization") == "fp8":
        return spec, weight_format("fp8")
    if str(row["observed"]["internals"].get("quantization") or "None") in ("None", "none", ""):
        return spec, weight_format("bf16")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(cfg))
        spec = load_model(folder)
    return spec, baseline_weights(spec)


def settings_of(row: dict, weights: WeightFormat, **extra: Any) -> vllm_engine.VllmSettings:
    """The settings the row's engine ran with: its LLM() arguments, the resolved max_model_len and KV dtype, the
    release, the offline entry point, the host's FlashInfer-sampler switch, and text-only when every modality was
    limited to 0 (vLLM then builds no encoder: engines/vllm_encoders.py). `extra` adds fields (a drafter)."""
    llm, internals = row["llm_kwargs"], row["observed"]["internals"]
    limits = llm.get("limit_mm_per_prompt") or {}
    return vllm_engine.VllmSettings(
        weights=weights, kv=kv_format(str(internals.get("cache_dtype") or "auto")),
        gpu_memory_utilization=float(llm["gpu_memory_utilization"]), max_model_len=int(internals["max_model_len"]),
        max_num_batched_tokens=llm.get("max_num_batched_tokens"), max_num_seqs=llm.get("max_num_seqs"),
        enforce_eager=bool(llm.get("enforce_eager")), version=row["environment"]["vllm_version"], entrypoint="llm",
        flashinfer_sampler=(row["environment"].get("env") or {}).get("VLLM_USE_FLASHINFER_SAMPLER") != "0",
        language_model_only=bool(limits) and all(v == 0 for v in limits.values()), **extra)
