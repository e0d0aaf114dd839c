"""What one decoder layer keeps per token or per sequence: the per-layer cache specs that engines sum their own way.

Describing layers by what they store (instead of one formula for the whole model) is what keeps sliding-window, MLA and
hybrid models right. Element counts here are dtype-free: each engine (kvcalc/engines/) turns them into bytes with its
own rules and a formats.KvFormat.
"""

from __future__ import annotations

from dataclasses import dataclass


def flatten(layers) -> list:
    """The caches one by one: a ParallelHybrid layer counts as its attention and its state."""
    out = []
    for layer in layers:
        if isinstance(layer, ParallelHybrid):
            out.extend((layer.attention, layer.state))
        else:
            out.append(layer)
    return out


@dataclass(frozen=True)
class FullAttention:
    """Keys and values for every token: num_kv_heads * (head_dim + v_head_dim) elements per token."""

    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    # MiniMax M3's sparse attention (MSA) layers: a key-only index cache of one head of this width per token, kept in
    # bf16 beside the KV (vLLM MiniMaxM3IndexerCache: MLAAttentionSpec(num_kv_heads=1, head_size=index_dim)); 0 else
    index_key_dim: int = 0

    kind = "full"

    def elements_per_token(self) -> int:
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)


@dataclass(frozen=True)
class SlidingWindow(FullAttention):
    """Attention over the last `window` tokens only; engines may keep fewer tokens than the context."""

    window: int = 0

    kind = "sliding"


@dataclass(frozen=True)
class ChunkedLocal(SlidingWindow):
    """Llama 4's chunked local attention: a token attends within its own chunk of `window` (= attention_chunk_size)
    tokens. transformers keeps it like a sliding window of that size; vLLM has its own ChunkedLocalAttentionSpec
    (v1/kv_cache_interface.py) whose per-request reservation is min(chunk + in-flight tokens, max_model_len)."""

    kind = "chunked"


@dataclass(frozen=True)
class MultiLatentAttention:
    """DeepSeek MLA. vLLM caches the compressed latent (kv_lora_rank + qk_rope_head_dim, one 'head', shared by all
    attention heads); transformers caches decompressed per-head keys (nope + rope) and values."""

    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    # DeepSeek V3.2 sparse attention (DSA): the lightning indexer keeps its own key of index_head_dim per token
    # (vLLM: DeepseekV32IndexerCache, fp8 key + one fp32 scale per 128 elements); 0 without an indexer.
    index_head_dim: int = 0
    # the model runs DeepSeek sparse attention (DSA) even where this layer has no indexer of its own (GLM-5.2's
    # "shared" layers reuse another layer's top-k): vLLM keeps every layer in the FLASHMLA_SPARSE fp8_ds_mla layout
    sparse: bool = False

    kind = "mla"

    def latent_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def decompressed_elements_per_token(self) -> int:
        return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)


@dataclass(frozen=True)
class CompressedSparseAttention:
    """DeepSeek V4's attention layer (compress_ratios in config.json): one shared KV head of head_dim (MQA) kept three
    ways. Every layer keeps the last `window` tokens (sliding_window, the SWA cache); a layer with compress_ratio r > 1
    also keeps one compressed entry per r tokens for the whole context (r = 4: CSA, with a lightning indexer whose
    key of index_head_dim is kept per compressed entry; r = 128: HCA, no indexer), plus the compressor's partial
    state of the last tokens. vLLM (v1/attention/backends/mla/sparse_swa.py, model_executor/layers/
    deepseek_v4_attention.py, deepseek_compressor.py) stores entries as 584 B (448 fp8 NoPE + 64 bf16 RoPE + 8 B of
    scales); transformers (modeling_deepseek_v4.py DeepseekV4CSACache / HCACache) keeps them in the model dtype."""

    head_dim: int
    rope_dim: int
    window: int
    compress_ratio: int  # 1: sliding window only; 4: CSA; 128: HCA
    index_head_dim: int = 0  # CSA layers' indexer key width; 0 elsewhere

    kind = "dsv4"

    @property
    def compressor_overlap(self) -> int:
        """coff: the CSA compressor pools overlapping windows (twice the width), the HCA one does not."""
        return 2 if self.compress_ratio == 4 else 1


@dataclass(frozen=True)
class MambaState:
    """A recurrent layer: a fixed state per sequence, whatever the context (conv state + SSM state).

    mixer names the recurrence, each with vLLM's shapes (model_executor/layers/mamba/mamba_utils.py,
    MambaStateShapeCalculator): "mamba1" (Jamba), "mamba2" (Nemotron-H, Granite 4, Falcon-H1), "gdn" (Gated
    DeltaNet linear attention: Qwen3-Next, Qwen3.5), "short_conv" (LFM2: a conv state only, ssm_state_elements 0).
    ssm_dtype_bytes: the recurrent state's element size when the checkpoint fixes it (Qwen3.5's
    mamba_ssm_dtype float32); None follows the engine's default.
    Element counts are at TP 1; engines divide them per rank (vllm_specs.mamba_page).
    """

    conv_state_elements: int
    ssm_state_elements: int
    mixer: str = "mamba1"
    ssm_dtype_bytes: int | None = None
    # conv channels (the conv state is (K-1) x channels in vLLM; transformers keeps K columns); 0 when not known
    conv_channels: int = 0
    # Mamba2 only: SSM groups and state size, for vLLM's group replication when TP does not divide n_groups
    n_groups: int = 0
    d_state: int = 0

    kind = "mamba"


@dataclass(frozen=True)
class ParallelHybrid:
    """Falcon-H1: attention and a Mamba2 mixer side by side in one decoder layer, each keeping its own cache (vLLM
    models/falcon_h1.py FalconH1ParallelHybrid registers both an Attention and a MambaMixer2)."""

    attention: FullAttention
    state: MambaState

    kind = "parallel"


@dataclass(frozen=True)
class NoCache:
    """A layer that stores nothing of its own (KV shared with an earlier layer, or an MLP-only block)."""

    shares_with: int | None = None

    kind = "none"


LayerCache = (FullAttention | SlidingWindow | ChunkedLocal | MultiLatentAttention | CompressedSparseAttention
              | MambaState | ParallelHybrid | NoCache)
