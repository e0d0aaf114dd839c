"""Per-token KV of the late-2026 layouts, hand-computed from vLLM's cache specs (kv_cache_interface.py
MLAAttentionSpec; models/deepseek_v2.py DeepseekV32IndexerCache: an fp8 key of index_head_dim plus one fp32 scale
per 128 = 132 B per token; fp8_ds_mla: 512 fp8 NoPE + 4 fp32 scales + 64 bf16 RoPE = 656 B per token)."""

from kvcalc.catalog import load_model
from kvcalc.engines.vllm_specs import vllm_bytes_per_token
from kvcalc.formats import kv_format


def _per_token(name: str, kv: str) -> int:
    spec = load_model(name)
    return vllm_bytes_per_token(spec.layers, kv_format(kv), spec.dtype_bytes)


def test_glm5_dsa_every_layer_has_an_indexer():
    # 78 MLA layers: bf16 latent (512 + 64) x 2 B = 1152, plus the 132 B indexer key in every layer
    assert _per_token("glm-5", "bf16") == 78 * (1152 + 132) == 100_152
    assert _per_token("glm-5", "fp8") == 78 * (656 + 132) == 61_464


def test_glm52_shared_indexers_keep_no_key_cache():
    # indexer_types: 21 "full" layers (0, 1, 2, then every 4th from 6 to 74) keep the 132 B key; 57 "shared" do not
    spec = load_model("glm-5.2")
    assert sum(1 for layer in spec.layers if layer.index_head_dim) == 21
    assert _per_token("glm-5.2", "bf16") == 78 * 1152 + 21 * 132 == 92_628
    # fp8: the whole model runs FLASHMLA_SPARSE, so shared layers keep the 656 B fp8_ds_mla layout too
    assert _per_token("glm-5.2", "fp8") == 78 * 656 + 21 * 132 == 53_940


def test_nemotron_3_ultra_attention_layers_only():
    # Mamba2 state is per sequence; per token only the attention layers: 2 KV heads x (128 + 128) x 2 B each
    # (layers_block_type lists 12 "attention" layers out of 108)
    spec = load_model("nemotron-3-ultra-550b-a55b")
    assert sum(1 for layer in spec.layers if layer.kind == "full") == 12
    assert _per_token("nemotron-3-ultra-550b-a55b", "bf16") == 12 * 2 * 256 * 2 == 12_288


def test_deepseek_v4_pages_from_the_vllm_source():
    """engines/vllm_dsv4.py: 584 B entries (448 fp8 NoPE + 128 B RoPE + 8 B scales), pages aligned to 576 B."""
    from kvcalc.engines.vllm_dsv4 import layer_pages
    from kvcalc.layers import CompressedSparseAttention

    c4 = {s.shape[0]: s.page_bytes for s in layer_pages(CompressedSparseAttention(512, 64, 128, 4, 128))}
    assert c4 == {"dsv4-swa": 37_440,  # 64-token SWA block x 584 = 37,376 -> 65 x 576
                  "dsv4-c4a": 37_440,  # 256 // 4 = 64 entries x 584, the same page (one shared tensor)
                  "dsv4-c4-state": 32_832,  # 4 tokens x 2 x 2 x 512 fp32 = 32,768 -> 57 x 576
                  "dsv4-indexer": 8_640,  # 64 entries x (128 + 4) = 8,448 -> 15 x 576
                  "dsv4-indexer-state": 8_640}  # 4 x 2 x 2 x 128 fp32 = 8,192 -> 15 x 576
    c128 = {s.shape[0]: s.page_bytes for s in layer_pages(CompressedSparseAttention(512, 64, 128, 128))}
    assert c128 == {"dsv4-swa": 37_440, "dsv4-c128a": 1_728,  # 2 entries x 584 = 1,168 -> 3 x 576
                    "dsv4-c128-state": 32_832}  # 8 tokens x 2 x 512 fp32
    swa = layer_pages(CompressedSparseAttention(512, 64, 128, 1))
    assert [s.shape[0] for s in swa] == ["dsv4-swa"]


def test_deepseek_v4_flash_per_token_kv():
    # 43 layers: 2 sliding-only, 21 CSA (r = 4), 20 HCA (r = 128). Per context token: a CSA layer adds a 584 B entry
    # and a 132 B indexer key every 4 tokens (179 B), an HCA layer a 584 B entry every 128 (4.5625 -> 4 B floored)
    spec = load_model("deepseek-v4-flash")
    ratios = [layer.compress_ratio for layer in spec.layers]
    assert (ratios.count(1), ratios.count(4), ratios.count(128)) == (2, 21, 20)
    assert _per_token("deepseek-v4-flash", "auto") == 21 * 179 + 20 * 4 == 3_839


def test_deepseek_v4_hf_cache_elements():
    # transformers keeps the window's last 127 rows of 512, one 512 entry per 4 tokens plus a 128 indexer key
    from kvcalc.engines.hf import hf_dsv4_elements
    from kvcalc.layers import CompressedSparseAttention

    csa = CompressedSparseAttention(512, 64, 128, 4, 128)
    assert hf_dsv4_elements(csa, 10_000) == 127 * 512 + 2_500 * (512 + 128)
    assert hf_dsv4_elements(CompressedSparseAttention(512, 64, 128, 1), 50) == 50 * 512


def test_deepseek_v4_vllm_layout_runs_and_says_what_it_assumed():
    from kvcalc.engines.vllm_groups import vllm_kv_layout

    spec = load_model("deepseek-v4-flash")
    layout = vllm_kv_layout(spec.layers, kv_format("auto"), 2, None, 1, 131_072, "deepseek_v4",
                            max_num_batched_tokens=8192, compute_capability=10.0)
    assert layout.block_size == 256 and {g.page_bytes for g in layout.groups} == {37_440}
    assert any("no V4 start-up log" in n for n in layout.notes)


def test_minimax_m3_msa_index_keys():
    # 60 GQA layers of 4 KV heads x (128 + 128); the 57 sparse layers (sparse_attention_freq) add one bf16 index key
    # of sparse_index_dim 128 per token (MiniMaxM3IndexerCache), whatever the KV dtype
    spec = load_model("minimax-m3")
    assert sum(1 for layer in spec.layers if layer.index_key_dim) == 57
    assert _per_token("minimax-m3", "bf16") == 60 * 4 * 256 * 2 + 57 * 128 * 2 == 137_472
    assert _per_token("minimax-m3", "fp8") == 60 * 4 * 256 + 57 * 128 * 2 == 76_032
    # at TP 4 each rank holds one KV head, and the index key whole
    assert vllm_bytes_per_token(spec.layers, kv_format("bf16"), 2, tp=4) == 60 * 256 * 2 + 57 * 256 == 45_312


def test_minimax_m3_vl_wrapper_plans_its_decoder_and_names_the_tower():
    spec = load_model("minimax-m3-nvfp4")
    assert spec.params.total == load_model("minimax-m3").params.total
    assert spec.uncounted and "vision" in spec.uncounted[0]
