"""Properties that must hold for any setting."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.catalog import load_model
from kvcalc.engines import vllm
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.plan import PlanRequest, plan

SPEC = load_model("llama-3.2-3b")
GPUS = ["t4", "l4", "a100-80gb", "h100-sxm", "h200"]


def est(gpu, util=0.9, kv="auto", mml=8192, weights="bf16"):
    return vllm.estimate(SPEC, get_gpu(gpu), vllm.VllmSettings(weight_format(weights), kv_format(kv), util, mml))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(GPUS), st.integers(256, 65536), st.integers(256, 65536))
def test_concurrency_never_grows_with_context(gpu, a, b):
    short, long_ = sorted((a, b))
    e = est(gpu, mml=long_)
    assert e.concurrency_at(long_) <= e.concurrency_at(short)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(GPUS), st.floats(0.3, 1.0), st.integers(512, 32768))
def test_fp8_never_costs_more_than_bf16(gpu, util, mml):
    bf16, fp8 = est(gpu, util, "auto", mml), est(gpu, util, "fp8", mml)
    assert fp8.kv_bytes_per_token <= bf16.kv_bytes_per_token
    assert fp8.kv_capacity_tokens >= bf16.kv_capacity_tokens


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(GPUS), st.floats(0.3, 1.0), st.floats(0.3, 1.0))
def test_higher_utilization_never_lowers_capacity(gpu, u1, u2):
    low, high = sorted((u1, u2))
    assert est(gpu, high).kv_capacity_tokens >= est(gpu, low).kv_capacity_tokens


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(GPUS), st.integers(1024, 131072), st.integers(1, 16))
def test_plan_rows_are_consistent(gpu, context, batch):
    rows = plan(PlanRequest(SPEC, get_gpu(gpu), context, batch))
    for row in rows:
        assert row.fits == (row.shortfall_bytes == 0)
        assert row.decode_tokens_per_s > 0
        if row.engine == "vllm" and row.fits:
            assert row.max_concurrency >= batch
