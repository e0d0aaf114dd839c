"""vLLM 0.26 KV-cache layout: block size, groups, blocks and concurrency, against hand-derived numbers.

Each expected value below is worked out by hand from the vLLM 0.26.0 rules cited in kvcalc/engines/vllm_groups.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.engines.vllm_groups import KvGroup, vllm_kv_layout
from kvcalc.formats import kv_format
from kvcalc.layers import FullAttention, MambaState, MultiLatentAttention, NoCache, SlidingWindow

GiB = 2**30
BF16 = kv_format("auto")
FP8 = kv_format("fp8")
E5M2 = kv_format("fp8-e5m2")


def layout(layers, kv=BF16, block_size=None, tp=1, max_model_len=8192, model_type="", **kw):
    return vllm_kv_layout(tuple(layers), kv, 2, block_size, tp, max_model_len, model_type, **kw)


LLAMA_3B = [FullAttention(8, 128, 128)] * 28


def gemma3(n_layers, kv_heads, head_dim, window):
    """Gemma-3 pattern: five sliding layers, then one global layer."""
    return [SlidingWindow(kv_heads, head_dim, head_dim, window=window) if (i + 1) % 6 else
            FullAttention(kv_heads, head_dim, head_dim) for i in range(n_layers)]


# ------------------------------------------------------------------------------------------- uniform full attention


def test_llama_3b_uniform_hand_computed():
    lay = layout(LLAMA_3B)
    assert lay.layout == "uniform"
    assert lay.block_size == 16
    # page per layer per block: 16 tokens * 8 heads * (128 + 128) * 2 bytes
    assert lay.groups == [KvGroup("full", 28, 65_536)]
    assert lay.group_size == 28
    assert lay.bytes_per_block == 1_835_008
    blocks = lay.num_blocks(10 * GiB)
    assert blocks == 10 * GiB // 1_835_008 == 5851
    assert lay.max_blocks_per_request == 512  # 8192 / 16
    assert lay.max_concurrency(blocks) == 5851 / 512
    assert lay.logged_tokens(blocks) == int(5851 / 512 * 8192) == 5851 * 16
    assert lay.blocks_per_request(8192) == 512
    assert lay.concurrency_at(blocks, 8192) == 5850 // 512 == 11  # one block is the null block
    assert lay.kv_bytes_per_token == 1_835_008 / 16
    assert lay.min_kv_bytes == 512 * 1_835_008


def test_llama_3b_fp8_halves_the_page():
    lay = layout(LLAMA_3B, kv=FP8)
    assert lay.groups == [KvGroup("full", 28, 32_768)]
    assert lay.bytes_per_block == 917_504
    assert lay.num_blocks(10 * GiB) == 11_702


@pytest.mark.parametrize("available", [0, 1, 1_835_007, 1_835_008, 7 * GiB + 12345, 75 * GiB])
@pytest.mark.parametrize("block_size", [16, 32, 64])
def test_uniform_equals_simple_formula(available, block_size):
    lay = layout(LLAMA_3B, block_size=block_size, max_model_len=131_072)
    page = block_size * 8 * 256 * 2
    blocks = available // (page * 28)
    assert lay.num_blocks(available) == blocks
    assert lay.max_concurrency(blocks) == blocks / (131_072 // block_size)
    assert lay.concurrency_at(blocks, 4096) == max(blocks - 1, 0) // (4096 // block_size)


def test_no_cache_layers_are_ignored():
    with_shared = LLAMA_3B + [NoCache(shares_with=0)] * 6
    assert layout(with_shared).bytes_per_block == layout(LLAMA_3B).bytes_per_block


def test_full_layers_of_different_sizes_sum_their_pages():
    # UniformTypeKVCacheSpecs: one group, blocks = available // sum of pages.
    layers = [FullAttention(8, 128, 128)] * 10 + [FullAttention(4, 128, 128)] * 6
    lay = layout(layers)
    assert lay.layout == "uniform_type"
    assert lay.bytes_per_block == 10 * 65_536 + 6 * 32_768
    assert lay.max_blocks_per_request == 512


# ------------------------------------------------------------------------------------------- tensor parallel


def test_tp_divides_kv_heads_and_replicates_below_one():
    qwen7b = [FullAttention(4, 128, 128)] * 28
    assert layout(qwen7b, tp=2).groups == [KvGroup("full", 28, 16 * 2 * 256 * 2)]
    # tp 8 > 4 KV heads: each rank keeps one (replicated) head, not half a head.
    assert layout(qwen7b, tp=8).groups == [KvGroup("full", 28, 16 * 1 * 256 * 2)]
    assert layout(qwen7b, tp=4).bytes_per_block == layout(qwen7b, tp=8).bytes_per_block == 229_376


# ------------------------------------------------------------------------------------------- sliding window


def test_gemma3_1b_hybrid_allocator_groups_hand_derived():
    # 26 layers: global at 5, 11, 17, 23 (4 full), 22 sliding, window 512, 1 KV head of 256, bf16.
    layers = gemma3(26, 1, 256, 512)
    lay = layout(layers, max_model_len=32_768, max_num_batched_tokens=8192)
    assert lay.layout == "hybrid"
    # group_size = smallest type (4 full); 22 sliding -> cdiv(22, 4) = 6 groups of layers[i::6]: 4,4,4,4,3,3
    page = 16 * 1 * 512 * 2
    assert lay.group_size == 4
    assert lay.groups == [KvGroup("sliding", n, page) for n in (4, 4, 4, 4, 3, 3)] + [KvGroup("full", 4, page)]
    assert lay.bytes_per_block == 4 * page == 65_536
    # per request: full cdiv(32768, 16) = 2048; each sliding group cdiv(min(511 + 2*8192, 32768), 16) + 1 = 1057
    assert lay.max_blocks_per_request == 2048 + 6 * 1057 == 8390
    blocks = lay.num_blocks(4 * GiB)
    assert blocks == 65_536
    assert lay.max_concurrency(blocks) == 65_536 / 8390
    assert lay.logged_tokens(blocks) == int(65_536 / 8390 * 32_768) == 255_957
    # a 512-token request: 32 blocks in each of the 7 groups
    assert lay.blocks_per_request(512) == 7 * 32
    assert lay.concurrency_at(blocks, 512) == 65_535 // 224


def test_gemma3_without_hybrid_allocator_pays_full_attention_everywhere():
    layers = gemma3(26, 1, 256, 512)
    lay = layout(layers, max_model_len=32_768, hybrid_allocator=False)
    assert lay.layout == "uniform"
    assert lay.groups == [KvGroup("full", 26, 16_384)]
    assert lay.num_blocks(4 * GiB) == 4 * GiB // (26 * 16_384) == 10_082
    assert lay.max_blocks_per_request == 2048
    assert lay.max_concurrency(10_082) == 10_082 / 2048
    # With the allocator on (the default) the gain at 32k is only ~1.6x: each sliding group still reserves
    # window + 2 * max_num_batched_tokens in-flight tokens per request (65,536 / 8390 = 7.81 vs 4.92).
    on = layout(layers, max_model_len=32_768)
    assert on.max_concurrency(on.num_blocks(4 * GiB)) == 65_536 / 8390


def test_gemma3_27b_like_window_1024():
    # 62 layers: 10 full, 52 sliding -> group_size 10; 52 sliding in cdiv(52, 10) = 6 groups (9,9,9,9,8,8).
    lay = layout(gemma3(62, 16, 128, 1024), max_model_len=131_072, max_num_batched_tokens=16_384)
    page = 16 * 16 * 256 * 2
    assert lay.group_size == 10
    assert [g.n_layers for g in lay.groups] == [9, 9, 9, 9, 8, 8, 10]
    assert lay.bytes_per_block == 10 * page
    sliding = -(-(1023 + 2 * 16_384) // 16) + 1
    assert sliding == 2113
    assert lay.max_blocks_per_request == 131_072 // 16 + 6 * sliding


def test_sliding_block_follows_full_block_size():
    # --block-size 32: full layers use 32, sliding layers start at 16 and are scaled up to the same page.
    lay = layout(gemma3(62, 16, 128, 1024), block_size=32, max_model_len=131_072)
    assert lay.block_size == 32
    assert all(rule.block_size == 32 for rule in lay.rules)


def test_mistral_v01_all_sliding():
    mistral = [SlidingWindow(8, 128, 128, window=4096)] * 32
    lay = layout(mistral, max_model_len=32_768, max_num_batched_tokens=8192)
    assert lay.layout == "uniform"
    assert lay.groups == [KvGroup("sliding", 32, 65_536)]
    assert lay.bytes_per_block == 2_097_152
    # cdiv(min(4095 + 16384, 32768), 16) + 1
    assert lay.max_blocks_per_request == 1281
    assert lay.blocks_per_request(1000) == 63
    assert lay.blocks_per_request(32_768) == 1281
    # The cap reaches max_model_len when the window covers it: one block more than a full layer.
    short = layout(mistral, max_model_len=4096)
    assert short.max_blocks_per_request == 257
    # Sliding layers take the kernel's smallest block (16) whatever --block-size says.
    assert layout(mistral, block_size=32).block_size == 16
    # With the hybrid allocator off an all-sliding model is still uniform and still sliding.
    assert layout(mistral, max_model_len=32_768, hybrid_allocator=False).groups == lay.groups


def test_disabled_allocator_with_two_windows_is_refused():
    layers = [SlidingWindow(8, 128, 128, window=512), SlidingWindow(8, 128, 128, window=1024),
              FullAttention(8, 128, 128)] * 4
    with pytest.raises(ValueError):
        layout(layers, hybrid_allocator=False)


# ------------------------------------------------------------------------------------------- MLA


DSV2_LITE = [MultiLatentAttention(16, 512, 64, 128, 128)] * 27


def test_mla_hopper_bf16_flash_attn_mla_block_16():
    lay = layout(DSV2_LITE, max_model_len=163_840)
    assert lay.block_size == 16
    assert lay.groups == [KvGroup("mla", 27, 16 * 576 * 2)]
    assert lay.bytes_per_block == 27 * 18_432


def test_mla_hopper_fp8_flashmla_block_64():
    lay = layout(DSV2_LITE, kv=FP8, max_model_len=163_840)
    assert lay.block_size == 64
    assert lay.groups == [KvGroup("mla", 27, 64 * 576)]
    # fewer, larger blocks than bf16, but more tokens
    bf16 = layout(DSV2_LITE, max_model_len=163_840)
    avail = 40 * GiB
    assert lay.num_blocks(avail) < bf16.num_blocks(avail)
    assert lay.num_blocks(avail) * 64 > bf16.num_blocks(avail) * 16


def test_mla_other_gpus_and_formats():
    assert layout(DSV2_LITE, kv=FP8, compute_capability=8.0).block_size == 16  # TRITON_MLA
    assert layout(DSV2_LITE, compute_capability=10.0).block_size == 32  # FLASHINFER_MLA
    assert layout(DSV2_LITE, block_size=64).groups == [KvGroup("mla", 27, 64 * 576 * 2)]
    with pytest.raises(ValueError):
        layout(DSV2_LITE, kv=E5M2)
    # DeepSeek V4 has a layer kind of its own now (CompressedSparseAttention, tests/test_late_2026_layouts.py)


def test_mla_is_replicated_across_tp():
    assert layout(DSV2_LITE, tp=8).bytes_per_block == layout(DSV2_LITE, tp=1).bytes_per_block


# ------------------------------------------------------------------------------------------- Mamba hybrids


def nemotron_h_8b():
    """52 layers: 24 Mamba2 (conv 10240 ch x 3 taps, SSM 128 heads x 64 x 128), 4 attention (8 x 128), 24 MLP-only."""
    mamba = MambaState(conv_state_elements=10_240 * 3, ssm_state_elements=128 * 64 * 128)
    attn = FullAttention(8, 128, 128)
    mlp = NoCache()
    block = [mamba, mlp, mamba, mlp, mamba, mlp, attn, mamba, mlp, mamba, mlp, mamba, mlp]
    return block * 4


def test_nemotron_h_block_size_raised_and_mamba_padded():
    layers = nemotron_h_8b()
    assert sum(isinstance(x, MambaState) for x in layers) == 24
    assert sum(isinstance(x, FullAttention) for x in layers) == 4
    lay = layout(layers, model_type="nemotron_h", max_model_len=8192)
    # Mamba page: conv 30720 x 2 B (bf16) + SSM 1,048,576 x 4 B (fp32 for Nemotron-H) = 4,255,744 B.
    # Attention: 8 heads x 256 x 2 B = 4096 B/token -> block = 16 * cdiv(4,255,744, 16 * 4096) = 16 * 65 = 1040.
    assert lay.block_size == lay.cache_block_size == 1040
    assert lay.mamba_page_padded == 1040 * 4096 == 4_259_840
    # 24 mamba : 4 attention -> group_size 4; 6 mamba groups + 1 attention group.
    assert lay.group_size == 4
    assert sorted(lay.groups) == sorted([KvGroup("mamba", 4, 4_259_840)] * 6 + [KvGroup("full", 4, 4_259_840)])
    assert lay.bytes_per_block == 17_039_360
    # per request: cdiv(8192, 1040) = 8 attention blocks + one state block per Mamba group
    assert lay.max_blocks_per_request == 8 + 6
    blocks = lay.num_blocks(20 * GiB)
    assert blocks == 1260
    assert lay.max_concurrency(blocks) == 90.0
    assert lay.logged_tokens(blocks) == 90 * 8192
    assert lay.blocks_per_request(100) == 1 + 6
    assert lay.min_kv_bytes == 14 * 17_039_360  # group_size * page * blocks per request


def test_jamba_like_bf16_and_fp8():
    # Mamba1: conv 8192 ch x 3, SSM 8192 x 16, bf16: (24576 + 131072) * 2 = 311,296 B.
    jamba = [FullAttention(8, 128, 128) if i % 8 == 4 else MambaState(24_576, 131_072) for i in range(32)]
    lay = layout(jamba)
    assert lay.block_size == 16 * -(-311_296 // (16 * 4096)) == 80
    assert lay.mamba_page_padded == 80 * 4096
    assert [g.kind for g in lay.groups].count("mamba") == 7 and lay.group_size == 4
    # fp8 halves the attention page per token, not the Mamba state: the block doubles.
    fp8 = layout(jamba, kv=FP8)
    assert fp8.block_size == 160
    assert fp8.bytes_per_block == lay.bytes_per_block
    # Jamba needs the hybrid allocator (vLLM refuses it disabled).
    with pytest.raises(ValueError):
        layout(jamba, hybrid_allocator=False)


def test_mamba_tp_divides_state():
    jamba = [FullAttention(8, 128, 128) if i % 8 == 4 else MambaState(24_576, 131_072) for i in range(32)]
    lay = layout(jamba, tp=2)
    # state 155,648 B per rank; attention 4 heads -> 2048 B/token -> block 16 * cdiv(155648, 32768) = 80
    assert lay.block_size == 80
    assert lay.mamba_page_padded == 80 * 2048


def test_refuses_what_it_does_not_model():
    with pytest.raises(ValueError):
        layout([NoCache()] * 4)
    with pytest.raises(ValueError):
        layout(LLAMA_3B, kv=kv_format("hqq-4"))
    with pytest.raises(NotImplementedError):
        layout([MambaState(100, 100)] * 4, mamba_cache_mode="align")


# ------------------------------------------------------------------------------------------- properties


def _model(kind: str, n: int, heads: int, dim: int, window: int) -> list:
    if kind == "full":
        return [FullAttention(heads, dim, dim)] * n
    if kind == "gemma":
        return gemma3(n, heads, dim, window)
    if kind == "sliding":
        return [SlidingWindow(heads, dim, dim, window=window)] * n
    if kind == "mla":
        return [MultiLatentAttention(16, 512, 64, 128, 128)] * n
    return [FullAttention(heads, dim, dim) if i % 6 == 3 else MambaState(24_576, 131_072) for i in range(n)]


models = st.builds(
    _model,
    st.sampled_from(["full", "gemma", "sliding", "mla", "mamba"]),
    st.integers(1, 64),
    st.sampled_from([1, 2, 4, 8, 16, 32]),
    st.sampled_from([64, 128, 256]),
    st.sampled_from([128, 512, 1024, 4096]),
)
tps = st.sampled_from([1, 2, 4, 8])
memory = st.integers(0, 140 * GiB)


@settings(max_examples=300, deadline=None)
@given(models, tps, st.integers(1, 262_144), st.integers(1, 262_144), memory, st.sampled_from([None, 16, 32, 64]))
def test_concurrency_never_grows_with_max_model_len(layers, tp, len_a, len_b, available, block_size):
    short, long = sorted((len_a, len_b))
    a = layout(layers, tp=tp, max_model_len=short, block_size=block_size)
    b = layout(layers, tp=tp, max_model_len=long, block_size=block_size)
    assert b.max_concurrency(b.num_blocks(available)) <= a.max_concurrency(a.num_blocks(available))


@settings(max_examples=300, deadline=None)
@given(models, tps, memory, st.sampled_from([16, 32, 64, 128]), st.integers(1, 131_072))
def test_fp8_never_fewer_blocks_than_bf16_at_a_given_block_size(layers, tp, available, block_size, max_len):
    bf16 = layout(layers, tp=tp, block_size=block_size, max_model_len=max_len)
    fp8 = layout(layers, kv=FP8, tp=tp, block_size=block_size, max_model_len=max_len)
    assert fp8.num_blocks(available) >= bf16.num_blocks(available)
    assert fp8.max_concurrency(fp8.num_blocks(available)) >= bf16.max_concurrency(bf16.num_blocks(available))


@settings(max_examples=300, deadline=None)
@given(models, tps, memory, memory, st.integers(1, 131_072))
def test_more_memory_never_fewer_blocks(layers, tp, mem_a, mem_b, max_len):
    lay = layout(layers, tp=tp, max_model_len=max_len)
    low, high = sorted((mem_a, mem_b))
    assert lay.num_blocks(high) >= lay.num_blocks(low)
    assert lay.logged_tokens(lay.num_blocks(high)) >= lay.logged_tokens(lay.num_blocks(low))


@settings(max_examples=200, deadline=None)
@given(models, tps, memory, st.integers(1, 131_072), st.integers(1, 131_072))
def test_longer_requests_never_fit_more(layers, tp, available, ctx_a, ctx_b):
    lay = layout(layers, tp=tp, max_model_len=131_072)
    nb = lay.num_blocks(available)
    short, long = sorted((ctx_a, ctx_b))
    assert lay.concurrency_at(nb, long) <= lay.concurrency_at(nb, short)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 80), st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([64, 128, 256]), tps, memory,
       st.sampled_from([16, 32, 64]), st.integers(1, 131_072))
def test_uniform_full_attention_matches_simple_formula(n, heads, dim, tp, available, block_size, max_len):
    lay = layout([FullAttention(heads, dim, dim)] * n, tp=tp, block_size=block_size, max_model_len=max_len)
    page_all = n * block_size * max(1, heads // tp) * 2 * dim * 2
    blocks = available // page_all
    assert lay.num_blocks(available) == blocks
    assert lay.max_concurrency(blocks) == blocks / -(-max_len // block_size)
