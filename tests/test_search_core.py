"""The vectorized search core equals the scalar plan path, configuration by configuration (blocks, start, requests,
fits), and the latency formulas equal their brute-force definitions."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.catalog import load_model
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import list_gpus
from kvcalc.latency import decode_line, mean_step_s, tpot_s, ttft_s
from kvcalc.plan import PlanRequest, custom_key, plan
from kvcalc.search_core import build_structure, evaluate_grid, valid_tp_sizes
from kvcalc.throughput import decode_speed

MODELS = ["llama-3.2-1b", "llama-3.1-8b", "qwen3-8b", "gemma-3-4b", "gemma-2-2b", "mistral-7b-v0.1",
          "qwen3-30b-a3b", "deepseek-v2-lite", "jamba-1.5-mini", "phi-3-mini", "qwen2.5-0.5b"]
GPUS = [g.id for g in list_gpus()]


def _scalar_row(spec, gpu, w, k, tp, pp, util, seqs, mnbt, mml, context, batch):
    req = PlanRequest(spec=spec, gpu=gpu, context=context, batch=batch, engines=("vllm",), weights=w, kv=k,
                      util=util, max_model_len=mml, max_num_batched_tokens=mnbt, max_num_seqs=seqs, tp=tp, pp=pp)
    rows = plan(req)
    return next(r for r in rows if r.config == custom_key(req))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), w=st.sampled_from(["bf16", "fp8", "awq", "nf4"]),
       k=st.sampled_from(["auto", "fp8"]), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 1, 2, 3]),
       util=st.integers(50, 99), seqs=st.sampled_from([1, 8, 64, 256, 1024]), mnbt=st.sampled_from([2048, 8192]),
       context=st.integers(100, 140_000), slack=st.integers(0, 4096), batch=st.integers(1, 64))
def test_vectorized_equals_scalar_plan(model, gpu, w, k, tp, pp, util, seqs, mnbt, context, slack, batch):
    spec = load_model(model)
    profile = next(g for g in list_gpus() if g.id == gpu)
    u = util / 100
    mml = context + slack
    try:
        row = _scalar_row(spec, profile, w, k, tp, pp, u, seqs, mnbt, mml, context, batch)
        s = build_structure(spec, profile, weight_format(w), kv_format(k), tp, pp, mml, mnbt, [seqs], context)
    except UsageError:
        return  # vLLM cannot serve this combination at all; both paths refuse it
    grid = evaluate_grid([s], np.array([u]), [seqs])
    est = row.vllm
    assert int(grid.blocks[0, 0, 0]) == est.num_gpu_blocks
    assert bool(grid.starts[0, 0, 0]) == est.fits
    assert int(grid.concurrency[0, 0, 0]) == row.max_concurrency
    assert (bool(grid.starts[0, 0, 0]) and int(grid.concurrency[0, 0, 0]) >= batch) == row.fits


def test_grid_over_many_utils_and_seqs_equals_scalar_calls():
    spec = load_model("llama-3.1-8b")
    gpu = next(g for g in list_gpus() if g.id == "l4")
    utils = np.round(np.arange(0.80, 0.96, 0.01), 2)
    seqs = [16, 256, 1024]
    s = build_structure(spec, gpu, weight_format("awq"), kv_format("fp8"), 1, 1, 4096, 2048, seqs, 4096)
    grid = evaluate_grid([s], utils, seqs)
    for i, u in enumerate(utils):
        for j, q in enumerate(seqs):
            row = _scalar_row(spec, gpu, "awq", "fp8", 1, 1, float(u), q, 2048, 4096, 4096, 1)
            assert grid.blocks[0, i, j] == row.vllm.num_gpu_blocks
            assert grid.concurrency[0, i, j] == row.max_concurrency


def test_valid_tp_sizes_follow_heads():
    assert valid_tp_sizes(load_model("llama-3.1-8b")) == [1, 2, 4, 8]  # 32 heads, 8 KV heads
    assert valid_tp_sizes(load_model("qwen2.5-0.5b")) == [1, 2]  # 14 heads, 2 KV heads


# ------------------------------------------------------------------------------------------------ latency


@pytest.mark.parametrize("model,w,k,batch", [("llama-3.1-8b", "bf16", "auto", 1), ("llama-3.1-8b", "awq", "fp8", 48),
                                             ("qwen3-30b-a3b", "bf16", "auto", 8), ("llama-3.2-1b", "bf16", "auto", 256)])
@pytest.mark.parametrize("gpu_id", ["h100-sxm", "t4"])
def test_tpot_is_the_mean_decode_step_over_the_output(model, w, k, batch, gpu_id):
    spec, gpu = load_model(model), next(g for g in list_gpus() if g.id == gpu_id)
    wf, kf = weight_format(w), kv_format(k)
    line = decode_line(spec, gpu, wf, kf, batch)
    for input_len, output_len in ((1000, 200), (30, 2), (5000, 1)):
        brute = [decode_speed(spec, gpu, "vllm", wf, kf, batch, c).step_s
                 for c in range(input_len + 1, input_len + output_len)]
        expect = sum(brute) / len(brute) if brute else 0.0
        assert tpot_s(line, input_len, output_len) == pytest.approx(expect, rel=1e-9)


def test_tpot_scales_from_batch_one_for_dense_models():
    """search scales the batch-1 line: the attention term by b, the weight part by weight_time_table (exact for dense
    models at every batch, padded tiles included)."""
    from kvcalc.latency import weight_time_table

    spec, gpu = load_model("llama-3.1-8b"), next(g for g in list_gpus() if g.id == "a10g")
    wf, kf = weight_format("bf16"), kv_format("auto")
    one = decode_line(spec, gpu, wf, kf, 1)
    table = weight_time_table(spec, gpu, wf, kf, 1, 300)
    for b in (2, 16, 65, 200, 300):
        direct = decode_line(spec, gpu, wf, kf, b)
        scaled = tpot_s(one, 2048, 512, batch_scale=b, mem0=one.mem0 * table[b])
        assert scaled == pytest.approx(tpot_s(direct, 2048, 512), rel=1e-9)


def test_mean_step_crossing_the_ridge_by_hand():
    # memory 1 + 0.5c, compute 0 + 1c: memory binds for c < 2, compute from c = 2; c = 0..3 -> 1, 1.5, 2, 3
    assert mean_step_s(0.0, 1.0, 0.5, 0.0, 1.0, 0, 3) == pytest.approx((1 + 1.5 + 2 + 3) / 4)
    assert mean_step_s(0.1, 1.0, 0.5, 0.0, 1.0, 0, 0) == pytest.approx(1.1)
    assert mean_step_s(0.1, 1.0, 0.5, 0.0, 1.0, 5, 4) == 0.0


def _ttft_brute(line, input_len, chunk, m0):
    t, pos = 0.0, 0
    while pos < input_len:
        n = min(chunk, input_len - pos)
        pairs = sum(p + 1 for p in range(pos, pos + n))
        c0, c1 = line.prefill_terms()
        t += line.fixed + max(m0, c0 * n + c1 * pairs)
        pos += n
    return t


@pytest.mark.parametrize("input_len", [1, 100, 2048, 2049, 9000, 20000])
@pytest.mark.parametrize("chunk", [512, 2048, 8192])
def test_ttft_is_the_sum_over_prefill_chunks(input_len, chunk):
    spec, gpu = load_model("llama-3.1-8b"), next(g for g in list_gpus() if g.id == "l4")
    line = decode_line(spec, gpu, weight_format("bf16"), kv_format("auto"), 1)
    for m0 in (line.mem0, line.mem0 * 40):  # the weight read binds for short chunks in the second case
        assert ttft_s(line, input_len, chunk, m0) == pytest.approx(_ttft_brute(line, input_len, chunk, m0), rel=1e-9)


def test_search_tpot_for_moe_scales_the_weight_read_by_experts_touched():
    """search.py evaluates TPOT at batch b from the batch-1 line, scaling the weight part by W(b)/W(1) (distinct
    experts touched); that equals the mean of decode_speed's own steps at batch b (exactly up to 64 and at multiples
    of 16; in between the experts of the batch rounded up to 16 rows)."""
    from kvcalc.latency import weight_time_table
    from kvcalc.search import _ratio

    spec, gpu = load_model("qwen3-30b-a3b"), next(g for g in list_gpus() if g.id == "h100-sxm")
    wf, kf = weight_format("bf16"), kv_format("fp8")
    one = decode_line(spec, gpu, wf, kf, 1)
    table = weight_time_table(spec, gpu, wf, kf, 1, 1024)
    assert table[1] == 1.0 and table[64] > 1.0  # more experts read at batch 64
    for b, rel in ((1, 1e-9), (8, 1e-9), (64, 1e-9), (304, 1e-9), (300, 1e-3)):
        scaled = tpot_s(one, 1000, 100, batch_scale=b, mem0=one.mem0 * _ratio(table, b))
        brute = [decode_speed(spec, gpu, "vllm", wf, kf, b, c).step_s for c in range(1001, 1100)]
        assert scaled == pytest.approx(sum(brute) / len(brute), rel=rel)
