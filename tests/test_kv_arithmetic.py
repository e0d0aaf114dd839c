"""Hand-computed KV arithmetic for Llama-3.2-3B (28 layers, 8 KV heads, head_dim 128)."""

from kvcalc.catalog import load_model
from kvcalc.formats import kv_format
from kvcalc.engines.hf import hf_bytes_per_token, hf_cache_bytes, hf_quantized_split
from kvcalc.engines.vllm_specs import vllm_bytes_per_token, vllm_page_bytes


def spec():
    return load_model("llama-3.2-3b")


def test_bf16_kv_bytes_per_token():
    # 2 (K and V) * 8 heads * 128 dims * 2 bytes * 28 layers
    assert vllm_bytes_per_token(spec().layers, kv_format("auto"), 2) == 114_688
    assert hf_bytes_per_token(spec().layers, kv_format("auto"), 2) == 114_688


def test_fp8_kv_bytes_per_token():
    assert vllm_bytes_per_token(spec().layers, kv_format("fp8"), 2) == 57_344


def test_hqq4_bytes_per_token_is_4_5_bits():
    # 57,344 elements per token * 4.5 bits / 8
    assert hf_bytes_per_token(spec().layers, kv_format("hqq-4"), 2) == 32_256


def test_vllm_page_per_layer_and_block():
    layer = spec().layers[0]
    assert vllm_page_bytes(layer, 16, kv_format("auto"), 2) == 65_536  # 16 * 8 * 256 * 2
    assert vllm_page_bytes(layer, 16, kv_format("fp8"), 2) == 32_768


def test_residual_split():
    # prefill 1024, then 255 single-token updates: 255 = 128 + 127 -> 127 wait in the residual
    assert hf_quantized_split(1024 + 255, 1024, 128) == (1152, 127)
    assert hf_quantized_split(1024, 1024, 128) == (1024, 0)
    assert hf_quantized_split(1024 + 128, 1024, 128) == (1152, 0)


def test_hf_quantized_cache_bytes_with_residual():
    # per layer: K = 8 heads * 1152 tokens * 128 = 1,179,648 elements -> 589,824 packed bytes
    # + 18,432 groups * (2-byte scale + 2-byte zero) = 73,728 -> 663,552; V the same;
    # residual 127 tokens * 8 * 256 * 2 bytes = 520,192. 28 layers.
    expected = 28 * (2 * 663_552 + 520_192)
    assert hf_cache_bytes(spec().layers, 1, 1024 + 255, 1024, kv_format("hqq-4"), 2) == expected == 51_724_288


def test_hf_default_cache_bytes():
    # batch 2, 1279 tokens, 114,688 bytes per token
    assert hf_cache_bytes(spec().layers, 2, 1279, 1024, kv_format("auto"), 2) == 2 * 1279 * 114_688
