"""The vllm-bench workload (kvcalc/workload.py): TTFT/TPOT/e2e arithmetic, the exact mean over the output, the
request-rate fixed point, and one-line refusals of bad workloads."""

from __future__ import annotations

import math
import statistics

import pytest

from kvcalc.catalog import load_model
from kvcalc.cli import main
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.plan import PlanRequest, plan
from kvcalc.throughput import decode_speed, prefill_s
from kvcalc.workload import Workload, hf_bench, vllm_bench

SPEC, GPU = load_model("llama-3.2-3b"), get_gpu("h200")
BF16, AUTO = weight_format("bf16"), kv_format("auto")


def test_tpot_is_the_exact_mean_step_over_the_output():
    """The decode step is affine in the context at a fixed batch, so the mean over contexts input+1 ..
    input+output-1 is the step at input + output/2."""
    wl = Workload(1000, 17, concurrency=1)
    b = vllm_bench(SPEC, GPU, BF16, AUTO, wl, chunk_tokens=2048, slots=64)
    steps = [decode_speed(SPEC, GPU, "vllm", BF16, AUTO, 1, c).step_s for c in range(1001, 1017)]
    assert b.tpot_s == pytest.approx(statistics.fmean(steps), rel=1e-12)
    assert b.ttft_s == pytest.approx(prefill_s(SPEC, GPU, BF16, AUTO, 1000, 2048))
    assert b.e2e_s == pytest.approx(b.ttft_s + 16 * b.tpot_s)
    assert b.output_tokens_per_s == pytest.approx(17 / b.e2e_s)


def test_other_requests_prefills_spread_over_the_output():
    wl = Workload(2048, 129, concurrency=8)
    b = vllm_bench(SPEC, GPU, BF16, AUTO, wl, chunk_tokens=2048, slots=64)
    step = decode_speed(SPEC, GPU, "vllm", BF16, AUTO, 8, 2048 + 129 / 2).step_s
    assert b.tpot_s == pytest.approx(step + 7 * b.ttft_s / 128)
    assert b.output_tokens_per_s == pytest.approx(8 * 129 / b.e2e_s)
    assert b.output_tokens_per_s_per_user == pytest.approx(129 / b.e2e_s)


def test_concurrency_past_the_slots_waits_for_one():
    wl = Workload(1024, 128, concurrency=20)
    held = vllm_bench(SPEC, GPU, BF16, AUTO, wl, chunk_tokens=2048, slots=10)
    assert held.concurrency == 10 and held.notes
    free = vllm_bench(SPEC, GPU, BF16, AUTO, Workload(1024, 128, concurrency=10), chunk_tokens=2048, slots=10)
    assert held.ttft_s == pytest.approx(free.ttft_s + free.e2e_s)  # 10 extra requests wait one round


def test_request_rate_is_littles_law():
    wl = Workload(1024, 256, request_rate=5.0)
    b = vllm_bench(SPEC, GPU, BF16, AUTO, wl, chunk_tokens=2048, slots=256)
    assert b.concurrency == math.ceil(5.0 * b.e2e_s) or abs(b.concurrency - 5.0 * b.e2e_s) <= 1
    assert not b.notes
    over = vllm_bench(SPEC, GPU, BF16, AUTO, Workload(1024, 256, request_rate=1e6), chunk_tokens=2048, slots=16)
    assert over.concurrency == 16 and "queue grows" in over.notes[0]


def test_hf_quantized_cache_tpot_follows_the_residual():
    """A quantized cache reads fewer bytes than the bf16 one once its residual empties: its TPOT averages the step
    over where the output stands (and the per-layer quantization bookkeeping makes it no faster on an H200)."""
    wl = Workload(4096, 300, concurrency=4)
    b16 = hf_bench(SPEC, GPU, BF16, AUTO, wl)
    b4 = hf_bench(SPEC, GPU, BF16, kv_format("hqq-4"), wl)
    assert b16.ttft_s > 0 and b4.tpot_s > 0
    assert b16.e2e_s == pytest.approx(b16.ttft_s + 299 * b16.tpot_s)


def test_plan_rows_carry_the_workload():
    req = PlanRequest(SPEC, GPU, context=1024 + 128, batch=4, workload=Workload(1024, 128, concurrency=4))
    rows = plan(req)
    assert all(r.bench is not None for r in rows)
    assert all("bench" in r.to_json() for r in rows)
    assert all("bench" not in r.to_json() for r in plan(PlanRequest(SPEC, GPU, context=1152)))


def test_workload_checks():
    with pytest.raises(UsageError, match="exceeds --max-model-len"):
        Workload(4096, 8192).check(8192)
    with pytest.raises(UsageError, match="concurrency"):
        Workload(10, 10, concurrency=0).check()


@pytest.mark.parametrize("args", [
    ["--input-len", "1024", "--output-len", "9000", "--max-model-len", "8k"],
    ["--input-len", "1024", "--concurrency", "0"],
    ["--output-len", "100"],
    ["--input-len", "1k", "--request-rate", "0"],
    ["--input-len", "1k", "--request-rate", "inf"],
])
def test_bad_workloads_are_one_line_exit_2(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--gpu", "h200", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


def test_hf_rows_take_the_prompt_and_output_of_the_workload():
    """The prompt sets transformers' prefill peak: a long prompt with a short output peaks higher than a short prompt
    with a long output at the same context."""
    def hf_total(i, o):
        req = PlanRequest(SPEC, get_gpu("l4"), context=i + o, engines=("hf",), workload=Workload(i, o))
        return next(r for r in plan(req) if r.config == "baseline").hf_memory_bytes
    assert hf_total(8000, 192) > hf_total(192, 8000)
