"""What one decoder layer keeps per token or per sequence: the per-layer cache specs that engines sum their own way.

Describing layers by what they store (instead of one formula for the whole model) is what keeps sliding-window, MLA and
hybrid models right. Element counts here are dtype-free: each engine (kvcalc/engines/) turns them into bytes with its
own rules and a formats.KvFormat.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FullAttention:
    """Keys and values for every token: num_kv_heads * (head_dim + v_head_dim) elements per token."""

    num_kv_heads: int
    head_dim: int
    v_head_dim: int

    kind = "full"

    def elements_per_token(self) -> int:
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)


@dataclass(frozen=True)
class SlidingWindow(FullAttention):
    """Attention over the last `window` tokens only; engines may keep fewer tokens than the context."""

    window: int = 0

    kind = "sliding"


@dataclass(frozen=True)
class MultiLatentAttention:
    """DeepSeek MLA. vLLM caches the compressed latent (kv_lora_rank + qk_rope_head_dim, one 'head', shared by all
    attention heads); transformers caches decompressed per-head keys (nope + rope) and values."""

    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    kind = "mla"

    def latent_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def decompressed_elements_per_token(self) -> int:
        return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)


@dataclass(frozen=True)
class MambaState:
    """A recurrent layer: a fixed state per sequence, whatever the context (conv state + SSM state)."""

    conv_state_elements: int
    ssm_state_elements: int

    kind = "mamba"


@dataclass(frozen=True)
class NoCache:
    """A layer that stores nothing of its own (KV shared with an earlier layer, or an MLP-only block)."""

    shares_with: int | None = None

    kind = "none"


LayerCache = FullAttention | SlidingWindow | MultiLatentAttention | MambaState | NoCache
