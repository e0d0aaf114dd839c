"""vLLM loads unquantized weights in the model dtype (--dtype float32 doubles a bf16 checkpoint's bytes), and a log
that ran float32 is predicted with 4-byte weights, activations and KV (public log llmd-h100-llama31-8b-fp32-8k)."""

from kvcalc.catalog import load_model
from kvcalc.engines.vllm import VllmSettings, vllm_weight_bytes
from kvcalc.formats import kv_format, weight_format
from kvcalc.validate.predict import settings_with_sources


def test_float32_doubles_unquantized_weights_only():
    spec = load_model("llama-3.1-8b")
    bf16 = VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"))
    fp32 = VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), dtype_bytes=4)
    rotary = spec.max_position_embeddings * spec.rotary_dim  # elements of the cos/sin cache, in the dtype too
    assert vllm_weight_bytes(spec, fp32) - rotary * 4 == 2 * (vllm_weight_bytes(spec, bf16) - rotary * 2)
    # quantized linears keep their bytes; only the unquantized rest (embeddings, norms) follows the dtype
    awq16 = VllmSettings(weights=weight_format("awq"), kv=kv_format("auto"))
    awq32 = VllmSettings(weights=weight_format("awq"), kv=kv_format("auto"), dtype_bytes=4)
    grow = vllm_weight_bytes(spec, awq32) - vllm_weight_bytes(spec, awq16)
    assert grow < vllm_weight_bytes(spec, fp32) - vllm_weight_bytes(spec, bf16)


def test_a_float32_log_runs_at_four_bytes():
    settings, sources = settings_with_sources({"settings": {"dtype": "float32"}}, {})
    assert settings.dtype_bytes == 4 and sources["dtype"] == "log"
    assert settings_with_sources({"settings": {"dtype": "bfloat16"}}, {})[0].dtype_bytes == 2
