"""DeepSeek V4's KV cache under vLLM: the caches each CompressedSparseAttention layer registers, their pages, and
the pool they share.

Read from the vLLM source (vllm-project/vllm main, 2026; paths under vllm/):
- every layer: a DeepseekV4SWACache (v1/attention/backends/mla/sparse_swa.py): SlidingWindowMLASpec, block 64
  ("C4A and SWA share the same physical tensor ... [256//4, head_dim] determines the SWA block size"), window =
  sliding_window, fp8_ds_mla entries of 584 B (448 fp8 NoPE + 64 bf16 RoPE + 7 scales + 1 pad;
  kv_cache_interface.py real_page_size_bytes), pages aligned to 576 B (_apply_alignment_padding);
- compress_ratio r > 1: the compressed cache (model_executor/layers/deepseek_v4_attention.py
  DeepseekV4MLAAttention.get_kv_cache_spec): MLAAttentionSpec with compress_ratio r over the cache block of 256
  tokens (DeepseekSparseSWABackend.get_preferred_block_size), storage block 256 // r entries of 584 B, aligned 576;
  and its compressor's state (deepseek_compressor.py CompressorStateCache): SlidingWindowMLASpec in float32 of
  state_dim = 2 x coff x head_dim (coff 2 for r = 4, else 1), block 4 (r = 4) or 8 (r = 128), window coff x r;
- r = 4 (CSA): the indexer's key cache (DeepseekV4IndexerCache): MLAAttentionSpec of index_head_dim + 4 B (fp8 +
  one fp32 scale per 128) per compressed entry, aligned 576; and the indexer's own compressor state (head 128).
V4 runs only the fp8_ds_mla cache (DeepseekV4MLAAttention asserts an fp8 cache dtype and converts it).

What kvcalc assumes beyond the source it read: the caches share one pool of equal pages, each padded to the largest
(the source's comments say SWA, C4A and compressor blocks share one physical tensor and must have one page size);
the grouping then follows _get_kv_cache_groups_uniform_page_size as for other hybrids. No public V4 start-up log
was checked: the plan says so.
"""

from __future__ import annotations

from dataclasses import replace

from ..layers import CompressedSparseAttention
from ..units import ceil_div
from .vllm_specs import DSV4_ENTRY_BYTES as ENTRY_BYTES, INDEXER_QUANT_BLOCK, PageSpec

PAGE_ALIGN = 576  # FlashMLA alignment of every V4 page
CACHE_BLOCK = 256  # DeepseekSparseSWABackend.get_preferred_block_size
SWA_BLOCK = 64  # DeepseekV4SWACache.block_size
STATE_BYTES = 4  # compressor states are float32


def _aligned(n: int) -> int:
    return ceil_div(n, PAGE_ALIGN) * PAGE_ALIGN


def _state_block(ratio: int) -> int:
    return 4 if ratio == 4 else 8  # CompressorStateCache: C4 block 4, C128 block 8


def layer_pages(layer: CompressedSparseAttention) -> list[PageSpec]:
    """The page specs one V4 layer registers, before the pool pads them to one size."""
    r = layer.compress_ratio
    specs = [PageSpec("sliding", SWA_BLOCK, _aligned(SWA_BLOCK * ENTRY_BYTES), window=layer.window,
                      shape=("dsv4-swa",))]
    if r > 1:
        coff = layer.compressor_overlap
        specs.append(PageSpec("mla", CACHE_BLOCK, _aligned(CACHE_BLOCK // r * ENTRY_BYTES), shape=(f"dsv4-c{r}a",)))
        bs = _state_block(r)
        specs.append(PageSpec("sliding", bs, _aligned(bs * 2 * coff * layer.head_dim * STATE_BYTES),
                              window=coff * r, shape=(f"dsv4-c{r}-state",)))
    if r == 4 and layer.index_head_dim:
        key = layer.index_head_dim + layer.index_head_dim // INDEXER_QUANT_BLOCK * 4
        specs.append(PageSpec("mla", CACHE_BLOCK, _aligned(CACHE_BLOCK // r * key), shape=("dsv4-indexer",)))
        bs = _state_block(r)
        specs.append(PageSpec("sliding", bs, _aligned(bs * 2 * 2 * layer.index_head_dim * STATE_BYTES),
                              window=2 * r, shape=("dsv4-indexer-state",)))
    return specs


def pooled_specs(layers: list[CompressedSparseAttention]) -> list[PageSpec]:
    """Every cache's spec, padded to the largest page (one pool of equal pages)."""
    specs = [spec for layer in layers for spec in layer_pages(layer)]
    page = max(s.page_bytes for s in specs)
    return [replace(s, page_bytes=page) for s in specs]
