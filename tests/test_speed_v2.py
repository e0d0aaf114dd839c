"""Speed model v2 (kvcalc/throughput.py): the kernel arithmetic by hand, and the hardware story of issue 11 as
properties that must come out of datasheet physics (only the H200 has fitted constants)."""

from __future__ import annotations

import math

import pytest

from kvcalc.catalog import load_model
from kvcalc.constants import load
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.throughput import Kernel, decode_speed, expected_experts, gpu_rates, prefill_s, weight_split

BF16, AWQ, FP8W = weight_format("bf16"), weight_format("awq"), weight_format("fp8")
AUTO, FP8 = kv_format("auto"), kv_format("fp8")


def _speed(gpu, model="llama-3.2-3b", w=BF16, kv=AUTO, batch=1, context=32768):
    return decode_speed(load_model(model), get_gpu(gpu), "vllm", w, kv, batch, context)


def test_kernel_time_is_the_max_or_the_p_norm_of_its_three_times():
    k = Kernel("x", 0, 0, 0, 3.0, 4.0, 1.0)
    assert k.time_s == 4.0 and k.bound == "compute"
    p = Kernel("x", 0, 0, 0, 3.0, 4.0, 0.0, overlap=2.0)
    assert math.isclose(p.time_s, 5.0)  # sqrt(9 + 16)
    assert Kernel("x", 0, 0, 0, 0.0, 0.0, 0.0, overlap=2.0).time_s == 0.0


def test_expected_distinct_experts_by_hand():
    assert expected_experts(8, 2, 1) == pytest.approx(2.0)
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))  # 3.5
    assert expected_experts(128, 8, 10**6) == pytest.approx(128.0)


def test_step_is_overhead_plus_the_kernels():
    d = _speed("h200", batch=4, context=4096)
    rates = gpu_rates(get_gpu("h200"))
    assert d.fixed_s == pytest.approx(rates.step_overhead_s)
    assert d.step_s == pytest.approx(d.fixed_s + sum(k.time_s for k in d.kernels))
    assert d.tokens_per_s == pytest.approx(4 / d.step_s)
    attention = next(k for k in d.kernels if k.name == "attention")
    # bf16 KV of Llama-3.2-3B: 28 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes per token
    assert attention.bytes == 28 * 8 * 128 * 2 * 2 * 4096 * 4
    assert attention.memory_s == pytest.approx(attention.bytes / rates.bandwidth)


def test_moe_reads_the_experts_a_batch_touches():
    spec = load_model("qwen3-30b-a3b")
    split = weight_split(spec, BF16)
    for batch in (1, 8, 64):
        d = decode_speed(spec, get_gpu("h200"), "vllm", BF16, AUTO, batch, 1024)
        experts = next(k for k in d.kernels if k.name == "experts")
        assert experts.bytes == pytest.approx(expected_experts(128, 8, batch) * split.expert_bytes)


@pytest.mark.parametrize("gpu", ["t4", "l4", "a10g", "a100-80gb", "h100-sxm", "h200"])
def test_decode_slows_with_context_and_gains_throughput_with_batch(gpu):
    assert _speed(gpu, context=1024).step_s < _speed(gpu, context=16384).step_s
    assert _speed(gpu, batch=1, context=2048).tokens_per_s < _speed(gpu, batch=16, context=2048).tokens_per_s


def test_only_the_h200_is_fitted_the_story_comes_from_datasheets():
    """The hardware story below is a property of datasheet ratios: no per-GPU constant tunes it."""
    assert set(load("speed")["measured"]) == {"h200"}
    assert not gpu_rates(get_gpu("t4")).measured and not gpu_rates(get_gpu("l4")).measured


def test_fp8_kv_costs_a_t4_and_nothing_on_an_l4():
    """Turing has no FP8 convert: attention upcasts each cached element in software on 8 TFLOPS of CUDA cores,
    more time than reading the bytes it saves. Ada (L4) converts natively and its ALU rate hides the work under
    the memory time, so half the bytes is simply faster."""
    t4 = _speed("t4", kv=FP8).tokens_per_s / _speed("t4").tokens_per_s
    l4 = _speed("l4", kv=FP8).tokens_per_s / _speed("l4").tokens_per_s
    assert 0.7 < t4 < 0.9  # ~20% slower
    assert l4 >= 1.0
    notes = " ".join(_speed("t4", kv=FP8).notes)
    assert "emulated" in notes


def test_four_bit_weights_buy_much_on_small_gpus_and_little_on_an_h200():
    """Decode of an 8B at batch 1 is a weight read: 4-bit weights cut the bytes ~3.5x. On a T4/L4 the unpack
    hides under the (slow) memory time, so the speed-up is near the byte ratio; on an H200 the memory time is
    so short that the unpack and the tensor tiles set the pace."""
    def gain(gpu):
        return _speed(gpu, "llama-3.1-8b", AWQ, context=1024).tokens_per_s / \
            _speed(gpu, "llama-3.1-8b", BF16, context=1024).tokens_per_s
    assert gain("t4") > 2.0 and gain("l4") > 2.0
    assert gain("h200") < 1.5
    assert gain("t4") > gain("a100-80gb") > gain("h200")


def test_fp8_weights_emulated_below_sm89():
    d = _speed("a100-80gb", "llama-3.1-8b", FP8W, context=1024)
    assert any("FP8 weights are emulated" in n for n in d.notes)
    assert not any("emulated" in n for n in _speed("h200", "llama-3.1-8b", FP8W, context=1024).notes)


def test_prefill_is_compute_bound_and_chunked():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    one = prefill_s(spec, gpu, BF16, AUTO, 8192, 8192)
    chunked = prefill_s(spec, gpu, BF16, AUTO, 8192, 512)
    assert chunked > one  # each chunk re-reads the weights and pays the step overhead
    # compute-bound: doubling a long prompt more than doubles the time (causal attention grows quadratically)
    assert prefill_s(spec, gpu, BF16, AUTO, 16384, 2048) > 2 * prefill_s(spec, gpu, BF16, AUTO, 8192, 2048)
    # FP8 weights run the GEMMs on FP8 tensor cores on an H200
    assert prefill_s(spec, gpu, FP8W, AUTO, 8192, 2048) < prefill_s(spec, gpu, BF16, AUTO, 8192, 2048)
