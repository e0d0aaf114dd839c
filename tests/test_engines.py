"""Engine accountings against hand-computed cases."""

import math

import pytest

from kvcalc.catalog import load_model
from kvcalc.engines import hf, vllm
from kvcalc.engines.weights import weight_bytes
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.units import GiB

L3B = 3_212_749_824


def settings(**kw):
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=8192)
    base.update(kw)
    return vllm.VllmSettings(**base)


def test_bf16_weights_are_two_bytes_per_param():
    assert weight_bytes(load_model("llama-3.2-3b"), weight_format("bf16")) == 2 * L3B


def test_nf4_weights_keep_embeddings_in_bf16():
    spec = load_model("llama-3.2-3b")
    # linears: per layer q,o 3072x3072, k,v 3072x1024, gate/up 3072x8192, down 8192x3072; NF4 = n/2 + n/64*4
    linear = sum(g.params for g in spec.linears)
    assert linear == 28 * (2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 8192)
    expected = linear // 2 + linear // 64 * 4 + (L3B - linear) * 2
    assert weight_bytes(spec, weight_format("nf4")) == expected


def test_vllm_blocks_from_available_memory():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    # 0.33.0: 16-token blocks (0.34.0's 64: tests/test_vllm_034.py)
    est = vllm.estimate(spec, gpu, settings(gpu_memory_utilization=0.85, version="0.33.0"))
    assert est.requested_memory == math.ceil(gpu.memory_total_bytes * 0.85)
    assert est.available_kv_bytes == (est.requested_memory - est.weights_bytes - est.activation_bytes
                                      - est.non_torch_bytes - est.cudagraph_bytes)
    # one block = 16 tokens * 8 heads * (128 + 128) * 2 bytes * 28 layers
    assert est.page_bytes_all_layers == 1_835_008
    assert est.num_gpu_blocks == est.available_kv_bytes // 1_835_008
    assert est.kv_capacity_tokens == est.num_gpu_blocks * 16
    # 0.24+: logged tokens = int(concurrency * max_model_len), concurrency = blocks / cdiv(8192, 16)
    assert est.logged_kv_tokens == int(est.num_gpu_blocks / 512 * 8192)
    assert est.concurrency_at(8192) == (est.num_gpu_blocks - 1) // 512


def test_vllm_weights_include_rotary_cache():
    spec = load_model("llama-3.2-3b")
    est = vllm.estimate(spec, get_gpu("h200"), settings())
    # vocab 128256 is a multiple of 64 (no padding); cos/sin cache 131072 positions x 128 dims in bf16
    assert est.weights_bytes == 2 * L3B + 131072 * 128 * 2


def test_cudagraph_estimate_by_version_runner_and_eager():
    dense, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    moe = load_model("mixtral-8x7b")
    assert vllm.estimate(dense, gpu, settings(enforce_eager=True)).cudagraph_bytes == 0
    assert vllm.estimate(dense, gpu, settings(version="0.19.1")).cudagraph_bytes == 0  # before 0.20: none
    assert vllm.estimate(dense, gpu, settings(version="0.22.0")).cudagraph_bytes > 0  # V1 runner subtracts it
    # 0.26-0.28: dense models run on the V2 runner, whose profile_cudagraph_memory returns 0
    assert vllm.estimate(dense, gpu, settings(version="0.26.0")).cudagraph_bytes == 0
    assert vllm.estimate(dense, gpu, settings(version="0.28.1")).cudagraph_bytes == 0
    # 0.29+: the V2 runner profiles its graphs (v1/worker/gpu/cudagraph_utils.py:718) and the budget subtracts them
    assert vllm.estimate(dense, gpu, settings(version="0.29.0")).cudagraph_bytes > 0
    assert vllm.estimate(dense, gpu, settings(version="0.29.0", enforce_eager=True)).cudagraph_bytes == 0
    assert vllm.estimate(moe, gpu, settings(version="0.26.0")).cudagraph_bytes > 0  # MoE stays on the V1 runner
    assert vllm.estimate(moe, gpu, settings(enforce_eager=True)).cudagraph_bytes == 0


def test_vllm_pre_024_logs_blocks_times_block_size():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    est = vllm.estimate(spec, gpu, settings(version="0.21.0", max_model_len=8000))
    assert est.logged_kv_tokens == est.num_gpu_blocks * 16


def test_vllm_batch_defaults_depend_on_gpu_memory():
    assert vllm.batch_defaults(get_gpu("h200"), "llm") == (16384, 1024)
    assert vllm.batch_defaults(get_gpu("t4"), "llm") == (8192, 256)
    assert vllm.batch_defaults(get_gpu("t4"), "serve") == (2048, 256)
    assert vllm.batch_defaults(get_gpu("a100-80gb"), "llm") == (8192, 256)  # A100 excluded on purpose upstream


def test_vllm_model_too_large_reports_shortfall():
    spec = load_model("llama-3.1-8b")
    est = vllm.estimate(spec, get_gpu("t4"), settings())
    assert not est.fits
    assert est.shortfall_bytes > 0
    assert est.available_kv_bytes < 0


def test_vllm_refuses_impossible_settings():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    with pytest.raises(UsageError):
        vllm.estimate(spec, gpu, settings(gpu_memory_utilization=1.7))
    with pytest.raises(UsageError):
        vllm.estimate(spec, gpu, settings(kv=kv_format("hqq-4")))
    with pytest.raises(UsageError):
        vllm.parse_version("0.3.3")


def test_vllm_tp_halves_kv_heads_and_weights():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    one = vllm.estimate(spec, gpu, settings())
    two = vllm.estimate(spec, gpu, settings(tensor_parallel=2))
    assert two.page_bytes_all_layers * 2 == one.page_bytes_all_layers
    assert two.weights_bytes < one.weights_bytes * 0.51 + 64 * 2**20


def test_hf_static_and_cache():
    spec = load_model("llama-3.2-3b")
    est = hf.estimate(spec, hf.HfSettings(weight_format("bf16"), kv_format("auto"), 1, 1024, 256))
    assert est.static_bytes == 2 * L3B
    assert est.cache_tokens == 1279
    assert est.cache_bytes == 1279 * 114_688
    assert est.peak_increment_bytes >= est.cache_bytes


def test_hf_quantized_cache_is_smaller_and_refuses_vllm_only_formats():
    spec = load_model("llama-3.2-3b")
    base = hf.estimate(spec, hf.HfSettings(weight_format("bf16"), kv_format("auto"), 1, 8192, 256))
    q4 = hf.estimate(spec, hf.HfSettings(weight_format("bf16"), kv_format("hqq-4"), 1, 8192, 256))
    assert q4.cache_bytes < base.cache_bytes / 3
    with pytest.raises(UsageError):
        hf.estimate(spec, hf.HfSettings(weight_format("bf16"), kv_format("fp8"), 1, 8192, 256))


def test_hf_max_context_fits_and_one_more_does_not():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("t4")
    s = hf.HfSettings(weight_format("bf16"), kv_format("auto"), 1, 512, 256)
    longest = hf.max_context(spec, s, gpu)
    assert 0 < longest < 200_000
    assert hf.estimate(spec, hf.HfSettings(s.weights, s.kv, 1, longest - 256, 256), gpu).fits
    assert not hf.estimate(spec, hf.HfSettings(s.weights, s.kv, 1, longest + 1 - 256, 256), gpu).fits
    assert gpu.memory_total_bytes < 15 * GiB


def test_tp_sweep_names_smallest_fitting_tp_for_70b_on_h100():
    from kvcalc.plan import PlanRequest, tp_sweep

    sweep = tp_sweep(PlanRequest(load_model("llama-3.1-70b"), get_gpu("h100-sxm"), 8192))
    assert [o.fits for o in sweep] == [False, True, True, True]
    # each larger TP buys capacity and speed
    caps = [o.kv_capacity_tokens for o in sweep[1:]]
    assert caps == sorted(caps) and caps[0] < caps[-1]
    assert sweep[0].shortfall_bytes > 60 * GiB  # 140 GB of bf16 weights on an 80 GB GPU


@pytest.mark.parametrize("model", ["gemma-3-1b", "mistral-7b-v0.1", "deepseek-v2-lite", "jamba-v0.1", "mixtral-8x7b"])
def test_vllm_handles_every_layer_kind(model):
    spec = load_model(model)
    est = vllm.estimate(spec, get_gpu("h200"), settings(max_model_len=32768))
    assert est.fits and est.num_gpu_blocks > 0 and est.logged_kv_tokens > 0
    assert est.concurrency_at(32768) >= 1


def test_gemma3_sliding_layers_cost_less_than_full_in_vllm():
    """Hybrid allocator: sliding layers hold at most their window plus the in-flight tokens (2 x 16384 on an H200),
    so Gemma 3's capacity at a long context is well above what a one-formula (all layers full) calculator says:
    22 of 26 layers slide, and each sliding group reserves about 32k tokens instead of 128k per request."""
    spec = load_model("gemma-3-1b")
    est = vllm.estimate(spec, get_gpu("h200"), settings(max_model_len=131072))
    naive_per_token = sum(2 * layer.num_kv_heads * layer.head_dim * 2 for layer in spec.layers)
    naive_tokens = est.available_kv_bytes // naive_per_token
    assert est.logged_kv_tokens > 2.5 * naive_tokens


def test_fp8_kv_costs_speed_on_turing_and_nothing_on_ada():
    """FP8 is upcast on every read without FP8 units (T4, compute capability 7.5) and native on an L4 (8.9)."""
    from kvcalc.throughput import decode_speed

    spec = load_model("llama-3.2-3b")

    def ratio(gpu):
        args = (spec, get_gpu(gpu), "vllm", weight_format("bf16"))
        return (decode_speed(*args, kv_format("fp8"), 1, 32768).tokens_per_s
                / decode_speed(*args, kv_format("auto"), 1, 32768).tokens_per_s)

    assert 0.75 < ratio("t4") < 0.95
    assert ratio("l4") >= 1.0


def test_deployment_kv_bytes_per_token_do_not_depend_on_the_split():
    """TP shards heads and PP shards layers; the deployment still stores the same KV per token (heads >= tp)."""
    from kvcalc.plan import PlanRequest, plan

    spec, gpu = load_model("llama-3.1-405b"), get_gpu("h200")
    per_token = set()
    for tp, pp in ((8, 1), (4, 2), (8, 2)):
        rows = plan(PlanRequest(spec, gpu, 32768, engines=("vllm",), weights="fp8", tp=tp, pp=pp))
        per_token.add(rows[0].kv_bytes_per_token)
    assert per_token == {2 * 8 * 128 * 126 * 2}
