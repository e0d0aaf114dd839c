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
