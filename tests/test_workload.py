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
from kvcalc.workload import Workload, frontend_s, hf_bench, vllm_bench

SPEC, GPU = load_model("llama-3.2-3b"), get_gpu("h200")
BF16, AUTO = weight_format("bf16"), kv_format("auto")


def test_a_lone_request_is_its_prefill_and_its_decode_steps():
    """One request, nothing cached, the LLM class (no server): TTFT is the prefill, TPOT the mean decode step over
    contexts input+1 .. input+output-1."""
    wl = Workload(1024, 17, concurrency=1, num_prompts=1)
    b = vllm_bench(SPEC, GPU, BF16, AUTO, wl, chunk_tokens=2048, slots=64, entrypoint="offline", prefix_caching=False)
    steps = [decode_speed(SPEC, GPU, "vllm", BF16, AUTO, 1, c).step_s for c in range(1025, 1041)]
    assert b.tpot_s == pytest.approx(statistics.fmean(steps), rel=1e-12)
    assert b.ttft_s == pytest.approx(prefill_s(SPEC, GPU, BF16, AUTO, 1024, 2048))
    assert b.e2e_s == pytest.approx(b.ttft_s + 16 * b.tpot_s)
    assert b.output_tokens_per_s == pytest.approx(17 / b.e2e_s)


def test_the_server_adds_its_front_end_to_the_first_token():
    wl = Workload(1000, 17, concurrency=1, num_prompts=1)
    kw = dict(chunk_tokens=2048, slots=64, prefix_caching=False)
    served = vllm_bench(SPEC, GPU, BF16, AUTO, wl, entrypoint="serve", **kw)
    offline = vllm_bench(SPEC, GPU, BF16, AUTO, wl, entrypoint="offline", **kw)
    assert served.ttft_s - offline.ttft_s == pytest.approx(frontend_s("serve"))
    assert served.tpot_s == pytest.approx(offline.tpot_s)


def test_a_wave_of_prompts_lands_in_the_first_token_not_in_tpot():
    """8 clients of equal 2,048-token prompts: the prompts queue behind each other for their first token (TTFT
    well above one prefill), and the decode steps that follow carry little prefill."""
    wl = Workload(2048, 129, concurrency=8, num_prompts=8)
    b = vllm_bench(SPEC, GPU, BF16, AUTO, wl, chunk_tokens=2048, slots=64, entrypoint="offline", prefix_caching=False)
    one = prefill_s(SPEC, GPU, BF16, AUTO, 2048, 2048)
    # the i-th waits for the i - 1 before it (mean (8 + 1) / 2 prefills); the running decodes take a token of each
    # step's budget, so a prompt's last token spills into one more step
    assert 4.5 * one < b.ttft_s < 5.5 * one
    step = decode_speed(SPEC, GPU, "vllm", BF16, AUTO, 8, 2048 + 129 / 2).step_s
    assert step < b.tpot_s < step + 7 * one / 128  # below the old "every other prefill in every TPOT" charge
    assert b.percentiles["p99_ttft_ms"] > b.ttft_s * 1e3


def test_concurrency_past_the_slots_waits_for_one():
    held = vllm_bench(SPEC, GPU, BF16, AUTO, Workload(1024, 128, concurrency=20), chunk_tokens=2048, slots=10)
    free = vllm_bench(SPEC, GPU, BF16, AUTO, Workload(1024, 128, concurrency=10), chunk_tokens=2048, slots=10)
    assert any("exceed the 10" in n for n in held.notes)
    assert held.ttft_s > free.ttft_s + 0.5 * free.e2e_s  # the 10 extra requests wait about a round
    assert held.output_tokens_per_s == pytest.approx(free.output_tokens_per_s, rel=0.1)


def test_a_request_rate_below_saturation_is_served_at_that_rate():
    b = vllm_bench(SPEC, GPU, BF16, AUTO, Workload(1024, 256, request_rate=5.0, num_prompts=300), chunk_tokens=2048,
                   slots=256)
    assert b.request_throughput == pytest.approx(5.0, rel=0.1)
    assert b.concurrency == pytest.approx(5.0 * b.e2e_s, rel=0.15)  # Little's law


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


def test_fresh_server_adds_the_first_requests_cost_to_plan_and_search_alike():
    """--fresh-server: the run's first request pays serve.yaml first_request_s, so a closed loop of one over N
    prompts has a mean TTFT first_request_s / N higher; plan and search carry it in their JSON the same."""
    import json

    from cli_helper import invoke
    from kvcalc.workload import first_request_s

    args = ["--model", "llama-3.1-8b", "--input-len", "1k", "--concurrency", "1", "--num-prompts", "8", "--json"]
    warm = json.loads(invoke(["plan", "--gpu", "h200", *args])[1])
    fresh = json.loads(invoke(["plan", "--gpu", "h200", *args, "--fresh-server"])[1])
    assert fresh["workload"]["fresh_server"] is True and warm["workload"]["fresh_server"] is False
    gap = fresh["rows"][0]["bench"]["ttft_s"] - warm["rows"][0]["bench"]["ttft_s"]
    assert abs(gap - first_request_s() / 8) < 1e-9
    found = json.loads(invoke(["search", "--gpus", "h200", *args, "--fresh-server"])[1])
    assert found["workload"]["fresh_server"] is True
    code, out, err = invoke(["plan", "--fresh-server"])
    assert code == 2 and "needs --input-len" in out + err


def test_a_fresh_sglang_server_pays_no_first_request_cost_but_says_its_first_wave_is_not_modelled():
    """SGLang's launch_server warms itself before it reports ready, so --fresh-server leaves a lone request's TTFT as a
    warm server's (with and without the radix cache); with concurrent prompts the row says the first wave's first-use
    work is not in the figures."""
    import json

    from cli_helper import invoke

    def row(*extra, conc="1", cmd="python -m sglang.launch_server --model-path llama-3.1-8b"):
        args = ["plan", "--gpu", "h200", "--engine", "sglang", "--sglang-command", cmd, "--input-len", "1k",
                "--output-len", "64", "--concurrency", conc, "--num-prompts", "8", "--json", *extra]
        code, out, err = invoke(args)
        assert code == 0, out + err
        return next(r for r in json.loads(out)["rows"] if r["engine"] == "sglang")

    for cmd in ("python -m sglang.launch_server --model-path llama-3.1-8b",
                "python -m sglang.launch_server --model-path llama-3.1-8b --disable-radix-cache"):
        assert row(cmd=cmd)["bench"]["ttft_s"] == row("--fresh-server", cmd=cmd)["bench"]["ttft_s"]
    notes = " ".join(row("--fresh-server", conc="16")["bench"]["notes"])
    assert "first-use work" in notes and "Not in these figures" in notes
    assert "first-use" not in " ".join(row(conc="16")["bench"]["notes"])


def test_a_busy_api_loop_gives_the_host_cpu_range_and_a_light_load_none_to_speak_of():
    """vllm serve under Poisson 64/s on the 3B (the H200 runs m-q): the simulation at the loop's costs of the fastest
    and slowest measured hosts brackets the median host's figures, and the row says so; a lone request's range is
    as good as a point (the loop is idle), with no note."""
    from kvcalc.catalog import load_model
    from kvcalc.engines import vllm as vllm_engine
    from kvcalc.formats import kv_format, weight_format
    from kvcalc.hardware import get_gpu
    from kvcalc.workload import Workload, vllm_bench

    spec, gpu, w, k = load_model("llama-3.2-3b"), get_gpu("h200"), weight_format("bf16"), kv_format("fp8")
    est = vllm_engine.estimate(spec, gpu, vllm_engine.VllmSettings(weights=w, kv=k, max_model_len=8192,
                                                                    entrypoint="serve"))
    kw = dict(chunk_tokens=est.max_num_batched_tokens, slots=est.max_num_seqs, est=est, host_range=True)
    busy = vllm_bench(spec, gpu, w, k, Workload(1024, 256, request_rate=64, num_prompts=512), **kw)
    r = busy.host_cpu_range
    assert r["machines"] == [1.0, 1.76]
    assert r["mean_ttft_ms"][0] < busy.ttft_s * 1e3 < r["mean_ttft_ms"][1]
    assert r["mean_tpot_ms"][0] < busy.tpot_s * 1e3 < r["mean_tpot_ms"][1]
    assert any("API server's loop is busy" in n for n in busy.notes)
    lone = vllm_bench(spec, gpu, w, k, Workload(1024, 256, concurrency=1, num_prompts=4), **kw)
    assert lone.host_cpu_range["mean_ttft_ms"][1] < 1.05 * lone.host_cpu_range["mean_ttft_ms"][0]
    assert not any("API server's loop is busy" in n for n in lone.notes)
    plain = vllm_bench(spec, gpu, w, k, Workload(1024, 256, concurrency=1, num_prompts=4),
                       chunk_tokens=est.max_num_batched_tokens, slots=est.max_num_seqs, est=est)
    assert plain.host_cpu_range == {}  # opt-in: search's rows do not pay two more simulations
