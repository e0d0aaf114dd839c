"""vLLM's KV-cache dtypes after fp8 (int8/fp8/int4 per-token-head, nvfp4): exact bytes per token, hand-computed from
vLLM's layouts (v1/kv_cache_interface.py, utils/torch_utils.py:nvfp4_kv_cache_full_dim), and the gates that refuse
them where vLLM does (release, GPU generation, MLA)."""

import pytest

from kvcalc.catalog import load_model
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format
from kvcalc.engines.vllm_specs import vllm_bytes_per_token, vllm_kv_refusal, vllm_page_bytes
from kvcalc.layers import FullAttention, MultiLatentAttention


def test_side_bytes_by_layout():
    # per side (K or V), one token, one head of 128: plain bf16 256, fp8 128; int8/fp8 per token-head 128 + one fp32
    # scale = 132; int4 per token-head 64 + 4 = 68; nvfp4 64 packed bytes + 128/16 = 8 fp8 scales = 72
    assert kv_format("auto").vllm_side_bytes(128, 2) == 256
    assert kv_format("fp8").vllm_side_bytes(128, 2) == 128
    assert kv_format("int8_per_token_head").vllm_side_bytes(128, 2) == 132
    assert kv_format("fp8_per_token_head").vllm_side_bytes(128, 2) == 132
    assert kv_format("int4_per_token_head").vllm_side_bytes(128, 2) == 68
    assert kv_format("nvfp4").vllm_side_bytes(128, 2) == 72
    assert kv_format("nvfp4_4over6").vllm_side_bytes(512, 2) == 256 + 32
    assert kv_format("nvfp4").vllm_bytes_per_element(2) == 0.5625  # 4.5 bits


def test_page_bytes_match_vllm_formula():
    layer = FullAttention(8, 128, 128)
    # AttentionSpec.page_size_bytes for int8_per_token_head, block 16, 8 heads:
    # 2 * 16 * 8 * 128 * 1 (int8 data) + 2 * 16 * 8 * 4 (fp32 scales) = 32,768 + 1,024
    assert vllm_page_bytes(layer, 16, kv_format("int8_per_token_head"), 2) == 32_768 + 1_024
    # nvfp4: block 16 x 8 heads x (72 + 72) = 18,432 (vllm#37192's "65536 / 18432 bytes per page" at this shape)
    assert vllm_page_bytes(layer, 16, kv_format("nvfp4"), 2) == 18_432
    assert vllm_page_bytes(layer, 16, kv_format("auto"), 2) == 65_536
    # TP 2 halves the heads per rank
    assert vllm_page_bytes(layer, 16, kv_format("nvfp4"), 2, tp=2) == 9_216


def test_llama_3_1_8b_per_token():
    spec = load_model("llama-3.1-8b")  # 32 layers x 8 KV heads x 128
    per = {k: vllm_bytes_per_token(spec.layers, kv_format(k), 2) for k in
           ("auto", "fp8", "int8_per_token_head", "int4_per_token_head", "nvfp4")}
    assert per == {"auto": 32 * 8 * 512, "fp8": 32 * 8 * 256, "int8_per_token_head": 32 * 8 * 264,
                   "int4_per_token_head": 32 * 8 * 136, "nvfp4": 32 * 8 * 144}


def test_gates():
    nvfp4, int4, fp8pth = kv_format("nvfp4"), kv_format("int4_per_token_head"), kv_format("fp8_per_token_head")
    assert vllm_kv_refusal(nvfp4, "0.26.0", 10.0) is None  # B200
    assert "sm_90" in vllm_kv_refusal(nvfp4, "0.26.0", 9.0)  # H100: no backend reads it
    assert "sm_120" in vllm_kv_refusal(nvfp4, "0.26.0", 12.0)  # RTX 5090 / PRO 6000: gated out (vllm#49011)
    assert "first accepted in 0.21.0" in vllm_kv_refusal(nvfp4, "0.20.1", 10.0)
    assert vllm_kv_refusal(nvfp4, "0.26.0", None, "amd") is not None
    assert "0.28.0" in vllm_kv_refusal(int4, "0.26.0", 9.0)
    assert vllm_kv_refusal(int4, "0.28.0", 8.0) is None  # Triton runs it on Ampere
    assert "8.9" in vllm_kv_refusal(fp8pth, "0.26.0", 8.6)  # RTX 3090
    assert vllm_kv_refusal(kv_format("fp8"), "0.26.0", 7.5) is None


def test_mla_refuses_scaled_caches():
    mla = MultiLatentAttention(16, 512, 64, 128, 128)
    with pytest.raises(ValueError, match="MLA"):
        vllm_page_bytes(mla, 64, kv_format("nvfp4"), 2)


def test_vllm_spellings_and_unmodelled():
    assert kv_format("fp8_inc").name == "fp8" and kv_format("fp8_ds_mla").name == "fp8"
    assert kv_format("INT8_PER_TOKEN_HEAD").name == "int8-per-token-head"
    # kvcalc's int8 stays transformers' HQQ 8-bit (the HF engine); vLLM's int8 is spelt out
    assert kv_format("int8").name == "hqq-8"
    for name in ("turboquant_k8v4", "turboquant_4bit_nc", "nvfp4_ds_mla"):
        with pytest.raises(UsageError, match="does not model"):
            kv_format(name)


def test_gemma4_global_layers_pad_per_token_head_pages():
    """gemma4.py (vllm@001cabc1): with int8/fp8_per_token_head a 512-wide global head takes 2 x 512 + 8 = 1,032 B per
    token, padded to 1,040 so that it divides evenly with the sliding layers' 16 heads x 520 B. Gemma-4-31B: sliding
    page 16 tokens x 16 heads x 520 = 133,120 B; global page at block 32: 32 x 4 heads x 1,040 = 133,120 B; ten
    layers per group share a block: 1,331,200 B."""
    from kvcalc.engines.vllm_groups import vllm_kv_layout

    spec = load_model("gemma-4-31b-nvfp4")
    layout = vllm_kv_layout(spec.layers, kv_format("int8_per_token_head"), 2, None, 1, 262_144, spec.model_type,
                            max_num_batched_tokens=4096)
    assert layout.bytes_per_block == 10 * 16 * 16 * 520 == 1_331_200
    assert layout.block_size == 32
    full = next(r for r in layout.rules if r.kind == "full")
    assert full.page_bytes == 32 * 4 * 1040
    # without the padding the pages would not divide (66,048 x 2 = 132,096 != 133,120): vLLM pads, kvcalc follows
    assert vllm_page_bytes(FullAttention(4, 512, 512), 32, kv_format("int8_per_token_head"), 2) == 132_096
