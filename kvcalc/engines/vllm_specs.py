"""Step 1 and 2 of vLLM's KV-cache set-up: the block size, and one page spec per layer (page bytes, blocks per request).

Pure Python, no torch or vLLM import; mirrors vLLM 0.26.0 `v1/kv_cache_interface.py` (each KVCacheSpec answers
page_size_bytes and max_memory_usage_bytes), `platforms/interface.py:update_block_size_for_backend` and
`_align_hybrid_block_size`, and `model_executor/layers/attention/attention.py:Attention.get_kv_cache_spec`. The whole
pipeline, with worked examples, is described in engines/vllm_groups.py, which groups these specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..formats import KvFormat
from ..layers import (
    ChunkedLocal, CompressedSparseAttention, FullAttention, LayerCache, MambaState, MultiLatentAttention,
    SlidingWindow, flatten,
)
from ..memo import per_object
from ..units import ceil_div

DEFAULT_BLOCK_SIZE = 16  # config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
SMALLEST_KERNEL_BLOCK = 16  # FLASH_ATTN / TRITON_ATTN MultipleOf(16), FLASHINFER [16, 32, 64]


def vllm_kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """TP divides KV heads; when tp exceeds them each rank holds one replicated head (vLLM QKVParallelLinear)."""
    return max(1, num_kv_heads // tp)


def vllm_element_bytes(kv: KvFormat, dtype_bytes: int) -> int:
    """Bytes of one stored element for plain caches (auto, fp8); for the packed / scaled ones (per-token-head,
    nvfp4) the rounded-up byte of one element, which only the grouping keys and the Mamba alignment use: pages
    always come from vllm_page_bytes."""
    if kv.vllm_name is None:
        raise ValueError(f"vLLM has no {kv.label} cache")
    if kv.vllm_layout != "plain":
        return max(1, kv.bits // 8)
    return kv.element_bytes(dtype_bytes)


def vllm_kv_refusal(kv: KvFormat, version: str, compute_capability: float | None, vendor: str = "nvidia") -> str | None:
    """Why vLLM `version` refuses --kv-cache-dtype kv on this GPU, or None: a release before the one that added the
    name rejects it at argument parsing (config/cache.py CacheDType); a cache no attention backend of this GPU reads
    fails backend selection ("kv_cache_dtype not supported", v1/attention/selector.py)."""
    from .vllm_versions import release_of, version_key

    if kv.vllm_name is None:
        return f"vLLM has no {kv.label} cache"
    if kv.vllm_since and version_key(version) < version_key(kv.vllm_since):
        return (f"vLLM {release_of(version)} does not accept --kv-cache-dtype {kv.vllm_name} (first accepted in "
                f"{kv.vllm_since})")
    if kv.vllm_cc_majors is not None:
        major = int(compute_capability or 0)
        if vendor != "nvidia" or major not in kv.vllm_cc_majors:
            where = f"sm_{int((compute_capability or 0) * 10)}" if vendor == "nvidia" else vendor.upper()
            allowed = ", ".join(f"sm_{m}x" for m in kv.vllm_cc_majors)
            return (f"no vLLM attention backend reads a {kv.vllm_name} cache on this GPU ({where}; {kv.vllm_backends} "
                    f"runs on {allowed} only)")
    if kv.vllm_layout == "per_token_head" and kv.native_min_compute_capability and vendor == "nvidia" and \
            (compute_capability or 0) < kv.native_min_compute_capability:
        return (f"{kv.vllm_name} needs compute capability {kv.native_min_compute_capability}+ (Triton's fp8 type); "
                f"this GPU is {compute_capability}")
    return None


@lru_cache(maxsize=4096)  # search calls it ~10^5 times on a few distinct layers; layers and formats are frozen
def vllm_page_bytes(layer: LayerCache, block_size: int, kv: KvFormat, dtype_bytes: int, tp: int = 1) -> int:
    """page_size_bytes of one attention layer's block (kv_cache_interface.py: AttentionSpec / MLAAttentionSpec); the
    only copy of the formula. Mamba pages: mamba_page; layers without a cache: 0."""
    elem = vllm_element_bytes(kv, dtype_bytes)
    if isinstance(layer, MultiLatentAttention):
        if kv.vllm_layout != "plain":  # v1/attention/backends/mla/*: supported_kv_cache_dtypes auto / fp8 only
            raise ValueError(f"no vLLM MLA backend accepts kv_cache_dtype={kv.vllm_name} (supported: auto, "
                             "fp8/fp8_e4m3, fp8_ds_mla for sparse MLA)")
        # MLAAttentionSpec: one latent 'head' of kv_lora_rank + rope dim, replicated on every TP rank.
        if (layer.index_head_dim or layer.sparse) and elem == 1:
            # fp8_ds_mla (FLASHMLA_SPARSE, DeepSeek V3.2): 512 fp8 NoPE values, one fp32 scale per 128 of them,
            # and the 64 RoPE values kept in bf16: 512 + 16 + 128 = 656 B per token (flashmla_sparse.py)
            per_token = layer.kv_lora_rank + layer.kv_lora_rank // 128 * 4 + layer.qk_rope_head_dim * 2
            return block_size * per_token + indexer_page_bytes(layer, block_size)
        return block_size * layer.latent_elements_per_token() * elem + indexer_page_bytes(layer, block_size)
    if isinstance(layer, FullAttention):
        heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
        # FullAttentionSpec.real_page_size_bytes (+ the per-token-head scales of AttentionSpec.page_size_bytes)
        sides = kv.vllm_side_bytes(layer.head_dim, dtype_bytes) + kv.vllm_side_bytes(layer.v_head_dim, dtype_bytes)
        # MiniMax M3's index keys: one bf16 head on every rank, whatever the KV dtype (MiniMaxM3IndexerCache)
        index = block_size * layer.index_key_dim * 2
        return block_size * heads * sides + index
    if isinstance(layer, CompressedSparseAttention):  # DeepSeek V4: the compressed entries of block_size tokens
        return int(block_size * dsv4_bytes_per_token(layer))
    return 0


DSV4_ENTRY_BYTES = 584  # DeepSeek V4 fp8_ds_mla entry: 448 fp8 NoPE + 128 B bf16 RoPE + 8 B scales


def dsv4_bytes_per_token(layer: CompressedSparseAttention) -> float:
    """Long-context bytes per token of one DeepSeek V4 layer under vLLM (the window and compressor states do not
    grow; engines/vllm_dsv4.py has the pages): a 584 B compressed entry every compress_ratio tokens, plus the CSA
    indexer key (index_head_dim fp8 + one fp32 scale per 128)."""
    r = layer.compress_ratio
    if r <= 1:
        return 0.0
    key = layer.index_head_dim + layer.index_head_dim // INDEXER_QUANT_BLOCK * 4 if r == 4 else 0
    return (DSV4_ENTRY_BYTES + key) / r


INDEXER_QUANT_BLOCK = 128  # models/deepseek_v2.py Indexer: quant_block_size = 128


def indexer_page_bytes(layer: MultiLatentAttention, block_size: int) -> int:
    """DeepSeek V3.2's indexer key cache (models/deepseek_v2.py:DeepseekV32IndexerCache.get_kv_cache_spec): an
    MLAAttentionSpec of one head, head_size = index_head_dim + index_head_dim // 128 * 4, dtype uint8 (an fp8 key and
    one fp32 scale per 128 elements), whatever the KV dtype: 132 B per token for index_head_dim 128."""
    if not layer.index_head_dim:
        return 0
    return block_size * (layer.index_head_dim + layer.index_head_dim // INDEXER_QUANT_BLOCK * 4)


def vllm_bytes_per_token(layers: tuple[LayerCache, ...], kv: KvFormat, dtype_bytes: int, tp: int = 1) -> int:
    """KV bytes per token per rank of all attention layers, each counted in full (sliding windows and Mamba state
    ignored): the per-token read of a long context."""
    return per_object("vllm_bytes_per_token", (layers, kv), (dtype_bytes, tp), lambda: sum(
        vllm_page_bytes(layer, 1, kv, dtype_bytes, tp) for layer in flatten(layers)))


@dataclass(frozen=True)
class PageSpec:
    """A layer's KVCacheSpec reduced to what grouping compares (equal specs share a group): its kind, tokens per
    block, page_size_bytes, sliding window and shape."""

    kind: str  # full, sliding, chunked, mla, mamba
    block_size: int
    page_bytes: int
    window: int = 0
    shape: tuple = ()
    spec_blocks: int = 0  # Mamba: MambaSpec.num_speculative_blocks (= num_speculative_tokens with a drafter)

    @property
    def type_key(self) -> tuple:
        """UniformTypeKVCacheSpecs.is_uniform_type: FullAttentionSpec (incl. MLA) / SlidingWindowSpec of one window /
        MambaSpec are each one type (kv_cache_spec_registry.py uniform_type_base_spec)."""
        if self.kind in ("full", "mla"):
            return ("full",)
        if self.kind in ("sliding", "chunked"):
            return (self.kind, self.window)
        return ("mamba",)

    def max_blocks(self, max_model_len: int, in_flight_tokens: int) -> int:
        """max_memory_usage_bytes // page_size_bytes: blocks one max_model_len request holds (kv_cache_interface.py);
        sliding: SlidingWindowSpec.max_admission_blocks_per_request; Mamba: one state block, plus one per speculative
        token (MambaSpec.max_memory_usage_bytes, mamba_cache_mode 'none')."""
        if self.kind == "mamba":
            return 1 + self.spec_blocks
        if self.kind == "sliding":
            return ceil_div(min(self.window - 1 + in_flight_tokens, max_model_len), self.block_size) + 1
        if self.kind == "chunked":
            # ChunkedLocalAttentionSpec.max_admission_blocks_per_request: at most one chunk plus the in-flight
            # tokens, no extra block (H200 check: Llama 4 Scout, 16 layers, max_model_len 65536 -> 2560 blocks).
            return ceil_div(min(self.window + in_flight_tokens, max_model_len), self.block_size)
        return ceil_div(max_model_len, self.block_size)

    def blocks_for(self, context: int, max_model_len: int, in_flight_tokens: int) -> int:
        """Blocks the admission gate reserves for a request of `context` tokens (kv_cache_manager.py:allocate_slots,
        single_type_kv_cache_manager.py:get_num_blocks_to_allocate with apply_admission_cap=True)."""
        if self.kind == "mamba":  # single_type_kv_cache_manager.py: cdiv(tokens, max_model_len) + speculative blocks
            return 1 + self.spec_blocks
        blocks = ceil_div(max(context, 0), self.block_size)
        if self.kind in ("sliding", "chunked"):
            blocks = min(blocks, self.max_blocks(max_model_len, in_flight_tokens))
        return blocks


SPARSE_MLA_MAJORS = (9, 10)  # FlashMLASparseBackend.supports_compute_capability


def mla_backend_block(compute_capability: float, fp8: bool, qk_nope_head_dim: int,
                      sparse: bool = False) -> tuple[str, int]:
    """(backend, default block size) for MLA when --block-size is not given (platforms/cuda.py priorities).
    Sparse MLA (DeepSeek V3.2's indexer) has one backend, FLASHMLA_SPARSE: kernel block [64], KV auto/bf16 or
    fp8 (= fp8_ds_mla), sm90 and sm100 (v1/attention/backends/mla/flashmla_sparse.py)."""
    major = int(compute_capability)
    if sparse:
        return "FLASHMLA_SPARSE", 64
    if major == 10:
        if qk_nope_head_dim in (64, 128, 192):
            return "FLASHINFER_MLA", 32  # flashinfer_mla.py: kernel blocks [32, 64]
        return "CUTLASS_MLA", 128  # cutlass_mla.py: [128]
    if major == 9:
        if not fp8:
            return "FLASH_ATTN_MLA", 16  # flashattn_mla.py: MultipleOf(16), kv dtypes auto/fp16/bf16
        return "FLASHMLA", 64  # flashmla.py: [64], kv dtypes incl. fp8
    return "TRITON_MLA", 16  # triton_mla.py: MultipleOf(16)


# Kernel block sizes of the MLA backends (v1/attention/backends/mla/*.py get_supported_kernel_block_sizes at v0.34.0):
# None = MultipleOf(16)
_MLA_KERNEL_BLOCKS = {"FLASHMLA_SPARSE": (64,), "FLASHINFER_MLA": (32, 64), "CUTLASS_MLA": (128,),
                      "FLASH_ATTN_MLA": None, "FLASHMLA": (64,), "TRITON_MLA": None}


def mla_accepts_block(backend: str, block: int) -> bool:
    sizes = _MLA_KERNEL_BLOCKS.get(backend, ())
    return block % 16 == 0 if sizes is None else block in sizes


def mamba2_extra_groups(n_groups: int, tp: int) -> int:
    """mamba_utils.py:extra_groups_for_head_shards: groups are replicated so every rank holds whole ones."""
    return 0 if n_groups % tp == 0 else tp - n_groups


def mamba_page(layer: MambaState, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
    """MambaSpec.page_size_bytes on one rank: MambaStateShapeCalculator divides the conv channels and the SSM heads
    by tp; Mamba2 first adds the replicated groups' 2 * extra * d_state channels when tp does not divide n_groups."""
    conv = layer.conv_state_elements
    if layer.mixer == "mamba2" and layer.n_groups and layer.conv_channels and tp > 1:
        width = conv // layer.conv_channels  # K - 1
        conv += width * 2 * mamba2_extra_groups(layer.n_groups, tp) * layer.d_state
    return (conv // tp) * conv_bytes + (layer.ssm_state_elements // tp) * ssm_bytes


@dataclass(frozen=True)
class BlockChoice:
    """cache_config.block_size after the backend and Mamba adjustments, and the padded Mamba page (if any)."""

    block_size: int
    mamba_page_padded: int | None
    notes: tuple[str, ...] = ()


def choose_block_size(cached: list[LayerCache], kv: KvFormat, dtype_bytes: int, block_size: int | None, tp: int,
                      compute_capability: float, conv_bytes: int, ssm_bytes: int,
                      default_block_size: int = DEFAULT_BLOCK_SIZE) -> BlockChoice:
    """Step 1: the backend's preferred block (MLA backends by GPU generation) unless --block-size is given, then
    interface.py:_align_hybrid_block_size for attention + Mamba hybrids (runs even over a user --block-size)."""
    elem = vllm_element_bytes(kv, dtype_bytes)
    fp8 = kv.vllm_name is not None and kv.vllm_name.startswith("fp8")
    notes: list[str] = []
    mla_layers = [layer for layer in cached if isinstance(layer, MultiLatentAttention)]
    attn_layers = [layer for layer in cached if isinstance(layer, (FullAttention, MultiLatentAttention))]
    mamba_layers = [layer for layer in cached if isinstance(layer, MambaState)]
    kernel_min = SMALLEST_KERNEL_BLOCK
    if mla_layers:
        backend, preferred = mla_backend_block(compute_capability, fp8, mla_layers[0].qk_nope_head_dim,
                                               sparse=bool(mla_layers[0].index_head_dim))
        kernel_min = preferred  # the chosen backend's smallest kernel block (fixed-size kernels: that size)
        if default_block_size != DEFAULT_BLOCK_SIZE and mla_accepts_block(backend, default_block_size):
            # v1/attention/backend.py:158-166 get_preferred_block_size: the default when the kernel takes it
            preferred = default_block_size
        if block_size is None:
            notes.append(f"MLA on sm{int(compute_capability * 10)}: {backend} backend, block size {preferred} "
                         "(platforms/cuda.py:_get_backend_priorities, get_preferred_block_size)")
    else:
        # FLASH_ATTN / TRITON_ATTN take MultipleOf(16), FlashInfer [16, 32, 64]: the release's default as is
        preferred = default_block_size
    bs = block_size if block_size is not None else preferred

    padded: int | None = None
    if mamba_layers and attn_layers:
        # interface.py:_align_hybrid_block_size (model-level attention page for one token; K and V of head_size).
        first = attn_layers[0]
        if isinstance(first, MultiLatentAttention):
            attn_1tok = first.latent_elements_per_token() * elem
        else:
            attn_1tok = vllm_page_bytes(first, 1, kv, dtype_bytes, tp)  # K and V of one token, scales included
        state_page = mamba_page(mamba_layers[0], tp, conv_bytes, ssm_bytes)
        if state_page > 0:
            align = max(kernel_min, bs)
            attn_block = align * ceil_div(state_page, align * attn_1tok)
            if bs < attn_block:
                notes.append(f"block size raised {bs} -> {attn_block} so the attention page ({attn_1tok} B/token) "
                             f"covers the Mamba state page ({state_page} B) (interface.py:_align_hybrid_block_size)")
                bs = attn_block
            attn_page = bs * attn_1tok
            if attn_page > state_page:
                padded = attn_page
                notes.append(f"Mamba page padded {state_page} -> {attn_page} B "
                             f"(+{100 * (attn_page - state_page) / state_page:.2f}%)")
    return BlockChoice(bs, padded, tuple(notes))


GEMMA4_PTH_PADDED_HEAD_BYTES = 1040  # gemma4.py: a 512-wide head with per-token-head scales pads 1032 -> 2 x 520


def gemma4_padded_page(layer: LayerCache, block_size: int, kv: KvFormat, tp: int, model_type: str) -> int | None:
    """models/gemma4.py Gemma4Attention (vllm@001cabc1): with int8/fp8_per_token_head, a global layer's 512-wide head
    takes (512 x 1) x 2 + 8 = 1,032 B per token, which the sliding layers' 520 does not divide, so vLLM pads it to
    1,040 (kv_cache_page_size_padded = block_size x heads per rank x 1040) and the groups' pages match."""
    if not (model_type.startswith("gemma4") and kv.vllm_layout == "per_token_head" and kv.bits == 8):
        return None
    if not isinstance(layer, FullAttention) or layer.head_dim != 512:
        return None
    return block_size * vllm_kv_heads_per_rank(layer.num_kv_heads, tp) * GEMMA4_PTH_PADDED_HEAD_BYTES


def layer_specs(cached: list[LayerCache], kv: KvFormat, dtype_bytes: int, tp: int, choice: BlockChoice,
                max_model_len: int, conv_bytes: int, ssm_bytes: int, mamba_spec_blocks: int = 0,
                model_type: str = "", sliding_follows_block: bool = False) -> list[PageSpec]:
    """Step 2: one PageSpec per layer that keeps a cache (kv_cache_interface.py), pages from vllm_page_bytes (or a
    model's own padded page: gemma4_padded_page)."""
    elem = vllm_element_bytes(kv, dtype_bytes)
    bs = choice.block_size
    specs: list[PageSpec] = []
    for layer in cached:
        if isinstance(layer, MultiLatentAttention):
            n = layer.latent_elements_per_token()
            specs.append(PageSpec("mla", bs, vllm_page_bytes(layer, bs, kv, dtype_bytes, tp), shape=(1, n, elem)))
        elif isinstance(layer, ChunkedLocal):
            # attention.py: ChunkedLocalAttentionSpec(block_size=cache_config.block_size, attention_chunk_size)
            heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
            specs.append(PageSpec("chunked", bs, vllm_page_bytes(layer, bs, kv, dtype_bytes, tp),
                                  window=layer.window, shape=(heads, layer.head_dim, layer.v_head_dim, elem)))
        elif isinstance(layer, SlidingWindow):
            heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
            sw_bs = SMALLEST_KERNEL_BLOCK  # attention.py:_largest_kernel_block_within(page_budget=None)
            if sliding_follows_block:
                # 0.34.0 attention.py:686-693: page_budget = per-token page x block_size, divisor_of=block_size:
                # the largest MultipleOf(16) block within it, the primary block itself
                sw_bs = bs
            specs.append(PageSpec("sliding", sw_bs, vllm_page_bytes(layer, sw_bs, kv, dtype_bytes, tp),
                                  window=layer.window, shape=(heads, layer.head_dim, layer.v_head_dim, elem)))
        elif isinstance(layer, FullAttention):
            heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
            page = gemma4_padded_page(layer, bs, kv, tp, model_type) or vllm_page_bytes(layer, bs, kv, dtype_bytes, tp)
            specs.append(PageSpec("full", bs, page, shape=(heads, layer.head_dim, layer.v_head_dim, elem)))
        elif isinstance(layer, MambaState):
            page = mamba_page(layer, tp, conv_bytes, ssm_bytes)
            if choice.mamba_page_padded is not None:
                page = max(page, choice.mamba_page_padded)
            # MambaModelConfig: without prefix caching mamba_block_size = max_model_len.
            specs.append(PageSpec("mamba", max_model_len, page,
                                  shape=(layer.mixer, layer.conv_state_elements, layer.ssm_state_elements),
                                  spec_blocks=mamba_spec_blocks))
        else:  # pragma: no cover - LayerCache is closed
            raise TypeError(f"unknown layer cache {layer!r}")
    return specs
