"""Hugging Face transformers memory accounting: the cache grows into free memory as tokens arrive.

Sources (transformers 5.x): cache_utils.py (DynamicLayer / DynamicSlidingWindowLayer append with torch.cat;
QuantizedLayer keeps a full-precision residual of up to residual_length-1 tokens, re-quantizes everything when it
fills, and returns a dequantized copy of the layer's keys and values on every update), generation/utils.py (only the
last position's logits are computed during generation, then copied to fp32).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .. import limits
from ..constants import engine_constants
from ..errors import UsageError
from ..formats import KvFormat, WeightFormat
from ..hardware import GpuProfile
from ..layers import (
    CompressedSparseAttention, FullAttention, LayerCache, MambaState, MultiLatentAttention, NoCache, ParallelHybrid,
    SlidingWindow,
)
from ..model import ModelSpec
from ..units import GiB
from .weights import weight_bytes

# Wrappers whose AutoModelForCausalLM class is the text model alone (transformers 5.24 models/auto/modeling_auto.py
# MODEL_FOR_CAUSAL_LM_MAPPING_NAMES: llama4 -> Llama4ForCausalLM, qwen3_5 -> Qwen3_5ForCausalLM, qwen3_5_moe ->
# Qwen3_5MoeForCausalLM): no encoder is loaded. Every other wrapper loads its encoders: gemma3 / gemma4 map to their
# ForConditionalGeneration classes, and mistral3, qwen2_5_vl, qwen3_vl load through AutoModelForImageTextToText.
TEXT_ONLY_CAUSAL_LM = {"llama4", "qwen3_5", "qwen3_5_moe"}


def hf_loads_encoders(spec: ModelSpec) -> bool:
    return any(e.wrapper not in TEXT_ONLY_CAUSAL_LM for e in spec.encoders)


# ------------------------------------------------------------------------- cache bytes per layer (cache_utils.py)

HF_RECURRENT_STATE_BYTES = 4  # LinearAttentionLayer keeps recurrent (SSM / delta-rule) states in float32


def hf_elements_per_token(layer: LayerCache) -> int:
    """Elements transformers caches per token for one layer (MLA decompressed per head)."""
    if isinstance(layer, ParallelHybrid):
        layer = layer.attention
    if isinstance(layer, MultiLatentAttention):
        return layer.decompressed_elements_per_token()
    if isinstance(layer, FullAttention):
        return layer.elements_per_token()
    return 0


def hf_dsv4_elements(layer: CompressedSparseAttention, tokens: int) -> int:
    """Elements one DeepSeek V4 layer's cache holds after `tokens` tokens (modeling_deepseek_v4.py: the sliding
    window of window-1 shared K=V rows, DynamicSlidingWindowLayer; DeepseekV4HCACache / CSACache append one compressed
    entry of head_dim per compress_rate tokens, and the CSA indexer one of index_head_dim; the buffers of fewer than
    compress_rate pending tokens are left out). Every layer type keeps these in the model dtype, whatever
    cache_implementation asks: the layers are the model's own cache classes."""
    kept = min(tokens, layer.window - 1) * layer.head_dim
    if layer.compress_ratio > 1:
        kept += tokens // layer.compress_ratio * (layer.head_dim + layer.index_head_dim)
    return kept


def hf_tokens_kept(layer: LayerCache, tokens: int, kv: KvFormat) -> int:
    """DynamicSlidingWindowLayer keeps the last window-1 tokens; the quantized cache keeps every layer full length."""
    if isinstance(layer, SlidingWindow) and not kv.hf_quantized:
        return min(tokens, layer.window - 1)
    return tokens


def hf_quantized_split(tokens_after_prefill: int, prompt_len: int, residual_length: int) -> tuple[int, int]:
    """(quantized tokens, full-precision residual tokens) after prefill of P tokens and k single-token updates.

    QuantizedLayer.update quantizes the whole prompt at prefill; later tokens wait in a full-precision residual
    and, on the update that would make it reach residual_length, everything is re-quantized (cache_utils.py).
    """
    k = tokens_after_prefill - prompt_len
    r = k % residual_length
    return tokens_after_prefill - r, r


def hf_layer_cache_bytes(layer: LayerCache, batch: int, tokens: int, prompt_len: int, kv: KvFormat,
                         dtype_bytes: int) -> int:
    """Bytes one layer's cache object holds after `tokens` tokens (prompt_len of them from prefill)."""
    if isinstance(layer, ParallelHybrid):  # Falcon-H1: its attention KV and its Mamba2 state
        return (hf_layer_cache_bytes(layer.attention, batch, tokens, prompt_len, kv, dtype_bytes)
                + hf_layer_cache_bytes(layer.state, batch, tokens, prompt_len, kv, dtype_bytes))
    if isinstance(layer, MambaState):
        # cache_utils.py LinearAttentionLayer (transformers 5.x): conv_states (batch, channels, K) in the model dtype,
        # one column more than vLLM keeps; recurrent_states in float32 (checked on 5.24 for Jamba, Nemotron-H,
        # Granite 4.0-H, Qwen3-Next; LFM2's short conv has none)
        conv = layer.conv_state_elements + layer.conv_channels
        return batch * (conv * dtype_bytes + layer.ssm_state_elements * HF_RECURRENT_STATE_BYTES)
    if isinstance(layer, NoCache):
        return 0
    if isinstance(layer, CompressedSparseAttention):
        return batch * hf_dsv4_elements(layer, tokens) * dtype_bytes
    per_token = hf_elements_per_token(layer)
    if not kv.hf_quantized:
        return batch * hf_tokens_kept(layer, tokens, kv) * per_token * dtype_bytes
    quantized_tokens, residual_tokens = hf_quantized_split(tokens, prompt_len, kv.residual_length)
    # Keys and values are quantized as two separate tensors, each with its own groups.
    half = per_token // 2 if isinstance(layer, FullAttention) and layer.head_dim == layer.v_head_dim else None
    if half is not None:
        quantized = 2 * kv.quantized_bytes(batch * quantized_tokens * half, dtype_bytes)
    else:
        quantized = kv.quantized_bytes(batch * quantized_tokens * per_token, dtype_bytes)
    return quantized + batch * residual_tokens * per_token * dtype_bytes


_COUNTS: dict[int, tuple[tuple, tuple]] = {}


def _layer_counts(layers: tuple[LayerCache, ...]) -> tuple[tuple[LayerCache, int], ...]:
    """Distinct layer specs and how many layers share each (a 36-layer model has one or two distinct specs). Cached
    by the identity of the model's layer tuple (hashing 36 dataclasses on every call would cost what it saves)."""
    hit = _COUNTS.get(id(layers))
    if hit is not None and hit[0] is layers:
        return hit[1]
    counts = tuple(Counter(layers).items())
    if len(_COUNTS) > 256:
        _COUNTS.clear()
    _COUNTS[id(layers)] = (layers, counts)
    return counts


def hf_cache_bytes(layers: tuple[LayerCache, ...], batch: int, tokens: int, prompt_len: int, kv: KvFormat,
                   dtype_bytes: int) -> int:
    # identical layers hold identical integer bytes: count each distinct spec once (max_context's search calls this
    # thousands of times per plan; summing layer by layer was most of a web request's time)
    return sum(n * hf_layer_cache_bytes(layer, batch, tokens, prompt_len, kv, dtype_bytes)
               for layer, n in _layer_counts(layers))


def hf_bytes_per_token(layers: tuple[LayerCache, ...], kv: KvFormat, dtype_bytes: int) -> float:
    """Average bytes per cached token for a long context (residual and window trimming ignored)."""
    total = 0.0
    for layer in layers:
        n = hf_elements_per_token(layer)
        total += n * (kv.bits_per_element(dtype_bytes) / 8 if kv.hf_quantized else dtype_bytes)
    return total


# ------------------------------------------------------------------------------------------------ the estimate


@dataclass(frozen=True)
class HfSettings:
    weights: WeightFormat
    kv: KvFormat
    batch: int = 1
    prompt_len: int = 512
    new_tokens: int = 256
    dtype_bytes: int = 2


@dataclass
class HfEstimate:
    static_bytes: int  # weights after load (torch.cuda.memory_allocated)
    cache_bytes: int  # what the cache object holds after generate
    cache_tokens: int
    transient_bytes: int  # the largest short-lived buffer of a decode step
    prefill_activation_bytes: int
    peak_increment_bytes: int  # max_memory_allocated - static during generate
    cuda_context_bytes: int
    total_bytes: int  # static + peak increment + CUDA context: what the process needs on the GPU
    gpu_total_bytes: int | None
    fits: bool
    shortfall_bytes: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The plan JSON's hf_breakdown (kvcalc.plan/1): these keys, in this order."""
        return {
            "static_bytes": self.static_bytes, "cache_bytes": self.cache_bytes, "cache_tokens": self.cache_tokens,
            "transient_bytes": self.transient_bytes, "prefill_activation_bytes": self.prefill_activation_bytes,
            "peak_increment_bytes": self.peak_increment_bytes, "cuda_context_bytes": self.cuda_context_bytes,
            "total_bytes": self.total_bytes, "gpu_total_bytes": self.gpu_total_bytes, "fits": self.fits,
            "shortfall_bytes": self.shortfall_bytes, "notes": list(self.notes),
        }


def _check(spec: ModelSpec, s: HfSettings) -> None:
    if "hf" not in s.weights.engines:
        raise UsageError(f"transformers does not load {s.weights.label} weights (vLLM only)")
    if s.kv.vllm_name is not None and s.kv.name != "auto":
        raise UsageError(f"transformers has no {s.kv.label} cache in the quantized-cache backends kvcalc models")
    if s.batch < 1 or s.prompt_len < 1 or s.new_tokens < 1:
        raise UsageError("batch, prompt length and new tokens must be positive")


def prefill_activation_bytes(spec: ModelSpec, s: HfSettings) -> int:
    """The prompt's forward pass: tokens x (a*hidden + b*intermediate) x dtype bytes, a and b fitted on Llama runs
    (kvcalc/data/constants.yaml), plus the last position's logits in the model dtype and in fp32."""
    c = engine_constants("hf")
    tokens = s.batch * s.prompt_len
    inter = spec.intermediate_size * (spec.moe.experts_per_token if spec.moe else 1)
    hidden_states = tokens * s.dtype_bytes * (c["prefill_hidden_factor"] * spec.hidden_size
                                              + c["prefill_intermediate_factor"] * inter)
    logits = s.batch * spec.vocab_size * (s.dtype_bytes + 4)
    return int(hidden_states + logits)


def decode_transient_bytes(spec: ModelSpec, s: HfSettings, tokens: int) -> int:
    """The largest short-lived buffer of one decode step, layer by layer:
    DynamicCache: torch.cat makes the new layer tensor while the old one still exists (one layer's K+V);
    QuantizedCache: the dequantized full-precision copy of the layer's keys and values returned to attention."""
    worst = 0
    for layer, _ in _layer_counts(spec.layers):  # the maximum over distinct layer specs is the maximum over layers
        per_token = hf_elements_per_token(layer)
        kept = hf_tokens_kept(layer, tokens, s.kv)
        worst = max(worst, s.batch * kept * per_token * s.dtype_bytes)
    return worst + s.batch * spec.vocab_size * (s.dtype_bytes + 4)


def _memory(spec: ModelSpec, s: HfSettings, static: int, c: dict) -> tuple[int, int, int, int, int, int, int]:
    """(cache tokens, cache, decode transient, prefill activation, peak increment, CUDA context, total) bytes."""
    cache_tokens = s.prompt_len + s.new_tokens - 1  # the last sampled token is never fed back
    cache = hf_cache_bytes(spec.layers, s.batch, cache_tokens, s.prompt_len, s.kv, s.dtype_bytes)
    transient = decode_transient_bytes(spec, s, cache_tokens)
    prefill = prefill_activation_bytes(spec, s)
    # Prefill: the prompt's cache is being written while activations are live.
    prompt_cache = hf_cache_bytes(spec.layers, s.batch, s.prompt_len, s.prompt_len, s.kv, s.dtype_bytes)
    peak = max(prompt_cache + prefill, cache + transient)
    context = int(c["cuda_context_bytes"])
    return cache_tokens, cache, transient, prefill, peak, context, static + peak + context


def estimate(spec: ModelSpec, s: HfSettings, gpu: GpuProfile | None = None) -> HfEstimate:
    _check(spec, s)
    c = engine_constants("hf")
    notes: list[str] = []
    static = weight_bytes(spec, s.weights, s.dtype_bytes, encoders=hf_loads_encoders(spec))
    cache_tokens, cache, transient, prefill, peak, context, total = _memory(spec, s, static, c)
    fits, shortfall = True, 0
    if gpu is not None:
        fits = total <= gpu.memory_total_bytes
        shortfall = max(total - gpu.memory_total_bytes, 0)
    if s.kv.hf_quantized:
        notes.append(f"{s.kv.label}: newest tokens (up to {s.kv.residual_length - 1}) stay in full precision; "
                     "needs generate(cache_implementation='quantized', cache_config=...)")
    if s.weights.name.startswith("nf4") or s.weights.name == "int8":
        notes.append("bitsandbytes quantizes every nn.Linear but lm_head; embeddings and norms stay 16-bit")
    if spec.encoders:
        notes.append(f"encoders: {sum(e.params for e in spec.encoders):,} params "
                     + ("in the weights (the class transformers loads for this checkpoint holds them)"
                        if hf_loads_encoders(spec) else "not loaded (AutoModelForCausalLM is the text model alone)"))
    notes.append(f"prefill activation factors: {c['source']}")
    notes.append(f"CUDA context {context / GiB:.2f} GiB: an assumption (the runs measured torch's allocations only)")
    return HfEstimate(
        static_bytes=static, cache_bytes=cache, cache_tokens=cache_tokens, transient_bytes=transient,
        prefill_activation_bytes=prefill, peak_increment_bytes=peak, cuda_context_bytes=context,
        total_bytes=total, gpu_total_bytes=gpu.memory_total_bytes if gpu else None, fits=fits,
        shortfall_bytes=shortfall, notes=notes,
    )


def max_context(spec: ModelSpec, s: HfSettings, gpu: GpuProfile, prompt_offset: int = 0) -> int:
    """Longest prompt+generation (at s.batch, generating s.new_tokens) that fits on the GPU, by bisection; at most
    the model's max_position_embeddings (what the model was trained for), or kvcalc's MAX_CONTEXT when config.json
    states none (the bound was 2 then: "2 (model max)" beside a context that fits, fuzz review 1d).
    prompt_offset: the prompt of a context C is C - new_tokens + prompt_offset, as the caller maps its context to a
    prompt (plan: + 1, so the cache ends holding C tokens), so that "fits at C" and "longest that fits >= C" agree."""
    _check(spec, s)
    c = engine_constants("hf")
    static = weight_bytes(spec, s.weights, s.dtype_bytes, encoders=hf_loads_encoders(spec))  # the same at every length: computed once, not per step
    lo, hi = 0, max(spec.max_position_embeddings, 2) if spec.max_position_embeddings else limits.MAX_CONTEXT
    while lo < hi:
        mid = (lo + hi + 1) // 2
        prompt = max(mid - s.new_tokens + prompt_offset, 1)
        trial = HfSettings(s.weights, s.kv, s.batch, prompt, s.new_tokens, s.dtype_bytes)
        if _memory(spec, trial, static, c)[-1] <= gpu.memory_total_bytes:  # estimate(...).fits, without its notes
            lo = mid
        else:
            hi = mid - 1
    return lo
