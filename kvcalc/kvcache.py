"""The dynamic ledger: bytes a KV cache holds, per layer, as each engine stores it.

transformers (DynamicCache / QuantizedCache, cache_utils.py) and vLLM (kv_cache_interface.py page sizes) store the
same layer differently; both are computed here from the per-layer specs so that the engines only sum.
"""

from __future__ import annotations

from .formats import KvFormat
from .layers import FullAttention, LayerCache, MambaState, MultiLatentAttention, NoCache, SlidingWindow


def hf_elements_per_token(layer: LayerCache) -> int:
    """Elements transformers caches per token for one layer (MLA decompressed per head)."""
    if isinstance(layer, MultiLatentAttention):
        return layer.decompressed_elements_per_token()
    if isinstance(layer, FullAttention):
        return layer.elements_per_token()
    return 0


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
    if isinstance(layer, MambaState):
        return batch * (layer.conv_state_elements + layer.ssm_state_elements) * dtype_bytes
    if isinstance(layer, NoCache):
        return 0
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


def hf_cache_bytes(layers: tuple[LayerCache, ...], batch: int, tokens: int, prompt_len: int, kv: KvFormat,
                   dtype_bytes: int) -> int:
    return sum(hf_layer_cache_bytes(layer, batch, tokens, prompt_len, kv, dtype_bytes) for layer in layers)


def hf_bytes_per_token(layers: tuple[LayerCache, ...], kv: KvFormat, dtype_bytes: int) -> float:
    """Average bytes per cached token for a long context (residual and window trimming ignored)."""
    total = 0.0
    for layer in layers:
        n = hf_elements_per_token(layer)
        total += n * (kv.bits_per_element(dtype_bytes) / 8 if kv.hf_quantized else dtype_bytes)
    return total


# ---------------------------------------------------------------------------------------------- vLLM pages


def vllm_kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """TP divides KV heads; when tp exceeds them each rank holds one replicated head (vLLM QKVParallelLinear)."""
    return max(1, num_kv_heads // tp)


def vllm_element_bytes(kv: KvFormat, dtype_bytes: int) -> int:
    if kv.vllm_name is None:
        raise ValueError(f"vLLM has no {kv.label} cache")
    return kv.element_bytes(dtype_bytes)


def vllm_page_bytes(layer: LayerCache, block_size: int, kv: KvFormat, dtype_bytes: int, tp: int = 1) -> int:
    """page_size_bytes of one layer's block (kv_cache_interface.py: AttentionSpec / MLAAttentionSpec)."""
    elem = vllm_element_bytes(kv, dtype_bytes)
    if isinstance(layer, MultiLatentAttention):
        # MLAAttentionSpec: one latent 'head' of kv_lora_rank + rope dim, replicated on every TP rank.
        return block_size * layer.latent_elements_per_token() * elem
    if isinstance(layer, FullAttention):
        heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
        return block_size * heads * (layer.head_dim + layer.v_head_dim) * elem
    return 0


def vllm_bytes_per_token(layers: tuple[LayerCache, ...], kv: KvFormat, dtype_bytes: int, tp: int = 1) -> int:
    """KV bytes per token per rank, all attention layers (sliding ones counted in full, as vLLM pages them)."""
    return sum(vllm_page_bytes(layer, 1, kv, dtype_bytes, tp) for layer in layers)
