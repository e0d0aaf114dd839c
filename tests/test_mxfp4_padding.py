"""vLLM pads MXFP4 experts for its MoE kernel (vllm/model_executor/layers/quantization/mxfp4.py,
Mxfp4MoEMethod.create_weights): hand-computed bytes for gpt-oss-120b, and the public A100 log it explains."""

from kvcalc.catalog import load_model
from kvcalc.checkpoint import baseline_weights
from kvcalc.engines.vllm import VllmSettings, mxfp4_moe_padding_bytes
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu


def _settings(spec, tp):
    return VllmSettings(weights=baseline_weights(spec), kv=kv_format("auto"), tensor_parallel=tp)


def _expert(i, h):  # w13 [2i, h] + w2 [h, i]: uint8 n/2, e8m0 scale n/32, bf16 bias per output row
    return 2 * i * h // 2 + 2 * i * h // 32 + 2 * i * 2 + h * i // 2 + h * i // 32 + h * 2


def test_marlin_pads_gpt_oss_120b_at_tp4_on_an_a100():
    spec = load_model("gpt-oss-120b")
    # Marlin (sm80): intermediate 2880/4 = 720 -> 768 (128), hidden 2880 -> 3072 (256); 128 experts x 36 layers
    assert _expert(768, 3072) - _expert(720, 2880) == 455_904
    assert mxfp4_moe_padding_bytes(spec, _settings(spec, 4), get_gpu("a100-80gb")) == 455_904 * 128 * 36


def test_triton_pads_only_the_intermediate_size_on_hopper():
    spec = load_model("gpt-oss-120b")
    # sm90 Triton kernels: 720 -> 768 (64), hidden unpadded
    assert mxfp4_moe_padding_bytes(spec, _settings(spec, 4), get_gpu("h100-sxm")) == \
        (_expert(768, 2880) - _expert(720, 2880)) * 128 * 36
    # TP 1: 2880 is a multiple of 64, nothing to pad
    assert mxfp4_moe_padding_bytes(spec, _settings(spec, 1), get_gpu("h100-sxm")) == 0


def test_only_mxfp4_experts_are_padded():
    spec = load_model("qwen3-30b-a3b")
    s = VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), tensor_parallel=4)
    assert mxfp4_moe_padding_bytes(spec, s, get_gpu("a100-80gb")) == 0
