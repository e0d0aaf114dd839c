"""vLLM and the multimodal encoders: whether it loads them, what they weigh per rank, and what its profile run adds
for them (the encoder forward on dummy items and the encoder cache those items fill).

- Loading. vLLM builds the wrapper's vision tower and projector on every rank (e.g. models/gemma3_mm.py,
  models/qwen2_5_vl.py; interfaces.py _mark_tower_model has no pipeline-stage gate), their projections
  tensor-parallel (QKVParallelLinear / Column- and RowParallelLinear): kvcalc charges the encoder's bytes / tp on
  every pipeline stage (the patch embedding, position table, norms and Gemma 3's projector matrix are replicated in
  fact: ~3% of SigLIP, so TP > 1 is a little under-counted). From 0.10.1 (vllm#22299, "implicit
  language-model-only mode via limit-mm-per-prompt", merged 2025-08-06; vllm#22224 for LLaVA) a model whose every
  modality is limited to 0 (`--limit-mm-per-prompt '{"image":0}'`, later also `--language-model-only`) skips building
  the encoders, family by family (TEXT_ONLY_SINCE below); earlier releases load them anyway.
- Profiling (read in vLLM 0.26.0's source). The V1 model runner's profile_run (v1/worker/gpu_model_runner.py)
  encodes a dummy batch of the largest item before the decoder's dummy forward (items: encoders.profile_items, as
  multimodal/encoder_budget.py MultiModalBudget counts them); the outputs stay in self.encoder_cache while the
  decoder's forward and the sampler run, and are freed after. V0's profile (worker/model_runner.py, before 0.11)
  runs the same items inside its dummy forward. So the profile's torch peak is max(encoder forward, decoder peak +
  encoder outputs): encoder_profile_bytes() is what that adds to the decoder's peak. The V2 model runner (0.26's
  default for dense, non-hybrid models: v1/worker/gpu/model_runner.py profile_run) runs the text dummy forward only:
  nothing is added, and the encoder's memory at run time is outside the budget (vllm#48469 describes the OOMs).
  `--skip-mm-profiling` (vllm#22950, from 0.10.2) skips it on the V1 runner too. The shapes come from encoders.py
  (tokens x widths x dtype bytes, layers one at a time), not from a fitted constant; no H200 run measured a
  multimodal profile, and no public log prints one apart (docs/validation).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..encoders import encoder_cache_bytes, encoder_forward_bytes, profile_items, quantized_by
from ..model import ModelSpec
from .vllm_versions import version_key
from .weights import encoder_weight_bytes

LANGUAGE_MODEL_ONLY_SINCE = "0.10.1"  # vllm#22299
# The release from which each family's towers are skipped, as far as the sources show it: vllm#22299 (merged
# 2025-08-06, first released in 0.10.1; its doc tip, vllm#22561, names Llama-4, Step3 and Mistral-3), vllm#26000 for
# Qwen3-VL (merged October 2025; 0.11.1 taken, the first release certainly after it), and the 0.26.0 wheel's own
# models (gemma3_mm.py, qwen2_5_vl.py, qwen3_5.py, gemma4_mm.py, gemma3n_mm.py call _mark_tower_model) for the rest,
# whose first release kvcalc has not pinned: before these, kvcalc keeps charging the encoder (the safe direction).
TEXT_ONLY_SINCE = {"llama4": "0.10.1", "mistral3": "0.10.1", "qwen3_vl": "0.11.1", "qwen3_vl_moe": "0.11.1"}
TEXT_ONLY_CONFIRMED = "0.26.0"


def text_only_since(spec: ModelSpec) -> str:
    """The first release in which vLLM skips all of this model's encoders (the latest over its wrappers)."""
    since = [TEXT_ONLY_SINCE.get(e.wrapper, TEXT_ONLY_CONFIRMED) for e in spec.encoders]
    return max(since, key=version_key) if since else LANGUAGE_MODEL_ONLY_SINCE


SKIP_MM_PROFILING_SINCE = "0.10.2"  # vllm#22950 (merged 2025-08-15)


def encoder_modalities(spec: ModelSpec) -> tuple[str, ...]:
    """The modalities vLLM's processor registers for the model's encoders (Qwen's vision tower takes video too)."""
    out = ["image"] if spec.encoders else []
    # Gemma 4's tower takes video too: a 0.31 start with limit_mm_per_prompt {'image': 0, 'audio': 0} still loads it
    # and profiles the encoder cache "with 6 video items" (docs/validation: xbill9-mi300x-gemma4-26b-a4b-bf16-v0.31)
    if any(e.family.startswith("qwen") or e.family == "gemma4" for e in spec.encoders):
        out.append("video")
    return tuple(out)


def skips_encoders(spec: ModelSpec, s: Any) -> bool:
    """vLLM builds no encoder for these settings: every modality limited to 0, on a release that honours it."""
    return bool(spec.encoders) and bool(getattr(s, "language_model_only", False)) and \
        version_key(s.version) >= version_key(text_only_since(spec))


def encoder_rank_bytes(spec: ModelSpec, s: Any) -> int:
    """The encoders' weights on one rank (every pipeline stage holds them; tensor parallel shards them)."""
    if not spec.encoders or skips_encoders(spec, s):
        return 0
    total = encoder_weight_bytes(spec, s.weights, s.dtype_bytes)
    if not s.weights.quantizes_linears and s.weights.bits != 8 * s.dtype_bytes:
        total = total * 8 * s.dtype_bytes // s.weights.bits  # as vllm.py: unquantized weights load in --dtype
    return total // s.tensor_parallel


def profiles_encoders(spec: ModelSpec, s: Any, v2_runner: bool = False) -> bool:
    """Whether the profile run encodes dummy items: not on the V2 model runner (vllm.uses_v2_runner, passed in by
    the caller), not with --skip-mm-profiling."""
    # every modality limited to 0: no encoder budget, so no profile, even where the release still builds the tower
    # (v1/core/encoder_cache_manager.py compute_mm_encoder_budget returns 0, 0)
    if not spec.encoders or getattr(s, "language_model_only", False) or v2_runner:
        return False
    return not (getattr(s, "skip_mm_profiling", False)
                and version_key(s.version) >= version_key(SKIP_MM_PROFILING_SINCE))


def _items(enc: Any, s: Any, mnbt: int, seqs: int | None, max_model_len: int | None) -> int:
    chunked = s.rules.engine == "v1" or bool(getattr(s, "enable_chunked_prefill", False))
    return profile_items(enc, mnbt, seqs if s.rules.engine == "v1" else None, max_model_len, chunked_prefill=chunked)


def encoder_profile_bytes(spec: ModelSpec, s: Any, mnbt: int, decoder_peak: int, seqs: int | None = None,
                          max_model_len: int | None = None, v2_runner: bool = False) -> int:
    """What the multimodal profile adds to the decoder's activation peak: max(encoder forward - decoder peak,
    encoder outputs held), the larger over the model's encoders (vLLM profiles the modality with the largest item)."""
    if not profiles_encoders(spec, s, v2_runner):
        return 0
    extra = 0
    for enc in spec.encoders:
        items = _items(enc, s, mnbt, seqs, max_model_len)
        forward = encoder_forward_bytes(enc, items, s.dtype_bytes, s.tensor_parallel)
        held = encoder_cache_bytes(enc, items, spec.hidden_size, s.dtype_bytes)
        extra = max(extra, forward - decoder_peak, held)
    return extra


def encoder_notes(spec: ModelSpec, s: Any, mnbt: int, seqs: int | None = None,
                  max_model_len: int | None = None, v2_runner: bool = False) -> list[str]:
    """explain's encoder lines: what is loaded, the profile's items, forward and cache, and where sizes come from."""
    if not spec.encoders:
        return []
    if skips_encoders(spec, s):
        return [f"encoders not loaded: every modality limited to 0 (--limit-mm-per-prompt / --language-model-only; "
                f"vLLM {text_only_since(spec)}+ skips this model's, vllm#22299 / _mark_tower_model): "
                f"{sum(e.params for e in spec.encoders):,} encoder params left out"]
    out = []
    if getattr(s, "language_model_only", False):
        out.append(f"--limit-mm-per-prompt 0 for every modality: vLLM {s.version} still loads this model's encoders "
                   f"(kvcalc follows vLLM's skipping from {text_only_since(spec)} for it: vllm#22299 and later, per "
                   "model family); no encoder profile (no encoder budget)")
    total = encoder_weight_bytes(spec, s.weights, s.dtype_bytes)
    skipped = getattr(s, "skip_mm_profiling", False) and profiles_encoders(
        spec, replace(s, skip_mm_profiling=False), v2_runner)
    for enc in spec.encoders:
        items = _items(enc, s, mnbt, seqs, max_model_len)
        weights = total * enc.params // max(spec.vision_params, 1)  # this encoder's share of the encoders' bytes
        line = (f"{enc.label}: {enc.params:,} params, {weights:,} B in the weights ({weights // s.tensor_parallel:,} "
                f"per rank)")
        if not items or getattr(s, "language_model_only", False):
            line += f"; profile not modelled ({enc.sizes_from})" if not items else ""
        elif v2_runner:
            line += ("; the V2 model runner's profile runs no encoder (v1/worker/gpu/model_runner.py profile_run): "
                     f"{items} {enc.modality} item(s) of {enc.embeds_per_item:,} embeddings at run time are not in "
                     "the budget")
        elif skipped:
            line += "; --skip-mm-profiling: no encoder profile, its run-time memory is not in the budget"
        else:
            fwd = encoder_forward_bytes(enc, items, s.dtype_bytes, s.tensor_parallel)
            cache = encoder_cache_bytes(enc, items, spec.hidden_size, s.dtype_bytes)
            forward = (f"encoder forward {fwd:,} B" if enc.patches_per_item
                       else f"encoder forward not modelled ({enc.sizes_from})")
            line += (f"; profile: {items} {enc.modality} item(s) of {enc.patches_per_item:,} patches -> "
                     f"{enc.embeds_per_item:,} embeddings (encoder budget max({mnbt:,}, {enc.embeds_per_item:,}) "
                     f"tokens), {forward}, encoder cache {cache:,} B"
                     + (f" ({enc.sizes_from})" if enc.patches_per_item else "") + "; not measured on our GPU")
        out.append(line)
        out += scheme_note(spec, enc)
    return out


# Towers vLLM builds with no quant config for these methods whatever the ignore list says (kimi_k25.py
# _maybe_ignore_quant_config, vLLM 0.26.0)
UNQUANTIZED_TOWER = {("kimi_k25", "compressed-tensors")}


def scheme_note(spec: ModelSpec, enc: Any) -> list[str]:
    """A checkpoint whose quantization_config does not exclude the tower: said, as its bytes stay 16-bit here."""
    ck = getattr(spec, "checkpoint", None)
    scheme = getattr(ck, "scheme", None)
    if not quantized_by(enc, scheme) or (enc.wrapper, scheme.method) in UNQUANTIZED_TOWER:
        return []
    return [f"the checkpoint's quantization_config ({scheme.method}) does not exclude {enc.sample_linear}: the "
            f"{enc.label} is charged in 16-bit as multimodal quantized checkpoints ship it, unless the safetensors "
            "headers give its bytes; a tower stored quantized weighs less"]
