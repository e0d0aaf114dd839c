"""vLLM 0.34.0's rules row (issue 19): the extensible KV cache sized after warmup, util 1.0 by default, block size
64, GB10 on the small batching tier (from 0.33). Expected figures are computed by hand from the release's formulas
(v1/worker/extensible_kv_cache.py:592-618 at v0.34.0), not read back from kvcalc."""

from dataclasses import replace

import pytest

from kvcalc.catalog import load_model
from kvcalc.engines import vllm
from kvcalc.engines.vllm_versions import NEWEST_RELEASE_KNOWN, batch_defaults_for, rules_for
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu

GiB = 1 << 30


def settings(version="0.34.0", **kw):
    return vllm.VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), version=version,
                             max_model_len=8192, entrypoint="serve", **kw)


def test_newest_release_is_the_default():
    assert NEWEST_RELEASE_KNOWN == "0.34.0" and vllm.DEFAULT_VERSION == "0.34.0"
    r = rules_for("0.34.0")
    assert r.extensible_kv_cache and r.default_block_size == 64 and r.default_util_for() == 1.0
    assert r.default_util_for(fixed_kv_budget=True) == 0.92  # --kv-cache-memory-bytes turns it off
    assert not rules_for("0.33.0").extensible_kv_cache and rules_for("0.33.0").default_util_for() == 0.92


def test_extensible_budget_by_hand():
    """Llama-3.1-8B on one H200, 0.34 defaults: KV = (total - init_used) - (weights + non-torch + graphs) - margin
    - peak, margin = max(1 GiB, 0.75 peak); util 1.0 asks for the whole card, so the free-memory term binds."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    e = vllm.estimate(spec, gpu, settings())
    assert e.requested_memory == gpu.memory_total_bytes  # ceil(total x 1.0)
    peak, w = e.activation_bytes, e.weights_bytes
    used = w + e.non_torch_bytes + e.cudagraph_bytes  # non_torch holds the V2 sampler's penalty state
    margin = max(GiB, int(0.75 * peak))
    free = gpu.memory_total_bytes - int(0.51 * GiB)
    assert e.available_kv_bytes == min(gpu.memory_total_bytes - used, free - used - margin) - peak
    assert e.available_kv_bytes == free - used - margin - peak
    assert e.cudagraph_bytes > 0 and e.graph_capture.placement == "in_budget"  # captured before sizing
    # the 0.33 budget of the same start: 0.92 x total - used - peak
    old = vllm.estimate(spec, gpu, settings("0.33.0"))
    assert old.available_kv_bytes == old.requested_memory - (old.weights_bytes + old.non_torch_bytes
                                                             + old.cudagraph_bytes) - old.activation_bytes
    assert e.available_kv_bytes > old.available_kv_bytes


def test_explicit_util_caps_it():
    """An explicit util below 1 binds where total x util - used < free - used - margin."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    e = vllm.estimate(spec, gpu, settings(gpu_memory_utilization=0.9))
    used = e.weights_bytes + e.non_torch_bytes + e.cudagraph_bytes
    assert e.available_kv_bytes == e.requested_memory - used - e.activation_bytes
    assert e.requested_memory == -(-gpu.memory_total_bytes * 9 // 10) or abs(
        e.requested_memory - gpu.memory_total_bytes * 0.9) < 1


def test_other_processes_come_out_of_free_memory():
    """Other processes lower the first snapshot's free memory, so the extensible cache loses them byte for byte
    (and vLLM no longer refuses to start for them: v1/worker/utils.py:783-786)."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    base = vllm.estimate(spec, gpu, settings())
    busy = vllm.estimate(spec, gpu, settings(other_processes_bytes=4 * GiB))
    assert base.available_kv_bytes - busy.available_kv_bytes == 4 * GiB and busy.fits


def test_block_size_64_and_logged_tokens():
    """Block size 64 (config/cache.py:185): a page is 64 tokens x 32 layers x 2 x 8 heads x 128 x 2 B = 8 MiB for
    Llama-3.1-8B; blocks = floor(KV / page); logged tokens = int(blocks / cdiv(8192, 64) x 8192) less the null block."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("l4")
    e = vllm.estimate(spec, gpu, settings())
    assert e.block_size == 64
    page = 64 * 32 * 2 * 8 * 128 * 2
    assert e.page_bytes_all_layers == page
    assert e.num_gpu_blocks == e.available_kv_bytes // page
    assert e.block_size == 64 and vllm.estimate(spec, gpu, settings("0.33.0")).block_size == 16
    assert vllm.estimate(spec, gpu, settings(block_size=16)).block_size == 16  # --block-size still wins


def test_kv_cache_memory_bytes_keeps_the_profiled_path():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    e = vllm.estimate(spec, gpu, settings(kv_cache_memory_bytes=20 * GiB))
    assert e.available_kv_bytes == 20 * GiB and e.requested_memory == -(-gpu.memory_total_bytes * 92 // 100) or \
        abs(e.requested_memory - gpu.memory_total_bytes * 0.92) < 1


def test_gb10_small_tier_from_0_33():
    spark = get_gpu("dgx-spark")
    assert spark.compute_capability == pytest.approx(12.1)
    r32, r33 = rules_for("0.32.0"), rules_for("0.33.0")
    args = (spark.memory_total_bytes, spark.name, "serve", 8192, spark.compute_capability)
    assert batch_defaults_for(r32, *args) == (8192, 1024)  # >= 70 GiB, not A100
    assert batch_defaults_for(r33, *args) == (2048, 256)  # arg_utils.py:2960-2962 at v0.33.0
    h200 = get_gpu("h200")
    assert batch_defaults_for(r33, h200.memory_total_bytes, h200.name, "serve", 8192,
                              h200.compute_capability) == (8192, 1024)


def test_replicated_weights_under_tp_by_hand():
    """What vLLM keeps whole on every TP rank (engines/vllm.py replicated_params, vLLM 0.34.0 source):
    Gemma-3-1B (1 KV head of 256, hidden 1152, 26 layers) at TP 2: QKVParallelLinear gives each rank the one head
    (linear.py:1114-1119), so a rank holds 1 x (256 + 256) x 1152 of k/v per layer, not half: extra
    512 x 1152 x (2 - 1) / 2 x 26 = 7,667,712 params, 2 B each in bf16. Qwen3-30B-A3B at TP 8: 4 KV heads of 128 ->
    256 x 2048 x 4 / 8 x 48 layers = 12,582,912; its router (GateLinear = ReplicatedLinear) 128 x 2048 x 48 x 7 / 8 =
    11,010,048. DeepSeek-V3 at TP 8: q_a_proj + kv_a_proj_with_mqa (disable_tp=True) 7168 x (1536 + 512 + 64) x 61 x
    7 / 8 = 808,034,304; router 256 x 7168 x 58 x 7 / 8 = 93,126,656. Llama-3.1-8B at TP 8 (8 KV heads): none."""
    gemma, qwen, dsv3 = load_model("gemma-3-1b"), load_model("qwen3-30b-a3b"), load_model("deepseek-v3")
    assert vllm.replicated_params(gemma, 2) == (7_667_712, 0)
    assert vllm.replicated_params(gemma, 1) == (0, 0)
    assert vllm.replicated_params(qwen, 8) == (12_582_912, 11_010_048)
    assert vllm.replicated_params(dsv3, 8) == (808_034_304, 93_126_656)
    assert vllm.replicated_params(load_model("llama-3.1-8b"), 8) == (0, 0)

    def weights(spec, tp, w="bf16"):
        return vllm.vllm_weight_bytes(spec, replace(settings(), weights=weight_format(w), tensor_parallel=tp))

    real = {("gemma", 2): weights(gemma, 2), ("qwen", 8): weights(qwen, 8), ("dsv3", 8): weights(dsv3, 8, "fp8")}
    import kvcalc.engines.vllm as engine

    original = engine.replicated_parts
    try:
        engine.replicated_parts = lambda spec, tp: (0, 0, 0)  # the even split alone
        split = {("gemma", 2): weights(gemma, 2), ("qwen", 8): weights(qwen, 8), ("dsv3", 8): weights(dsv3, 8, "fp8")}
    finally:
        engine.replicated_parts = original
    # bf16: 2 B per parameter for the k/v heads and the router alike
    assert real[("gemma", 2)] - split[("gemma", 2)] == 7_667_712 * 2
    assert real[("qwen", 8)] - split[("qwen", 8)] == (12_582_912 + 11_010_048) * 2
    # FP8 DeepSeek-V3: the down projections at the checkpoint's mean bytes per body parameter (~1 B: fp8 with block
    # scales), the router in bf16: 0.75 + 0.17 GiB more per rank than the even split
    extra = real[("dsv3", 8)] - split[("dsv3", 8)]
    assert 808_034_304 * 1.0 + 93_126_656 * 2 <= extra <= 808_034_304 * 1.1 + 93_126_656 * 2
    # SGLang adds its own MLA and router replicas (engines/sglang.py replicated_weight_bytes): only the K/V heads here
    s = replace(settings(), tensor_parallel=8)
    assert vllm.vllm_weight_bytes(qwen, s, kv_heads_only=True) - split[("qwen", 8)] == 12_582_912 * 2
